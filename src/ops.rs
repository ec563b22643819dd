//! The one op table: every operation a person can run besides talking to the model, reachable
//! as a CLI verb (`tern plan confirm`), a slash command (`/confirm`) and an editor command (ACP),
//! dispatched through [`run`] so every surface gives the same receipt for the same state
//! (DESIGN.md §1). An op returns data ([`OpOutput`]); each surface renders it ([`OpOutput::render`]
//! is the text every surface shows today).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::domain::plan::PlanState;
use crate::launcher::{Launcher, SessionRef};
use crate::runtime::{self, Failure, Runtime, Surface, plan};
use crate::stats::RequestStats;
use crate::store::{Session, StateDir, Status, files};
use crate::tools::ToolError;

pub use crate::op_id::OpId;

/// What an op may do to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only.
    Read,
    /// Writes session state.
    Write,
    /// Writes session state and calls the model (a compaction).
    Model,
}

/// One operation's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// Stable id, used in receipts and events.
    pub id: OpId,
    /// The CLI path after `tern` (empty when the op has no CLI verb).
    pub cli: &'static str,
    /// The slash command in the REPL (and the editor's command name without the `/`).
    pub slash: &'static str,
    /// What the op may do.
    pub access: Access,
    /// What the receipt's `detail` holds.
    pub receipt: &'static str,
    /// One line of help.
    pub help: &'static str,
}

impl Op {
    /// Whether the op writes session state.
    pub fn writes(&self) -> bool {
        self.access != Access::Read
    }
    /// Whether the op calls the model.
    pub fn model_call(&self) -> bool {
        self.access == Access::Model
    }
}

/// `tern ops --json`: `{id, cli, slash, writes, model_call, receipt, help}` per op.
impl Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Op", 7)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("cli", self.cli)?;
        st.serialize_field("slash", self.slash)?;
        st.serialize_field("writes", &self.writes())?;
        st.serialize_field("model_call", &self.model_call())?;
        st.serialize_field("receipt", self.receipt)?;
        st.serialize_field("help", self.help)?;
        st.end()
    }
}

const fn op(
    id: OpId,
    cli: &'static str,
    slash: &'static str,
    access: Access,
    receipt: &'static str,
    help: &'static str,
) -> Op {
    Op {
        id,
        cli,
        slash,
        access,
        receipt,
        help,
    }
}

/// Every op, in the order `tern ops` and `/help` list them.
pub const OPS: &[Op] = &[
    op(
        OpId::PlanShow,
        "plan show",
        "/plan",
        Access::Read,
        "plan state, draft and locked plan",
        "show the plan state, the draft and the locked plan",
    ),
    op(
        OpId::PlanPath,
        "plan path",
        "/path",
        Access::Read,
        "the two plan file paths",
        "print PLAN_DRAFT_FILE and PLAN_FILE",
    ),
    op(
        OpId::PlanDraft,
        "plan draft",
        "/draft",
        Access::Write,
        "draft revision and state",
        "replace the draft (/draft TEXT; the verb reads stdin or --file)",
    ),
    op(
        OpId::PlanEdit,
        "plan edit",
        "/edit",
        Access::Write,
        "draft revision and state",
        "edit the draft in $EDITOR",
    ),
    op(
        OpId::PlanConfirm,
        "plan confirm",
        "/confirm",
        Access::Model,
        "locked plan revision",
        "compact, then lock the draft into the prompt",
    ),
    op(
        OpId::PlanCancel,
        "plan cancel",
        "/discard",
        Access::Write,
        "state returned to",
        "discard the draft (archived)",
    ),
    op(
        OpId::PlanClear,
        "plan clear",
        "/clear",
        Access::Model,
        "archived plan",
        "compact, then take the locked plan out of the prompt",
    ),
    op(
        OpId::Compact,
        "compact",
        "/compact",
        Access::Model,
        "messages summarised",
        "summarise the conversation and archive it",
    ),
    op(
        OpId::Status,
        "status",
        "/status",
        Access::Read,
        "the sidebar view",
        "show the To-do ledger, plan state and cache figures",
    ),
    op(
        OpId::Relay,
        "relay",
        "/relay",
        Access::Write,
        "handoff.md path and text",
        "write handoff.md for the next thread",
    ),
    op(
        OpId::Stats,
        "stats",
        "/stats",
        Access::Read,
        "per-request cache figures",
        "show cache figures per request",
    ),
    op(
        OpId::Sessions,
        "sessions",
        "/sessions",
        Access::Read,
        "session list",
        "list sessions with status, model requests, tokens",
    ),
    op(
        OpId::Resume,
        "chat --resume",
        "/resume",
        Access::Read,
        "session switched to",
        "switch to another session",
    ),
    op(
        OpId::Undo,
        "undo",
        "/undo",
        Access::Write,
        "what the undo restored",
        "put the files back as before the last turn (/undo N: the last N turns; --force: even over your later edits, saved for /redo)",
    ),
    op(
        OpId::Redo,
        "redo",
        "/redo",
        Access::Write,
        "what the redo put back",
        "put back what the last undo or rewind replaced",
    ),
    op(
        OpId::Checkpoints,
        "checkpoints",
        "/checkpoints",
        Access::Read,
        "checkpoint list",
        "list checkpoints: turn, time, files changed, size",
    ),
    op(
        OpId::Diff,
        "diff",
        "/diff",
        Access::Read,
        "the patch",
        "show what a turn changed (/diff TURN; default the last)",
    ),
    op(
        OpId::Fork,
        "fork",
        "/fork",
        Access::Write,
        "the new session",
        "branch the conversation into a new session (/fork TURN: at the end of TURN)",
    ),
    op(
        OpId::Rewind,
        "rewind",
        "/rewind",
        Access::Write,
        "the new session and the files restored",
        "fork at the end of TURN and restore the files to then (/rewind TURN)",
    ),
    op(
        OpId::Model,
        "",
        "/model",
        Access::Write,
        "model switched to",
        "switch the model for the next request (/model NAME; alone: show it)",
    ),
    op(
        OpId::Effort,
        "",
        "/effort",
        Access::Write,
        "reasoning effort switched to",
        "set how much a reasoning model thinks (/effort none|minimal|low|medium|high|max|default; alone: show it)",
    ),
    op(
        OpId::Mcp,
        "mcp list",
        "/mcp",
        Access::Read,
        "MCP servers and their tools",
        "MCP servers' tools (/mcp [list [SERVER] | schema SERVER TOOL | call SERVER TOOL JSON])",
    ),
    op(
        OpId::Help,
        "ops",
        "/help",
        Access::Read,
        "the op table",
        "list these operations",
    ),
    op(
        OpId::Goal,
        "exec --goal",
        "/goal",
        Access::Write,
        "the goal set, cleared or shown",
        "a command that must pass before a turn completes (/goal CMD [--attempts N], /goal off)",
    ),
    op(
        OpId::Quit,
        "",
        "/quit",
        Access::Read,
        "nothing",
        "leave the REPL",
    ),
];

