//! The one op table: every operation a person can run besides talking to the model, reachable
//! as a CLI verb (`tern plan confirm`) and as a slash command (`/confirm`), dispatched through
//! [`run`] so both give the same receipt for the same state (DESIGN.md §1).

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::config::{self, ProviderFlags, ProviderKind};
use crate::runtime::{self, Config, Runtime, Surface, plan};
use crate::store::{Session, StateDir, files};

/// One operation's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Op {
    /// Stable id, used in receipts and events.
    pub id: &'static str,
    /// The CLI path after `tern` (empty when the op has no CLI verb).
    pub cli: &'static str,
    /// The slash command in the REPL.
    pub slash: &'static str,
    /// Whether the op writes session state.
    pub writes: bool,
    /// Whether the op calls the model (compaction).
    pub model_call: bool,
    /// What the receipt's `detail` holds.
    pub receipt: &'static str,
    /// One line of help.
    pub help: &'static str,
}

const fn op(
    id: &'static str,
    cli: &'static str,
    slash: &'static str,
    writes: bool,
    model_call: bool,
    receipt: &'static str,
    help: &'static str,
) -> Op {
    Op {
        id,
        cli,
        slash,
        writes,
        model_call,
        receipt,
        help,
    }
}

/// Every op, in the order `tern ops` and `/help` list them.
pub const OPS: &[Op] = &[
    op(
        "plan.show",
        "plan show",
        "/plan",
        false,
        false,
        "plan state, draft and locked plan",
        "show the plan state, the draft and the locked plan",
    ),
    op(
        "plan.path",
        "plan path",
        "/path",
        false,
        false,
        "the two plan file paths",
        "print PLAN_DRAFT_FILE and PLAN_FILE",
    ),
    op(
        "plan.draft",
        "plan draft",
        "/draft",
        true,
        false,
        "draft revision and state",
        "replace the draft (/draft TEXT; the verb reads stdin or --file)",
    ),
    op(
        "plan.edit",
        "plan edit",
        "/edit",
        true,
        false,
        "draft revision and state",
        "edit the draft in $EDITOR",
    ),
    op(
        "plan.confirm",
        "plan confirm",
        "/confirm",
        true,
        true,
        "locked plan revision",
        "compact, then lock the draft into the prompt",
    ),
    op(
        "plan.cancel",
        "plan cancel",
        "/cancel",
        true,
        false,
        "state returned to",
        "discard the draft (archived)",
    ),
    op(
        "plan.clear",
        "plan clear",
        "/clear",
        true,
        true,
        "archived plan",
        "compact, then take the locked plan out of the prompt",
    ),
    op(
        "compact",
        "compact",
        "/compact",
        true,
        true,
        "messages summarised",
        "summarise the conversation and archive it",
    ),
    op(
        "status",
        "status",
        "/status",
        false,
        false,
        "the sidebar view",
        "show the To-do ledger, plan state and cache figures",
    ),
    op(
        "relay",
        "relay",
        "/relay",
        true,
        false,
        "handoff.md path and text",
        "write handoff.md for the next thread",
    ),
    op(
        "stats",
        "stats",
        "/stats",
        false,
        false,
        "per-request cache figures",
        "show cache figures per request",
    ),
    op(
        "sessions",
        "sessions",
        "/sessions",
        false,
        false,
        "session list",
        "list sessions with status, turns, tokens",
    ),
    op(
        "resume",
        "chat --resume",
        "/resume",
        false,
        false,
        "session switched to",
        "switch to another session",
    ),
    op(
        "help",
        "ops",
        "/help",
        false,
        false,
        "the op table",
        "list these operations",
    ),
    op(
        "quit",
        "",
        "/quit",
        false,
        false,
        "nothing",
        "leave the REPL",
    ),
];

/// Looks an op up by id.
pub fn by_id(id: &str) -> Option<&'static Op> {
    OPS.iter().find(|o| o.id == id)
}

/// Looks an op up by slash name (with or without the `/`).
pub fn by_slash(name: &str) -> Option<&'static Op> {
    let name = name.trim_start_matches('/');
    OPS.iter().find(|o| o.slash.trim_start_matches('/') == name)
}

