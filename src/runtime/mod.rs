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
mod mcp;
pub mod nudge;
mod open;
pub mod plan;
pub mod prefix;
pub mod repair;
mod request;
mod spend;
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
use crate::store::fsutil::{FileStamp, stamp};
use crate::store::lease::Lease;
use crate::store::{Meta, Session, files};

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
    /// The model's reasoning as it streams, where the provider sends it (OpenAI-compatible
    /// `reasoning_content`, Anthropic thinking blocks); display only, stored nowhere.
    fn thought_delta(&mut self, _text: &str) {}
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
    /// The free space commands must leave (`TERN_DISK_FLOOR`).
    pub disk_floor: crate::policy::DiskFloor,
    /// Prices the person configured (the built-in table answers for the rest).
    pub prices: crate::cost::PriceBook,
    /// The run's spending limit in USD (`--max-cost`, `max_cost`); None: none.
    pub max_cost: Option<f64>,
    /// The Anthropic wire asks for the 1-hour prompt cache (`cache_ttl: "1h"`).
    pub long_cache: bool,
    /// The reasoning effort (`--reasoning-effort`) and the replay rule of the provider's host
    /// (or the config's `reasoning_replay`).
    pub reasoning: crate::provider::reasoning::Settings,
    /// The config's `reasoning_replay` (None: the provider host's rule, set by the launcher).
    pub reasoning_replay: Option<crate::provider::reasoning::Replay>,
    /// Where Agent Skills are looked for (`crate::skills`): the catalog is refreshed from them
    /// at a deliberate boundary, and `$name` reads them. None: no skills (tests, embedders).
    pub skills: Option<crate::skills::Roots>,
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
            disk_floor: crate::policy::DiskFloor::Auto,
            prices: crate::cost::PriceBook::default(),
            max_cost: None,
            long_cache: false,
            reasoning: Default::default(),
            reasoning_replay: None,
            skills: None,
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
    /// What the priced requests cost, USD (`crate::cost`).
    pub cost_usd: f64,
    /// Requests of a model with no known price (their cost is unknown).
    pub unpriced: u64,
    /// The sub-agents' cost (at any depth), not in `cost_usd`.
    pub child_cost_usd: f64,
    /// Their requests with no known price.
    pub child_unpriced: u64,
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
    /// The whole bill in USD, this runtime's and its sub-agents' (None: no request had a
    /// known price; a bill with some unpriced requests is the priced part, see `unpriced`).
    pub fn bill_usd(&self) -> Option<f64> {
        let priced = self.requests + self.child_requests > self.unpriced + self.child_unpriced;
        priced.then_some(self.cost_usd + self.child_cost_usd)
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
        let mut m = crate::store::redact::redact(&e.to_string()).into_owned();
        m.push_str(full_disk_hint(&e));
        Failure::Failed(m)
    }
}

/// What a person should know when a write failed because the disk (or a quota) is full: the
/// session is kept, and `--continue` resumes it. Empty for any other error.
pub(crate) fn full_disk_hint(e: &std::io::Error) -> &'static str {
    let full = matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        );
    if full {
        " (the disk is full: the session is kept as far as it was written; free some space, then `tern exec --continue` resumes it)"
    } else {
        ""
    }
}

/// The first write of a session's records (`events.jsonl`, `meta.json`) that failed in this
/// process, in words: the run then ends non-zero, whatever the turn did (issue 46: it exited 0
/// with `meta.json` still saying running).
static RECORDS_LOST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Notes that `what` (a record file and the error) could not be written (the first one is kept).
pub(crate) fn records_lost(what: String) {
    let mut lost = RECORDS_LOST.lock().unwrap_or_else(|p| p.into_inner());
    lost.get_or_insert(what);
}

/// The first record this process could not write since the last call, if any (taken: a
/// REPL's next run starts clean).
fn lost_records() -> Option<String> {
    RECORDS_LOST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
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
    /// Where this runtime stands among sub-agents.
    pub lineage: Lineage,
}

