//! `tern` / `tern chat`: the line REPL for a terminal or a tmux pane. It reads prompts and slash
//! commands, runs turns on the one [`Runtime`], and prints one status line after each turn. Slash
//! commands go through the same op table as the CLI verbs. With stdin not a terminal it reads
//! lines until EOF, so it can be scripted.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use serde_json::Value;

use crate::config::{self, ProviderFlags};
use crate::ops::{self, Target};
use crate::output::Human;
use crate::runtime::{Answer, Config, Runtime, Surface};
use crate::store::StateDir;

/// What `tern chat` needs from its flags.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    /// Provider flags.
    pub provider: ProviderFlags,
    /// Runtime settings (approval defaults to ask here).
    pub config: Config,
    /// Continue the current session.
    pub continue_: bool,
    /// Resume this session.
    pub resume: Option<String>,
    /// `--state-dir`.
    pub state_dir: Option<std::path::PathBuf>,
    /// Provider idle timeout.
    pub idle_timeout: std::time::Duration,
}

/// Reads lines for the REPL: rustyline on a terminal (editing, history), plain lines otherwise.
struct Input {
    editor: Option<DefaultEditor>,
    history: std::path::PathBuf,
}

enum Line {
    Text(String),
    Interrupted,
    Eof,
}

impl Input {
    fn new(state: &StateDir) -> Input {
        let history = state.root.join("history");
        let mut editor = DefaultEditor::new().ok();
        if let Some(ed) = editor.as_mut() {
            let _ = ed.load_history(&history);
        }
        Input { editor, history }
    }

    fn read(&mut self, prompt: &str) -> Line {
        let Some(ed) = self.editor.as_mut() else {
            let mut s = String::new();
            return match std::io::stdin().read_line(&mut s) {
                Ok(0) | Err(_) => Line::Eof,
                Ok(_) => Line::Text(s.trim_end_matches(['\n', '\r']).to_string()),
            };
        };
        match ed.readline(prompt) {
            Ok(l) => Line::Text(l),
            Err(ReadlineError::Interrupted) => Line::Interrupted,
            Err(_) => Line::Eof,
        }
    }

    /// Reads one input: a line, lines joined while they end in `\`, or a `"""` block.
    fn read_input(&mut self) -> Line {
        let first = match self.read("› ") {
            Line::Text(t) => t,
            other => return other,
        };
        let mut text = String::new();
        if first.trim() == "\"\"\"" {
            loop {
                match self.read("… ") {
                    Line::Text(t) if t.trim() == "\"\"\"" => break,
                    Line::Text(t) => {
                        text.push_str(&t);
                        text.push('\n');
                    }
                    other => return other,
                }
            }
        } else {
            let mut line = first;
            while let Some(stripped) = line.strip_suffix('\\') {
                text.push_str(stripped);
                text.push('\n');
                line = match self.read("… ") {
                    Line::Text(t) => t,
                    other => return other,
                };
            }
            text.push_str(&line);
        }
        if !text.trim().is_empty()
            && let Some(ed) = self.editor.as_mut()
        {
            let _ = ed.add_history_entry(text.trim_end());
            let _ = ed.save_history(&self.history);
        }
        Line::Text(text)
    }
}

/// The REPL's surface: human output plus approval questions read from the same input.
struct ReplSurface<'a> {
    human: Human,
    input: &'a mut Input,
}

impl Surface for ReplSurface<'_> {
    fn event(&mut self, ev: &Value) {
        self.human.event(ev);
    }
    fn text_delta(&mut self, text: &str) {
        self.human.text_delta(text);
    }
    fn approve(&mut self, command: &str) -> Answer {
        crate::errln!("tern wants to run:\n  {}", command.replace('\n', "\n  "));
        loop {
            match self
                .input
                .read("run it? [y]es / [n]o / [a]lways this session: ")
            {
                Line::Text(a) => match a.trim().to_lowercase().as_str() {
                    "y" | "yes" => return Answer::Yes,
                    "n" | "no" => return Answer::No,
                    "a" | "always" => return Answer::Always,
                    _ => crate::errln!("answer y, n or a"),
                },
                Line::Interrupted | Line::Eof => return Answer::No,
            }
        }
    }
}

/// Runs the REPL; returns the exit code.
pub fn run(opts: ChatOptions) -> i32 {
    let choice = match config::resolve(&opts.provider, &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            crate::errln!("tern: {e}");
            return 2;
        }
    };
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            crate::errln!("tern: no current folder: {e}");
            return 1;
        }
    };
    let state = StateDir::locate(&cwd, opts.state_dir.as_deref());
    if let Err(e) = state.init() {
        crate::errln!("tern: {e}");
        return 1;
    }
    let mut cfg = opts.config.clone();
    cfg.model = choice.model.clone();
    cfg.base_url = choice.base_url.clone();
    cfg.send_cache_key = config::is_openai_host(&choice.base_url);
    cfg.secret_env = config::SECRET_ENV.iter().map(|s| s.to_string()).collect();
    let cancel = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, cancel.clone());
    let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, cancel.clone());
    let mut input = Input::new(&state);
    let mut repl = Repl {
        state: &state,
        choice,
        cfg,
        idle: opts.idle_timeout,
        rt: None,
        cancel,
    };
    let tty = std::io::stdin().is_terminal();
    if opts.continue_ || opts.resume.is_some() {
        let id = match &opts.resume {
            Some(id) => Some(id.clone()),
            None => state.current().ok().flatten().map(|s| s.id),
        };
        match id {
            Some(id) => {
                if let Err(e) = repl.open(&id, &mut input) {
                    crate::errln!("tern: {e}");
                    return 1;
                }
            }
            None => {
                crate::errln!("tern: no session to continue here");
                return 1;
            }
        }
    }
    if tty {
        crate::errln!(
            "tern {} · model {} · /help for commands, Ctrl-D to leave",
            env!("CARGO_PKG_VERSION"),
            repl.cfg.model
        );
    }
    let mut interrupts = 0;
    loop {
        repl.cancel.store(false, Ordering::SeqCst);
        let text = match input.read_input() {
            Line::Eof => break,
            Line::Interrupted => {
                interrupts += 1;
                if interrupts >= 2 {
                    break;
                }
                crate::errln!("(Ctrl-C again or Ctrl-D to leave)");
                continue;
            }
            Line::Text(t) => t,
        };
        interrupts = 0;
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
    }
    if repl.rt.is_none() && tty {
        crate::errln!("bye");
    }
    0
}