/// The result of one op: printed to the person and written to `events.jsonl` as a `receipt`
/// event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// Op id.
    pub op: String,
    /// Session id, when the op had one.
    pub session: Option<String>,
    /// Whether it succeeded.
    pub ok: bool,
    /// Plan state before.
    pub before: String,
    /// Plan state after.
    pub after: String,
    /// What happened, or why not.
    pub detail: String,
    /// RFC 3339 time.
    pub time: String,
}

/// Where an op runs.
pub struct Target<'a> {
    /// The state folder.
    pub state: &'a StateDir,
    /// The REPL's live runtime, when there is one.
    pub runtime: Option<&'a mut Runtime>,
    /// Session id for verbs (`--session`); the current session when None.
    pub session: Option<String>,
    /// Wait for a turn running in another process instead of refusing (`--wait`).
    pub wait: bool,
}

/// Runs `op` with its argument (the draft text for `plan.draft`, a session id for `resume`).
/// Never panics; a failure is a receipt with `ok: false`.
pub fn run(op: &Op, arg: Option<&str>, target: &mut Target<'_>, ui: &mut dyn Surface) -> Receipt {
    let session = match open_session(op, target) {
        Ok(s) => s,
        Err(e) => return receipt(op, None, Err(e), "", ""),
    };
    let before = session
        .as_ref()
        .and_then(|s| plan::plan_file(s).ok())
        .map(|p| p.state.as_str().to_string())
        .unwrap_or_default();
    let result = dispatch(op, arg, target, session.as_ref(), ui);
    let after = session
        .as_ref()
        .and_then(|s| plan::plan_file(s).ok())
        .map(|p| p.state.as_str().to_string())
        .unwrap_or_default();
    let r = receipt(
        op,
        session.as_ref().map(|s| s.id.clone()),
        result,
        &before,
        &after,
    );
    if let Some(s) = &session
        && op.id != "status"
        && op.id != "stats"
    {
        let mut fields = json!({"op": r.op, "ok": r.ok, "before": r.before, "after": r.after});
        if !r.ok || op.writes {
            fields["detail"] = json!(r.detail);
        }
        runtime::emit_to(s, &mut runtime::Quiet, "receipt", fields);
    }
    r
}

fn receipt(
    op: &Op,
    session: Option<String>,
    result: Result<String, String>,
    before: &str,
    after: &str,
) -> Receipt {
    let (ok, detail) = match result {
        Ok(d) => (true, d),
        Err(e) => (false, e),
    };
    Receipt {
        op: op.id.to_string(),
        session,
        ok,
        before: before.to_string(),
        after: after.to_string(),
        detail: crate::store::redact::redact(&detail).into_owned(),
        time: crate::clock::now_rfc3339(),
    }
}

/// The session an op works on (None for ops that need none).
fn open_session(op: &Op, target: &Target<'_>) -> Result<Option<Session>, String> {
    if matches!(op.id, "help" | "quit" | "sessions" | "resume") {
        return Ok(None);
    }
    if let Some(rt) = &target.runtime {
        return Ok(Some(Session::at(&rt.session.id, rt.session.dir.clone())));
    }
    let s = match &target.session {
        Some(id) => target.state.open_session(id).map_err(|e| e.to_string())?,
        None => target
            .state
            .current()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "no session in {} yet: start one with `tern exec` or `tern`",
                    target.state.root.display()
                )
            })?,
    };
    Ok(Some(s))
}

