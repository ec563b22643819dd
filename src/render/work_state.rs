//! The `<tern:work_state>` block: the model-facing rendering of the To-do ledger, appended as the
//! transient tail of each request (DESIGN.md §4, §6). Its body is byte-identical wherever it
//! appears (request tail, sub-agent requests, fork state, relay), so it is a pure function of the
//! [`Ledger`].
//!
//! Body format (lines joined by `\n`, no trailing newline):
//!
//! ```text
//! To-do: 50% settled (2/4)
//! Goal: Land the v0.9.2 website docs cluster
//! +N earlier To-do items
//! [✓] #2 Draft the Fleet and Sandbox pages
//! [~] #3 Write the Work surface page
//! [ ] #4 Run check:docs, tests, and the build
//! +N more To-do items
//! ```
//!
//! The goal line appears when a goal is set; the marker lines only when items were left out.
//! An empty To-do gives no block at all, even with a goal set: a goal alone is no progress
//! position, and strategy never enters the block.
//!
//! The renderer guarantees exactly three things and nothing more: control characters cannot forge
//! the line format, item text cannot close the wrapper early, and the bounds
//! ([`MAX_SHOWN_ITEMS`], [`MAX_LINE_CHARS`], [`MAX_BODY_CHARS`]) hold. It does not vet what item
//! text says: To-do content is not thereby safe to follow as instructions.

use crate::domain::ledger::{Item, Ledger, Status};

/// Opens the block.
pub const OPEN_TAG: &str = "<tern:work_state>";
/// Closes the block; item text can never produce it (nor any `</tern` in any letter case).
pub const CLOSE_TAG: &str = "</tern:work_state>";
/// At most this many item lines in the body.
pub const MAX_SHOWN_ITEMS: usize = 40;
/// At most this many characters (Unicode scalar values) per line; longer lines end in `…`.
pub const MAX_LINE_CHARS: usize = 200;
/// At most this many characters in the body (newlines included, wrapper excluded).
pub const MAX_BODY_CHARS: usize = 4000;

// The smallest body (header, goal, the in-progress item, two markers) always fits, so the
// in-progress item never has to be dropped to hold the bounds.
const _: () = assert!(5 * (MAX_LINE_CHARS + 1) <= MAX_BODY_CHARS && MAX_SHOWN_ITEMS >= 1);

/// The status mark of an item line: `[ ]` pending, `[~]` in progress, `[✓]` completed,
/// `[-]` cancelled.
pub fn mark(status: Status) -> &'static str {
    match status {
        Status::Pending => "[ ]",
        Status::InProgress => "[~]",
        Status::Completed => "[✓]",
        Status::Cancelled => "[-]",
    }
}

/// `50% settled (2/4)`: settled = completed + cancelled, percentage rounded down; `0% settled
/// (0/0)` for no items.
pub fn settled_summary(ledger: &Ledger) -> String {
    let (settled, total) = (ledger.settled(), ledger.items.len());
    let pct = (settled as u128 * 100)
        .checked_div(total as u128)
        .unwrap_or(0);
    format!("{pct}% settled ({settled}/{total})")
}

/// One item as both renderers show it: `[~] #3 Write the Work surface page`, made safe by
/// [`clean_line`].
pub fn item_line(item: &Item) -> String {
    clean_line(&format!(
        "{} #{} {}",
        mark(item.status),
        item.id,
        item.content
    ))
}

/// Characters that could break or disguise the line format: every control character (C0 with
/// tab, CR, LF and ESC, DEL, C1 with NEL), the Unicode line and paragraph separators, and the
/// bidirectional embedding, override and isolate controls.
fn is_forbidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Makes one line of text safe to place in the block: forbidden characters (see above) become
/// spaces; every `</tern` (any letter case, whitespace allowed around the `/`) gets a backslash
/// before its `/`, so the wrapper cannot be closed early; then the line is cut to
/// [`MAX_LINE_CHARS`] characters, ending in `…` when cut.
pub fn clean_line(raw: &str) -> String {
    // Only the first MAX_LINE_CHARS + 1 characters can survive the cut; neutralising a prefix
    // is as safe as neutralising the whole text, since a match in a prefix is a match.
    let chars: Vec<char> = raw
        .chars()
        .take(MAX_LINE_CHARS + 1)
        .map(|c| if is_forbidden(c) { ' ' } else { c })
        .collect();
    let mut out: Vec<char> = Vec::with_capacity(chars.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c == '/' && closes_tern(&chars, i) {
            out.push('\\');
        }
        out.push(c);
    }
    if out.len() > MAX_LINE_CHARS {
        out.truncate(MAX_LINE_CHARS - 1);
        out.push('…');
    }
    out.into_iter().collect()
}

