//! `tern` / `tern chat`: the line REPL for a terminal or a tmux pane. It reads prompts and slash
//! commands, runs turns on the one [`Runtime`], and prints one status line after each turn. Slash
//! commands go through the same op table as the CLI verbs. With stdin not a terminal it reads
//! lines until EOF, so it can be scripted.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, ConditionalEventHandler, DefaultEditor, Event, EventContext, EventHandler, KeyEvent,
    Movement, RepeatCount,
};

use crate::cancel::CancelToken;
use crate::event::Envelope;
use crate::launcher::{Launcher, Process, SessionRef};
use crate::ops::{self, OpId, Target};
use crate::output::Human;
use crate::runtime::{Answer, Runtime, Surface};
use crate::store::{StateDir, files};

/// What one read gave.
enum Line {
    Text(String),
    /// Ctrl-C at the prompt (a key in the editor, SIGINT in a pipe).
    Interrupted,
    /// Ctrl-D or end of input.
    Eof,
    /// SIGTERM: leave now.
    Terminated,
    /// Ctrl-C inside a multi-line input: what was typed is dropped.
    Discarded,
}

/// Reads lines for the REPL in a thread of its own (rustyline on a terminal, with editing and
/// history; plain lines from a pipe), so the main thread can notice SIGTERM while a read blocks.
struct Input {
    prompts: mpsc::Sender<String>,
    lines: mpsc::Receiver<Line>,
    cancel: CancelToken,
    term: Arc<AtomicBool>,
    /// Whether rustyline shows the prompt itself (a real terminal); otherwise the questions that
    /// need an answer are written to stderr.
    editing: bool,
    /// The terminal settings at start, restored when SIGTERM ends the REPL mid-read (the reader
    /// thread's raw mode would otherwise stay on).
    saved_tty: Option<libc::termios>,
    /// Set while a question reads the terminal during a turn: the steer watcher leaves the
    /// answer to it.
    asking: Arc<AtomicBool>,
    /// Slash commands typed during a turn, read before the terminal is asked again.
    later: std::collections::VecDeque<String>,
}

impl Input {
    fn new(state: &StateDir, cancel: CancelToken, term: Arc<AtomicBool>) -> Input {
        let history = History {
            path: state.root.join("history"),
            warned: false,
        };
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let editing = std::io::stdin().is_terminal() && !dumb;
        let saved_tty = editing.then(|| {
            // SAFETY: tcgetattr fills a termios we own; on failure we keep nothing.
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            (unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } == 0).then_some(t)
        });
        let (prompt_tx, prompt_rx) = mpsc::channel::<String>();
        let (line_tx, line_rx) = mpsc::channel::<Line>();
        std::thread::spawn(move || {
            let mut editor = if editing {
                DefaultEditor::new().ok()
            } else {
                None
            };
            let mut history = history;
            if let Some(ed) = editor.as_mut() {
                for entry in history.load() {
                    let _ = ed.add_history_entry(entry);
                }
                ed.bind_sequence(
                    KeyEvent::ctrl('C'),
                    EventHandler::Conditional(Box::new(ClearOrInterrupt)),
                );
            }
            for prompt in prompt_rx {
                // The approval question takes one key in a terminal (issue 46).
                if editor.is_some() && prompt == crate::output::APPROVE_PROMPT {
                    eprint!("{prompt}");
                    let line = match crate::output::read_key(libc::STDIN_FILENO) {
                        Ok(3) => Line::Interrupted,
                        Ok(4) => Line::Eof,
                        Ok(k) => {
                            let shown = if k.is_ascii_graphic() { k as char } else { ' ' };
                            eprintln!("{shown}");
                            Line::Text((k as char).to_string())
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Line::Interrupted,
                        Err(_) => Line::Eof,
                    };
                    if line_tx.send(line).is_err() {
                        break;
                    }
                    continue;
                }
                let line = match editor.as_mut() {
                    Some(ed) => match ed.readline(&prompt) {
                        Ok(l) => {
                            if !l.trim().is_empty() && prompt == PROMPT {
                                // Saved as every other file tern writes: keys redacted.
                                let entry = crate::store::redact::redact(&l);
                                let _ = ed.add_history_entry(entry.as_ref());
                                history.append(&entry);
                            }
                            Line::Text(l)
                        }
                        Err(ReadlineError::Interrupted) => Line::Interrupted,
                        Err(_) => Line::Eof,
                    },
                    None => {
                        use std::io::{BufRead, Read};
                        let mut s = String::new();
                        let limit = crate::runtime::MAX_PROMPT_BYTES as u64 + 1;
                        match std::io::stdin().lock().take(limit).read_line(&mut s) {
                            Ok(0) | Err(_) => Line::Eof,
                            // A line with no end in sight (`< /dev/zero`): stop reading, not grow.
                            Ok(n) if n as u64 >= limit && !s.ends_with('\n') => {
                                crate::errln!("tern: an input line is longer than 1 MiB; stopping");
                                Line::Eof
                            }
                            Ok(_) => Line::Text(s.trim_end_matches(['\n', '\r']).to_string()),
                        }
                    }
                };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Input {
            prompts: prompt_tx,
            lines: line_rx,
            cancel,
            term,
            editing,
            saved_tty: saved_tty.flatten(),
            asking: Arc::new(AtomicBool::new(false)),
            later: std::collections::VecDeque::new(),
        }
    }

    /// Reads one line; `ask` writes the prompt to stderr when no editor shows it.
    fn read(&mut self, prompt: &str, ask: bool) -> Line {
        if ask && !self.editing {
            crate::errln!("{prompt}");
        }
        if self.prompts.send(prompt.to_string()).is_err() {
            return Line::Eof;
        }
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => return line,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Line::Eof,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.term.load(Ordering::SeqCst) {
                        self.restore_tty();
                        return Line::Terminated;
                    }
                    // SIGINT reaches us as a signal only when no editor has the terminal.
                    if !self.editing && self.cancel.take() {
                        return Line::Interrupted;
                    }
                }
            }
        }
    }