/// The descriptor of `id`.
pub fn get(id: OpId) -> &'static Op {
    match OPS.iter().find(|o| o.id == id) {
        Some(op) => op,
        // Every OpId has a row: `every_id_has_a_row` checks it.
        None => &OPS[0],
    }
}

/// Looks an op up by id string (`plan.confirm`).
pub fn by_id(id: &str) -> Option<&'static Op> {
    OPS.iter().find(|o| o.id.as_str() == id)
}

/// Old slash names that still work but are not listed: `/cancel` was the draft's discard,
/// which an editor person reads as "stop the turn" (issue 21).
const SLASH_ALIASES: &[(&str, OpId)] = &[("cancel", OpId::PlanCancel)];

/// Looks an op up by slash name (with or without the `/`), hidden aliases included.
pub fn by_slash(name: &str) -> Option<&'static Op> {
    let name = name.trim_start_matches('/');
    OPS.iter()
        .find(|o| o.slash.trim_start_matches('/') == name)
        .or_else(|| {
            SLASH_ALIASES
                .iter()
                .find(|(alias, _)| *alias == name)
                .map(|(_, id)| get(*id))
        })
}

/// The plan as `/plan` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanView {
    /// Lifecycle state.
    pub state: String,
    /// Draft revisions counted.
    pub revision: u64,
    /// The last PlanConfirm.
    pub confirmed_at: Option<String>,
    /// `$PLAN_DRAFT_FILE`'s text (empty when [`PlanView::draft_problem`] is set).
    pub draft: String,
    /// Why the draft is not shown: over the plan limit, or not UTF-8 text (it is not loaded).
    pub draft_problem: Option<String>,
    /// The locked plan, from `plan.json`.
    pub locked: Option<String>,
    /// `plan.md` differs from the locked copy (edited outside PlanConfirm).
    pub plan_md_edited: bool,
    /// Set when `plan.json` was damaged and rebuilt just now (the words a start uses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired: Option<String>,
}

/// One row of `tern sessions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRow {
    /// Session id.
    pub id: String,
    /// `.tern/current` names it.
    pub current: bool,
    /// Status as shown (`interrupted?` for a running status whose process is gone), or the
    /// reason `meta.json` could not be read.
    pub status: Result<String, String>,
    /// Model requests (meta.json's `turns`; shown as the `requests` column).
    pub requests: u64,
    /// Input + output tokens.
    pub tokens: u64,
    /// What its priced requests cost, USD (None: none was priced).
    pub cost_usd: Option<f64>,
    /// `meta.updated_at`.
    pub updated_at: String,
    /// The first prompt.
    pub title: String,
    /// 0 for a session, 1 for its sub-agents, 2 for theirs.
    pub depth: usize,
}

/// What an op produced, for a surface to render.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OpOutput {
    /// `/plan`.
    Plan(PlanView),
    /// `/path`.
    Paths {
        /// `$PLAN_DRAFT_FILE`.
        draft: PathBuf,
        /// `$PLAN_FILE`.
        plan: PathBuf,
    },
    /// A one-sentence receipt (draft, cancel, confirm, clear, compact, edit).
    Done {
        /// The sentence.
        message: String,
    },
    /// `/status`: the sidebar text.
    Status {
        /// The rendered view.
        text: String,
    },
    /// `/relay`.
    Relay {
        /// Where handoff.md was written.
        path: PathBuf,
        /// Its text.
        text: String,
    },
    /// `/stats`.
    Stats {
        /// Session id.
        session: String,
        /// Per request.
        requests: Vec<RequestStats>,
        /// The fixed part of every request the session pinned.
        fixed: crate::stats::Fixed,
    },
    /// `/sessions`.
    Sessions {
        /// The state folder.
        root: PathBuf,
        /// Newest first.
        rows: Vec<SessionRow>,
    },
    /// `/checkpoints`.
    Checkpoints {
        /// Oldest first.
        rows: Vec<crate::checkpoint::Row>,
    },
    /// `/diff`: the patch (or why there is none).
    Diff {
        /// The text.
        text: String,
    },
    /// `/fork`, `/rewind`: the new session (a surface with a live runtime switches to it).
    Forked {
        /// The new session's id.
        session: String,
        /// The receipt.
        message: String,
    },
    /// `/help`.
    Help,
}