/// Whether the `/` at `i` is part of `<` ws* `/` ws* `tern` (ASCII case-insensitive).
fn closes_tern(chars: &[char], i: usize) -> bool {
    let before = chars[..i].iter().rev().find(|c| !c.is_whitespace());
    if before != Some(&'<') {
        return false;
    }
    let mut after = chars[i + 1..].iter().skip_while(|c| c.is_whitespace());
    "tern"
        .chars()
        .all(|t| after.next().is_some_and(|c| c.eq_ignore_ascii_case(&t)))
}

/// The item every view keeps: the first in progress, else the first pending, else the last item;
/// `None` for an empty ledger.
pub fn anchor(ledger: &Ledger) -> Option<usize> {
    if let Some((i, _)) = ledger.in_progress() {
        return Some(i);
    }
    ledger
        .items
        .iter()
        .position(|i| i.status == Status::Pending)
        .or(ledger.items.len().checked_sub(1))
}

/// `+N earlier To-do items`: the marker above a window that leaves out the first N items.
pub fn earlier_marker(n: usize) -> String {
    format!("+{n} earlier To-do items")
}

/// `+N more To-do items`: the marker below a window that leaves out the last N items.
pub fn more_marker(n: usize) -> String {
    format!("+{n} more To-do items")
}

/// The window `[start, end)` of `n` items shown around `anchor` (< n): starts at the anchor
/// alone and grows one item at a time, alternately after and before, while `fits(start, end)`
/// holds for the grown window. The anchor is always inside.
pub fn window(n: usize, anchor: usize, fits: impl Fn(usize, usize) -> bool) -> (usize, usize) {
    let (mut start, mut end) = (anchor, anchor + 1);
    let (mut grow_after, mut grow_before) = (true, true);
    let mut after_turn = true;
    while grow_after || grow_before {
        if after_turn && grow_after {
            if end < n && fits(start, end + 1) {
                end += 1;
            } else {
                grow_after = false;
            }
        } else if !after_turn && grow_before {
            if start > 0 && fits(start - 1, end) {
                start -= 1;
            } else {
                grow_before = false;
            }
        }
        after_turn = !after_turn;
    }
    (start, end)
}

/// The To-do body (format in the module docs), or `None` when the ledger has no items.
/// Windowed around the [`anchor`] (the in-progress item) so that at most [`MAX_SHOWN_ITEMS`]
/// items and [`MAX_BODY_CHARS`] characters are shown; left-out items are counted by the marker
/// lines.
pub fn body(ledger: &Ledger) -> Option<String> {
    let anchor = anchor(ledger)?;
    let mut head = vec![format!("To-do: {}", settled_summary(ledger))];
    if let Some(goal) = &ledger.goal {
        head.push(clean_line(&format!("Goal: {}", goal.objective)));
    }
    let lines: Vec<String> = ledger.items.iter().map(item_line).collect();
    let n = lines.len();
    // Characters of each line plus its newline; the body's last newline is not emitted.
    let cost = |l: &str| l.chars().count() + 1;
    let head_cost: usize = head.iter().map(|l| cost(l)).sum();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0usize);
    for l in &lines {
        prefix.push(prefix[prefix.len() - 1] + cost(l));
    }
    let fits = |start: usize, end: usize| {
        let mut total = head_cost + prefix[end] - prefix[start];
        if start > 0 {
            total += cost(&earlier_marker(start));
        }
        if end < n {
            total += cost(&more_marker(n - end));
        }
        end - start <= MAX_SHOWN_ITEMS && total - 1 <= MAX_BODY_CHARS
    };
    let (start, end) = window(n, anchor, fits);
    let mut out = head;
    if start > 0 {
        out.push(earlier_marker(start));
    }
    out.extend_from_slice(&lines[start..end]);
    if end < n {
        out.push(more_marker(n - end));
    }
    Some(out.join("\n"))
}

/// The block: `<tern:work_state>\n{body}\n</tern:work_state>`, or `None` when the ledger has no
/// items (an empty To-do emits no block at all).
pub fn block(ledger: &Ledger) -> Option<String> {
    body(ledger).map(|b| format!("{OPEN_TAG}\n{b}\n{CLOSE_TAG}"))
}
