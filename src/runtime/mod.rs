//! The runtime: one session, one provider, the tools, and the turn loop (`turn.rs`). Every surface
//! (`tern exec`, the REPL, the CLI verbs, the demo, ACP, a sub-agent) gets its runtime from the
//! [`crate::launcher::Launcher`] and drives this same type; none has a loop of its own.
//!
//! What a runtime holds, grouped: the session folder and its [`Lease`] while a turn (or a
//! rewriting verb) holds it; the request [`Prefix`] (tools + pinned system prompt + history); the
//! provider; the policy ([`Config`], approvals); the `Meter` of requests; and the stamps of files
//! other processes may change (`Seen`).

pub mod agent;
mod answer;
mod checkpoints;
pub mod compact;
mod dispatch;
pub mod hooks;
pub mod nudge;
pub mod plan;
pub mod prefix;
pub mod repair;
mod request;
pub mod steer;
pub mod system;
pub mod textcall;
mod turn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::event::{BoundaryKind, Envelope, Event, ResultFields, ResultTotals};
use crate::message::{Message, Usage};
use crate::procs::ProcessGroups;
use crate::provider::Provider;
use crate::provider::retry::RetryPolicy;
use crate::store::lease::Lease;
use crate::store::{Meta, Session, Status, files};

pub use answer::RUNAWAY_NOTE;
pub use prefix::Prefix;
pub use turn::TurnOutcome;

/// Largest prompt accepted, in bytes: it is sent again in every later request of the session.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

pub use crate::policy::Approval;

/// A person's answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this command.
    Yes,
    /// Do not run it; the model gets an error tool result.
    No,
    /// Run it and every later command of this session.
    Always,
    /// There was no one to ask (no terminal): not run, and the model is told so.
    Unavailable,
    /// The one asked went away before answering (an editor closed the connection): not run,
    /// the model is told so, and the surface cancels the turn.
    Disconnected,
    /// The turn was cancelled while the question was open: not run, and the model is told the
    /// turn was cancelled (not that anyone declined).
    Cancelled,
}

/// What a surface (exec output, REPL, demo, ACP) receives from the runtime. Events arrive after
/// they were written to `events.jsonl`, so what the person sees is what the file says.
pub trait Surface {
    /// One event, as written.
    fn event(&mut self, ev: &Envelope);
    /// Assistant text as it streams; display only (the `assistant` event carries the whole text).
    fn text_delta(&mut self, _text: &str) {}
    /// Asked before a bash command runs under [`Approval::Ask`].
    fn approve(&mut self, _command: &str) -> Answer {
        Answer::Yes
    }
    /// A wait begins (`waiting for the model…`, `running…`); the next event or text ends it.
    /// Display only.
    fn progress(&mut self, _note: &str) {}
}

/// A surface that shows nothing (verbs that print their own receipt).
pub struct Quiet;

impl Surface for Quiet {
    fn event(&mut self, _ev: &Envelope) {}
}

/// Runtime settings, from flags and environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Model name sent to the provider.
    pub model: String,
    /// Model requests allowed in one turn before it stops with exit code 3 (`--max-turns`).
    pub max_turns: u32,
    /// The model's context window in tokens (`--context-window`).
    pub context_window: u64,
    /// Fraction of the context window at which a request triggers an automatic compaction.
    pub compact_threshold: f64,
    /// Retry policy for provider errors.
    pub retry: RetryPolicy,
    /// When bash may run.
    pub approval: Approval,
    /// The output cap of every request, in tokens (`--max-output-tokens`).
    pub max_output_tokens: u32,
    /// Sampling temperature (`--temperature`); None: the server's default.
    pub temperature: Option<f64>,
    /// Send `prompt_cache_key` = session id (only where the server is OpenAI's).
    pub send_cache_key: bool,
    /// The provider's base URL, recorded in `meta.json` (credentials removed).
    pub base_url: String,
    /// What commands may write (`--sandbox`, `TERN_SANDBOX`).
    pub sandbox: crate::policy::Mode,
    /// Commands may not connect or bind TCP (`--no-network`).
    pub no_network: bool,
    /// What commands may reach beyond the mode's defaults, and whether they run in the jail.
    pub reach: crate::sandbox::jail::Reach,
    /// The program that serves as the jail's init (`tern __jail`); None: this process's own
    /// binary (`/proc/self/exe`). Set by embedders whose process is not `tern` (the tests).
    pub jail_exe: Option<PathBuf>,
    /// Sub-agents: how deep they may nest, how many run at once, and each child's budgets.
    pub agents: AgentLimits,
    /// The token budget of one turn (input + output tokens over its requests); a sub-agent's
    /// comes from [`AgentLimits::token_budget`]. None: no budget.
    pub token_budget: Option<u64>,
    /// Tell the model once per turn when its first answer shows a shell command in a code block
    /// and makes no tool call (see `nudge`); false: `--no-nudge`.
    pub nudge: bool,
    /// The checkpoint store's limits (`TERN_CHECKPOINT_*`).
    pub checkpoints: crate::checkpoint::Limits,
}

/// Sub-agent limits (`--agent-depth`, `--agents-parallel`, `--agent-max-turns`,
/// `--agent-wall-time`, `--agent-token-budget`; a Fleet member's own fields narrow the budgets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// Deepest nesting: a runtime at depth `d` may start a child only while `d < depth`.
    pub depth: u32,
    /// Children of one assistant message running at once.
    pub parallel: usize,
    /// A child's model requests.
    pub max_turns: u32,
    /// A child's wall time.
    pub wall_time: std::time::Duration,
    /// A child's input + output tokens.
    pub token_budget: u64,
}