    fn restore_tty(&self) {
        if let Some(t) = &self.saved_tty {
            // SAFETY: restores settings read by tcgetattr at start on the same descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t) };
            crate::errln!();
        }
    }

    /// Reads one input: a line, lines joined while they end in `\`, or a `"""` block.
    ///
    /// Inside a block or a continuation, Ctrl-C discards what was typed so far (it does not count
    /// toward leaving) and Ctrl-D ends the input as it stands (nothing typed is lost).
    fn read_input(&mut self) -> Line {
        if let Some(l) = self.later.pop_front() {
            crate::errln!("{PROMPT}{l}");
            return Line::Text(l);
        }
        let first = match self.read(PROMPT, false) {
            Line::Text(t) => t,
            other => return other,
        };
        let mut text = String::new();
        let more = |input: &mut Input, text: &str| match input.read(MORE, false) {
            Line::Interrupted => Err(Line::Discarded),
            Line::Eof if !text.trim().is_empty() => Err(Line::Text(text.to_string())),
            other => Ok(other),
        };
        if first.trim() == "\"\"\"" {
            loop {
                match more(self, &text) {
                    Err(done) => return done,
                    Ok(Line::Text(t)) if t.trim() == "\"\"\"" => break,
                    Ok(Line::Text(t)) => {
                        text.push_str(&t);
                        text.push('\n');
                    }
                    Ok(other) => return other,
                }
            }
        } else {
            let mut line = first;
            while let Some(stripped) = line.strip_suffix('\\') {
                text.push_str(stripped);
                text.push('\n');
                line = match more(self, &text) {
                    Err(done) => return done,
                    Ok(Line::Text(t)) => t,
                    Ok(other) => return other,
                };
            }
            text.push_str(&line);
        }
        Line::Text(text)
    }
}

/// The input history, `.tern/history`, in rustyline's format (`#V2`, then one entry a line with
/// `\\` and `\n` escaped), read and appended by tern itself so that nothing is read or written
/// through a link planted at it or at a folder above it (see [`crate::store::dirfd`]); rustyline
/// keeps the entries in memory only.
struct History {
    path: std::path::PathBuf,
    /// A failure to save was reported (once per REPL).
    warned: bool,
}

/// Entries kept when the file is trimmed; the file is trimmed once it holds 10 times as many.
const HISTORY_ENTRIES: usize = 100;