/// Where a runtime stands among sub-agents: its parent, its depth, the cache it shares, who
/// opens its children, and whether it is the person's current session.
#[derive(Clone, Default)]
pub struct Lineage {
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
    /// The run's spending limit, shared with every sub-agent (they spend from it).
    pub budget: Option<Arc<crate::cost::Budget>>,
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
    fn fleet(&self) -> Result<crate::fleet::Fleet, crate::fleet::FleetError>;
    /// The environment snapshot (a member's route is resolved from it).
    fn env(&self) -> &crate::config::Env;
}

/// Request measurement: totals, the previous body (for prefix reuse), the start time, how the
/// last turn's final answer ended, and what requests cost (the cost room's state).
#[derive(Debug)]
struct Meter {
    totals: Totals,
    last_body: Vec<u8>,
    started: Instant,
    /// The last turn's final answer was cut at the output cap (see [`Runtime::answer_cut`]).
    answer_cut: bool,
    /// Prompt tokens the last request read from the cache or wrote to it: what the next one
    /// can be proven to read from it.
    last_cacheable: u64,
    /// Requests not yet counted in `meta.json` (written once per turn: [`Runtime::release`]).
    unsaved: Unsaved,
    /// What requests cost and why they missed the cache (the cost room, `src/cost`; its door
    /// is `runtime::spend`).
    spend: spend::Spend,
}

/// Request totals on record in `events.jsonl` but not yet in `meta.json`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Unsaved {
    requests: u64,
    usage: Usage,
    cost_usd: f64,
    unpriced: u64,
    /// Finished sub-agents' cost (`agent_end` events).
    children_cost_usd: f64,
}

impl Unsaved {
    /// Adds these totals to `m`.
    fn onto(&self, m: &mut Meta) {
        m.turns = m.turns.saturating_add(self.requests);
        m.usage.add(&self.usage);
        m.cost_usd = crate::cost::add_usd(m.cost_usd, self.cost_usd);
        m.unpriced = m.unpriced.saturating_add(self.unpriced);
        m.children_cost_usd = crate::cost::add_usd(m.children_cost_usd, self.children_cost_usd);
    }
}

/// This runtime's hold on a session folder other processes share: the lease while a turn (or
/// a rewriting verb) runs, and the stamps of files another process (or the model's bash) may
/// change, as last seen by this runtime, so unchanged files are not read again.
#[derive(Debug, Default)]
struct Seen {
    /// Held while a turn (or a rewriting verb) runs.
    lease: Option<Lease>,
    /// The plan files.
    plan: Vec<Option<FileStamp>>,
    /// The ledger's stamp and the work-state block rendered from it.
    tail: Option<(Option<FileStamp>, Option<String>)>,
    /// `system.txt` and `conversation.jsonl` after our last read or write: anything else means
    /// another process (a verb in another pane) rewrote them.
    disk: Option<(Option<FileStamp>, Option<FileStamp>)>,
    /// `plan.md` edited outside PlanConfirm was reported (once per process).
    warned_plan_md: bool,
}

/// The one runtime of a session. Twelve private fields at most (DESIGN §1; the architecture
/// test fails on a thirteenth), each one value of its own room: the session and its lease, the
/// settings, the cancel token, the provider and the request prefix, the request meter (with
/// the cost room's state), the stamps of files others change, the lineage among sub-agents,
/// and the doors of the commands, hooks and checkpoints rooms.
pub struct Runtime {
    session: Session,
    cfg: Config,
    /// Checked by streaming, bash and the loop.
    cancel: CancelToken,
    provider: Box<dyn Provider>,
    prefix: Prefix,
    meter: Meter,
    seen: Seen,
    lineage: Lineage,
    /// Where and how commands run: the sandbox, the private tmp, the jail, the guard
    /// (src/commands).
    commands: crate::commands::Commands,
    /// The session's MCP servers and the channel commands reach them through (src/mcp; the
    /// door is `runtime::mcp`).
    mcp: crate::mcp::link::Link,
    /// The person's hooks and the goal's outcome (src/hooks; the door is `runtime::hooks`).
    hook_state: hooks::HookState,
    /// The turn's checkpoint state (the door: [`Runtime::checkpoint`]).
    checkpoints: crate::checkpoint::Tracker,
}

