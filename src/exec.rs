//! `tern exec [PROMPT | -]`: one headless turn, for scripts, CI and shell aliases. Human output
//! (assistant text on stdout, tool activity on stderr) or `--json` events; the `result` event is
//! always the last line, also on failure and on Ctrl-C / SIGTERM.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::{Value, json};

use crate::config::{self, ProviderFlags};
use crate::output::{self, Human, Json};
use crate::runtime::{Config, Failure, Runtime, Surface, make_event};
use crate::store::StateDir;

/// Everything `tern exec` needs, from its flags.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The prompt text, `-` for stdin, or None (only with `--continue` / `--resume`).
    pub prompt: Option<String>,
    /// Print JSONL events instead of human output.
    pub json: bool,
    /// Provider flags.
    pub provider: ProviderFlags,
    /// Runtime settings (model is filled from the provider choice).
    pub config: Config,
    /// Continue the current session.
    pub continue_: bool,
    /// Resume this session id.
    pub resume: Option<String>,
    /// `--state-dir` / TERN_STATE_DIR.
    pub state_dir: Option<PathBuf>,
    /// Provider idle-read timeout.
    pub idle_timeout: std::time::Duration,
}

/// Registers SIGINT, SIGTERM and SIGHUP to set `flag` (an orderly stop: the running command is
/// killed, results stored, a final `result` event). A third SIGINT is the escape hatch if that
/// hangs: it kills the running command's process group and exits at once with 130.
pub fn install_signals(flag: &Arc<AtomicBool>) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static SIGINTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // SAFETY: the handler only touches atomics and calls kill(2) and _exit(2), all
    // async-signal-safe.
    let _ = unsafe {
        signal_hook::low_level::register(SIGINT, || {
            if SIGINTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 2 {
                let group =
                    crate::tools::bash::RUNNING_GROUP.load(std::sync::atomic::Ordering::SeqCst);
                if group > 0 {
                    libc::kill(-group, libc::SIGKILL);
                }
                libc::_exit(130);
            }
        })
    };
    let _ = signal_hook::flag::register(SIGINT, flag.clone());
    let _ = signal_hook::flag::register(SIGTERM, flag.clone());
    // A closed terminal (SIGHUP) ends the turn the same orderly way.
    let _ = signal_hook::flag::register(SIGHUP, flag.clone());
}

/// Runs `tern exec`; returns the process exit code (DESIGN.md §8).
pub fn run(opts: ExecOptions) -> i32 {
    let mut json_ui = Json;
    let mut human = Human::new();
    let ui: &mut dyn Surface = if opts.json { &mut json_ui } else { &mut human };

    let choice = match config::resolve(&opts.provider, &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => return early_failure(&opts, &e, 2),
    };
    // Still one thread here: the key leaves this process's environment before anything runs.
    config::scrub_environment();
    // Handlers next: a Ctrl-C or SIGTERM while the prompt is read or the session opens still
    // ends with a `result` event.
    let cancel = Arc::new(AtomicBool::new(false));
    install_signals(&cancel);
    let prompt = match read_prompt(&opts, &cancel) {
        Ok(p) => p,
        Err(None) => return early_failure(&opts, "interrupted while reading the prompt", 130),
        Err(Some(e)) => return early_failure(&opts, &e, 2),
    };
    let mut cfg = opts.config.clone();
    cfg.model = choice.model.clone();
    cfg.base_url = choice.base_url.clone();
    cfg.send_cache_key = config::is_openai_host(&choice.base_url);
    cfg.secret_env = config::SECRET_ENV.iter().map(|s| s.to_string()).collect();
    let provider = config::build(&choice, opts.idle_timeout);

    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return early_failure(&opts, &format!("no current folder: {e}"), 1),
    };
    let state = StateDir::locate(&cwd, opts.state_dir.as_deref());
    let opened = if opts.continue_ || opts.resume.is_some() {
        let session = match &opts.resume {
            Some(id) => state.open_session(id).map_err(|e| e.to_string()),
            None => state.current().map_err(|e| e.to_string()).and_then(|s| {
                s.ok_or_else(|| {
                    "no session to continue here (start one with `tern exec PROMPT`)".to_string()
                })
            }),
        };
        match session {
            Ok(s) => Runtime::resume(&state, s, provider, cfg, ui),
            // Naming a session that is not there is a usage error (exit 2).
            Err(e) => return early_failure(&opts, &e, 2),
        }
    } else {
        Runtime::create(&state, provider, cfg, &prompt, ui)
    };
    let mut rt = match opened {
        Ok(rt) => rt,
        Err(e) => return early_failure(&opts, &e.to_string(), e.exit_code()),
    };
    rt.cancel = cancel;
    let outcome = rt.run_turn(&prompt, ui);
    finish(&mut rt, outcome, ui, opts.json)
}