impl OpOutput {
    /// The text every surface shows for this output (the receipt's `detail`).
    pub fn render(&self) -> String {
        match self {
            OpOutput::Plan(v) => render_plan(v),
            OpOutput::Paths { draft, plan } => format!(
                "PLAN_DRAFT_FILE={}\nPLAN_FILE={}",
                draft.display(),
                plan.display()
            ),
            OpOutput::Done { message } => message.clone(),
            OpOutput::Status { text } => text.clone(),
            OpOutput::Relay { path, text } => format!("{text}\n(written to {})", path.display()),
            OpOutput::Stats {
                session,
                requests,
                fixed,
            } => format!(
                "{}{}",
                crate::stats::render(session, requests),
                fixed.line()
            ),
            OpOutput::Sessions { root, rows } => render_sessions(root, rows),
            OpOutput::Checkpoints { rows } => crate::checkpoint::render_rows(rows),
            OpOutput::Diff { text } => crate::render::safe(text).into_owned(),
            OpOutput::Forked { message, .. } => message.clone(),
            OpOutput::Help => help(),
        }
    }
}

/// Why an op failed.
#[derive(Debug, Clone, PartialEq)]
pub enum OpError {
    /// A bad argument or a reference to nothing (exit 2).
    Usage(String),
    /// Refused: the lifecycle's order, a session held elsewhere, nothing to do (exit 1).
    Refused(String),
    /// Something failed (exit 1).
    Failed(String),
    /// Interrupted (exit 130).
    Interrupted,
}

impl OpError {
    /// The process exit code of a verb that failed this way.
    pub fn exit_code(&self) -> i32 {
        match self {
            OpError::Usage(_) => 2,
            OpError::Interrupted => 130,
            OpError::Refused(_) | OpError::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Usage(m) | OpError::Refused(m) | OpError::Failed(m) => f.write_str(m),
            OpError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl From<Failure> for OpError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Interrupted => OpError::Interrupted,
            Failure::Usage(m) => OpError::Usage(m),
            other => OpError::Failed(other.to_string()),
        }
    }
}

impl From<crate::checkpoint::Error> for OpError {
    fn from(e: crate::checkpoint::Error) -> Self {
        match e {
            crate::checkpoint::Error::Usage(m) => OpError::Usage(m),
            crate::checkpoint::Error::Failed(m) => OpError::Failed(m),
        }
    }
}

impl From<ToolError> for OpError {
    fn from(e: ToolError) -> Self {
        match e {
            ToolError::Interrupted(_) => OpError::Interrupted,
            ToolError::Refused(m) => OpError::Refused(m),
            ToolError::Arguments(m) => OpError::Usage(m),
            ToolError::Failed(m) => OpError::Failed(m),
        }
    }
}

impl From<std::io::Error> for OpError {
    fn from(e: std::io::Error) -> Self {
        OpError::Failed(e.to_string())
    }
}

/// The result of one op: printed to the person and written to `events.jsonl` as a `receipt`
/// event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// Op id.
    pub op: OpId,
    /// Session id, when the op had one.
    pub session: Option<String>,
    /// Whether it succeeded.
    pub ok: bool,
    /// Plan state before (written `""` when there was no session or no readable plan).
    #[serde(with = "crate::domain::plan::state_or_empty")]
    pub before: Option<PlanState>,
    /// Plan state after (the same).
    #[serde(with = "crate::domain::plan::state_or_empty")]
    pub after: Option<PlanState>,
    /// What happened, or why not.
    pub detail: String,
    /// RFC 3339 time.
    pub time: String,
    /// The data, when it succeeded (not in the JSON receipt: `detail` renders it).
    #[serde(skip)]
    pub output: Option<OpOutput>,
    /// The exit code a verb ends with (0 when ok).
    #[serde(skip)]
    pub exit_code: i32,
}

/// Where an op runs.
pub struct Target<'a> {
    /// Opens sessions and runtimes.
    pub launcher: &'a Launcher,
    /// The surface's live runtime, when there is one (the REPL, ACP).
    pub runtime: Option<&'a mut Runtime>,
    /// Session reference for verbs (`--session`); the current session when None.
    pub session: Option<String>,
    /// Wait for a turn running in another process instead of refusing (`--wait`).
    pub wait: bool,
}

/// Runs `op` with its argument (the draft text for `plan.draft`, a session id for `resume`).
/// Never panics; a failure is a receipt with `ok: false`.
pub fn run(op: &Op, arg: Option<&str>, target: &mut Target<'_>, ui: &mut dyn Surface) -> Receipt {
    let session = match open_session(op, target) {
        Ok(s) => s,
        Err(e) => return receipt(op, None, Err(e), None, None),
    };
    let plan_state = |s: &Option<Session>| {
        s.as_ref()
            .and_then(|s| plan::plan_file(s).ok())
            .map(|p| p.state)
    };
    let before = plan_state(&session);
    let result = dispatch(op, arg, target, session.as_ref(), ui);
    let after = plan_state(&session);
    let r = receipt(
        op,
        session.as_ref().map(|s| s.id.clone()),
        result,
        before,
        after,
    );
    if let Some(s) = &session
        && !matches!(op.id, OpId::Status | OpId::Stats | OpId::Mcp)
    {
        let parent = target
            .runtime
            .as_ref()
            .and_then(|rt| rt.parent().map(str::to_string));
        runtime::emit_to(
            s,
            parent.as_deref(),
            &mut runtime::Quiet,
            crate::event::Event::Receipt {
                op: op.id,
                ok: r.ok,
                before: r.before,
                after: r.after,
                detail: (!r.ok || op.writes()).then(|| r.detail.clone()),
            },
        );
    }
    r
}

