//! How a surface shows runtime events: [`Json`] prints every event as one compact JSON line
//! (`--json`, DESIGN.md §7); [`Human`] streams assistant text to stdout and tool activity to stderr.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::Value;

use crate::event::{BoundaryKind, Envelope, Event};
use crate::runtime::{Answer, Surface};
use crate::store::fsutil::to_jsonl;

/// What stands on the terminal's current line, so a line printed from another thread
/// ([`aside`]) never lands inside it: nothing, a progress note, or model text without its
/// newline yet. [`Human`] keeps it.
static LINE: AtomicU8 = AtomicU8::new(LINE_CLEAN);
const LINE_CLEAN: u8 = 0;
const LINE_NOTE: u8 = 1;
const LINE_TEXT: u8 = 2;

/// Prints `line` on stderr on a line of its own, from any thread: a progress note on the
/// current line is erased first (it is drawn again with the next one), model text without its
/// newline gets one. For what the REPL says about input typed during a turn.
pub fn aside(line: &str) {
    let lead = match LINE.swap(LINE_CLEAN, Ordering::SeqCst) {
        LINE_NOTE => "\r\x1b[K",
        LINE_TEXT => "\n",
        _ => "",
    };
    crate::errln!("{lead}{line}");
}

/// `--json`: stdout carries only events, one compact object per line, flushed per event.
pub struct Json;

impl Surface for Json {
    fn event(&mut self, ev: &Envelope) {
        print_json_line(&ev.to_value());
    }
    fn approve(&mut self, command: &str) -> Answer {
        ask_on_terminal(command)
    }
}

/// The approval question's last line (the REPL reads its answer as one key too).
pub const APPROVE_PROMPT: &str = "run it? [y]es / [n]o / [a]lways (until tern exits): ";

/// The answer a key (or a typed word) gives to the approval question; None: not an answer.
pub fn approval_answer(typed: &str) -> Option<Answer> {
    match typed.trim().to_lowercase().as_str() {
        "y" | "yes" => Some(Answer::Yes),
        "n" | "no" => Some(Answer::No),
        "a" | "always" => Some(Answer::Always),
        _ => None,
    }
}

/// Reads one key from the terminal `fd` without waiting for Enter (issue 46: the approval
/// question took `y` then Enter): canonical mode and echo off for one byte, then the terminal's
/// settings back. What was typed before the question is dropped first, so typeahead never
/// answers it. Ctrl-C comes back as byte 3 (the caller stops the turn), Ctrl-D as 4.
///
/// Errors: `fd` is not a terminal (`ENOTTY`: read a line instead), the read was interrupted
/// (a signal: `ErrorKind::Interrupted`), or the terminal is gone (`UnexpectedEof`).
pub fn read_key(fd: std::os::fd::RawFd) -> std::io::Result<u8> {
    // SAFETY: tcgetattr fills a termios we own; the same descriptor throughout.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut raw = saved;
    // ISIG off too: a Ctrl-C is read as byte 3, since a signal handler that restarts the read
    // would leave the question waiting for another key.
    raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
    raw.c_cc[libc::VMIN] = 1;
    raw.c_cc[libc::VTIME] = 0;
    // SAFETY: a termios copied from this terminal's own; TCIFLUSH drops unread typeahead.
    unsafe {
        libc::tcflush(fd, libc::TCIFLUSH);
        if libc::tcsetattr(fd, libc::TCSANOW, &raw) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into a buffer we own.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    let err = std::io::Error::last_os_error();
    // SAFETY: puts back the settings read above.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    match n {
        1 => Ok(b[0]),
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        _ => Err(err),
    }
}