fn dispatch(
    op: &Op,
    arg: Option<&str>,
    target: &mut Target<'_>,
    session: Option<&Session>,
    ui: &mut dyn Surface,
) -> Result<String, String> {
    let need = || session.ok_or_else(|| "no session".to_string());
    if arg.is_some() && !matches!(op.id, "plan.draft" | "resume") {
        return Err(format!("{} takes no argument (see /help)", op.slash));
    }
    match op.id {
        "plan.show" => plan_show(need()?),
        "plan.path" => {
            let s = need()?;
            Ok(format!(
                "PLAN_DRAFT_FILE={}\nPLAN_FILE={}",
                s.path(files::DRAFT).display(),
                s.path(files::PLAN).display()
            ))
        }
        "plan.draft" => {
            let text = arg.ok_or("no draft text given")?;
            plan::draft(need()?, text, ui)
        }
        "plan.edit" => plan_edit(need()?, ui),
        "plan.cancel" => plan::cancel(need()?, ui),
        "plan.confirm" | "plan.clear" | "compact" => with_runtime(op, target, need()?, ui),
        "status" => Ok(crate::status::render_text(need()?, None)),
        "stats" => {
            let s = need()?;
            let reqs = crate::stats::requests(s).map_err(|e| e.to_string())?;
            Ok(crate::stats::render(&s.id, &reqs))
        }
        "relay" => crate::relay::write(need()?)
            .map(|(path, text)| format!("{text}\n(written to {})", path.display())),
        "sessions" => sessions(target.state),
        "help" => Ok(help()),
        "resume" | "quit" => Err(format!("{} is a REPL command", op.slash)),
        other => Err(format!("unknown op {other}")),
    }
}

fn plan_show(s: &Session) -> Result<String, String> {
    let p = plan::plan_file(s).map_err(|e| e.to_string())?;
    let draft = s
        .read_text(files::DRAFT)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let mut out = format!(
        "plan state: {} (revision {})\n",
        p.state.as_str(),
        p.revision
    );
    if let Some(at) = &p.confirmed_at {
        out.push_str(&format!("last confirmed: {at}\n"));
    }
    out.push_str("\n# draft ($PLAN_DRAFT_FILE, not in the prompt)\n");
    out.push_str(if draft.trim().is_empty() {
        "(empty)\n"
    } else {
        &draft
    });
    if !draft.ends_with('\n') && !draft.trim().is_empty() {
        out.push('\n');
    }
    out.push_str("\n# locked plan ($PLAN_FILE, in the system prompt)\n");
    match &p.locked {
        Some(l) => {
            out.push_str(l);
            let on_disk = s
                .read_text(files::PLAN)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            if &on_disk != l {
                out.push_str("\n! plan.md was edited outside PlanConfirm; tern uses the copy above. Put changes in the draft and confirm.");
            }
        }
        None => out.push_str("(none)"),
    }
    Ok(out.trim_end().to_string())
}

fn plan_edit(s: &Session, ui: &mut dyn Surface) -> Result<String, String> {
    use std::io::IsTerminal;
    // An empty variable counts as unset: `sh -c ' "$1"'` would run the draft as a program.
    let set = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let chosen = set("VISUAL").or_else(|| set("EDITOR"));
    // The fallback `vi` needs a terminal; from a pipe it would hang or spray escape codes. An
    // editor the person named (perhaps a script) is trusted to know where it runs.
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if chosen.is_none() && !tty {
        return Err(
            "no terminal for an editor here: set EDITOR, or write the draft with `tern plan draft` (stdin or --file) or /draft TEXT".into(),
        );
    }
    let editor = chosen.unwrap_or_else(|| "vi".into());
    let path = s.path(files::DRAFT);
    if s.read_text(files::DRAFT)
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let lock = s.lock().map_err(|e| e.to_string())?;
        s.write_text_locked(&lock, files::DRAFT, "")
            .map_err(|e| e.to_string())?;
    }
    // The editor string may carry arguments (`code -w`), as git allows.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("tern-edit")
        .arg(&path)
        .status()
        .map_err(|e| format!("could not start the editor {editor:?}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "the editor {editor:?} exited with {status}; the draft is as the editor left it"
        ));
    }
    let before = plan::plan_file(s).map_err(|e| e.to_string())?.revision;
    let p = plan::observe_draft(s, ui).map_err(|e| e.to_string())?;
    let what = if p.revision == before {
        "draft unchanged"
    } else {
        "draft saved"
    };
    Ok(format!(
        "{what} (revision {}); plan state: {}",
        p.revision,
        p.state.as_str()
    ))
}

