//! `tern exec [PROMPT | -]`: one headless turn, for scripts, CI and shell aliases. Human output
//! (assistant text on stdout, tool activity on stderr) or `--json` events; the `result` event is
//! always the last line, also on failure and on Ctrl-C / SIGTERM.

use std::io::Read;

use crate::cancel::CancelToken;
use crate::launcher::{Launcher, SessionRef};
use crate::output::{self, Human, Json};
use crate::runtime::{Failure, Surface};

use crate::runtime::MAX_PROMPT_BYTES;

/// What `tern exec` was asked to do.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The prompt text, `-` for stdin, or None (only with `--continue` / `--resume`).
    pub prompt: Option<String>,
    /// Print JSONL events instead of human output.
    pub json: bool,
    /// Which session: new, current (`--continue`) or an id (`--resume`).
    pub continues: Option<SessionRef>,
}

/// Runs `tern exec` on `launcher`; returns the process exit code (DESIGN.md §8).
pub fn run(launcher: &Launcher, opts: ExecOptions) -> i32 {
    let mut json_ui = Json;
    // Piped or redirected, stdout carries the final answer alone (printed at the end); on a
    // terminal the answer streams there as it comes.
    let to_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut human = if to_terminal {
        Human::new()
    } else {
        Human::answer_only()
    };
    let ui: &mut dyn Surface = if opts.json { &mut json_ui } else { &mut human };
    if let Err(e) = launcher.ready() {
        return early_failure(&opts, &e);
    }
    if let Some(note) = std::env::current_dir()
        .ok()
        .and_then(|cwd| launcher.workspace_note(&cwd))
    {
        crate::errln!("tern: {note}");
    }
    let prompt = match read_prompt(&opts, &launcher.cancel) {
        Ok(p) => p,
        Err(None) => return early_failure(&opts, &Failure::Interrupted),
        Err(Some(e)) => return early_failure(&opts, &Failure::Usage(e)),
    };
    let target = opts.continues.clone().unwrap_or(SessionRef::New {
        title: prompt.clone(),
    });
    let mut rt = match launcher.open(&target, ui) {
        Ok(rt) => rt,
        Err(e) => return early_failure(&opts, &e),
    };
    let outcome = rt.run_turn(&prompt, ui);
    let code = rt.finish(&outcome, ui);
    if !opts.json {
        match &outcome {
            // stdout holds the final answer alone, redacted and terminal-safe.
            Ok(text) if !text.is_empty() && !to_terminal => {
                let text = crate::store::redact::redact(text);
                crate::outln!("{}", crate::render::safe(text.trim_end()));
            }
            Ok(_) => {}
            Err(e) => crate::errln!("tern: {e}"),
        }
    }
    code
}

/// The prompt from the argument or stdin. Err(None): interrupted while reading; Err(Some):
/// a usage error. Stdin is read in a thread so a signal is noticed even while a writer stalls.
fn read_prompt(opts: &ExecOptions, cancel: &CancelToken) -> Result<String, Option<String>> {
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
                        if cancel.is_cancelled() {
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
        None if opts.continues.is_some() => return Ok(String::new()),
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

/// A failure before any runtime exists: still a final `result` event in `--json` mode.
fn early_failure(opts: &ExecOptions, f: &Failure) -> i32 {
    let error = crate::store::redact::redact(&f.to_string()).into_owned();
    let code = f.exit_code();
    if opts.json {
        output::print_sessionless_result(&error, code);
    } else {
        crate::errln!("tern: {error}");
    }
    code
}