/// `--approval ask` outside the REPL: the question and the answer go through the controlling
/// terminal (`/dev/tty`, so it works even when stdin carries the prompt), one key answering it;
/// with no terminal to ask on, the command is not run and the model is told why, never run
/// unasked.
pub fn ask_on_terminal(command: &str) -> Answer {
    use std::io::{BufRead, BufReader};
    use std::os::fd::AsRawFd;
    let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        crate::errln!(
            "tern: not running (--approval ask, and no terminal to ask on): {}",
            crate::render::safe_line(command)
        );
        return Answer::Unavailable;
    };
    let mut out = &tty;
    let mut input = BufReader::new(&tty);
    let _ = write!(out, "{}", crate::render::approval_question(command));
    loop {
        let _ = write!(out, "{APPROVE_PROMPT}");
        let _ = out.flush();
        let typed = match read_key(tty.as_raw_fd()) {
            // Ctrl-C: what it means everywhere, stop the turn.
            Ok(3) => {
                let _ = writeln!(out);
                // SAFETY: raise(3) of a signal whose handlers only set flags.
                unsafe { libc::raise(libc::SIGINT) };
                return Answer::No;
            }
            Ok(4) => return Answer::No,
            Ok(k) => {
                let shown = if k.is_ascii_graphic() { k as char } else { ' ' };
                let _ = writeln!(out, "{shown}");
                (k as char).to_string()
            }
            // Not a terminal after all: a line.
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {
                let mut line = String::new();
                match input.read_line(&mut line) {
                    Ok(0) | Err(_) => return Answer::No,
                    Ok(_) => line,
                }
            }
            Err(_) => return Answer::No,
        };
        match approval_answer(&typed) {
            Some(a) => return a,
            None => {
                let _ = writeln!(out, "answer y, n or a");
            }
        }
    }
}

pub use crate::render::safe;

/// Prints one event line to stdout and flushes. A closed stdout (`| head`) is ignored.
pub fn print_json_line(ev: &Value) {
    if let Ok(line) = to_jsonl(ev) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The `result` event of a run that failed before any session existed (a usage error): printed
/// on stdout with `session: null` and `seq` 1; it is in no `events.jsonl`.
pub fn print_sessionless_result(error: &str, code: i32) {
    let mut env = Envelope::new(
        "",
        None,
        Event::Result(crate::event::ResultFields {
            status: crate::event::Ending::Failed,
            text: String::new(),
            goal: None,
            error: Some(error.to_string()),
            exit_code: code,
            totals: None,
            worktree: None,
            branch: None,
        }),
    );
    env.seq = 1;
    print_json_line(&env.to_value());
}

/// Prints a receipt for a person: the detail on stdout when ok, `tern: …` on stderr when not.
pub fn print_receipt(r: &crate::ops::Receipt, json: bool) {
    if json {
        print_json_line(&serde_json::to_value(r).unwrap_or_default());
        return;
    }
    // The detail may quote a draft, a plan or a title: shown through the terminal-safe filter.
    if r.ok {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", safe(&r.detail));
    } else {
        crate::errln!("tern: {}", safe(&r.detail));
    }
}

/// Lines of a tool result shown to the person (the model sees the whole result).
pub const PREVIEW_LINES: usize = 6;

/// Human output: assistant text on stdout as it streams; tool calls, short result views, plan,
/// to-do and retry notes on stderr. In answer-only mode (`tern exec`) stdout carries the final
/// answer alone, printed by the surface at the end: the text streams to stderr instead (on a
/// terminal only), so an attempt abandoned for a retry never reaches stdout.
#[derive(Default)]
pub struct Human {
    /// Text was printed without a final newline yet.
    open_line: bool,
    /// A progress note is on stderr's current line (a terminal only), to be erased first.
    note_shown: bool,
    /// Stream text to stderr (a terminal) instead of stdout.
    answer_only: bool,
    /// Text of the current request was streamed (to tell an abandoned attempt).
    streamed: bool,
    /// The `$ command` line of the latest bash call, not printed yet: it is printed when the
    /// call goes on (progress, its result, anything else), and dropped when an approval question
    /// shows the whole command instead (so the question does not repeat it).
    pending_call: Option<String>,
    /// When the last retry line was printed, and the retries not shown since (a server that
    /// answers 429 with `Retry-After: 1` is retried every second for minutes: one line every
    /// [`RETRY_LINE_EVERY`] says as much).
    retries: (Option<std::time::Instant>, u32),
}

/// The least time between two retry lines on a person's stderr.
pub const RETRY_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Human {
    /// A new human surface.
    pub fn new() -> Human {
        Human::default()
    }

    /// The answer-only surface of `tern exec` (see the type's docs).
    pub fn answer_only() -> Human {
        Human {
            answer_only: true,
            ..Human::default()
        }
    }

    /// Prints the held `$ command` line, if any.
    fn flush_call(&mut self) {
        if let Some(line) = self.pending_call.take() {
            self.end_text_line();
            crate::errln!("{line}");
        }
    }

    /// Drops the held `$ command` line: the approval question about to be asked on this
    /// terminal shows the command whole.
    pub fn asking(&mut self) {
        self.clear_note();
        self.end_text_line();
        self.pending_call = None;
    }

    /// Erases a progress note before anything else is written.
    fn clear_note(&mut self) {
        if self.note_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.note_shown = false;
            LINE.store(LINE_CLEAN, Ordering::SeqCst);
        }
    }

    fn end_text_line(&mut self) {
        if self.open_line {
            if self.answer_only {
                crate::errln!();
            } else {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out);
                let _ = out.flush();
            }
            self.open_line = false;
            LINE.store(LINE_CLEAN, Ordering::SeqCst);
        }
    }
}