impl History {
    /// The saved entries, oldest first (none when absent or refused). A file grown past ten
    /// times [`HISTORY_ENTRIES`] is rewritten with its last entries.
    fn load(&mut self) -> Vec<String> {
        use std::io::Read;
        let mut bytes = Vec::new();
        match crate::store::fsutil::open_file(&self.path, libc::O_RDONLY, 0) {
            Ok(f) => {
                let limit = 16 * crate::runtime::MAX_PROMPT_BYTES as u64;
                if let Err(e) = f.take(limit).read_to_end(&mut bytes) {
                    self.warn(&e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => self.warn(&e),
        }
        let text = String::from_utf8_lossy(&bytes);
        let mut lines = text.lines();
        let v2 = text.starts_with("#V2");
        if v2 {
            lines.next();
        }
        let mut entries: Vec<String> = lines
            .filter(|l| !l.is_empty())
            .map(|l| if v2 { unescape(l) } else { l.to_string() })
            .collect();
        if entries.len() > 10 * HISTORY_ENTRIES {
            entries.drain(..entries.len() - HISTORY_ENTRIES);
            let mut text = String::from("#V2\n");
            for e in &entries {
                text.push_str(&escape(e));
                text.push('\n');
            }
            if let Err(e) = crate::store::fsutil::atomic_write(&self.path, text.as_bytes()) {
                self.warn(&e);
            }
        }
        entries
    }

    /// Appends one entry (already redacted). The state folder appears with the first session;
    /// until then the history lives in memory only.
    fn append(&mut self, entry: &str) {
        if !self.path.parent().is_some_and(|d| d.is_dir()) {
            return;
        }
        let fresh = std::fs::symlink_metadata(&self.path).is_err();
        let mut line = escape(entry);
        if fresh {
            line = format!("#V2\n{line}");
        }
        if let Err(e) = crate::store::fsutil::append_line(&self.path, &line) {
            self.warn(&e);
        }
    }

    fn warn(&mut self, e: &std::io::Error) {
        if !self.warned {
            self.warned = true;
            crate::errln!(
                "tern: input history not saved: {}",
                crate::render::safe(&e.to_string())
            );
        }
    }
}

fn escape(entry: &str) -> String {
    entry.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// Reads lines typed while a turn runs and steers each into it (`tern steer`'s inbox): the
/// terminal stays line by line, so Enter ends a line and Ctrl-C still reaches the signal handler
/// that cancels the turn, but its echo is off while the turn runs: typed text would land inside
/// the progress line and the model's text. Each line is said back whole on a line of its own
/// ([`crate::output::aside`]) once Enter ends it. Waits in `poll` (100 ms) so it stops soon
/// after the turn; leaves the terminal to an approval question while one is asked (the editor
/// turns its own echo on).
struct SteerWatcher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
    /// The terminal's settings before the echo went off, put back by [`SteerWatcher::stop`].
    tty: Option<libc::termios>,
}

impl SteerWatcher {
    fn start(session: &crate::store::Session, asking: Arc<AtomicBool>) -> SteerWatcher {
        // SAFETY: tcgetattr fills a termios we own; tcsetattr sets a copy of it with only ECHO
        // changed, on the same descriptor.
        let tty = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            (libc::tcgetattr(libc::STDIN_FILENO, &mut t) == 0).then(|| {
                let mut quiet = t;
                quiet.c_lflag &= !(libc::ECHO | libc::ECHONL);
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &quiet);
                t
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let session = crate::store::Session::at(&session.id, session.dir.clone());
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut line = Vec::new();
            let mut later = Vec::new();
            while !halt.load(Ordering::SeqCst) {
                let mut fd = libc::pollfd {
                    fd: libc::STDIN_FILENO,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, count 1.
                let ready = unsafe { libc::poll(&mut fd, 1, 100) };
                if ready <= 0 || asking.load(Ordering::SeqCst) || halt.load(Ordering::SeqCst) {
                    continue;
                }
                if fd.revents & libc::POLLIN == 0 {
                    // Hung up or an error: nothing more to read here.
                    break;
                }
                // SAFETY: reads into a buffer we own, at most its length.
                let n =
                    unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                line.extend_from_slice(&buf[..n as usize]);
                if !line.ends_with(b"\n") {
                    continue;
                }
                let text = String::from_utf8_lossy(&line).trim().to_string();
                line.clear();
                if text.is_empty() {
                    continue;
                }
                if text.starts_with('/') {
                    // A slash command is for tern, not the model: it runs when the turn ends.
                    crate::output::aside(&format!("({text} runs when the turn ends)"));
                    later.push(text);
                    continue;
                }
                match crate::runtime::steer::send(&session, &text, true) {
                    Ok(_) => crate::output::aside(&format!(
                        "(queued for the model's next request: {text})"
                    )),
                    Err(e) => crate::output::aside(&format!("tern: could not steer: {e}")),
                }
            }
            later
        });
        SteerWatcher { stop, thread, tty }
    }

    /// Stops watching and puts the terminal's echo back; returns the slash commands typed
    /// meanwhile, in order.
    fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        let later = self.thread.join().unwrap_or_default();
        if let Some(t) = &self.tty {
            // SAFETY: restores settings read by tcgetattr in `start` on the same descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t) };
        }
        later
    }
}

/// Ctrl-C in the editor: with text on the line it clears the line (as a shell does); on an empty
/// line it is the interrupt that, twice in a row, leaves the REPL.
struct ClearOrInterrupt;

impl ConditionalEventHandler for ClearOrInterrupt {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        if ctx.line().is_empty() {
            None
        } else {
            Some(Cmd::Kill(Movement::WholeLine))
        }
    }
}

const PROMPT: &str = "› ";
/// A second Ctrl-C at an empty prompt within this time leaves the REPL.
const LEAVE_WINDOW: Duration = Duration::from_secs(3);
const MORE: &str = "… ";

/// The REPL's surface: human output plus approval questions read from the same input.
struct ReplSurface<'a> {
    human: Human,
    input: &'a mut Input,
}