impl Default for AgentLimits {
    /// Depth 2, 4 at once, 30 requests, 10 minutes, 2 million tokens per child.
    fn default() -> Self {
        AgentLimits {
            depth: 2,
            parallel: 4,
            max_turns: 30,
            wall_time: std::time::Duration::from_secs(600),
            token_budget: 2_000_000,
        }
    }
}

impl Config {
    /// Defaults for `model`: 50 turns, a 128k window compacted at 80 %, default retries, auto
    /// approval, 8192 output tokens, the `workspace-write` sandbox.
    pub fn new(model: &str) -> Config {
        Config {
            model: model.to_string(),
            max_turns: 50,
            context_window: 128_000,
            compact_threshold: 0.8,
            retry: RetryPolicy::default(),
            approval: Approval::Auto,
            max_output_tokens: 8192,
            temperature: None,
            send_cache_key: false,
            base_url: String::new(),
            sandbox: crate::policy::Mode::default(),
            no_network: false,
            reach: crate::sandbox::jail::Reach::default(),
            jail_exe: None,
            agents: AgentLimits::default(),
            token_budget: None,
            nudge: true,
            checkpoints: crate::checkpoint::Limits::default(),
        }
    }
}

/// Running totals of this process's requests, for `usage` and `result` events.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Usage summed over requests.
    pub usage: Usage,
    /// Model requests sent (compactions included).
    pub requests: u64,
    /// Sum of the common byte prefix of each request body with the previous one.
    pub prefix_reuse_bytes: u64,
    /// Sum of request body sizes in bytes.
    pub request_bytes: u64,
    /// The requests of this runtime's sub-agents (at any depth), not in `requests`.
    pub child_requests: u64,
    /// Their usage, not in `usage`.
    pub child_usage: Usage,
}

impl Totals {
    /// Cached over input tokens (0 when nothing was sent).
    pub fn cache_hit_ratio(&self) -> f64 {
        ratio(self.usage.cached_tokens, self.usage.input_tokens)
    }
    /// Reused over sent request bytes.
    pub fn prefix_reuse_ratio(&self) -> f64 {
        ratio(self.prefix_reuse_bytes, self.request_bytes)
    }
}

/// `a / b` rounded to 4 decimals, 0 when `b` is 0, at most 1 (a server that reports more cached
/// than prompt tokens is not believed past 100 %).
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        return 0.0;
    }
    ((a as f64 / b as f64).min(1.0) * 10_000.0).round() / 10_000.0
}

/// An error that ends a turn or an operation, with the exit code it maps to (DESIGN.md §8).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Ctrl-C or SIGTERM (exit 130).
    Interrupted,
    /// `--max-turns` reached (exit 3).
    MaxTurns(u32),
    /// The provider stayed unavailable after retries (exit 75).
    ProviderUnavailable(String),
    /// A sub-agent's budget (wall time or tokens) ran out (exit 1).
    Budget(String),
    /// A session reference that names nothing, or a bad flag value (exit 2).
    Usage(String),
    /// Another process holds the session (a turn runs there): exit 1. Its own variant, so a
    /// caller told to wait (`--wait`) can tell it from every other failure without racing a
    /// second look at the lease.
    Held(String),
    /// Anything else (exit 1).
    Failed(String),
}

impl Failure {
    /// How a run that failed this way ended (`result`, `error`, `turn_end`, `meta.json`).
    pub fn kind(&self) -> crate::event::Ending {
        use crate::event::Ending;
        match self {
            Failure::Interrupted => Ending::Interrupted,
            Failure::MaxTurns(_) => Ending::MaxTurns,
            Failure::ProviderUnavailable(_) => Ending::ProviderUnavailable,
            Failure::Budget(_) => Ending::BudgetExhausted,
            Failure::Usage(_) | Failure::Failed(_) | Failure::Held(_) => Ending::Failed,
        }
    }

    /// The process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Interrupted => 130,
            Failure::MaxTurns(_) => 3,
            Failure::ProviderUnavailable(_) => 75,
            Failure::Usage(_) => 2,
            Failure::Budget(_) | Failure::Failed(_) | Failure::Held(_) => 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Interrupted => f.write_str("interrupted"),
            Failure::MaxTurns(n) => write!(f, "stopped after --max-turns {n} model requests"),
            Failure::ProviderUnavailable(m) => write!(f, "provider unavailable: {m}"),
            Failure::Usage(m) | Failure::Failed(m) | Failure::Budget(m) | Failure::Held(m) => {
                f.write_str(m)
            }
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Failed(crate::store::redact::redact(&e.to_string()).into_owned())
    }
}

/// What the launcher hands a runtime besides its session: everything per process or per parent.
pub struct Parts {
    /// The provider this runtime sends to.
    pub provider: Box<dyn Provider>,
    /// Settings.
    pub cfg: Config,
    /// Where bash runs and `AGENTS.md` is read.
    pub workspace: PathBuf,
    /// Cancelled by Ctrl-C / SIGTERM / a surface; a child's is a child of its parent's.
    pub cancel: CancelToken,
    /// The registry the running commands' process groups go in.
    pub groups: Arc<ProcessGroups>,
    /// The parent session of a sub-agent, written into every event's envelope.
    pub parent: Option<String>,
    /// Whether a turn points `.tern/current` at this session (never for a child).
    pub mark_current: bool,
    /// How deep this runtime is among sub-agents (0: a person's session).
    pub depth: u32,
    /// The `prompt_cache_key` this runtime sends (a child sends its parent's: they share the
    /// cache); None: its own session id.
    pub cache_key: Option<String>,
    /// Opens sub-agents (the launcher).
    pub spawner: Option<Arc<dyn Spawner>>,
}