impl Surface for Human {
    fn progress(&mut self, note: &str) {
        use std::io::IsTerminal;
        // Only on a terminal, and only at the start of a line: a note must never land in a log
        // or in the middle of the model's text.
        self.flush_call();
        if self.open_line || !std::io::stderr().is_terminal() {
            return;
        }
        self.clear_note();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "⋯ {note}");
        let _ = err.flush();
        self.note_shown = true;
        LINE.store(LINE_NOTE, Ordering::SeqCst);
    }

    fn approve(&mut self, command: &str) -> Answer {
        use std::io::IsTerminal;
        // The question goes to the terminal: the `$` line is left out only when stderr is that
        // terminal too (a log of stderr keeps every call).
        if std::io::stderr().is_terminal() {
            self.asking();
        } else {
            self.clear_note();
            self.flush_call();
        }
        ask_on_terminal(command)
    }

    fn text_delta(&mut self, text: &str) {
        use std::io::IsTerminal;
        self.clear_note();
        self.flush_call();
        self.streamed = true;
        let text = crate::store::redact::redact(text);
        let text = safe(&text);
        if self.answer_only {
            if !std::io::stderr().is_terminal() {
                return;
            }
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        self.open_line = !text.ends_with('\n');
        LINE.store(
            if self.open_line {
                LINE_TEXT
            } else {
                LINE_CLEAN
            },
            Ordering::SeqCst,
        );
    }

    fn event(&mut self, ev: &Envelope) {
        self.clear_note();
        self.flush_call();
        if matches!(ev.event, Event::Retry { .. }) && self.streamed {
            self.end_text_line();
            crate::errln!("(the answer so far was abandoned: the request is sent again)");
        }
        if matches!(ev.event, Event::Usage { .. } | Event::Assistant { .. }) {
            self.streamed = false;
        }
        if let Event::Retry { .. } = ev.event {
            let now = std::time::Instant::now();
            if self
                .retries
                .0
                .is_some_and(|t| now.duration_since(t) < RETRY_LINE_EVERY)
            {
                self.retries.1 += 1;
                return;
            }
            let n = std::mem::take(&mut self.retries.1);
            self.retries.0 = Some(now);
            if let Some(line) = describe(ev) {
                self.end_text_line();
                let more = if n > 0 {
                    format!(" ({n} more since the last line)")
                } else {
                    String::new()
                };
                crate::errln!("{}{more}", safe(&line));
            }
            return;
        }
        if let Some(line) = describe(ev) {
            self.end_text_line();
            if matches!(&ev.event, Event::ToolCall { name, .. } if name == "bash") {
                self.pending_call = Some(safe(&line).into_owned());
                return;
            }
            crate::errln!("{}", safe(&line));
        } else if matches!(ev.event, Event::Assistant { .. }) {
            self.end_text_line();
        }
    }
}

