//! The `tern status` Work view: the person-facing rendering of the To-do ledger, plain text (so
//! NO_COLOR is honoured by construction). Visual only: never sent to the model.
//!
//! Lines, each ending in `\n`:
//!
//! ```text
//! To-do
//! ◆ Goal: Land the v0.9.2 website docs cluster
//! elapsed: 18m
//! [█████████░░░░░░░░░░░] 45% of the token budget
//! 50% settled (2/4)
//! [✓] #1 Read docs-map.ts and the Modes page pattern
//! [✓] #2 Draft the Fleet and Sandbox pages
//! [~] #3 Write the Work surface page
//! [ ] #4 Run check:docs, tests, and the build
//! ```
//!
//! then the caller's footer lines. The goal line appears when a goal is set; `elapsed` when the
//! goal has a `started_at`; the budget bar when it has a token budget and the tokens used are
//! known. With no items the settled line reads `no To-do items`. Item lines are the block's
//! ([`work_state::item_line`]): same marks, same per-line cap; but what the block turns into
//! spaces (control characters, escape sequences, bidi overrides) is shown here as visible escapes
//! ([`crate::render::safe_line`]), so a person sees what an item holds and nothing redraws the
//! terminal. Footer lines too.
//!
//! Windowing, when `height` is given and the items do not fit: the items shown are a window
//! around the in-progress item ([`work_state::window`]), with `+N earlier To-do items` above and
//! `+N more To-do items` below counting what was left out. When even the header, footer and the
//! smallest window (the in-progress item and its markers) do not fit, lines are dropped in this
//! order: footer lines (last first), budget bar, elapsed, `To-do`, goal, settled line, then the
//! markers. The in-progress line is always shown and the output never exceeds `height` lines
//! (a height of 0 counts as 1).

use crate::domain::ledger::Ledger;
use crate::render::{safe_line, work_state};

/// Cells of the token-budget bar; each cell is 5 %.
pub const BAR_CELLS: usize = 20;

/// What the sidebar shows.
pub struct SidebarInput<'a> {
    /// The To-do ledger.
    pub ledger: &'a Ledger,
    /// Now, in Unix seconds (for `elapsed`).
    pub now_unix: u64,
    /// Tokens spent so far by the job, if known (for the budget bar).
    pub tokens_used: Option<u64>,
    /// Lines available; `None` = no limit, every item shown.
    pub height: Option<usize>,
    /// Extra lines the caller adds below (plan state, cache figures); control characters in them
    /// are shown as escapes ([`crate::render::safe_line`]) so each stays one line.
    pub footer: &'a [String],
}

/// Elapsed time: `45s` under a minute, `18m` under an hour (minutes rounded down), else
/// `2h 05m` (hours, then minutes on two digits).
pub fn format_elapsed(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        _ => format!("{}h {:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `[█████████░░░░░░░░░░░] 45% of the token budget`: the percentage of `budget` that `used` is,
/// rounded down and capped at 100; filled cells = percentage / 5. `budget` must be positive (0
/// reads as 100 %). It says what it measures: beside `50% settled` a bare percentage read as
/// the work's progress.
pub fn budget_bar(used: u64, budget: u64) -> String {
    let pct = (used as u128 * 100)
        .checked_div(budget as u128)
        .unwrap_or(100)
        .min(100) as usize;
    let full = pct / 5;
    format!(
        "[{}{}] {pct}% of the token budget",
        "█".repeat(full),
        "░".repeat(BAR_CELLS - full)
    )
}

/// One To-do item as the person sees it: the block's line ([`work_state::item_line`]: same mark,
/// same cap) of the item with its content shown through [`safe_line`], so control characters,
/// escape sequences and bidi overrides appear as visible escapes instead of blanks.
pub fn item_line(item: &crate::domain::ledger::Item) -> String {
    work_state::item_line(&crate::domain::ledger::Item {
        content: safe_line(&item.content).into_owned(),
        ..item.clone()
    })
}

/// The Work view as text (format and windowing in the module docs), every line ending in `\n`.
pub fn render(input: &SidebarInput) -> String {
    let ledger = input.ledger;
    // Fixed lines in display order, with their drop rank (lower goes first).
    let mut header: Vec<(String, usize)> = vec![("To-do".into(), 4)];
    if let Some(goal) = &ledger.goal {
        header.push((
            work_state::clean_line(&safe_line(&format!("◆ Goal: {}", goal.objective))),
            5,
        ));
        if let Some(started) = goal.started_at {
            let elapsed = format_elapsed(input.now_unix.saturating_sub(started));
            header.push((format!("elapsed: {elapsed}"), 3));
        }
        if let (Some(budget), Some(used)) = (goal.token_budget, input.tokens_used)
            && budget > 0
        {
            header.push((budget_bar(used, budget), 2));
        }
    }
    let settled = if ledger.items.is_empty() {
        "no To-do items".to_string()
    } else {
        work_state::settled_summary(ledger)
    };
    header.push((settled, 6));
    let footer: Vec<String> = input
        .footer
        .iter()
        .map(|l| safe_line(l).into_owned())
        .collect();

    let lines: Vec<String> = ledger.items.iter().map(item_line).collect();
    let n = lines.len();
    let anchor = work_state::anchor(ledger);

    let mut keep_header = vec![true; header.len()];
    let mut keep_footer = footer.len();
    let (mut start, mut end, mut markers) = (0, n, false);
    if let Some(height) = input.height {
        let height = height.max(1);
        let smallest = anchor.map_or(0, |a| 1 + usize::from(a > 0) + usize::from(a + 1 < n));
        let mut kept = header.len() + footer.len();
        while kept + smallest > height && keep_footer > 0 {
            keep_footer -= 1;
            kept -= 1;
        }
        let mut by_rank: Vec<usize> = (0..header.len()).collect();
        by_rank.sort_by_key(|&i| header[i].1);
        for i in by_rank {
            if kept + smallest <= height {
                break;
            }
            keep_header[i] = false;
            kept -= 1;
        }
        let room = height.saturating_sub(kept);
        match anchor {
            None => {}
            Some(a) if room >= smallest => {
                let lines_for =
                    |s: usize, e: usize| e - s + usize::from(s > 0) + usize::from(e < n);
                (start, end) = work_state::window(n, a, |s, e| lines_for(s, e) <= room);
                markers = true;
            }
            Some(a) => (start, end) = (a, a + 1),
        }
    }

    let mut out = String::new();
    let mut put = |l: &str| {
        out.push_str(l);
        out.push('\n');
    };
    for ((line, _), keep) in header.iter().zip(&keep_header) {
        if *keep {
            put(line);
        }
    }
    if markers && start > 0 {
        put(&work_state::earlier_marker(start));
    }
    for line in &lines[start..end] {
        put(line);
    }
    if markers && end < n {
        put(&work_state::more_marker(n - end));
    }
    for line in &footer[..keep_footer] {
        put(line);
    }
    out
}
