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
    /// `--goal CMD` and `--goal-attempts N`: set as the session's goal before the turn.
    pub goal: Option<(String, u32)>,
    /// `--goal-timeout S`: seconds one goal run may take (None: the bash tool's default).
    pub goal_timeout: Option<u64>,
    /// `--output-last-message FILE` (absolute): the final answer, written atomically when the
    /// run completes.
    pub output_last_message: Option<std::path::PathBuf>,
    /// `--max-wall-time S`: the whole run's budget.
    pub max_wall_time: Option<std::time::Duration>,
}

/// Runs `tern exec` on `launcher`; returns the process exit code (DESIGN.md §8).
pub fn run(launcher: &Launcher, opts: ExecOptions) -> i32 {
    // The wall-time budget cancels a token of this run only (a child of the process's), so the
    // turn ends as an interrupt would, and is reported as the budget it is.
    let mut scoped;
    let launcher = match opts.max_wall_time {
        Some(limit) => {
            scoped = launcher.clone();
            scoped.cancel = launcher.cancel.child();
            watchdog(&scoped.cancel, limit);
            &scoped
        }
        None => launcher,
    };
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
    // Checked before any model call: a run must not spend its tokens and then fail to write
    // its answer.
    let last_message = match opts
        .output_last_message
        .as_deref()
        .map(|p| check_last_message_path(p, &launcher.state.root))
    {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return early_failure(&opts, &Failure::Usage(e)),
    };
    if let Err(e) = launcher.ready().and_then(|_| launcher.check_hooks()) {
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
    // In --json mode stdout carries only events: the untrusted hooks file is named on stderr.
    if opts.json
        && let Some(u) = &rt.hooks().untrusted
    {
        crate::errln!("tern: {}", crate::hooks::untrusted_note(u));
    }
    if let Some((cmd, attempts)) = &opts.goal
        && let Err(e) = rt.set_goal(cmd, *attempts, opts.goal_timeout)
    {
        return early_failure(&opts, &e);
    }
    // A wall-time cancel ends the turn as `budget_exhausted` in the runtime (the token says
    // why), so meta.json, `tern sessions` and the tool results all say the same. A steer that
    // arrived as the turn ended is answered (the runtime's one rule).
    let mut outcome = rt.run_prompt(&prompt, ui, &mut |_| {});
    if let (Ok(text), Some(lm)) = (&outcome, &last_message)
        && let Err(e) = write_last_message(lm, text)
    {
        outcome = Err(Failure::Failed(format!(
            "could not write --output-last-message {}: {e}",
            lm.shown.display()
        )));
    }
    rt.hook_session_end(crate::hooks::EndReason::Other, ui);
    let outcome = rt.with_records(outcome);
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
///
/// A prompt given as an argument while stdin is a pipe or a file (`git diff | tern exec "review
/// this"`) gets what stdin holds as context after it, in a `<stdin>` block, as Codex CLI does;
/// cut at the prompt's limit with a note. A terminal, `/dev/null` or a socket is not read.
fn read_prompt(opts: &ExecOptions, cancel: &CancelToken) -> Result<String, Option<String>> {
    let text = match opts.prompt.as_deref() {
        Some("-") => {
            let bytes = read_stdin(MAX_PROMPT_BYTES as u64 + 1, cancel)?;
            String::from_utf8(bytes)
                .map_err(|_| Some("the prompt read from stdin is not UTF-8 text".to_string()))?
        }
        Some(p) if stdin_is_data() => {
            // The prompt, the `<stdin>` block's tags and the note fit in the prompt's limit
            // (the room was short of them, so a cut stdin was then refused as too long).
            let room = MAX_PROMPT_BYTES.saturating_sub(p.len() + 256);
            let bytes = read_stdin(room as u64 + 1, cancel)?;
            let piped = String::from_utf8_lossy(&bytes);
            if piped.trim().is_empty() {
                p.to_string()
            } else {
                let cut = bytes.len() > room;
                let kept = crate::text::cut(&piped, room);
                let mut t = format!("{p}\n\n<stdin>\n{}\n</stdin>", kept.trim_end());
                if cut {
                    let note = format!(
                        "[stdin cut at {} KiB: a prompt holds at most {} KiB; the rest was not read — put it in a file and point the model at it]",
                        room >> 10,
                        MAX_PROMPT_BYTES >> 10
                    );
                    crate::errln!("tern: {note}");
                    t.push('\n');
                    t.push_str(&note);
                }
                t
            }
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

/// Whether stdin is a pipe or a regular file (data piped or redirected in), not a terminal, a
/// device (`/dev/null`) or a socket.
fn stdin_is_data() -> bool {
    // SAFETY: fstat(2) of descriptor 0 into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return false;
    }
    matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFREG)
}

/// Up to `limit` bytes of stdin, read in a thread (a signal is noticed while a writer stalls).
/// Err(None): interrupted; Err(Some): it could not be read.
fn read_stdin(limit: u64, cancel: &CancelToken) -> Result<Vec<u8>, Option<String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let r = std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .map(|_| bytes);
        let _ = tx.send(r);
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(r) => {
                return r.map_err(|e| Some(format!("could not read the prompt from stdin: {e}")));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if cancel.is_cancelled() {
                    return Err(None);
                }
            }
            Err(_) => return Err(Some("could not read the prompt from stdin".into())),
        }
    }
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

/// `--output-last-message PATH` checked at start, so a run never spends its tokens and then
/// fails to write its answer. Returns its folder, held open, and the file's name there: PATH's,
/// or for a symbolic link the file it points to (written through, as a shell's `>` does; the
/// link stays); never a file in tern's state folder. Refused (a usage
/// error naming the flag, exit 2): a path ending in `/`, a folder, a FIFO, device or socket
/// (a write would block on or feed something else), a link to a missing file or to one of those,
/// a folder that does not exist (tern makes none: a typo must not grow a tree of folders), and
/// a folder tern cannot create a file in (`/proc/self/status`: the answer is written by a
/// rename from a temporary file beside it).
fn check_last_message_path(
    path: &std::path::Path,
    state_root: &std::path::Path,
) -> Result<LastMessage, String> {
    let shown = path.display();
    let flag = "--output-last-message";
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(format!("{flag} {shown}: names a folder; give a file path"));
    }
    let target = file_target(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{flag} {shown}: {} is not a folder", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{flag} {shown}: the folder {} does not exist (tern does not create it)",
                dir.display()
            ));
        }
        Err(e) => return Err(format!("{flag} {shown}: {}: {e}", dir.display())),
    }
    // tern's own records are never the answer's file (it would replace a session's history).
    let real_dir = std::fs::canonicalize(&dir).map_err(|e| format!("{flag} {shown}: {e}"))?;
    if let Ok(state) = std::fs::canonicalize(state_root)
        && real_dir.starts_with(&state)
    {
        return Err(format!(
            "{flag} {shown}: is inside tern's state folder {}; give a file outside it",
            state.display()
        ));
    }
    // The answer goes in by a rename from a temporary file beside it: that must be possible.
    match tempfile::Builder::new()
        .prefix(crate::store::fsutil::TEMP_PREFIX)
        .tempfile_in(&dir)
    {
        Ok(probe) => drop(probe),
        Err(e) => {
            // The OS's words without the probe's own name.
            let why = e.raw_os_error().map_or(e.to_string(), |c| {
                std::io::Error::from_raw_os_error(c).to_string()
            });
            return Err(format!(
                "{flag} {shown}: tern cannot create a file in {} ({why}), so it cannot write the answer there",
                dir.display()
            ));
        }
    }
    // The folder is held open from now on: the model's commands run before the answer is
    // written, and a folder they swap for a symbolic link (`rm -rf d; ln -s /root d`) must not
    // carry the write outside the sandbox. The write goes into the folder opened here or fails.
    let name = target
        .file_name()
        .map(|n| n.to_os_string())
        .ok_or_else(|| format!("{flag} {shown}: names no file"))?;
    let dir = crate::store::dirfd::Dir::hold(&real_dir)
        .map_err(|e| format!("{flag} {shown}: {}: {e}", real_dir.display()))?;
    Ok(LastMessage {
        dir,
        name,
        shown: path.to_path_buf(),
    })
}