/// What a sub-agent's session starts from: the bytes of its first request's prefix and the
/// route it runs on. The `agent` tool builds `system` and `history`: a fork passes its parent's
/// exact system bytes and stored history plus the fork-state message; a fresh child the
/// parent's base system bytes and one message.
pub struct ChildSpec {
    /// Shown in `tern sessions` under the parent.
    pub title: String,
    /// The exact bytes of the child's `system.txt`.
    pub system: String,
    /// The history the child starts with (ends with a user message).
    pub history: Vec<Message>,
    /// The child's settings (its own turn budget, approval, …).
    pub cfg: Config,
    /// A route of its own (a Fleet member's); None runs on the parent's.
    pub route: Option<crate::config::ProviderChoice>,
    /// The parent's tool call that asked for it (recorded in the child's `meta.json`).
    pub parent_call: String,
    /// The Fleet member it is, if any.
    pub member: Option<String>,
    /// A fork (it starts from the parent's history) rather than a fresh child; recorded in its
    /// `meta.json`.
    pub fork: bool,
}

/// Opens sub-agents for a runtime (implemented by the launcher, which keeps the provider choice
/// and the per-process parts), and reads the Fleet.
pub trait Spawner: Send + Sync {
    /// Opens a child of `parent` from `spec` (see `Launcher::child`).
    fn child(
        &self,
        parent: &Runtime,
        spec: ChildSpec,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure>;
    /// The Fleet of this workspace.
    fn fleet(&self) -> Result<crate::fleet::Fleet, String>;
    /// The environment snapshot (a member's route is resolved from it).
    fn env(&self) -> &crate::config::Env;
}

/// Request measurement: totals, the previous body (for prefix reuse), the start time.
#[derive(Debug, Default)]
struct Meter {
    totals: Totals,
    last_body: Vec<u8>,
}

/// Stamps of files another process (or the model's bash) may change, as last seen by this
/// runtime, so unchanged files are not read again.
#[derive(Debug, Default)]
struct Seen {
    /// The plan files.
    plan: Vec<Option<FileStamp>>,
    /// The ledger's stamp and the work-state block rendered from it.
    tail: Option<(Option<FileStamp>, Option<String>)>,
    /// `system.txt` and `conversation.jsonl` after our last read or write: anything else means
    /// another process (a verb in another pane) rewrote them.
    disk: Option<(Option<FileStamp>, Option<FileStamp>)>,
    /// `plan.md` edited outside PlanConfirm was reported (once per process).
    warned_plan_md: bool,
    /// The state folder's `current` at the guard's last look.
    current: Option<FileStamp>,
}

/// The one runtime of a session.
pub struct Runtime {
    /// The session folder.
    pub session: Session,
    /// Where bash runs and `AGENTS.md` is read.
    pub workspace: PathBuf,
    /// Settings.
    pub cfg: Config,
    /// Checked by streaming, bash and the loop.
    pub cancel: CancelToken,
    groups: Arc<ProcessGroups>,
    provider: Box<dyn Provider>,
    prefix: Prefix,
    meter: Meter,
    seen: Seen,
    lease: Option<Lease>,
    approved_always: bool,
    parent: Option<String>,
    mark_current: bool,
    started: Instant,
    depth: u32,
    cache_key: Option<String>,
    spawner: Option<Arc<dyn Spawner>>,
    /// What commands may write in this runtime, as probed at open.
    sandbox: crate::policy::Setting,
    /// The state files the model's commands may not change (DESIGN.md §10), as tern last left
    /// them.
    guard: Option<crate::sandbox::Snapshot>,
    /// The folders tern only adds to (this session's `archive/` and `agents/`, the state
    /// folder's `sessions/`), watched with the guard for entries a command removed.
    listings: Vec<crate::sandbox::Listing>,
    /// Other sessions' files (fallback without a jail): a command's change to them is detected
    /// and named, never undone (another pane may be running that session).
    others: Option<crate::sandbox::Snapshot>,
    /// The commands' private `TMPDIR` in a sandboxed mode: made at the first call, emptied
    /// after each.
    tmp: Option<crate::sandbox::TempFolder>,
    /// The jail the commands run in (sandboxed modes, unless `--no-jail`): started at the first
    /// command, shared with sub-agents whose jail would be the same, gone with the runtime.
    jail: crate::sandbox::jail::JailSlot,
    /// A bash command ran in this runtime: what it left running is killed when the runtime
    /// ends (see the `Drop`).
    ran_commands: bool,
    /// The person's hooks and the goal's outcome (src/hooks; the door is `runtime::hooks`).
    pub(crate) hook_state: hooks::HookState,
    /// The turn's checkpoint state (the door: [`Runtime::checkpoint`]).
    pub(crate) checkpoints: crate::checkpoint::Tracker,
    /// The last turn's final answer was cut at the output cap (see [`Runtime::answer_cut`]).
    answer_cut: bool,
}

/// What the commands of this runtime left running (a background job, a daemon: found by the
/// `TERN_SESSION_DIR` in their environment) is killed when the runtime ends, so no command
/// outlives tern and changes the workspace, or tern's files, behind the next run. Not while
/// another process holds the session: those are its commands.
impl Drop for Runtime {
    fn drop(&mut self) {
        // A surface that did not end the session itself (the REPL, ACP): SessionEnd now.
        self.hook_session_end("other", &mut Quiet);
        // In a jail, what the commands left running dies with it (its PID namespace); then
        // nothing can plant in git's folder any more, and what was planted is removed.
        if let crate::sandbox::jail::JailSlot::Running(j) = std::mem::take(&mut self.jail) {
            let plants = j.spec().git_plants.clone();
            drop(j);
            crate::sandbox::jail::unplant(&plants);
            return;
        }
        if self.ran_commands && (self.lease.is_some() || held_elsewhere(&self.session).is_none()) {
            crate::tools::bash::kill_orphans(&self.session.dir);
        }
    }
}

impl Runtime {
    /// A runtime over `session` with `system` pinned and `history` loaded (the launcher's
    /// constructor; nothing is written here).
    pub(crate) fn assemble(
        session: Session,
        parts: Parts,
        system: String,
        history: Vec<Message>,
    ) -> Runtime {
        let sandbox = crate::sandbox::probe(
            parts.cfg.sandbox,
            parts.cfg.no_network,
            !parts.cfg.reach.no_jail,
        );
        Runtime {
            session,
            sandbox,
            guard: None,
            listings: Vec::new(),
            others: None,
            tmp: None,
            jail: crate::sandbox::jail::JailSlot::Unstarted,
            ran_commands: false,
            hook_state: Default::default(),
            checkpoints: crate::checkpoint::Tracker::default(),
            answer_cut: false,
            workspace: parts.workspace,
            cfg: parts.cfg,
            cancel: parts.cancel,
            groups: parts.groups,
            provider: parts.provider,
            prefix: Prefix {
                tools: crate::tools::specs(),
                system,
                history,
            },
            meter: Meter::default(),
            seen: Seen::default(),
            lease: None,
            approved_always: false,
            parent: parts.parent,
            mark_current: parts.mark_current,
            started: Instant::now(),
            depth: parts.depth,
            cache_key: parts.cache_key,
            spawner: parts.spawner,
        }
    }

