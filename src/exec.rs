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

/// Registers SIGINT, SIGTERM and SIGHUP to set `flag`; a second SIGINT while the flag is already set exits
/// at once with 130 (the escape hatch if something hangs).
pub fn install_signals(flag: &Arc<AtomicBool>) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let _ = signal_hook::flag::register_conditional_shutdown(SIGINT, 130, flag.clone());
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

    let prompt = match read_prompt(&opts) {
        Ok(p) => p,
        Err(e) => return early_failure(&opts, &e, 2),
    };
    let choice = match config::resolve(&opts.provider, &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => return early_failure(&opts, &e, 2),
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
    // Handlers first: a Ctrl-C while the session opens still ends with a `result` event.
    let cancel = Arc::new(AtomicBool::new(false));
    install_signals(&cancel);
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

fn read_prompt(opts: &ExecOptions) -> Result<String, String> {
    match opts.prompt.as_deref() {
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("could not read the prompt from stdin: {e}"))?;
            if s.trim().is_empty() {
                return Err("the prompt read from stdin is empty".into());
            }
            Ok(s)
        }
        Some(p) if !p.trim().is_empty() => Ok(p.to_string()),
        Some(_) => Err("the prompt is empty".into()),
        None if opts.continue_ || opts.resume.is_some() => Ok(String::new()),
        None => Err("no prompt: give one as an argument, or `-` to read it from stdin".into()),
    }
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