impl Surface for ReplSurface<'_> {
    fn event(&mut self, ev: &Envelope) {
        self.human.event(ev);
    }
    fn text_delta(&mut self, text: &str) {
        self.human.text_delta(text);
    }
    fn progress(&mut self, note: &str) {
        self.human.progress(note);
    }
    fn approve(&mut self, command: &str) -> Answer {
        self.human.asking();
        crate::errln!("{}", crate::render::approval_question(command).trim_end());
        let asking = self.input.asking.clone();
        asking.store(true, Ordering::SeqCst);
        let answer = self.ask();
        asking.store(false, Ordering::SeqCst);
        answer
    }
}

impl ReplSurface<'_> {
    fn ask(&mut self) -> Answer {
        loop {
            match self.input.read(crate::output::APPROVE_PROMPT, true) {
                Line::Text(a) => match crate::output::approval_answer(&a) {
                    Some(answer) => return answer,
                    None => crate::errln!("answer y, n or a"),
                },
                // Ctrl-C here means what it means everywhere: stop the turn.
                Line::Interrupted | Line::Terminated => {
                    self.input.cancel.cancel();
                    return Answer::No;
                }
                Line::Eof | Line::Discarded => return Answer::No,
            }
        }
    }
}

/// Runs the REPL on `launcher` (approval defaults to ask here), first reopening `continues`
/// when given; returns the exit code.
pub fn run(launcher: &Launcher, process: &Process, continues: Option<SessionRef>) -> i32 {
    if let Err(e) = launcher.ready().and_then(|_| launcher.check_hooks()) {
        crate::errln!("tern: {e}");
        return e.exit_code();
    }
    let state = &launcher.state;
    if let Some(note) = std::env::current_dir()
        .ok()
        .and_then(|cwd| launcher.workspace_note(&cwd))
    {
        crate::errln!("tern: {note}");
    }
    let term = process.term.clone();
    let mut input = Input::new(state, launcher.cancel.clone(), term.clone());
    let mut repl = Repl {
        launcher,
        process,
        rt: None,
    };
    let tty = std::io::stdin().is_terminal();
    if let Some(r) = continues
        && let Err(e) = repl.open(&r, &mut input)
    {
        // The one mapping every surface uses: no such session is a usage error (exit 2).
        crate::errln!("tern: {e}");
        return e.exit_code();
    }
    if tty {
        let model = repl
            .rt
            .as_ref()
            .map(|rt| rt.cfg().model.clone())
            .or_else(|| launcher.route().ok().map(|r| r.model))
            .unwrap_or_default();
        crate::errln!(
            "tern {} · model {model} · /help for commands, Ctrl-D to leave",
            env!("CARGO_PKG_VERSION"),
        );
    }
    // When the last Ctrl-C at an empty prompt came: a second one soon after leaves.
    let mut interrupted_at: Option<std::time::Instant> = None;
    loop {
        if term.load(Ordering::SeqCst) {
            return 130;
        }
        launcher.cancel.reset();
        let text = match input.read_input() {
            Line::Eof => break,
            Line::Terminated => return 130,
            Line::Interrupted => {
                if interrupted_at.is_some_and(|t| t.elapsed() < LEAVE_WINDOW) {
                    break;
                }
                interrupted_at = Some(std::time::Instant::now());
                crate::errln!("(Ctrl-C again or Ctrl-D to leave)");
                continue;
            }
            Line::Discarded => {
                crate::errln!("(input discarded)");
                continue;
            }
            Line::Text(t) => t,
        };
        interrupted_at = None;
        let trimmed = text.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(cmd) = trimmed.strip_prefix('/') {
            if repl.slash(cmd, &mut input) {
                break;
            }
            continue;
        }
        repl.turn(&text, &mut input);
        if term.load(Ordering::SeqCst) {
            return 130;
        }
    }
    if repl.rt.is_none() && tty {
        crate::errln!("bye");
    }
    0
}