/// Emits the final `result` event for `outcome` and returns the exit code. In human mode (`json`
/// false) an error is also printed to stderr.
pub fn finish(
    rt: &mut Runtime,
    outcome: Result<String, Failure>,
    ui: &mut dyn Surface,
    json: bool,
) -> i32 {
    let (status, text, error, code) = match &outcome {
        Ok(text) => ("completed", text.clone(), None, 0),
        Err(f) => (f.kind(), String::new(), Some(f.to_string()), f.exit_code()),
    };
    let mut fields = json!({"status": status, "text": text, "error": error, "exit_code": code});
    if let (Some(f), Value::Object(extra)) = (fields.as_object_mut(), rt.result_fields()) {
        f.extend(extra);
    }
    rt.emit(ui, "result", fields);
    if let (false, Some(e)) = (json, &error) {
        crate::errln!("tern: {e}");
    }
    code
}

/// Largest prompt accepted, in bytes: it is sent again in every later request of the session.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

/// The prompt from the argument or stdin. Err(None): interrupted while reading; Err(Some):
/// a usage error. Stdin is read in a thread so a signal is noticed even while a writer stalls.
fn read_prompt(opts: &ExecOptions, cancel: &AtomicBool) -> Result<String, Option<String>> {
    let text = match opts.prompt.as_deref() {
        Some("-") => {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let r = std::io::stdin()
                    .take(MAX_PROMPT_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
                    .map(|_| bytes);
                let _ = tx.send(r);
            });
            let bytes = loop {
                match rx.recv_timeout(std::time::Duration::from_millis(100)) {
                    Ok(r) => {
                        break r.map_err(|e| {
                            Some(format!("could not read the prompt from stdin: {e}"))
                        })?;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if cancel.load(std::sync::atomic::Ordering::SeqCst) {
                            return Err(None);
                        }
                    }
                    Err(_) => return Err(Some("could not read the prompt from stdin".into())),
                }
            };
            String::from_utf8(bytes)
                .map_err(|_| Some("the prompt read from stdin is not UTF-8 text".to_string()))?
        }
        Some(p) => p.to_string(),
        None if opts.continue_ || opts.resume.is_some() => return Ok(String::new()),
        None => {
            return Err(Some(
                "no prompt: give one as an argument, or `-` to read it from stdin".into(),
            ));
        }
    };
    if text.len() > MAX_PROMPT_BYTES {
        return Err(Some(format!(
            "the prompt is longer than {} KiB; put the material in a file and point the model at it",
            MAX_PROMPT_BYTES >> 10
        )));
    }
    if text.trim().is_empty() {
        return Err(Some("the prompt is empty".into()));
    }
    Ok(text)
}

/// A failure before any session exists: still a final `result` event in `--json` mode.
fn early_failure(opts: &ExecOptions, error: &str, code: i32) -> i32 {
    let error = crate::store::redact::redact(error).into_owned();
    if opts.json {
        print_sessionless_result(&error, code);
    } else {
        crate::errln!("tern: {error}");
    }
    code
}

/// The `result` event of a run that failed before any session existed (a usage error): printed
/// on stdout with `session: null` and `seq` 1; it is in no `events.jsonl`.
pub fn print_sessionless_result(error: &str, code: i32) {
    let mut ev = make_event(
        "result",
        "",
        json!({"status": "failed", "text": "", "error": error, "exit_code": code}),
    );
    if let Some(o) = ev.as_object_mut() {
        o.insert("session".into(), Value::Null);
        o.insert("seq".into(), Value::from(1));
    }
    output::print_json_line(&ev);
}