/// What the commands of this runtime left running is killed when the runtime ends (see
/// [`crate::commands::Commands::end`]), so no command outlives tern and changes the workspace,
/// or tern's files, behind the next run; a surface that did not end the session itself (the
/// REPL, ACP) runs SessionEnd first.
impl Drop for Runtime {
    fn drop(&mut self) {
        self.save_totals(&mut Quiet);
        self.hook_session_end(crate::hooks::EndReason::Other, &mut Quiet);
        self.wait_async_hooks(&mut Quiet);
        let holds = self.seen.lease.is_some();
        // The channel's thread stops and the servers the session started go with it, before
        // the commands (and their jail) end.
        self.mcp.close();
        self.commands.end(&self.session, holds);
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
        let rules = crate::commands::Rules {
            workspace: parts.workspace,
            mode: parts.cfg.sandbox,
            no_network: parts.cfg.no_network,
            reach: parts.cfg.reach.clone(),
            jail_exe: parts.cfg.jail_exe.clone(),
            disk_floor: parts.cfg.disk_floor,
            record: parts
                .cfg
                .checkpoints
                .enabled
                .then_some(parts.cfg.checkpoints.max_file_bytes),
        };
        Runtime {
            session,
            commands: crate::commands::Commands::new(rules, parts.groups),
            mcp: crate::mcp::link::Link::default(),
            hook_state: Default::default(),
            checkpoints: crate::checkpoint::Tracker::default(),
            cfg: parts.cfg,
            cancel: parts.cancel,
            provider: parts.provider,
            prefix: Prefix {
                tools: crate::tools::specs(),
                system,
                history,
            },
            meter: Meter {
                totals: Totals::default(),
                last_body: Vec::new(),
                started: Instant::now(),
                answer_cut: false,
                last_cacheable: 0,
                unsaved: Unsaved::default(),
                spend: spend::Spend::default(),
            },
            seen: Seen::default(),
            lineage: parts.lineage,
        }
    }

    /// Whether the last turn's final answer was cut at the output cap (the provider's
    /// `finish_reason` `length`, Anthropic's `stop_reason` `max_tokens`): an editor reports that
    /// turn as ACP's `max_tokens` stop reason.
    pub fn answer_cut(&self) -> bool {
        self.meter.answer_cut
    }

    /// The session folder.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The settings.
    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// Where bash runs and `AGENTS.md` is read.
    pub fn workspace(&self) -> &std::path::Path {
        self.commands.workspace()
    }

    /// The cancel token streaming, bash and the loop check.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// A surface's own token for the next turn or operation (ACP cancels one prompt at a
    /// time; the REPL resets its token after Ctrl-C).
    pub fn set_cancel(&mut self, cancel: CancelToken) {
        self.cancel = cancel;
    }

    /// The approval policy of the next commands (ACP's session modes change it per turn).
    pub fn set_approval(&mut self, approval: Approval) {
        self.cfg.approval = approval;
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
        self.lineage.depth
    }

    /// The `prompt_cache_key` this runtime's requests carry where the server takes one.
    pub fn cache_key(&self) -> &str {
        self.lineage
            .cache_key
            .as_deref()
            .unwrap_or(&self.session.id)
    }

    /// What commands may write in this runtime.
    pub fn sandbox(&self) -> crate::policy::Setting {
        self.commands.setting()
    }