fn receipt(
    op: &Op,
    session: Option<String>,
    result: Result<OpOutput, OpError>,
    before: Option<PlanState>,
    after: Option<PlanState>,
) -> Receipt {
    let (ok, detail, output, exit_code) = match result {
        Ok(o) => (true, o.render(), Some(o), 0),
        Err(e) => (false, e.to_string(), None, e.exit_code()),
    };
    Receipt {
        op: op.id,
        session,
        ok,
        before,
        after,
        detail: crate::store::redact::redact(&detail).into_owned(),
        time: crate::clock::now_rfc3339(),
        output,
        exit_code,
    }
}

/// The session an op works on (None for ops that need none).
fn open_session(op: &Op, target: &Target<'_>) -> Result<Option<Session>, OpError> {
    if matches!(
        op.id,
        OpId::Help | OpId::Quit | OpId::Sessions | OpId::Resume
    ) {
        return Ok(None);
    }
    if let Some(rt) = &target.runtime {
        return Ok(Some(Session::at(
            &rt.session().id,
            rt.session().dir.clone(),
        )));
    }
    let r = match &target.session {
        Some(id) => SessionRef::Id(id.clone()),
        None => SessionRef::Current,
    };
    Ok(target.launcher.find(&r)?)
}

/// `/stats`: the session's requests and the fixed part of each.
fn stats_of(s: &Session) -> Result<OpOutput, OpError> {
    Ok(OpOutput::Stats {
        session: s.id.clone(),
        requests: crate::stats::requests(s)?,
        fixed: crate::stats::Fixed::of(s),
    })
}

/// The one dispatch of ops: an exhaustive match on [`OpId`].
fn dispatch(
    op: &Op,
    arg: Option<&str>,
    target: &mut Target<'_>,
    session: Option<&Session>,
    ui: &mut dyn Surface,
) -> Result<OpOutput, OpError> {
    let need = || session.ok_or_else(|| OpError::Usage("no session".to_string()));
    if arg.is_some()
        && !matches!(
            op.id,
            OpId::PlanDraft
                | OpId::Resume
                | OpId::Goal
                | OpId::Model
                | OpId::Effort
                | OpId::Mcp
                | OpId::Undo
                | OpId::Diff
                | OpId::Fork
                | OpId::Rewind
        )
    {
        return Err(OpError::Usage(format!(
            "{} takes no argument (see /help)",
            op.slash
        )));
    }
    let parent = target
        .runtime
        .as_ref()
        .and_then(|rt| rt.parent().map(str::to_string));
    let done = |message: String| OpOutput::Done { message };
    match op.id {
        OpId::PlanShow => plan_view(need()?).map(OpOutput::Plan),
        OpId::PlanPath => {
            let s = need()?;
            Ok(OpOutput::Paths {
                draft: s.path(files::DRAFT),
                plan: s.path(files::PLAN),
            })
        }
        OpId::PlanDraft => {
            let text = arg.ok_or_else(|| OpError::Usage("no draft text given".into()))?;
            let s = need()?;
            if target.runtime.is_none() && crate::store::held_elsewhere(s).is_some() {
                return Ok(done(plan::draft_for_holder(s, Some(text))?));
            }
            Ok(done(plan::draft(s, parent.as_deref(), text, ui)?))
        }
        OpId::PlanEdit => plan_edit(need()?, ui).map(done),
        OpId::PlanCancel => {
            let s = need()?;
            if target.runtime.is_none() && crate::store::held_elsewhere(s).is_some() {
                return Ok(done(plan::draft_for_holder(s, None)?));
            }
            Ok(done(plan::cancel(s, parent.as_deref(), ui)?))
        }
        OpId::PlanConfirm | OpId::PlanClear | OpId::Compact => {
            with_runtime(op, target, need()?, ui).map(done)
        }
        OpId::Status => {
            let s = need()?;
            Ok(OpOutput::Status {
                text: format!(
                    "{}\n{}{}",
                    crate::status::render_text(s, None),
                    crate::config_file::explain(target.launcher.env.sources()),
                    crate::status::price_line(&target.launcher.config.prices, s)
                ),
            })
        }
        OpId::Stats => stats_of(need()?),
        OpId::Relay => {
            let (path, text) = crate::relay::write(need()?).map_err(OpError::Failed)?;
            Ok(OpOutput::Relay { path, text })
        }
        OpId::Sessions => Ok(OpOutput::Sessions {
            root: target.launcher.state.root.clone(),
            rows: sessions(&target.launcher.state)?,
        }),
        OpId::Undo | OpId::Redo | OpId::Checkpoints | OpId::Diff | OpId::Fork | OpId::Rewind => {
            checkpoint_op(op, arg, target, need()?)
        }
        OpId::Help => Ok(OpOutput::Help),
        OpId::Goal => goal_op(need()?, arg).map(done),
        OpId::Model => match target.runtime.as_deref_mut() {
            Some(rt) => rt.set_model(arg, ui).map(done).map_err(OpError::from),
            None => Err(OpError::Usage(
                "/model needs an open session (send a prompt first)".into(),
            )),
        },
        OpId::Effort => match target.runtime.as_deref_mut() {
            Some(rt) => rt.set_effort(arg).map(done).map_err(OpError::from),
            None => Err(OpError::Usage(
                "/effort needs an open session (send a prompt first)".into(),
            )),
        },
        OpId::Mcp => mcp_op(arg, target),
        OpId::Resume | OpId::Quit => Err(OpError::Usage(format!("{} is a REPL command", op.slash))),
    }
}