    /// Whether the last turn's final answer was cut at the output cap (the provider's
    /// `finish_reason` `length`, Anthropic's `stop_reason` `max_tokens`): an editor reports that
    /// turn as ACP's `max_tokens` stop reason.
    pub fn answer_cut(&self) -> bool {
        self.answer_cut
    }

    /// The request prefix: tools, pinned system prompt, stored history.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// The stored history (what the next request's messages start with).
    pub fn history(&self) -> &[Message] {
        &self.prefix.history
    }

    /// The provider's name (`openai`, `anthropic`, `replay`).
    pub fn provider_name(&self) -> crate::provider::Wire {
        self.provider.name()
    }

    /// How deep this runtime is among sub-agents (0: a person's session).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The `prompt_cache_key` this runtime's requests carry where the server takes one.
    pub fn cache_key(&self) -> &str {
        self.cache_key.as_deref().unwrap_or(&self.session.id)
    }

    /// What commands may write in this runtime.
    pub fn sandbox(&self) -> crate::policy::Setting {
        self.sandbox
    }

    /// The registry the running commands' (and hooks') process groups go in.
    pub(crate) fn process_groups(&self) -> &ProcessGroups {
        &self.groups
    }

    /// The parent session of a sub-agent.
    pub fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// Totals of this runtime's requests.
    pub fn totals(&self) -> &Totals {
        &self.meter.totals
    }