/// The file `--output-last-message PATH` names: PATH, or for a symbolic link the file it points
/// to. Errors: PATH (or the link's target) is a folder, a FIFO, a device or a socket, or a link
/// to a file that does not exist.
fn file_target(path: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let flag = "--output-last-message";
    let kind = |t: std::fs::FileType| {
        if t.is_dir() {
            Some("a folder")
        } else if t.is_fifo() {
            Some("a FIFO (named pipe)")
        } else if t.is_char_device() || t.is_block_device() {
            Some("a device")
        } else if t.is_socket() {
            Some("a socket")
        } else {
            None
        }
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(t) => {
                let m = std::fs::metadata(&t).map_err(|e| format!("{flag} {shown}: {e}"))?;
                if let Some(what) = kind(m.file_type()) {
                    return Err(format!(
                        "{flag} {shown}: a symbolic link to {what} ({}); give a regular file",
                        t.display()
                    ));
                }
                Ok(t)
            }
            Err(_) => Err(format!(
                "{flag} {shown}: a symbolic link to a file that does not exist; give the file's own path"
            )),
        },
        Ok(m) => match kind(m.file_type()) {
            Some(what) => Err(format!(
                "{flag} {shown}: is {what}, not a regular file; give a file path"
            )),
            None => Ok(path.to_path_buf()),
        },
        Err(_) => Ok(path.to_path_buf()),
    }
}

/// Where `--output-last-message` writes: its folder, opened at start (so a folder replaced by
/// a link during the run cannot redirect the write), and the file's name in it.
struct LastMessage {
    dir: crate::store::dirfd::Dir,
    name: std::ffi::OsString,
    /// The path as given, for messages.
    shown: std::path::PathBuf,
}

/// The final answer into the file of `lm` (a regular file or a new one, checked at start),
/// through the one link-safe writer ([`crate::store::fsutil::atomic_write_in`]), only inside the
/// folder opened at start (a link planted at the name is replaced, never followed), with the
/// permission bits a shell's `>` leaves; redacted, with a final newline. Errors: the folder was removed
/// during the run, or any write error.
fn write_last_message(lm: &LastMessage, text: &str) -> std::io::Result<()> {
    use crate::store::fsutil::{Perm, atomic_write_in};
    let text = crate::store::redact::redact(text);
    let mut bytes = text.trim_end().as_bytes().to_vec();
    bytes.push(b'\n');
    atomic_write_in(&lm.dir, &lm.name, &bytes, Perm::LikeShell).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOENT) {
            std::io::Error::other(
                "its folder was removed or replaced during the run; nothing was written",
            )
        } else {
            e
        }
    })
}

/// Cancels a run's token as a budget when its wall time is up (`--max-wall-time`): the turn
/// then ends `budget_exhausted` with the reason "the run's wall time (--max-wall-time N s) ran
/// out", never as an interrupt by the user.
fn watchdog(token: &CancelToken, limit: std::time::Duration) {
    let token = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        token.cancel_for_budget(format!(
            "the run's wall time (--max-wall-time {} s) ran out",
            limit.as_secs()
        ));
    });
}