struct Repl<'a> {
    state: &'a StateDir,
    choice: config::ProviderChoice,
    cfg: Config,
    idle: std::time::Duration,
    rt: Option<Runtime>,
    cancel: Arc<AtomicBool>,
}

impl Repl<'_> {
    fn open(&mut self, id: &str, input: &mut Input) -> Result<(), String> {
        let session = self.state.open_session(id).map_err(|e| e.to_string())?;
        let provider = config::build(&self.choice, self.idle);
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        let mut rt = Runtime::resume(self.state, session, provider, self.cfg.clone(), &mut ui)
            .map_err(|e| e.to_string())?;
        rt.cancel = self.cancel.clone();
        self.state
            .set_current(&rt.session.id)
            .map_err(|e| e.to_string())?;
        crate::errln!("resumed session {}", rt.session.id);
        self.rt = Some(rt);
        Ok(())
    }

    fn runtime(&mut self, title: &str, input: &mut Input) -> Result<&mut Runtime, String> {
        if self.rt.is_none() {
            let provider = config::build(&self.choice, self.idle);
            let mut ui = ReplSurface {
                human: Human::new(),
                input,
            };
            let mut rt = Runtime::create(self.state, provider, self.cfg.clone(), title, &mut ui)
                .map_err(|e| e.to_string())?;
            rt.cancel = self.cancel.clone();
            self.rt = Some(rt);
        }
        self.rt.as_mut().ok_or_else(|| "no session".to_string())
    }

    fn turn(&mut self, text: &str, input: &mut Input) {
        let rt = match self.runtime(text, input) {
            Ok(rt) => rt,
            Err(e) => {
                crate::errln!("tern: {e}");
                return;
            }
        };
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        match rt.run_turn(text, &mut ui) {
            Ok(_) => {}
            Err(crate::runtime::Failure::Interrupted) => crate::errln!("(interrupted)"),
            Err(e) => crate::errln!("tern: {e}"),
        }
        rt.cancel.store(false, Ordering::SeqCst);
        crate::errln!("{}", status_line(rt));
    }

    /// Runs a slash command; returns true to leave.
    fn slash(&mut self, cmd: &str, input: &mut Input) -> bool {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, Some(a.trim()).filter(|a| !a.is_empty())),
            None => (cmd, None),
        };
        let Some(op) = ops::by_slash(name) else {
            crate::errln!("unknown command /{name}; /help lists them");
            return false;
        };
        match op.id {
            "quit" => return true,
            "resume" => {
                match arg {
                    Some(id) => {
                        if let Err(e) = self.open(id, input) {
                            crate::errln!("tern: {e}");
                        }
                    }
                    None => crate::errln!("usage: /resume SESSION_ID (see /sessions)"),
                }
                return false;
            }
            _ => {}
        }
        // Ops on a session need one: create it on first use, as a prompt would.
        if !matches!(op.id, "help" | "sessions")
            && self.rt.is_none()
            && let Err(e) = self.runtime("", input)
        {
            crate::errln!("tern: {e}");
            return false;
        }
        let mut target = Target {
            state: self.state,
            runtime: self.rt.as_mut(),
            session: None,
            wait: false,
            provider: ProviderFlags::default(),
        };
        let mut ui = ReplSurface {
            human: Human::new(),
            input,
        };
        let r = ops::run(op, arg, &mut target, &mut ui);
        ops::print_receipt(&r, false);
        let _ = std::io::stdout().flush();
        self.cancel.store(false, Ordering::SeqCst);
        false
    }
}

/// The one line shown after each turn: settled count, tokens, cache hit ratio, plan state.
pub fn status_line(rt: &Runtime) -> String {
    let snap = crate::status::snapshot(&rt.session);
    let t = &rt.totals;
    let mut parts = Vec::new();
    if !snap.ledger.items.is_empty() {
        parts.push(format!(
            "{}/{} settled",
            snap.ledger.settled(),
            snap.ledger.items.len()
        ));
    }
    parts.push(format!(
        "{} tokens in, {} out",
        t.usage.input_tokens, t.usage.output_tokens
    ));
    parts.push(format!("cache {:.0}%", t.cache_hit_ratio() * 100.0));
    parts.push(format!("plan {}", snap.plan.state.as_str()));
    format!("── {}", parts.join(" · "))
}