    /// True when Ctrl-C / SIGTERM (or the parent's cancel) was requested.
    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Writes an event to `events.jsonl` (the one place events are emitted: `seq`, `ts`,
    /// `session`, `parent` are filled here) and shows it to the surface. A failed write never
    /// loses the event for the surface, which also gets a warning saying so.
    pub fn emit(&self, ui: &mut dyn Surface, event: Event) -> Envelope {
        emit_to(&self.session, self.parent.as_deref(), ui, event)
    }

    /// Records a model switch (the stored route differs from this runtime's) as a declared
    /// boundary and saves the new route in `meta.json`.
    pub(crate) fn switch_model(
        &mut self,
        ui: &mut dyn Surface,
        meta: &Meta,
    ) -> Result<(), Failure> {
        let (provider, model) = (self.provider.name(), self.cfg.model.clone());
        if meta.model == model && meta.provider == provider.as_str() {
            return Ok(());
        }
        self.emit(
            ui,
            Event::Boundary {
                kind: BoundaryKind::ModelSwitch,
                from: Some(format!("{}/{}", meta.provider, meta.model)),
                to: Some(format!("{provider}/{model}")),
                reason: None,
            },
        );
        let base_url = crate::provider::http::display_url(&self.cfg.base_url);
        self.session.update_meta(|m| {
            m.model = model;
            m.provider = provider.to_string();
            m.base_url = base_url;
        })?;
        Ok(())
    }

    /// `/model NAME` and ACP `session/set_model`: the next request goes to `model` (any name the
    /// server accepts), recorded as a declared boundary (`boundary` model_switch) and in
    /// `meta.json`. `None` only names the model. Returns the receipt line. Errors: a blank name
    /// or one with control characters ([`Failure::Usage`]), `meta.json` unreadable.
    pub fn set_model(
        &mut self,
        model: Option<&str>,
        ui: &mut dyn Surface,
    ) -> Result<String, Failure> {
        let Some(name) = model else {
            return Ok(format!("model: {}", self.cfg.model));
        };
        let name = crate::config::model_name(name.trim(), "/model").map_err(Failure::Usage)?;
        if name == self.cfg.model {
            return Ok(format!("model: {name} (unchanged)"));
        }
        let meta = self.session.read_meta()?;
        let before = std::mem::replace(&mut self.cfg.model, name.clone());
        if let Err(e) = self.switch_model(ui, &meta) {
            self.cfg.model = before;
            return Err(e);
        }
        Ok(format!(
            "model: {before} → {name}; the next request goes to {name}"
        ))
    }

    /// Records a sandbox change (the stored setting differs from this runtime's) as a declared
    /// boundary: the pinned system prompt's sandbox line is replaced, `meta.json` updated.
    pub(crate) fn switch_sandbox(
        &mut self,
        ui: &mut dyn Surface,
        meta: &Meta,
    ) -> Result<(), Failure> {
        let now = self.sandbox;
        let same = meta
            .sandbox
            .is_some_and(|s| s.mode == now.mode && s.no_network == now.no_network);
        let lines = system::sandbox_lines(now.mode, now.no_network);
        if same || system::sandbox_of(&self.prefix.system) == lines {
            if meta.sandbox != Some(now) {
                self.session.update_meta(|m| m.sandbox = Some(now))?;
            }
            return Ok(());
        }
        let from = meta
            .sandbox
            .map_or("unknown".to_string(), |s| s.mode.as_str().to_string());
        let new_system = system::with_sandbox(&self.prefix.system, &lines);
        {
            let lock = self.session.lock()?;
            self.session
                .write_text_locked(&lock, files::SYSTEM, &new_system)?;
        }
        self.prefix.system = new_system;
        self.session.update_meta(|m| m.sandbox = Some(now))?;
        self.note_disk();
        self.meter.last_body = self.stored_body();
        self.emit(
            ui,
            Event::Boundary {
                kind: BoundaryKind::SandboxSwitch,
                from: Some(from),
                to: Some(now.mode.as_str().to_string()),
                reason: None,
            },
        );
        Ok(())
    }

    /// After the history was loaded: the stored prefix as it stands is what the next request
    /// repeats (the previous process's last body is gone), so prefix reuse is measured against
    /// it; memory and disk agree.
    pub(crate) fn after_load(&mut self) {
        self.meter.last_body = self.stored_body();
        self.note_disk();
    }

    /// Appends messages to the history, on disk first, in one write.
    fn store(&mut self, msgs: Vec<Message>) -> Result<(), Failure> {
        self.session.append_messages(&msgs)?;
        self.prefix.history.extend(msgs);
        // Only the conversation changed: two `lstat`s, where a whole refresh costs nine (this
        // runs twice a turn) and would also accept what another process changed meanwhile.
        let conversation = self.session.path(files::CONVERSATION);
        match &mut self.seen.disk {
            Some((_, c)) => *c = stamp(&conversation),
            None => self.seen.disk = Some(self.disk_stamps()),
        }
        self.guard_accept(&conversation);
        Ok(())
    }

    /// Accepts `path` as tern just wrote it (see [`crate::sandbox::Snapshot::accept`]).
    pub(crate) fn guard_accept(&mut self, path: &std::path::Path) {
        if let Some(g) = &mut self.guard {
            g.accept(path);
        }
    }

    /// The state files a command may not change: everything in the session folder that tern
    /// reads back as truth, but the draft (DESIGN.md §10). The conversation is only detected
    /// (tern rewrites it from memory) and the event log only watched for removal.
    fn protected(&self) -> Vec<(PathBuf, crate::sandbox::Keep)> {
        use crate::sandbox::Keep;
        [
            (files::PLAN, Keep::Copy),
            (files::PLAN_STATE, Keep::Copy),
            (files::LEDGER, Keep::Copy),
            (files::CONVERSATION, Keep::Detect),
            (files::SYSTEM, Keep::Copy),
            (files::META, Keep::Copy),
            (files::EVENTS, Keep::Append),
            (crate::hooks::goal::FILE, Keep::Copy),
        ]
        .iter()
        .map(|(n, k)| (self.session.path(n), *k))
        .chain(
            // The hooks files and the trust record run as the person's code: never the model's.
            self.hook_state
                .protected()
                .iter()
                .map(|p| (p.clone(), Keep::Copy)),
        )
        // The checkpoint store's refs and settings (the objects only the jail protects).
        .chain(
            self.state_root()
                .map(|r| crate::checkpoint::guarded(&r))
                .unwrap_or_default()
                .into_iter()
                .map(|p| (p, Keep::Copy)),
        )
        .collect()
    }

    /// Accepts the state files as tern itself just left them (after each of its own writes).
    pub(crate) fn guard_refresh(&mut self) {
        self.others = Some(crate::sandbox::Snapshot::take_kept(
            self.other_session_files()
                .into_iter()
                .map(|p| (p, crate::sandbox::Keep::Detect)),
        ));
        match &mut self.guard {
            Some(g) => g.refresh(),
            None => {
                self.guard = Some(crate::sandbox::Snapshot::take_kept(self.protected()));
                let skip = crate::store::fsutil::TEMP_PREFIX;
                let mut dirs = vec![
                    self.session.path(files::ARCHIVE),
                    self.session.path(files::AGENTS),
                ];
                dirs.extend(self.state_root().map(|r| r.join("sessions")));
                self.listings = dirs
                    .into_iter()
                    .map(|d| crate::sandbox::Listing::take(d, skip))
                    .collect();
            }
        }
    }

    /// The files of the state folder's other sessions that a resume trusts (history, system
    /// prompt, To-do, plan, metadata), for the fallback guard.
    fn other_session_files(&self) -> Vec<PathBuf> {
        let Some(root) = self.state_root() else {
            return Vec::new();
        };
        let Ok(rd) = std::fs::read_dir(root.join("sessions")) else {
            return Vec::new();
        };
        let mine: Vec<PathBuf> = self
            .session
            .dir
            .ancestors()
            .map(std::path::Path::to_path_buf)
            .collect();
        let mut out = Vec::new();
        for e in rd.flatten() {
            let dir = e.path();
            if mine.contains(&dir) || !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for f in [
                files::CONVERSATION,
                files::SYSTEM,
                files::LEDGER,
                files::PLAN,
                files::PLAN_STATE,
                files::META,
            ] {
                out.push(dir.join(f));
            }
        }
        out
    }

    /// Other sessions whose files changed since the last look, as `id (files)`, leaving out
    /// sessions another live process holds (their own turn writes them).
    fn others_changed(&mut self) -> Vec<String> {
        let Some(snap) = &self.others else {
            return Vec::new();
        };
        let mut by_session: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for c in snap.changes() {
            let (Some(dir), Some(name)) = (c.path.parent(), c.path.file_name()) else {
                continue;
            };
            let id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if held_elsewhere(&Session::at(&id, dir.to_path_buf())).is_some() {
                continue;
            }
            by_session
                .entry(id)
                .or_default()
                .push(name.to_string_lossy().into_owned());
        }
        by_session
            .into_iter()
            .map(|(id, f)| format!("{id} ({})", f.join(", ")))
            .collect()
    }

    /// The state folder: the parent of the topmost `sessions` folder above this session (a
    /// sub-agent's folder lies deeper, under its parent's `agents/`).
    pub(crate) fn state_root(&self) -> Option<PathBuf> {
        self.session
            .dir
            .ancestors()
            .skip(1)
            .filter(|a| a.file_name().is_some_and(|n| n == "sessions"))
            .last()
            .and_then(std::path::Path::parent)
            .map(std::path::Path::to_path_buf)
    }

    /// What a command removed from the folders tern only adds to, as `folder/name` (sessions by
    /// id), since the last look.
    fn guard_vanished(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for l in &mut self.listings {
            let folder = l
                .dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            gone.extend(l.vanished().into_iter().map(|n| format!("{folder}/{n}")));
        }
        gone
    }

    /// Undoes a folder on the way from the state folder down to this session (`.tern`,
    /// `sessions`, the session's own, a parent's `agents`) replaced by a symbolic link (`mv
    /// .tern/sessions x && ln -s x .tern/sessions`): tern never writes through links in its state
    /// folder, and a link out of the workspace would let the command have tern write where the
    /// sandbox lets no command write. The link is removed and the folder it named renamed back
    /// into place (or, across file systems, an empty folder made, which the guard then refills).
    /// Returns what it put back, as "NAME (a link)". One `lstat` per level.
    fn unlink_structure(&mut self) -> Vec<String> {
        let Some(root) = self.state_root() else {
            return Vec::new();
        };
        let mut chain: Vec<PathBuf> = self
            .session
            .dir
            .ancestors()
            .take_while(|a| a.starts_with(&root))
            .map(std::path::Path::to_path_buf)
            .collect();
        chain.reverse();
        let mut done = Vec::new();
        for dir in chain {
            let is_link = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink());
            if !is_link {
                continue;
            }
            let target = std::fs::read_link(&dir).ok().map(|t| match dir.parent() {
                Some(p) if t.is_relative() => p.join(t),
                _ => t,
            });
            if std::fs::remove_file(&dir).is_err() {
                continue;
            }
            let back = target
                .filter(|t| std::fs::symlink_metadata(t).is_ok_and(|m| m.is_dir()))
                .is_some_and(|t| std::fs::rename(&t, &dir).is_ok());
            if !back {
                let _ = crate::store::fsutil::ensure_dir(&dir);
            }
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            done.push(format!("{name} (a link)"));
        }
        done
    }