/// The stderr line(s) a person sees for an event; None for events shown otherwise or not at all.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per event kind: renderers match every variant, never a catch-all (tests/it/architecture.rs), so a new kind is a compile error here"
)]
pub fn describe(env: &Envelope) -> Option<String> {
    Some(match &env.event {
        Event::ToolCall {
            name, arguments, ..
        } if name == "bash" => {
            let Some(cmd) = arguments["command"]
                .as_str()
                .filter(|c| !c.trim().is_empty())
            else {
                // Arguments that were not JSON are stored as {}: the error result says why.
                return Some("bash (no command)".into());
            };
            let mut lines = cmd.lines();
            let first = lines.next().unwrap_or("");
            let more = lines.count();
            if more > 0 {
                format!("$ {first}  [+{more} lines]")
            } else {
                format!("$ {first}")
            }
        }
        Event::ToolResult {
            name,
            content,
            is_error,
            bash,
            ..
        } if name == "bash" => {
            let view = preview(content, *is_error);
            // After Ctrl-C the terminal has echoed ^C on the current line.
            if bash.as_ref().is_some_and(|b| b.interrupted) {
                format!("\n{view}")
            } else {
                view
            }
        }
        Event::ToolResult {
            name,
            content,
            is_error,
            ..
        } => {
            let first = content.lines().next().unwrap_or("");
            let mark = if *is_error { "!" } else { "•" };
            format!("{mark} {name}: {}", clip(first))
        }
        Event::Retry {
            attempt,
            delay_ms,
            error,
            left_ms,
        } => format!(
            "retry {attempt} in {:.1} s: {error} (tern gives up in {} s)",
            *delay_ms as f64 / 1000.0,
            left_ms.div_ceil(1000)
        ),
        Event::PlanState {
            from, to, trigger, ..
        } => format!("plan: {} → {} ({trigger})", from.as_str(), to.as_str()),
        Event::Compaction {
            trigger,
            archived_messages: 0,
            ..
        } => format!("compaction ({}): nothing to summarise", trigger.as_str()),
        Event::Compaction {
            trigger,
            archived_messages: n,
            archive,
            ..
        } => format!(
            "compaction ({}): {n} message{} summarised, archived in {}",
            trigger.as_str(),
            if *n == 1 { "" } else { "s" },
            archive.as_deref().unwrap_or("")
        ),
        Event::Warning { message } => format!("warning: {message}"),
        Event::Nudge { command } => format!(
            "nudge: the answer shows a command that did not run ({}); the model was told to call bash",
            clip(command)
        ),
        Event::Steer { text, .. } => format!("steered in: {}", crate::render::safe(text.trim())),
        Event::Hook { .. } => return crate::hooks::run_line(&env.event),
        Event::McpCall {
            server,
            tool,
            exit_code,
            duration_ms,
            error,
        } => match error {
            Some(e) => format!("mcp {server} {tool}: exit {exit_code} after {duration_ms} ms: {e}"),
            None => format!("mcp {server} {tool}: exit {exit_code} after {duration_ms} ms"),
        },
        Event::Door { held, listed } => crate::sandbox::door::describe(held, listed),
        Event::SessionStart {
            untrusted_hooks: Some(path),
            ..
        } => crate::hooks::untrusted_line(path),
        Event::Repair {
            dropped_lines,
            torn_tail,
            answered_calls,
            dropped_messages,
            merged,
            fixed,
            ..
        } => format!(
            "repaired the history: {} dropped lines{}, {} unanswered tool calls closed, {dropped_messages} messages dropped, {merged} merged, {fixed} fixed",
            dropped_lines.len(),
            dropped_why(dropped_lines.len(), *torn_tail),
            answered_calls.len(),
        ),
        Event::TurnInterrupted { .. } => {
            "the previous turn was interrupted (its process is gone)".into()
        }
        Event::Boundary {
            kind,
            reason: Some(reason),
            ..
        } => format!("{}: {reason}", boundary_name(*kind)),
        Event::Boundary { kind, from, to, .. } => format!(
            "{}: {} → {}",
            boundary_name(*kind),
            from.as_deref().unwrap_or(""),
            to.as_deref().unwrap_or("")
        ),
        // Shown otherwise (the answer streams, a bash call's line waits for its result, the
        // status line, `error` and `result` at the end) or not at all.
        Event::SessionStart { .. }
        | Event::TurnStart { .. }
        | Event::Assistant { .. }
        | Event::ToolCall { .. }
        | Event::Usage { .. }
        | Event::WorkUpdate { .. }
        | Event::Receipt { .. }
        | Event::AgentStart { .. }
        | Event::AgentEnd { .. }
        | Event::Error { .. }
        | Event::TurnEnd { .. }
        | Event::Result(_) => return None,
    })
}