struct Repl<'a> {
    launcher: &'a Launcher,
    process: &'a Process,
    rt: Option<Runtime>,
}

impl Repl<'_> {
    fn open(&mut self, r: &SessionRef, input: &mut Input) -> Result<(), crate::runtime::Failure> {
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        let rt = self.launcher.open(r, &mut ui)?;
        self.launcher.state.set_current(&rt.session().id)?;
        crate::errln!("resumed session {}", rt.session().id);
        self.rt = Some(rt);
        Ok(())
    }

    fn runtime(&mut self, title: &str, input: &mut Input) -> Result<&mut Runtime, String> {
        if self.rt.is_none() {
            let mut ui = ReplSurface {
                human: Human::new(),
                input,
            };
            let rt = self
                .launcher
                .open(
                    &SessionRef::New {
                        title: title.to_string(),
                    },
                    &mut ui,
                )
                .map_err(|e| e.to_string())?;
            self.rt = Some(rt);
        }
        self.rt.as_mut().ok_or_else(|| "no session".to_string())
    }

    fn turn(&mut self, text: &str, input: &mut Input) {
        let process = self.process;
        let rt = match self.runtime(text, input) {
            Ok(rt) => rt,
            Err(e) => {
                crate::errln!("tern: {e}");
                return;
            }
        };
        // The editor users' 10× surprise: a pause longer than the provider's cache lifetime
        // means this turn's first request reads nothing from the cache. Said before it is sent.
        if let Some(idle) = rt.idle_past_cache() {
            crate::errln!(
                "(the pause of {} min outlived the provider's prompt cache: this turn's first request is billed in full{})",
                idle.as_secs() / 60,
                if rt.provider_name() == crate::provider::Wire::Anthropic {
                    "; cache_ttl \"1h\" in the config keeps it an hour"
                } else {
                    ""
                }
            );
        }
        // A line typed while the turn runs is steered into it (a terminal only: piped lines are
        // the next prompts).
        let watcher = std::io::stdin()
            .is_terminal()
            .then(|| SteerWatcher::start(rt.session(), input.asking.clone()));
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        // Lines steered as the turn ended are answered by one more turn (the runtime's rule).
        // Each turn's outcome is shown as it ends (above); nothing more to do with the last.
        let _ = rt.run_prompt(text, &mut ui, &mut |outcome| match outcome {
            Ok(_) => {}
            // Ends the line a progress note or the model's text left open.
            Err(crate::runtime::Failure::Interrupted) => crate::output::aside("(interrupted)"),
            Err(e) => crate::errln!("tern: {e}"),
        });
        if let Some(w) = watcher {
            ui.input.later.extend(w.stop());
        }
        rt.cancel_token().reset();
        // The emergency exit counts Ctrl-Cs within one turn, not over the whole REPL.
        process.sigints.store(0, Ordering::SeqCst);
        crate::errln!("{}", status_line(rt));
    }

    /// Runs a slash command; returns true to leave.
    fn slash(&mut self, cmd: &str, input: &mut Input) -> bool {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, Some(a.trim()).filter(|a| !a.is_empty())),
            None => (cmd, None),
        };
        let Some(op) = ops::by_slash(name) else {
            // A skill's name (tern's own commands win a clash: `$name` reaches that skill).
            if crate::skills::discover(&self.launcher.skill_roots())
                .get(name)
                .is_some()
            {
                self.turn(&format!("/{cmd}"), input);
                return false;
            }
            crate::errln!("unknown command /{name}; /help and `tern skills` list them");
            return false;
        };
        match op.id {
            OpId::Quit => return true,
            OpId::Resume => {
                match arg {
                    Some(id) => {
                        if let Err(e) = self.open(&SessionRef::Id(id.to_string()), input) {
                            crate::errln!("tern: {e}");
                        }
                    }
                    None => crate::errln!("usage: /resume SESSION_ID (see /sessions)"),
                }
                return false;
            }
            _ => {}
        }
        if self.rt.is_none() && !matches!(op.id, OpId::Help | OpId::Sessions) {
            if !op.writes() {
                // Nothing to show yet; do not create an empty session just to show it.
                let hint = match self.launcher.state.current().ok().flatten() {
                    Some(s) => format!(" (the latest is {}: /resume {0})", s.id),
                    None => String::new(),
                };
                crate::errln!("no session yet: type a prompt to start one, or /resume ID{hint}");
                return false;
            }
            // A write (e.g. /draft before the first prompt) starts the session, as a prompt would.
            if let Err(e) = self.runtime("", input) {
                crate::errln!("tern: {e}");
                return false;
            }
        }
        let mut target = Target {
            launcher: self.launcher,
            runtime: self.rt.as_mut(),
            session: None,
            wait: false,
        };
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        let r = ops::run(op, arg, &mut target, &mut ui);
        crate::output::print_receipt(&r, false);
        let _ = std::io::stdout().flush();
        self.launcher.cancel.reset();
        // /fork and /rewind: the conversation goes on in the new session.
        if let Some(ops::OpOutput::Forked { session, .. }) = &r.output
            && let Err(e) = self.open(&SessionRef::Id(session.clone()), input)
        {
            crate::errln!("tern: {e}");
        }
        false
    }
}