    /// Puts back what a command removed around the session files (`rm -rf .tern`): the lease
    /// (re-taken: a removed lease file would let another process take a second one), the state
    /// folder's `.gitignore` (else git would see the conversation), `sessions/`, and `current`
    /// when this runtime keeps it. Returns what it recreated. Costs a few `lstat`s per call.
    fn repair_structure(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        if self.lease.as_ref().is_some_and(|l| !l.intact()) {
            self.lease = None;
            if let Ok(Ok(l)) = Lease::try_take(&self.session.dir) {
                self.lease = Some(l);
                done.push("lease".to_string());
            }
        }
        if let Some(root) = self.state_root() {
            let gitignore = root.join(".gitignore");
            if std::fs::symlink_metadata(&gitignore).is_err() {
                let state = crate::store::StateDir {
                    root: root.clone(),
                    workspace: self.workspace.clone(),
                };
                if state.init().is_ok() {
                    done.push(".gitignore".to_string());
                }
            }
            if self.mark_current {
                let current = root.join("current");
                let now = stamp(&current);
                // Another pane may point `current` at its own session: fine. Garbage, or a
                // session that does not exist, is a command's doing: pointed back at this one.
                // Read only when it changed since the last look.
                let broken = now.is_none()
                    || (now != self.seen.current
                        && !crate::store::fsutil::read_text(&current).is_ok_and(|id| {
                            let id = id.unwrap_or_default();
                            let id = id.trim();
                            !id.is_empty()
                                && !id.contains(['/', '\0'])
                                && id != "."
                                && id != ".."
                                && std::fs::symlink_metadata(root.join("sessions").join(id))
                                    .is_ok_and(|m| m.is_dir())
                        }));
                if broken && self.session.mark_current().is_ok() {
                    done.push("current".to_string());
                }
                self.seen.current = stamp(&current);
            }
        }
        done
    }