/// Why lines of `conversation.jsonl` were dropped: only a last line without a final newline is a
/// torn write; a complete line that does not parse was edited or damaged.
fn dropped_why(dropped: usize, torn_tail: bool) -> String {
    let torn = torn_tail && dropped > 0;
    let damaged = match dropped - usize::from(torn) {
        0 => None,
        1 => Some("a line that is not a JSON message: edited or damaged".to_string()),
        n => Some(format!(
            "{n} lines that are not JSON messages: edited or damaged"
        )),
    };
    match (torn, damaged) {
        (false, None) => String::new(),
        (true, None) => " (a torn last line: a crash mid-write)".into(),
        (false, Some(d)) => format!(" ({d})"),
        (true, Some(d)) => format!(" (a torn last line: a crash mid-write; and {d})"),
    }
}

fn boundary_name(kind: BoundaryKind) -> &'static str {
    match kind {
        BoundaryKind::ModelSwitch => "model_switch",
        BoundaryKind::ToolsOff => "tools_off",
        BoundaryKind::SandboxSwitch => "sandbox_switch",
        BoundaryKind::McpServers => "mcp_servers",
    }
}

/// A short view of a tool result: the first lines and the last (the exit line), indented.
///
/// The lines between are counted as the command printed them: when they hold the marker of a
/// cut output (`[N bytes, M lines left out; full output: PATH]`), its M lines count too, and the
/// count says how many of them the result left out and where the full output is.
pub fn preview(content: &str, is_error: bool) -> String {
    let lines: Vec<&str> = content.lines().collect();
    let mut out = Vec::new();
    if lines.len() <= PREVIEW_LINES + 1 {
        out.extend(lines.iter().copied());
    } else {
        out.extend(lines[..PREVIEW_LINES].iter().copied());
        let between = &lines[PREVIEW_LINES..lines.len() - 1];
        let hidden = match between.iter().find_map(|l| cut_marker(l)) {
            Some((left_out, saved)) => {
                let more = (between.len() as u64 - 1).saturating_add(left_out);
                // Not clipped: the path is the point (the marker is one bounded line).
                format!("… {more} more lines ({left_out} of them left out of the result; {saved})")
            }
            None => format!("… {} more lines", between.len()),
        };
        let last = lines[lines.len() - 1];
        return indent(&out, is_error) + "\n  " + &hidden + "\n  " + &clip(last);
    }
    indent(&out, is_error)
}

/// The lines left out and the note on the full output, when `line` is the marker the bash tool
/// puts where it cut an output (`[N bytes, M lines left out; NOTE]`).
fn cut_marker(line: &str) -> Option<(u64, &str)> {
    let rest = line.strip_prefix('[')?.strip_suffix(']')?;
    let (bytes, rest) = rest.split_once(" bytes, ")?;
    let (lines, saved) = rest.split_once(" lines left out; ")?;
    if bytes.is_empty() || !bytes.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((lines.parse().ok()?, saved))
}

fn indent(lines: &[&str], is_error: bool) -> String {
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s.push_str(if is_error && i == 0 { "! " } else { "  " });
        s.push_str(&clip(l));
    }
    s
}

fn clip(line: &str) -> String {
    let c = crate::text::cut(line, 200);
    if c.len() < line.len() {
        format!("{c}…")
    } else {
        c.to_string()
    }
}