/// `/mcp [list [SERVER] | schema SERVER TOOL | call SERVER TOOL JSON]`: through the open
/// session's servers (and its hooks), else straight to the workspace's servers, as `tern mcp`.
fn mcp_op(arg: Option<&str>, target: &mut Target<'_>) -> Result<OpOutput, OpError> {
    use crate::mcp::Verb;
    let arg = arg.unwrap_or("list").trim();
    let mut words = arg.splitn(4, char::is_whitespace).filter(|w| !w.is_empty());
    let usage = || {
        OpError::Usage("/mcp [list [SERVER] | schema SERVER TOOL | call SERVER TOOL JSON]".into())
    };
    let verb = match words.next() {
        Some("list") => Verb::List {
            server: words.next().map(str::to_string),
        },
        Some("schema") => Verb::Schema {
            server: words.next().ok_or_else(usage)?.to_string(),
            tool: words.next().ok_or_else(usage)?.to_string(),
        },
        Some("call") => {
            let server = words.next().ok_or_else(usage)?.to_string();
            let tool = words.next().ok_or_else(usage)?.to_string();
            let text = words.next().unwrap_or("{}");
            let arguments: serde_json::Value = serde_json::from_str(text)
                .ok()
                .filter(serde_json::Value::is_object)
                .ok_or_else(|| OpError::Usage("the arguments must be a JSON object".into()))?;
            Verb::Call {
                server,
                tool,
                arguments,
                json: false,
            }
        }
        _ => return Err(usage()),
    };
    let reply = match target
        .runtime
        .as_deref()
        .and_then(runtime::Runtime::mcp_hub)
    {
        Some(hub) => hub.run(&verb),
        None => {
            let hub = target.launcher.mcp_hub(None);
            let r = hub.run(&verb);
            hub.close();
            r
        }
    };
    let text = format!("{}{}", reply.stdout, reply.stderr)
        .trim_end()
        .to_string();
    match reply.exit {
        0 => Ok(OpOutput::Done { message: text }),
        2 => Err(OpError::Usage(
            text.trim_start_matches("tern: ").to_string(),
        )),
        _ => Err(OpError::Failed(
            text.trim_start_matches("tern: ").to_string(),
        )),
    }
}

/// The checkpoint and fork ops (src/checkpoint). The ones that change files or make a session
/// are refused while a turn of any session of this state folder runs (it shares the workspace);
/// this process holds the session meanwhile, so no turn starts under them.
fn checkpoint_op(
    op: &Op,
    arg: Option<&str>,
    target: &mut Target<'_>,
    session: &Session,
) -> Result<OpOutput, OpError> {
    use crate::checkpoint as cp;
    let number = |what: &str| -> Result<Option<u32>, OpError> {
        arg.map(|a| {
            a.trim()
                .parse::<u32>()
                .map_err(|_| OpError::Usage(format!("{} takes {what}, not {a:?}", op.slash)))
        })
        .transpose()
    };
    let state = &target.launcher.state;
    let limits = target.launcher.config.checkpoints;
    let store = || cp::open(state, limits).map_err(OpError::from);
    match op.id {
        OpId::Checkpoints => Ok(OpOutput::Checkpoints {
            rows: cp::list(&store()?, session)?,
        }),
        OpId::Diff => {
            let turn = number("a turn number")?;
            Ok(OpOutput::Diff {
                text: cp::diff(&store()?, session, turn)?,
            })
        }
        _ => {
            // `/undo [N] [--force]`: the flag may stand anywhere.
            let mut force = false;
            let rest: Vec<&str> = arg
                .unwrap_or("")
                .split_whitespace()
                .filter(|w| {
                    let flag = op.id == OpId::Undo && *w == "--force";
                    force |= flag;
                    !flag
                })
                .collect();
            let rest = rest.join(" ");
            let arg = (!rest.is_empty()).then_some(rest.as_str());
            let n = arg
                .map(|a| {
                    a.parse::<u32>().map_err(|_| {
                        OpError::Usage(format!("{} takes a turn number, not {a:?}", op.slash))
                    })
                })
                .transpose()?;
            if op.id == OpId::Rewind && n.is_none() {
                return Err(OpError::Usage(
                    "/rewind takes the turn to go back to (see /checkpoints)".into(),
                ));
            }
            refuse_while_running(op, state)?;
            // Held for the op: no turn of this session starts in another pane meanwhile.
            let _lease = match crate::store::lease::Lease::try_take(&session.dir)? {
                Ok(l) => Some(l),
                Err(_) if target.runtime.as_ref().is_some_and(|rt| rt.held()) => None,
                Err(h) => {
                    return Err(OpError::Refused(format!(
                        "refused: session {} is held by process {}",
                        session.id,
                        h.pid.unwrap_or(0)
                    )));
                }
            };
            let mark = target.launcher.mark_current;
            match op.id {
                OpId::Undo => Ok(OpOutput::Done {
                    message: cp::undo(&store()?, session, n.unwrap_or(1), force)?,
                }),
                OpId::Redo => Ok(OpOutput::Done {
                    message: cp::redo(&store()?, session)?,
                }),
                OpId::Fork => {
                    let s = cp::fork(state, session, n, mark)?;
                    let at = n.map_or("its end".to_string(), |t| format!("the end of turn {t}"));
                    Ok(OpOutput::Forked {
                        message: format!(
                            "new session {} forked from {} at {at} (now the current session; continue it with tern exec --continue or tern chat --continue)",
                            s.id, session.id
                        ),
                        session: s.id,
                    })
                }
                _ => {
                    let (s, message) = cp::rewind(state, &store()?, session, n.unwrap_or(0), mark)?;
                    Ok(OpOutput::Forked {
                        session: s.id,
                        message,
                    })
                }
            }
        }
    }
}