    /// Undoes any change to the state files since tern last wrote them (a command's, or a
    /// background process's), rewriting the conversation from memory, and returns the message
    /// the model reads: the files are tern's. The sandbox makes these writes impossible in
    /// `read-only`; in the other modes this is how they are refused.
    pub(crate) fn guard_check(&mut self) -> Option<String> {
        self.guard.as_ref()?;
        let others = self.others_changed();
        let msg = self.guard_check_own();
        if others.is_empty() {
            return msg;
        }
        self.others = Some(crate::sandbox::Snapshot::take_kept(
            self.other_session_files()
                .into_iter()
                .map(|p| (p, crate::sandbox::Keep::Detect)),
        ));
        let note = format!(
            "this command changed other sessions' files, which are tern's: {}. tern keeps no copy of them, so they are not put back: review those sessions before resuming them.",
            others.join("; ")
        );
        Some(match msg {
            Some(m) => format!("{m} {note}"),
            None => note,
        })
    }

    /// [`Runtime::guard_check`] for this session's own files.
    fn guard_check_own(&mut self) -> Option<String> {
        // First, so the fingerprints below are taken along the real path again.
        let unlinked = self.unlink_structure();
        let changes = self.guard.as_ref()?.changes();
        let mut rebuilt = self.repair_structure();
        rebuilt.extend(unlinked);
        if changes.is_empty() && rebuilt.is_empty() {
            let gone = self.guard_vanished();
            if gone.is_empty() {
                return None;
            }
            return Some(lost_message(&gone));
        }
        let outcomes = match self.guard.as_mut() {
            Some(g) => g.restore(&changes),
            None => Vec::new(),
        };
        let conversation = self.session.path(files::CONVERSATION);
        if outcomes
            .iter()
            .any(|(p, o)| *p == conversation && *o != crate::sandbox::RestoreOutcome::Restored)
            && let Ok(lock) = self.session.lock()
        {
            let _ = self
                .session
                .replace_conversation_locked(&lock, &self.prefix.history);
        }
        self.guard_refresh();
        self.note_disk();
        let mut msg = crate::sandbox::Snapshot::refusal(&changes)
            .map(|m| m.trim_start_matches("Error: ").to_string())
            .unwrap_or_else(|| {
                "this command changed tern's own files in its state folder.".to_string()
            });
        let events = self.session.path(files::EVENTS);
        if changes.iter().any(|c| c.path == events) {
            // The log has no copy: "put them back" would claim too much.
            if changes.len() == 1 {
                msg = msg.replace("and tern put them back", "but tern cannot put it back");
            } else {
                msg = msg.replace("tern put them back", "tern put back the others");
            }
            msg.push_str(
                " The event log (events.jsonl) cannot be put back: its earlier events are lost.",
            );
        }
        if !rebuilt.is_empty() {
            msg.push_str(&format!(" tern also recreated: {}.", rebuilt.join(", ")));
        }
        // After the repair, so this session's own folder is back in `sessions/`.
        let gone = self.guard_vanished();
        if !gone.is_empty() {
            msg.push(' ');
            msg.push_str(&lost_message(&gone));
        }
        Some(msg)
    }

    fn disk_stamps(&self) -> (Option<FileStamp>, Option<FileStamp>) {
        (
            stamp(&self.session.path(files::SYSTEM)),
            stamp(&self.session.path(files::CONVERSATION)),
        )
    }

    /// Records that memory and disk agree now (after our own read or write).
    pub(crate) fn note_disk(&mut self) {
        self.seen.disk = Some(self.disk_stamps());
        if self.guard.is_some() {
            self.guard_refresh();
        }
    }

    /// Reads `conversation.jsonl` into memory, repairing and saving it when needed. Only the
    /// process holding the session repairs: a turn running elsewhere has calls in flight that
    /// look dangling.
    pub(crate) fn load_history(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        let lock = self.session.lock()?;
        let read = self.session.read_conversation()?;
        if self.lease.is_none() && Lease::holder(&self.session.dir)?.is_some() {
            self.prefix.history = read.items;
            return Ok(());
        }
        let agents = self.session.path(files::AGENTS);
        let lost = |id: &str, name: &str| -> (String, bool) {
            if name != crate::tools::agent::NAME {
                return (repair::LOST_RESULT.to_string(), true);
            }
            agent::repaired_result(&agents, id)
        };
        let (history, mut report) = repair::repair_with(read.items, &read.skipped, &lost);
        report.torn_tail = read.torn_tail;
        if report.changed() {
            // The file as it was goes to archive/ first: a repair drops lines, and nothing may be
            // lost for good.
            let archive = self.session.rewrite_conversation_locked(&lock, &history)?;
            drop(lock);
            self.emit(ui, report.event(archive));
        }
        self.prefix.history = history;
        Ok(())
    }