/// Runs a model-calling op on the live runtime, or on a runtime opened for the verb.
fn with_runtime(
    op: &Op,
    target: &mut Target<'_>,
    session: &Session,
    ui: &mut dyn Surface,
) -> Result<String, String> {
    if let Some(rt) = target.runtime.as_deref_mut() {
        return holding(rt, false, ui, |rt, ui| model_op(op, rt, ui));
    }
    wait_or_refuse(op, session, target.wait)?;
    // A transition that is refused anyway must not open the session (which records a
    // `session_start`) nor need a reachable provider: "error, nothing changed" .
    match op.id {
        "plan.confirm" => {
            let draft = session
                .read_text(files::DRAFT)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            plan::plan_file(session)
                .map_err(|e| e.to_string())?
                .check_confirm(&draft)?;
        }
        "plan.clear" => plan::plan_file(session)
            .map_err(|e| e.to_string())?
            .check_clear()?,
        _ => {}
    }
    let meta = session.read_meta().map_err(|e| e.to_string())?;
    let choice = provider_for(&meta)?;
    // A verb runs in its own process, on its main thread: no other thread exists yet.
    config::scrub_environment();
    let mut cfg = Config::new(&choice.model);
    cfg.base_url = choice.base_url.clone();
    cfg.send_cache_key = config::is_openai_host(&choice.base_url);
    cfg.secret_env = config::SECRET_ENV.iter().map(|s| s.to_string()).collect();
    let provider = config::build(&choice, Duration::from_secs(300));
    let s = Session::at(&session.id, session.dir.clone());
    let mut rt = Runtime::resume(target.state, s, provider, cfg, &mut runtime::Quiet)
        .map_err(|e| e.to_string())?;
    crate::exec::install_signals(&rt.cancel);
    holding(&mut rt, target.wait, ui, |rt, ui| model_op(op, rt, ui))
}

/// Runs `f` while this process holds the session (as a turn does), after reloading what another
/// process may have written: a turn started meanwhile in another pane would append to a history
/// this op is about to replace. `wait`: wait for a running turn instead of refusing.
fn holding(
    rt: &mut Runtime,
    wait: bool,
    ui: &mut dyn Surface,
    f: impl FnOnce(&mut Runtime, &mut dyn Surface) -> Result<String, String>,
) -> Result<String, String> {
    let before = loop {
        match rt.claim(None) {
            Ok(b) => break b,
            Err(_) if wait => std::thread::sleep(Duration::from_millis(250)),
            Err(e) => return Err(format!("refused: {e}")),
        }
    };
    let result = rt
        .sync_from_disk(ui)
        .map_err(|e| e.to_string())
        .and_then(|()| f(rt, ui));
    if let Err(e) = rt.release(before) {
        crate::errln!("tern: could not release the session: {e}");
    }
    result
}

fn model_op(op: &Op, rt: &mut Runtime, ui: &mut dyn Surface) -> Result<String, String> {
    match op.id {
        "plan.confirm" => rt.plan_confirm(None, ui),
        "plan.clear" => rt.plan_clear(None, ui),
        _ => {
            let before = rt.history().len();
            if before == 0 {
                return Ok("nothing to summarise yet: the conversation is empty".into());
            }
            rt.compact("manual", None, ui).map_err(|e| e.to_string())?;
            let s = if before == 1 { "" } else { "s" };
            Ok(format!(
                "{before} message{s} summarised; the history now opens with the summary"
            ))
        }
    }
}