/// Refuses `op` while a turn of any session of `state` runs in a live process: the sessions
/// share the workspace, and the op rewrites its files or copies a history in flight.
fn refuse_while_running(op: &Op, state: &StateDir) -> Result<(), OpError> {
    for id in state.session_ids().unwrap_or_default() {
        if let Ok(s) = state.open_session(&id)
            && let Some(pid) = crate::store::held_elsewhere(&s)
        {
            return Err(OpError::Refused(format!(
                "refused: a turn of session {id} is running in process {pid}, and {} changes the workspace or copies its history. Wait for the turn to end (or interrupt it).",
                op.slash
            )));
        }
    }
    Ok(())
}

fn plan_view(s: &Session) -> Result<PlanView, OpError> {
    // A damaged plan.json is rebuilt here as `exec --continue` rebuilds it, with its words.
    let (p, rebuilt) = plan::plan_file_repaired(s)?;
    let read = plan::read_draft(s)?;
    let draft_problem = read.problem();
    let draft = read.text().unwrap_or_default().to_string();
    let plan_md_edited = match &p.locked {
        Some(l) => s.read_text(files::PLAN)?.unwrap_or_default() != *l,
        None => false,
    };
    Ok(PlanView {
        state: p.state.as_str().to_string(),
        revision: p.revision,
        confirmed_at: p.confirmed_at,
        draft,
        draft_problem,
        locked: p.locked,
        plan_md_edited,
        repaired: rebuilt.then(|| plan::PLAN_REBUILT.to_string()),
    })
}

