//! The CLI verbs' glue: open the state folder, run an op from the table, print its receipt.
//! `tern status` and `tern watch` render the same view as `/status`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::config::ProviderFlags;
use crate::ops::{self, Target as OpTarget};
use crate::store::{Session, StateDir, files};

/// The session and output choice of a verb.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// `--session`; the current session when None.
    pub session: Option<String>,
    /// `--json`.
    pub json: bool,
    /// `--state-dir` / TERN_STATE_DIR.
    pub state_dir: Option<PathBuf>,
}

fn state(t: &Target) -> Result<StateDir, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?;
    Ok(StateDir::locate(&cwd, t.state_dir.as_deref()))
}

fn session(t: &Target) -> Result<Session, String> {
    let st = state(t)?;
    match &t.session {
        Some(id) => st.open_session(id).map_err(|e| e.to_string()),
        None => st.current().map_err(|e| e.to_string())?.ok_or_else(|| {
            format!(
                "no session in {} yet: start one with `tern exec PROMPT` or `tern`",
                st.root.display()
            )
        }),
    }
}

/// Runs op `id` as a verb and prints the receipt (JSON with `--json`). Exit 0 when ok, else 1.
pub fn verb(id: &str, arg: Option<&str>, t: &Target, wait: bool) -> i32 {
    let Some(op) = ops::by_id(id) else {
        eprintln!("tern: unknown op {id}");
        return 2;
    };
    let st = match state(t) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern: {e}");
            return 1;
        }
    };
    let mut target = OpTarget {
        state: &st,
        runtime: None,
        session: t.session.clone(),
        wait,
        provider: ProviderFlags::default(),
    };
    let mut human = crate::output::Human::new();
    let r = ops::run(op, arg, &mut target, &mut human);
    ops::print_receipt(&r, t.json);
    if r.ok { 0 } else { 1 }
}

/// `tern plan draft`: the draft from `--file` or stdin.
pub fn read_draft(file: Option<&Path>) -> Result<String, String> {
    let text = match file {
        Some(f) => std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("could not read the draft from stdin: {e}"))?;
            s
        }
    };
    if text.trim().is_empty() {
        return Err("the draft is empty (to discard a draft: tern plan cancel)".into());
    }
    Ok(text)
}

/// `tern status [--json] [--height N]`.
pub fn status(t: &Target, height: Option<usize>) -> i32 {
    let s = match session(t) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern: {e}");
            return 1;
        }
    };
    if t.json {
        crate::output::print_json_line(&crate::status::to_json(&s));
    } else {
        crate::output::print_text(&crate::status::render_text(
            &s,
            height.or_else(terminal_height),
        ));
    }
    0
}

/// `tern stats --json`.
pub fn stats_json(t: &Target) -> i32 {
    match session(t).and_then(|s| {
        crate::stats::requests(&s)
            .map(|r| crate::stats::to_json(&s.id, &r))
            .map_err(|e| e.to_string())
    }) {
        Ok(v) => {
            crate::output::print_json_line(&v);
            0
        }
        Err(e) => {
            eprintln!("tern: {e}");
            1
        }
    }
}

/// `tern relay --start`: writes the handoff and opens a new session seeded with it.
pub fn relay_start(t: &Target) -> i32 {
    let result = state(t).and_then(|st| {
        let from = session(t)?;
        crate::relay::start(&st, &from)
    });
    match result {
        Ok(new) => {
            if t.json {
                crate::output::print_json_line(&serde_json::json!({"session": new.id}));
            } else {
                crate::output::print_text(&format!(
                    "New session {} seeded with the handoff (now the current session).\nContinue it with: tern exec --continue   or   tern chat --continue\n",
                    new.id
                ));
            }
            0
        }
        Err(e) => {
            eprintln!("tern: {e}");
            1
        }
    }
}

/// `tern ops [--json]`.
pub fn ops(json: bool) -> i32 {
    if json {
        crate::output::print_json_line(&serde_json::to_value(ops::OPS).unwrap_or_default());
    } else {
        crate::output::print_text(&format!("{}\n", ops::help()));
    }
    0
}

/// The terminal's height in lines (None when stdout is not a terminal).
pub fn terminal_height() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; on error we return None.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0).then_some(usize::from(ws.ws_row))
}

/// How often `tern watch` looks at the files (a few `stat` calls: cheap when idle).
pub const WATCH_POLL: Duration = Duration::from_millis(250);

/// `tern watch`: redraws the status view when the ledger, plan, meta or events change, in place
/// (cursor home, each line cleared to its end, the rest of the screen cleared), so it does not
/// flicker. Follows `.tern/current` when no `--session` is given. Ctrl-C leaves cleanly.
pub fn watch(t: &Target, height: Option<usize>) -> i32 {
    let stop = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone());
    let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone());
    let tty = terminal_height().is_some();
    let mut last: Option<(String, Vec<Option<SystemTime>>, Option<usize>)> = None;
    let mut out = std::io::stdout();
    if tty {
        let _ = write!(out, "\x1b[?25l\x1b[2J");
    }
    while !stop.load(Ordering::SeqCst) {
        let h = height.or_else(terminal_height);
        let frame_key = match session(t) {
            Ok(s) => {
                let stamps: Vec<Option<SystemTime>> = [
                    files::LEDGER,
                    files::PLAN_STATE,
                    files::META,
                    files::EVENTS,
                    files::DRAFT,
                ]
                .iter()
                .map(|f| std::fs::metadata(s.path(f)).and_then(|m| m.modified()).ok())
                .collect();
                (s.id.clone(), stamps, h)
            }
            Err(e) => (format!("! {e}"), Vec::new(), h),
        };
        if last.as_ref() != Some(&frame_key) {
            let text = match session(t) {
                Ok(s) => crate::status::render_text(&s, h.map(|h| h.saturating_sub(1).max(1))),
                Err(e) => format!("tern watch: {e}\n(waiting for a session…)\n"),
            };
            if tty {
                let mut frame = String::from("\x1b[H");
                for line in text.lines() {
                    frame.push_str(line);
                    frame.push_str("\x1b[K\n");
                }
                frame.push_str("\x1b[J");
                let _ = out.write_all(frame.as_bytes());
            } else {
                let _ = out.write_all(text.as_bytes());
                let _ = out.write_all(b"\n");
            }
            let _ = out.flush();
            last = Some(frame_key);
        }
        std::thread::sleep(WATCH_POLL);
    }
    if tty {
        let _ = writeln!(out, "\x1b[?25h");
        let _ = out.flush();
    }
    0
}