/// Refuses (or with `wait`, waits) while a turn of `session` runs in another live process.
fn wait_or_refuse(op: &Op, session: &Session, wait: bool) -> Result<(), String> {
    let mut announced = false;
    loop {
        let meta = session.read_meta().map_err(|e| e.to_string())?;
        let Some(pid) = runtime::running_elsewhere(&meta) else {
            return Ok(());
        };
        if !wait {
            return Err(format!(
                "refused: a turn of session {} is running in process {pid}, and {} rewrites the conversation. Wait for the turn to end (or interrupt it), or pass --wait.",
                session.id, op.cli
            ));
        }
        if !announced {
            crate::errln!("waiting for the turn running in process {pid} to end…");
            announced = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The provider a verb uses for its model call: server and key from the environment (never a URL
/// saved in the session), wire format and model defaulting to the session's.
fn provider_for(meta: &crate::store::Meta) -> Result<config::ProviderChoice, String> {
    let env = |k: &str| std::env::var(k).ok();
    let kind = match meta.provider.as_str() {
        "openai" => Some(ProviderKind::Openai),
        "anthropic" => Some(ProviderKind::Anthropic),
        _ => None,
    };
    let mut f = ProviderFlags::default();
    // The server and the key come from this environment, as for `tern exec`: a URL saved in a
    // session (perhaps by another provider, perhaps planted) never receives this key. Only the
    // wire format and the model name default to the session's.
    if let Some(k) = kind {
        f.provider = f.provider.or(Some(k));
        if env("TERN_MODEL").is_none_or(|m| m.trim().is_empty()) {
            f.model = f.model.or(Some(meta.model.clone()));
        }
    }
    config::resolve(&f, &env).map_err(|e| {
        if kind.is_none() {
            format!(
                "this session's model was the demo's replay; a compaction needs a real model.\n{e}"
            )
        } else {
            e
        }
    })
}

fn sessions(state: &StateDir) -> Result<String, String> {
    let ids = state.session_ids().map_err(|e| e.to_string())?;
    if ids.is_empty() {
        return Ok(format!("no sessions in {}", state.root.display()));
    }
    let current = state.current().ok().flatten().map(|s| s.id);
    let mut out = format!(
        "  {:<22} {:<11} {:>5} {:>9}  {:<20}  {}\n",
        "id", "status", "turns", "tokens", "last activity", "title"
    );
    for id in ids.iter().rev() {
        let mark = if current.as_deref() == Some(id) {
            "*"
        } else {
            " "
        };
        match state.open_session(id).and_then(|s| s.read_meta()) {
            Ok(m) => {
                let mut status = m.status.as_str().to_string();
                if m.status == crate::store::Status::Running
                    && runtime::running_elsewhere(&m).is_none()
                {
                    status = "interrupted?".into();
                }
                out.push_str(&format!(
                    "{mark} {:<22} {:<11} {:>5} {:>9}  {:<20}  {}\n",
                    id,
                    status,
                    m.turns,
                    m.usage.input_tokens.saturating_add(m.usage.output_tokens),
                    m.updated_at,
                    crate::output::safe(&m.title.replace(['\n', '\r'], " "))
                ));
            }
            Err(e) => out.push_str(&format!("{mark} {id:<22} unreadable: {e}\n")),
        }
    }
    Ok(out.trim_end().to_string())
}

/// The op table as text (`tern ops`, `/help`).
pub fn help() -> String {
    let cli = |o: &Op| {
        if o.cli.is_empty() {
            String::new()
        } else {
            format!("tern {}", o.cli)
        }
    };
    // Columns as wide as their longest entry, so rows stay aligned; about 90 columns in all.
    let w = OPS.iter().map(|o| cli(o).len()).max().unwrap_or(0);
    let mut out = format!("{:<10} {:<w$}  what\n", "slash", "verb");
    for o in OPS {
        let mark = if o.model_call { " (a model call)" } else { "" };
        out.push_str(&format!(
            "{:<10} {:<w$}  {}{mark}\n",
            o.slash,
            cli(o),
            o.help
        ));
    }
    out.push_str(
        "\nInput: a line ending in \\ continues on the next; \"\"\" on its own line opens and closes a block.\n\
         Ctrl-C stops the model or the running command; at an empty prompt, Ctrl-C twice or Ctrl-D leaves.",
    );
    out
}

/// Prints a receipt for a person: the detail on stdout when ok, `tern: …` on stderr when not.
pub fn print_receipt(r: &Receipt, json: bool) {
    if json {
        crate::output::print_json_line(&serde_json::to_value(r).unwrap_or_default());
        return;
    }
    if r.ok {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", r.detail);
    } else {
        crate::errln!("tern: {}", r.detail);
    }
}