fn render_plan(v: &PlanView) -> String {
    // The draft and the plan are the model's or a person's text: shown through the
    // terminal-safe filter, so they cannot move the cursor or hide text.
    let safe = |t: &str| crate::render::safe(t).into_owned();
    let mut out = String::new();
    if let Some(r) = &v.repaired {
        out.push_str(&format!("note: {r}\n"));
    }
    out.push_str(&format!(
        "plan state: {} (revision {})\n",
        v.state, v.revision
    ));
    if let Some(at) = &v.confirmed_at {
        out.push_str(&format!("last confirmed: {at}\n"));
    }
    out.push_str("\n# draft ($PLAN_DRAFT_FILE, not in the prompt)\n");
    if let Some(problem) = &v.draft_problem {
        out.push_str(&format!("({problem})\n"));
    } else if v.draft.trim().is_empty() {
        out.push_str("(empty)\n");
    } else {
        out.push_str(&safe(&v.draft));
        if !v.draft.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str("\n# locked plan ($PLAN_FILE, in the system prompt)\n");
    match &v.locked {
        Some(l) => {
            out.push_str(&safe(l));
            if v.plan_md_edited {
                out.push_str("\n! plan.md was edited outside PlanConfirm; tern uses the copy above. Put changes in the draft and confirm.");
            }
        }
        None => out.push_str("(none)"),
    }
    out.trim_end().to_string()
}

fn plan_edit(s: &Session, ui: &mut dyn Surface) -> Result<String, OpError> {
    use std::io::IsTerminal;
    // An empty variable counts as unset: `sh -c ' "$1"'` would run the draft as a program.
    let set = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let chosen = set("VISUAL").or_else(|| set("EDITOR"));
    // The fallback `vi` needs a terminal; from a pipe it would hang or spray escape codes. An
    // editor the person named (perhaps a script) is trusted to know where it runs.
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if chosen.is_none() && !tty {
        return Err(OpError::Refused(
            "no terminal for an editor here: set EDITOR, or write the draft with `tern plan draft` (stdin or --file) or /draft TEXT".into(),
        ));
    }
    let editor = chosen.unwrap_or_else(|| "vi".into());
    let path = s.path(files::DRAFT);
    if std::fs::symlink_metadata(&path).is_err() {
        let lock = s.lock()?;
        s.write_text_locked(&lock, files::DRAFT, "")?;
    }
    // The editor string may carry arguments (`code -w`), as git allows.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("tern-edit")
        .arg(&path)
        .status()
        .map_err(|e| OpError::Failed(format!("could not start the editor {editor:?}: {e}")))?;
    if !status.success() {
        return Err(OpError::Failed(format!(
            "the editor {editor:?} exited with {status}; the draft is as the editor left it"
        )));
    }
    // plan.json is the holder's while another process runs the session (see
    // `plan::draft_for_holder`).
    if crate::store::held_elsewhere(s).is_some() {
        return Ok(
            "draft as the editor left it; the tern running this session records it before its next request".into(),
        );
    }
    let before = plan::plan_file(s)?;
    let p = plan::observe_draft(s, None, ui)?;
    let empty = plan::read_draft(s)?.is_blank();
    // An emptied draft is a removed draft (its state says so), not an unchanged one.
    let what = if empty && p.state != before.state {
        "draft emptied"
    } else if empty {
        "draft is empty"
    } else if p.revision == before.revision {
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

/// Runs a model-calling op on the surface's live runtime, or on a runtime the launcher opens for
/// the verb (the provider of this environment, the session's model).
fn with_runtime(
    op: &Op,
    target: &mut Target<'_>,
    session: &Session,
    ui: &mut dyn Surface,
) -> Result<String, OpError> {
    if let Some(rt) = target.runtime.as_deref_mut() {
        return holding(rt, false, ui, |rt, ui| model_op(op, rt, ui));
    }
    wait_or_refuse(op, session, target.wait, ui)?;
    // A transition that is refused anyway must not open the session (which records a
    // `session_start`) nor need a reachable provider: "error, nothing changed".
    match op.id {
        OpId::PlanConfirm => {
            let draft = plan::read_draft(session)?;
            plan::plan_file(session)?
                .check_confirm(&draft)
                .map_err(|e| OpError::Refused(e.into()))?;
        }
        OpId::PlanClear => plan::plan_file(session)?
            .check_clear()
            .map_err(|e| OpError::Refused(e.into()))?,
        _ => {}
    }
    // Another pane can take the session between the wait above and the reopen; with --wait that
    // is one more turn to wait for, not a refusal.
    let mut rt = loop {
        let s = Session::at(&session.id, session.dir.clone());
        match target.launcher.resume_for_verb(s, &mut runtime::Quiet) {
            Ok(rt) => break rt,
            // Held when it looked: wait (a turn that ended since is no refusal either: the
            // next try opens it). A second look at the lease here raced the turn's end.
            Err(Failure::Held(_)) if target.wait => {
                wait_or_refuse(op, session, true, ui)?;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    };
    holding(&mut rt, target.wait, ui, |rt, ui| model_op(op, rt, ui))
}

/// Runs `f` while this runtime holds the session (as a turn does), after reloading what another
/// process may have written: a turn started meanwhile in another pane would append to a history
/// this op is about to replace. `wait`: wait for a running turn instead of refusing. Holding
/// writes nothing, so a refused op changes no file.
fn holding(
    rt: &mut Runtime,
    wait: bool,
    ui: &mut dyn Surface,
    f: impl FnOnce(&mut Runtime, &mut dyn Surface) -> Result<String, OpError>,
) -> Result<String, OpError> {
    let had = rt.held();
    loop {
        match rt.hold() {
            Ok(()) => break,
            Err(_) if wait => std::thread::sleep(Duration::from_millis(250)),
            Err(e) => return Err(OpError::Refused(format!("refused: {e}"))),
        }
    }
    let result = rt
        .sync_from_disk(ui)
        .map_err(OpError::from)
        .and_then(|()| f(rt, ui));
    if !had {
        rt.release();
    }
    result
}

fn model_op(op: &Op, rt: &mut Runtime, ui: &mut dyn Surface) -> Result<String, OpError> {
    match op.id {
        OpId::PlanConfirm => Ok(rt.plan_confirm(None, ui)?),
        OpId::PlanClear => Ok(rt.plan_clear(None, ui)?),
        _ => {
            let before = rt.history().len();
            if before == 0 {
                return Ok("nothing to summarise yet: the conversation is empty".into());
            }
            rt.compact(crate::event::CompactTrigger::Manual, None, ui)?;
            let s = if before == 1 { "" } else { "s" };
            Ok(format!(
                "{before} message{s} summarised; the history now opens with the summary"
            ))
        }
    }
}

/// Refuses (or with `wait`, waits) while a turn of `session` runs in another live process.
fn wait_or_refuse(
    op: &Op,
    session: &Session,
    wait: bool,
    ui: &mut dyn Surface,
) -> Result<(), OpError> {
    let mut announced = false;
    loop {
        let Some(pid) = crate::store::held_elsewhere(session) else {
            return Ok(());
        };
        if !wait {
            return Err(OpError::Refused(format!(
                "refused: a turn of session {} is running in process {pid}, and {} rewrites the conversation. Wait for the turn to end (or interrupt it), or pass --wait.",
                session.id, op.cli
            )));
        }
        if !announced {
            runtime::emit_to(
                session,
                None,
                ui,
                crate::event::Event::warning(format!(
                    "waiting for the turn running in process {pid} to end…"
                )),
            );
            announced = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn sessions(state: &StateDir) -> Result<Vec<SessionRow>, OpError> {
    state.check_links()?;
    let ids = state.session_ids()?;
    let current = state.current().ok().flatten().map(|s| s.id);
    let mut rows = Vec::new();
    for id in ids.iter().rev() {
        let is_current = current.as_deref() == Some(id);
        match state.open_session(id) {
            Ok(s) => session_rows(&s, is_current, 0, &mut rows),
            Err(e) => rows.push(unreadable(id, is_current, e.to_string())),
        }
    }
    Ok(rows)
}

/// The row of `s`, then its sub-agents' rows (oldest first) under it.
fn session_rows(s: &Session, current: bool, depth: usize, rows: &mut Vec<SessionRow>) {
    let id = &s.id;
    let is_current = current;
    {
        let row = {
            match s.read_meta() {
                Ok(mut m) => {
                    // Not held by a live process: shown as the next start will settle it from
                    // events.jsonl (`Meta::settle`), `?` marking what is not written yet.
                    let unsettled = matches!(m.status, Status::Running)
                        || (depth == 0 && m.status == Status::Idle);
                    let mut guess = false;
                    if unsettled && let Ok(rec) = s.recorded() {
                        if crate::store::held_elsewhere(s).is_none() {
                            guess = m.settle(&rec)
                                && m.status == Status::Ended(crate::event::Ending::Interrupted);
                        } else {
                            // A running turn writes meta.json when it ends: its requests so
                            // far are on record in events.jsonl.
                            m.take_totals(&rec);
                        }
                    }
                    let status = if guess {
                        "interrupted?".to_string()
                    } else {
                        m.status.as_str().to_string()
                    };
                    SessionRow {
                        id: id.clone(),
                        current: is_current,
                        status: Ok(status),
                        requests: m.turns,
                        tokens: m.usage.input_tokens.saturating_add(m.usage.output_tokens),
                        cost_usd: (m.turns > m.unpriced || m.children_cost_usd > 0.0)
                            .then_some(m.cost_usd + m.children_cost_usd),
                        updated_at: m.updated_at,
                        title: m.title,
                        depth,
                    }
                }
                Err(e) => SessionRow {
                    depth,
                    ..unreadable(id, is_current, e.to_string())
                },
            }
        };
        rows.push(row);
    }
    let children: Vec<Session> = crate::store::session::child_dirs(&s.path(files::AGENTS))
        .into_iter()
        .map(|(id, dir)| Session::at(&id, dir))
        .collect();
    for c in &children {
        session_rows(c, false, depth + 1, rows);
    }
}

fn unreadable(id: &str, current: bool, why: String) -> SessionRow {
    SessionRow {
        id: id.to_string(),
        current,
        status: Err(why),
        requests: 0,
        tokens: 0,
        cost_usd: None,
        updated_at: String::new(),
        title: String::new(),
        depth: 0,
    }
}

fn render_sessions(root: &std::path::Path, rows: &[SessionRow]) -> String {
    let worktrees = crate::worktree::made(root);
    let mut tail = String::new();
    if !worktrees.is_empty() {
        tail.push_str("\nworktrees (each with sessions of its own: `tern exec --worktree NAME`, or cd there):");
        for w in &worktrees {
            let running = w
                .running
                .as_ref()
                .map(|(id, pid)| format!("  RUNNING {id} (pid {pid})"))
                .unwrap_or_default();
            tail.push_str(&format!(
                "\n  {:<22} {:<24} {} session{}  {}{running}",
                w.name,
                w.branch.as_deref().unwrap_or("(no branch)"),
                w.sessions,
                if w.sessions == 1 { "" } else { "s" },
                w.path.display()
            ));
        }
    }
    if rows.is_empty() {
        return format!("no sessions in {}{tail}", root.display());
    }
    // `requests`: model requests (meta.json's `turns`, the `result` event's), not prompts.
    let mut out = format!(
        "  {:<22} {:<11} {:>8} {:>9} {:>9}  {:<20}  {}\n",
        "id", "status", "requests", "tokens", "cost", "last activity", "title"
    );
    for r in rows {
        let mark = if r.current { "*" } else { " " };
        // A sub-agent sits under its parent: `└ id`, indented by its depth.
        let id = if r.depth == 0 {
            r.id.clone()
        } else {
            format!("{}└ {}", "  ".repeat(r.depth - 1), r.id)
        };
        match &r.status {
            Ok(status) => out.push_str(&format!(
                "{mark} {:<22} {:<11} {:>8} {:>9} {:>9}  {:<20}  {}\n",
                id,
                status,
                r.requests,
                r.tokens,
                match r.cost_usd {
                    Some(c) => crate::cost::usd_text(Some(c)),
                    None if r.requests == 0 => "-".into(),
                    None => "unknown".into(),
                },
                r.updated_at,
                crate::render::safe(&r.title.replace(['\n', '\r'], " "))
            )),
            Err(e) => out.push_str(&format!("{mark} {id:<22} unreadable: {e}\n")),
        }
    }
    format!("{}{tail}", out.trim_end())
}

/// `/goal`: shows the goal; `/goal CMD [--attempts N]` sets it; `/goal off` clears it.
fn goal_op(s: &Session, arg: Option<&str>) -> Result<String, OpError> {
    use crate::hooks::goal;
    let Some(arg) = arg.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(
            match goal::read(s).map_err(|e| OpError::Failed(e.into()))? {
                Some(g) => goal::status_line(&g),
                None => "no goal set (/goal CMD sets one)".into(),
            },
        );
    };
    if matches!(arg, "off" | "clear" | "none") {
        goal::set(s, None)?;
        return Ok("goal cleared".into());
    }
    let (cmd, attempts) = match arg.rsplit_once("--attempts") {
        Some((c, n)) => {
            let n: u32 = n
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| OpError::Usage("--attempts takes a number from 1 to 1000".into()))?;
            (c.trim(), n)
        }
        _ => (arg, goal::DEFAULT_ATTEMPTS),
    };
    // A blank command (`/goal --attempts 3`, `/goal ""`) is a usage error, as `--goal ""` is:
    // it would be set as the goal and fail (or pass) for no reason of the work's.
    if matches!(cmd.trim(), "" | "\"\"" | "''") {
        return Err(OpError::Usage(
            "/goal needs a command: /goal CMD [--attempts N] (`/goal off` clears it)".into(),
        ));
    }
    goal::set(s, Some((cmd, attempts)))?;
    Ok(format!(
        "goal set: `{cmd}` must pass (exit 0) before a turn completes; {attempts} attempts per turn"
    ))
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
    let sw = OPS.iter().map(|o| o.slash.len()).max().unwrap_or(0).max(10);
    let mut out = format!("{:<sw$} {:<w$}  what\n", "slash", "verb");
    for o in OPS {
        let mark = if o.model_call() {
            " (a model call)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<sw$} {:<w$}  {}{mark}\n",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_has_one_row() {
        let ids = OpId::ALL;
        assert_eq!(ids.len(), OPS.len());
        for id in ids {
            assert_eq!(OPS.iter().filter(|o| o.id == id).count(), 1, "{id:?}");
            assert_eq!(get(id).id, id);
        }
    }
}