    /// Holds the session for this runtime: takes its [`Lease`], so no other process runs a turn
    /// or rewrites the conversation meanwhile. Holding twice is a no-op. A turn holds it; so
    /// does a verb that rewrites the conversation. Nothing is written.
    ///
    /// Errors: another process (or another runtime of this one) holds it.
    pub fn hold(&mut self) -> Result<(), Failure> {
        if self.lease.is_some() {
            return Ok(());
        }
        match Lease::try_take(&self.session.dir)? {
            Ok(l) => {
                self.lease = Some(l);
                // What a crashed writer left: no atomic write is in flight under the lock.
                self.session.remove_stray_temps()?;
                // A steer delivered just before a crash is not delivered twice (nor summarised
                // away by a compaction first and then sent again).
                // Best effort: the delivery itself checks the history again.
                let _ = steer::sweep(&self.session, &self.prefix.history);
                Ok(())
            }
            Err(h) => Err(Failure::Held(held_message(&self.session.id, h.pid))),
        }
    }

    /// Whether this runtime holds its session now.
    pub fn held(&self) -> bool {
        self.lease.is_some()
    }

    /// Lets go of the session (see [`Runtime::hold`]).
    pub fn release(&mut self) {
        self.lease = None;
    }

    /// Reloads the system prompt and the history when another process rewrote them since we
    /// last looked (`tern plan confirm`, `tern plan clear` or `tern compact` in another pane while
    /// this runtime sat idle), so the next request is what the files say.
    pub fn sync_from_disk(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        if self.seen.disk == Some(self.disk_stamps()) {
            return Ok(());
        }
        if let Some(system) = self.session.read_text(files::SYSTEM)? {
            self.prefix.system = system;
        }
        self.load_history(ui)?;
        self.meter.last_body = self.stored_body();
        self.seen.plan.clear();
        self.note_disk();
        self.emit(
            ui,
            Event::warning(
                "another process changed this session (a plan confirm or clear, or a compaction): reloaded the system prompt and the history",
            ),
        );
        Ok(())
    }

    /// The totals a `result` event carries.
    pub fn result_totals(&self) -> ResultTotals {
        let t = &self.meter.totals;
        ResultTotals {
            turns: t.requests,
            usage: t.usage,
            cache_hit_ratio: t.cache_hit_ratio(),
            prefix_reuse_bytes: t.prefix_reuse_bytes,
            prefix_reuse_ratio: t.prefix_reuse_ratio(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            children_turns: t.child_requests,
            children_usage: t.child_usage,
        }
    }

    /// Emits the final `result` event for `outcome` and returns the exit code (DESIGN.md §8).
    pub fn finish(&self, outcome: &TurnOutcome, ui: &mut dyn Surface) -> i32 {
        let (status, text, error, code) = match outcome {
            Ok(text) => (crate::event::Ending::Completed, text.clone(), None, 0),
            Err(f) => (f.kind(), String::new(), Some(f.to_string()), f.exit_code()),
        };
        self.emit(
            ui,
            Event::Result(ResultFields {
                status,
                text,
                goal: self.hook_state.goal.clone(),
                error,
                exit_code: code,
                totals: Some(self.result_totals()),
            }),
        );
        code
    }
}

/// The message of a refused hold.
pub(crate) fn held_message(id: &str, pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!(
            "session {id} is running a turn in process {pid}; wait for it to finish (or interrupt it) first"
        ),
        None => format!("session {id} is held by another process; wait for it to finish first"),
    }
}

/// Writes an event of `session` to its `events.jsonl` and shows it to `ui` (see
/// [`Runtime::emit`]); for verbs that have a session but no runtime.
pub fn emit_to(
    session: &Session,
    parent: Option<&str>,
    ui: &mut dyn Surface,
    event: Event,
) -> Envelope {
    let mut env = Envelope::new(&session.id, parent, event);
    if let Err(e) = session.append_event(&mut env) {
        ui.event(&env);
        let warn = Envelope::new(
            &session.id,
            parent,
            Event::warning(format!("could not write events.jsonl: {e}")),
        );
        ui.event(&warn);
        return env;
    }
    ui.event(&env);
    env
}

/// A file's length and modification time: a cheap test for "changed since last read".
pub(crate) type FileStamp = (u64, std::time::SystemTime);

/// The stamp of `path` (None when absent or unreadable).
/// The refusal for entries a command removed from `archive/`, `agents/` or `sessions/` (at most
/// ten named): lost for good, since tern keeps no copy.
fn lost_message(gone: &[String]) -> String {
    let mut named = gone.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if gone.len() > 10 {
        named.push_str(&format!(" and {} more", gone.len() - 10));
    }
    format!(
        "this command removed (or moved away) what tern keeps in its state folder and cannot put back: {named}. They are lost unless moved back. Never remove or move anything under .tern/."
    )
}

pub(crate) fn stamp(path: &std::path::Path) -> Option<FileStamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// The pid of another process holding `session` (running a turn or a rewriting verb), if any.
pub fn held_elsewhere(session: &Session) -> Option<u32> {
    match Lease::holder(&session.dir) {
        Ok(Some(h)) => Some(h.pid.unwrap_or(0)),
        _ => None,
    }
}

/// Whether a turn of `meta`'s session is really running: `meta.json` says running and someone
/// holds the lease. A running status with a free lease is a turn whose process died.
pub fn really_running(session: &Session, meta: &Meta) -> bool {
    meta.status == Status::Running && held_elsewhere(session).is_some()
}

/// A runtime moves to the thread that runs it (a sub-agent, ACP's worker): it must be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Runtime>();
};