/// The one line shown after each turn: settled count, the session's tokens and cache hit ratio
/// (from `meta.json`, so a resumed session keeps its totals), plan state. Reads the small state
/// files only, never the event log.
pub fn status_line(rt: &Runtime) -> String {
    let s = rt.session();
    let ledger: crate::domain::ledger::Ledger = s
        .read_json(files::LEDGER)
        .ok()
        .flatten()
        .unwrap_or_default();
    let plan = crate::runtime::plan::plan_file(s).unwrap_or_default();
    let meta = s.read_meta().ok();
    let t = meta.as_ref().map_or(rt.totals().usage, |m| m.usage);
    let mut parts = Vec::new();
    if !ledger.items.is_empty() {
        parts.push(format!(
            "{}/{} settled",
            ledger.settled(),
            ledger.items.len()
        ));
    }
    parts.push(format!(
        "session: {} tokens in, {} out",
        t.input_tokens, t.output_tokens
    ));
    parts.push(format!(
        "cache {:.0}%",
        crate::runtime::ratio(t.cached_tokens, t.input_tokens) * 100.0
    ));
    if let Some(m) = &meta
        && m.turns > 0
    {
        parts.push(if m.turns > m.unpriced || m.children_cost_usd > 0.0 {
            crate::cost::usd_text(Some(m.cost_usd + m.children_cost_usd))
        } else {
            "cost unknown".into()
        });
    }
    if let Some((spent, limit)) = rt.budget_state() {
        parts.push(format!(
            "limit {} ({} spent)",
            crate::cost::usd_text(Some(limit)),
            crate::cost::usd_text(Some(spent))
        ));
    }
    let sb = rt.sandbox();
    parts.push(format!(
        "sandbox {}{}",
        sb.mode.as_str(),
        if sb.no_network { ", no network" } else { "" }
    ));
    parts.push(format!("plan {}", plan.state.as_str()));
    format!("── {}", parts.join(" · "))
}