    /// The parent session of a sub-agent.
    pub fn parent(&self) -> Option<&str> {
        self.lineage.parent.as_deref()
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
        emit_to(&self.session, self.lineage.parent.as_deref(), ui, event)
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
        self.note_change(crate::cost::miss::Cause::ModelSwitch);
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
        let name = crate::config::model_name(name.trim(), "/model")
            .map_err(|e| Failure::Usage(e.into()))?;
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

    /// `/effort [LEVEL]`: sets how much a reasoning model thinks from the next request on
    /// (`default` clears it: the model's own, nothing sent); alone, says what it is. The
    /// request's reasoning field changes, so the next request reads less from the cache (its
    /// miss reason says so). Errors: a level that is none of them (a usage error).
    pub fn set_effort(&mut self, level: Option<&str>) -> Result<String, Failure> {
        use crate::provider::reasoning::Effort;
        let shown = |e: Option<Effort>| e.map_or("the model's default", Effort::as_str);
        let Some(level) = level.map(str::trim).filter(|l| !l.is_empty()) else {
            return Ok(format!(
                "reasoning effort: {}",
                shown(self.cfg.reasoning.effort)
            ));
        };
        let new = match level {
            "default" | "unset" => None,
            l => Some(<Effort as clap::ValueEnum>::from_str(l, true).map_err(|_| {
                Failure::Usage(format!(
                    "/effort {l}: expected none, minimal, low, medium, high, max or default"
                ))
            })?),
        };
        let before = std::mem::replace(&mut self.cfg.reasoning.effort, new);
        Ok(format!(
            "reasoning effort: {} → {}; the next request asks for it",
            shown(before),
            shown(new)
        ))
    }

    /// Records a sandbox change (the stored setting differs from this runtime's) as a declared
    /// boundary: the pinned system prompt's sandbox line is replaced, `meta.json` updated.
    pub(crate) fn switch_sandbox(
        &mut self,
        ui: &mut dyn Surface,
        meta: &Meta,
    ) -> Result<(), Failure> {
        let now = self.commands.setting();
        let same = meta
            .sandbox
            .is_some_and(|s| s.mode == now.mode && s.no_network == now.no_network);
        let names = self.mcp.names();
        let lines = system::sandbox_lines(now.mode, now.no_network, &names);
        let pinned = system::sandbox_of(&self.prefix.system).to_string();
        let mcp_now = system::mcp_of(&lines).to_string();
        let mcp_then = system::mcp_of(&pinned).to_string();
        // Only the servers changed: the mode's lines stay as pinned, the MCP line is replaced.
        let servers_only = same && !pinned.is_empty() && mcp_then != mcp_now;
        if !servers_only && (same || pinned == lines) {
            if meta.sandbox != Some(now) {
                self.session.update_meta(|m| m.sandbox = Some(now))?;
            }
            return Ok(());
        }
        let lines = if servers_only {
            format!("{}{mcp_now}", &pinned[..pinned.len() - mcp_then.len()])
        } else {
            lines
        };
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
        self.note_change(crate::cost::miss::Cause::SystemPrompt);
        self.meter.last_body = self.stored_body();
        let names_of = |line: &str| {
            line.strip_prefix("MCP servers: ")
                .and_then(|r| r.split(". ").next())
                .filter(|n| !n.is_empty())
                .unwrap_or("none")
                .to_string()
        };
        let event = if servers_only {
            Event::Boundary {
                kind: BoundaryKind::McpServers,
                from: Some(names_of(&mcp_then)),
                to: Some(names_of(&mcp_now)),
                reason: None,
            }
        } else {
            Event::Boundary {
                kind: BoundaryKind::SandboxSwitch,
                from: Some(from),
                to: Some(now.mode.as_str().to_string()),
                reason: None,
            }
        };
        self.emit(ui, event);
        Ok(())
    }

    /// After the history was loaded: the stored prefix as it stands is what the next request
    /// repeats (the previous process's last body is gone), so prefix reuse is measured against
    /// it; memory and disk agree.
    pub(crate) fn after_load(&mut self) {
        self.meter.last_body = self.stored_body();
        self.note_disk();
        self.recall_last_request();
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

    /// The guard's view of this session (see [`crate::commands::Site`]).
    fn site(&mut self) -> (&mut crate::commands::Commands, crate::commands::Site<'_>) {
        (
            &mut self.commands,
            crate::commands::Site {
                session: &self.session,
                lease: &mut self.seen.lease,
                history: &self.prefix.history,
                keeps_current: self.lineage.mark_current,
                hook_files: self.hook_state.protected(),
            },
        )
    }

    /// Accepts `path` as tern just wrote it: the guard's new baseline for it.
    pub(crate) fn guard_accept(&mut self, path: &std::path::Path) {
        self.commands.accept(path);
    }

    /// Accepts the state files as tern itself just left them (after each of its own writes);
    /// the first call takes the guard's baseline.
    pub(crate) fn guard_refresh(&mut self) {
        let (commands, site) = self.site();
        commands.settle(&site);
    }

    /// What changed in tern's files since tern last wrote them (a background process of an
    /// earlier command), put back where tern can (see [`crate::commands::Commands::watch`]).
    pub(crate) fn guard_check(&mut self) -> Option<crate::commands::GuardReport> {
        let (commands, mut site) = self.site();
        let report = commands.watch(&mut site)?;
        if report.rewrote_own() {
            self.note_disk();
        }
        Some(report)
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
        let (commands, site) = self.site();
        commands.settle_if_on(&site);
    }

    /// Reads `conversation.jsonl` into memory, repairing and saving it when needed. Only the
    /// process holding the session repairs: a turn running elsewhere has calls in flight that
    /// look dangling.
    pub(crate) fn load_history(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        let lock = self.session.lock()?;
        let read = self.session.read_conversation()?;
        if self.seen.lease.is_none() && Lease::holder(&self.session.dir)?.is_some() {
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
        if self.seen.lease.is_some() {
            return Ok(());
        }
        match Lease::try_take(&self.session.dir)? {
            Ok(l) => {
                self.seen.lease = Some(l);
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
        self.seen.lease.is_some()
    }

    /// Lets go of the session (see [`Runtime::hold`]).
    pub fn release(&mut self) {
        self.save_totals(&mut Quiet);
        self.seen.lease = None;
    }

    /// Writes the requests made since the last write into `meta.json` (nothing when there were
    /// none). A failed write keeps them for the next try, and says so.
    pub(crate) fn save_totals(&mut self, ui: &mut dyn Surface) {
        let unsaved = std::mem::take(&mut self.meter.unsaved);
        if unsaved == Unsaved::default() {
            return;
        }
        match self.session.update_meta(|m| unsaved.onto(m)) {
            // tern's own write: the sandbox guard must not put the old file back.
            Ok(_) => self.guard_accept(&self.session.path(files::META)),
            Err(e) => {
                self.meter.unsaved = unsaved;
                self.emit(
                    ui,
                    Event::warning(format!("could not update meta.json: {e}")),
                );
            }
        }
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
        self.note_change(crate::cost::miss::Cause::Compaction);
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
            duration_ms: self.meter.started.elapsed().as_millis() as u64,
            children_turns: t.child_requests,
            children_usage: t.child_usage,
            cost_usd: t.bill_usd().map(crate::cost::usd_json),
            unpriced_requests: t.unpriced + t.child_unpriced,
        }
    }

    /// `outcome`, failed when records of the session could not all be written during the run
    /// (`events.jsonl`, `meta.json`): a script must not take a run whose session says less than
    /// what happened for a success (issue 46). The failure names the record and says the
    /// session is kept for `--continue`.
    pub fn with_records(&self, outcome: TurnOutcome) -> TurnOutcome {
        match (outcome, lost_records()) {
            (Ok(_), Some(lost)) => Err(Failure::Failed(format!(
                "the turn finished, but the session's records could not all be written ({lost}); the session is kept, and `tern exec --continue` resumes it once they can be"
            ))),
            (outcome, _) => outcome,
        }
    }

    /// Emits the final `result` event for `outcome` and returns the exit code (DESIGN.md §8).
    pub fn finish(&self, outcome: &TurnOutcome, ui: &mut dyn Surface) -> i32 {
        let (status, text, error, code) = match outcome {
            Ok(text) => (crate::event::Ending::Completed, text.clone(), None, 0),
            Err(f) => (f.kind(), String::new(), Some(f.to_string()), f.exit_code()),
        };
        let worktree = self.worktree();
        self.emit(
            ui,
            Event::Result(ResultFields {
                status,
                text,
                goal: self.hook_state.goal.clone(),
                error,
                exit_code: code,
                totals: Some(self.result_totals()),
                worktree: worktree.as_ref().map(|w| w.name.clone()),
                branch: worktree.map(|w| w.branch),
            }),
        );
        code
    }

    /// The worktree this session was started in (`meta.json`'s `worktree`).
    pub(crate) fn worktree(&self) -> Option<crate::store::WorktreeLink> {
        self.session.read_meta().ok().and_then(|m| m.worktree)
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
        records_lost(format!("events.jsonl: {e}{}", full_disk_hint(&e)));
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

/// A runtime moves to the thread that runs it (a sub-agent, ACP's worker): it must be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Runtime>();
};
