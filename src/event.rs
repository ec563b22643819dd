//! Events: every kind the runtime emits, as one typed enum ([`Event`]) inside an [`Envelope`]
//! (`seq`, `ts`, `session`, optional `parent`). `events.jsonl`, `tern exec --json`, the REPL's
//! human output, `tern status` / `stats` and ACP notifications are all renderings of these values
//! (DESIGN.md §7), so a producer and a consumer cannot drift apart: both match on the enum.
//!
//! Wire form: one compact JSON object per line, `type` first, then `seq`, `ts`, `session`,
//! `parent` (only for a sub-agent's events), then the kind's own fields in declaration order.
//! `state/README.md` documents each kind; a test checks it against [`Event::KINDS`] and
//! [`Event::examples`].

use crate::message::is_zero;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::plan::PlanState;
use crate::message::Usage;

/// What a request was for: a turn step or a compaction's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A request of the turn loop.
    Turn,
    /// The summary request of a compaction.
    Compaction,
}

impl Purpose {
    /// `turn` or `compaction`, as in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Turn => "turn",
            Purpose::Compaction => "compaction",
        }
    }
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactTrigger {
    /// `/compact`, `tern compact`.
    Manual,
    /// The preflight estimate passed the threshold of the context window.
    Auto,
    /// The provider answered "context too long".
    ContextOverflow,
    /// PlanConfirm compacts before it locks the draft.
    PlanConfirm,
    /// PlanClear compacts before it removes the plan.
    PlanClear,
}

impl CompactTrigger {
    /// The name used in events, e.g. `plan_confirm`.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactTrigger::Manual => "manual",
            CompactTrigger::Auto => "auto",
            CompactTrigger::ContextOverflow => "context_overflow",
            CompactTrigger::PlanConfirm => "plan_confirm",
            CompactTrigger::PlanClear => "plan_clear",
        }
    }
}

/// A declared cache boundary other than a plan transition or a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryKind {
    /// A resumed session talks to another provider or model.
    ModelSwitch,
    /// One request asks for a final text answer (`tool_choice` none) after a loop.
    ToolsOff,
    /// A resumed session runs with another sandbox: the system prompt's sandbox line changed.
    SandboxSwitch,
    /// A resumed session reaches another set of MCP servers: the system prompt's MCP line
    /// changed.
    McpServers,
}

/// How a run (a turn, a `tern exec`, a sub-agent) ended: the one vocabulary of `turn_end`,
/// `result`, `agent_end`, `error`, `meta.json` (see [`crate::store::Status`]), `tern sessions`,
/// `tern status`, the parent's `agent` result and ACP's `_meta`. Renderers match every variant,
/// so a new one cannot be forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// A final answer.
    Completed,
    /// An error (a tool or state error, a refused request): exit 1, or 2 for a usage error.
    Failed,
    /// Ctrl-C, SIGTERM, a cancel, or its process died (exit 130).
    Interrupted,
    /// `--max-turns` (or a sub-agent's turn budget) reached (exit 3).
    MaxTurns,
    /// A sub-agent's wall time or token budget ran out (exit 1).
    BudgetExhausted,
    /// The provider stayed unavailable after retries (exit 75).
    ProviderUnavailable,
}

/// The name `turn_end` used before [`Ending`] covered every way a run ends.
pub type TurnStatus = Ending;

impl Ending {
    /// Every ending, in declaration order.
    pub const ALL: [Ending; 6] = [
        Ending::Completed,
        Ending::Failed,
        Ending::Interrupted,
        Ending::MaxTurns,
        Ending::BudgetExhausted,
        Ending::ProviderUnavailable,
    ];

    /// The ending named `s` (its [`Ending::as_str`]); None for any other string.
    pub fn parse(s: &str) -> Option<Ending> {
        Ending::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The snake_case name used in files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Failed => "failed",
            Ending::Interrupted => "interrupted",
            Ending::MaxTurns => "max_turns",
            Ending::BudgetExhausted => "budget_exhausted",
            Ending::ProviderUnavailable => "provider_unavailable",
        }
    }

    /// The reason in words, for people (`tern sessions`, `tern status`).
    pub fn words(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Failed => "failed",
            Ending::Interrupted => "interrupted",
            Ending::MaxTurns => "stopped: its turn budget ran out",
            Ending::BudgetExhausted => "stopped: its budget (wall time or tokens) ran out",
            Ending::ProviderUnavailable => "failed: the provider stayed unavailable",
        }
    }
}

/// Which provider a runtime talks to, as named in `session_start` and `meta.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// OpenAI-compatible Chat Completions (`provider::openai`).
    Openai,
    /// Anthropic Messages (`provider::anthropic`).
    Anthropic,
    /// OpenAI's Responses API (`provider::responses`).
    #[serde(rename = "openai-responses")]
    Responses,
    /// A recorded script played back (the demo, `provider::replay`).
    Replay,
}

impl Wire {
    /// `openai`, `anthropic` or `replay`.
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::Openai => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Responses => "openai-responses",
            Wire::Replay => "replay",
        }
    }
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The events tern runs hooks at, with Claude Code's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// A runtime's first turn begins (`source`: `startup` for a new session, `resume`).
    SessionStart,
    /// The person's prompt, before it is stored.
    UserPromptSubmit,
    /// A tool call, before it runs.
    PreToolUse,
    /// A tool call, after it ran, before its result is stored.
    PostToolUse,
    /// The model ended its answer (a person's session).
    Stop,
    /// A sub-agent's model ended its answer.
    SubagentStop,
    /// Before a compaction (`trigger`: `manual` or `auto`).
    PreCompact,
    /// The runtime ends.
    SessionEnd,
}

impl HookEvent {
    /// Every event, in the order `tern hooks` lists them.
    pub const ALL: [HookEvent; 8] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::PreCompact,
        HookEvent::SessionEnd,
    ];

    /// Claude Code's name, e.g. `PreToolUse`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::SessionEnd => "SessionEnd",
        }
    }

    /// The event named `name` (Claude Code's spelling); None for any other.
    pub fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Its place in [`HookEvent::ALL`].
    pub fn index(self) -> usize {
        HookEvent::ALL
            .iter()
            .position(|e| *e == self)
            .unwrap_or_default()
    }
}

/// One tool call as listed in an `assistant` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallView {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The parsed arguments object.
    pub arguments: Value,
}

/// The process facts a `bash` result adds to its `tool_result` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BashFacts {
    /// The shell's exit code; null when it died of a signal.
    pub exit_code: Option<i32>,
    /// The timeout passed and the group was killed.
    pub timed_out: bool,
    /// The person interrupted the command.
    pub interrupted: bool,
    /// Raw bytes the command wrote.
    pub output_bytes: u64,
    /// Absolute path of the full output when the content was cut.
    pub spill: Option<String>,
}

/// The item in progress, in a `work_update` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveItem {
    /// Item id.
    pub id: String,
    /// Item content.
    pub content: String,
}

/// Every event kind with its fields (`state/README.md` documents each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A runtime opened the session (new or resumed).
    SessionStart {
        /// `openai`, `anthropic`, `replay`.
        provider: Wire,
        /// The model name.
        model: String,
        /// True when an existing session was reopened.
        resumed: bool,
        /// What commands may write, and whether Landlock enforces it (the default setting in
        /// events written before the sandbox).
        #[serde(default)]
        sandbox: crate::policy::Setting,
        /// The project's hooks file when it exists and is not trusted (its hooks do not run
        /// until `tern hooks trust`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        untrusted_hooks: Option<String>,
        /// The worktree the session runs in (`--worktree NAME`), and its branch: a JSONL log of
        /// parallel runs says which is which (issue 46).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worktree: Option<String>,
        /// The worktree's branch (`tern/NAME`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        branch: Option<String>,
    },
    /// A turn began; `prompt` is empty when it continues the stored history.
    TurnStart {
        /// The person's prompt.
        prompt: String,
    },
    /// A steered message (`tern steer`, a line typed during a turn, ACP `_tern/steer`) was
    /// delivered: stored as a user message after the last tool result, before the next request.
    Steer {
        /// The inbox entry's id (also on the stored message).
        id: String,
        /// The message.
        text: String,
    },
    /// One stored model answer.
    Assistant {
        /// The answer's text (empty when it was tool calls only).
        text: String,
        /// Its tool calls, in order.
        tool_calls: Vec<CallView>,
    },
    /// A tool call is about to run.
    ToolCall {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Parsed arguments.
        arguments: Value,
    },
    /// A tool call's result, stored in the conversation before this event is written.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Stored as an error result.
        is_error: bool,
        /// Wall time of the call in milliseconds.
        duration_ms: u64,
        /// What the model reads.
        content: String,
        /// The process facts of a bash call.
        #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
        bash: Option<BashFacts>,
    },
    /// The figures of one model request.
    Usage {
        /// Turn step or compaction summary.
        purpose: Purpose,
        /// The model that answered (the effective one: a sub-agent's member's, a switched one).
        /// Empty in events written before it was recorded.
        #[serde(default)]
        model: String,
        /// All prompt tokens.
        input_tokens: u64,
        /// Prompt tokens read from the provider's cache.
        cached_tokens: u64,
        /// Prompt tokens written to the cache.
        cache_write_tokens: u64,
        /// Generated tokens.
        output_tokens: u64,
        /// Of the output, the tokens spent reasoning, where the provider says (absent: 0 or
        /// not said).
        #[serde(default, skip_serializing_if = "is_zero")]
        reasoning_tokens: u64,
        /// cached / input, 4 decimals.
        cache_hit_ratio: f64,
        /// Request body size in bytes.
        request_bytes: u64,
        /// Common byte prefix with the previous request body.
        prefix_reuse_bytes: u64,
        /// The server never reported some of these figures (tern cut a runaway answer and
        /// dropped the stream before its usage), or reported figures tern refused (negative,
        /// above 100 M tokens, more cached than prompt tokens: `provider::check_usage`): they
        /// are estimated from the bytes sent and received. Absent when the figures are the
        /// server's.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
        /// What the request cost in USD at the model's price (`crate::cost`); absent when no
        /// price is known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Why more than the new messages was billed in full (`crate::cost::miss`); absent
        /// when all but the new messages was read from the cache.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        miss: Option<crate::cost::miss::Miss>,
        /// The cache lifetime the request asked for, in seconds, where tern asks for one (the
        /// Anthropic wire: 300, or 3600 for the one-hour cache); absent elsewhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_ttl_s: Option<u64>,
    },
    /// A plan lifecycle transition.
    PlanState {
        /// State before.
        from: PlanState,
        /// State after.
        to: PlanState,
        /// What caused it.
        trigger: crate::domain::plan::Trigger,
        /// The draft revision after it.
        revision: u64,
    },
    /// The ledger changed.
    WorkUpdate {
        /// Items completed or cancelled.
        settled: usize,
        /// All items.
        total: usize,
        /// The item in progress.
        in_progress: Option<ActiveItem>,
        /// The ledger's new revision.
        revision: u64,
    },
    /// A compaction was written (or found nothing to summarise).
    Compaction {
        /// What started it.
        trigger: CompactTrigger,
        /// Messages summarised and archived.
        archived_messages: usize,
        /// Messages kept after the summary.
        kept_messages: usize,
        /// Size of the summary in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary_bytes: Option<usize>,
        /// `archive/conversation-NNNN.jsonl`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        archive: Option<String>,
        /// Why nothing was written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A provider attempt failed and another follows after `delay_ms`.
    Retry {
        /// 1 for the first retry.
        attempt: u32,
        /// The wait before it.
        delay_ms: u64,
        /// What went wrong.
        error: String,
        /// How long tern goes on retrying after this wait (the retry time left, `RetryPolicy`'s
        /// `max_total`), so a surface can say when it gives up.
        left_ms: u64,
    },
    /// Something the person should know; nothing stopped.
    Warning {
        /// One line or a short paragraph.
        message: String,
    },
    /// A declared cache boundary.
    Boundary {
        /// Which boundary.
        kind: BoundaryKind,
        /// `provider/model` before a model switch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        /// `provider/model` after a model switch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
        /// Why tools are off for one request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The model's answer showed a command in a shell code block and made no tool call: tern
    /// told it, in one user message, that the command did not run (issue 23; `--no-nudge`).
    Nudge {
        /// The command the answer showed (its first line, at most 200 bytes).
        command: String,
    },
    /// The stored history was repaired before any request.
    Repair {
        /// 1-based line numbers that did not parse.
        dropped_lines: Vec<usize>,
        /// The last of them had no final newline: a torn write (a crash mid-append). The
        /// others are complete lines that are not JSON messages (edited or damaged).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        torn_tail: bool,
        /// Tool calls that got an error result.
        answered_calls: Vec<String>,
        /// Empty messages and orphan results dropped.
        dropped_messages: usize,
        /// Adjacent same-role messages merged.
        merged: usize,
        /// Tool calls given `{}` for arguments that were not an object, and empty tool results
        /// given a placeholder.
        #[serde(default)]
        fixed: usize,
        /// The copy of the file as it was, `archive/conversation-NNNN.jsonl`.
        archive: String,
    },
    /// An op (verb or slash command) ran.
    Receipt {
        /// Op id, e.g. `plan.confirm`.
        op: crate::op_id::OpId,
        /// Whether it succeeded.
        ok: bool,
        /// Plan state before (`""`: no session or no readable plan).
        #[serde(with = "crate::domain::plan::state_or_empty")]
        before: Option<PlanState>,
        /// Plan state after (the same).
        #[serde(with = "crate::domain::plan::state_or_empty")]
        after: Option<PlanState>,
        /// What happened (present when the op writes or failed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// The previous turn's process died mid-turn.
    TurnInterrupted {
        /// Its pid, when recorded.
        pid: Option<u32>,
        /// Why the turn counts as interrupted.
        reason: String,
    },
    /// A sub-agent started (its session folder and `meta.json` exist already).
    AgentStart {
        /// The parent's `agent` tool call.
        call_id: String,
        /// The child's session id (its folder is `agents/<child>/`).
        child: String,
        /// The Fleet member, if one was named.
        member: Option<String>,
        /// A fork (the parent's history) or a fresh child.
        fork: bool,
        /// The model it runs on.
        model: String,
        /// Its sandbox and approval after intersecting the parent's and the member's.
        sandbox: crate::policy::Mode,
        /// Its approval policy.
        approval: crate::policy::Approval,
    },
    /// A sub-agent ended; its result is the parent's tool result.
    AgentEnd {
        /// The parent's `agent` tool call.
        call_id: String,
        /// The child's session id.
        child: String,
        /// How the child ended.
        status: Ending,
        /// Its model requests.
        requests: u64,
        /// Its usage.
        usage: Usage,
        /// Its wall time in milliseconds.
        duration_ms: u64,
        /// What it cost in USD, its own sub-agents' included; absent when no price is known
        /// (and in events written before costs were recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A turn failed (not an interrupt), just before its `turn_end`.
    Error {
        /// How the turn failed (never `completed` nor `interrupted`).
        kind: Ending,
        /// What went wrong.
        message: String,
    },
    /// A turn ended.
    TurnEnd {
        /// How.
        status: Ending,
        /// Model requests made in it.
        requests: u64,
        /// The failure, if any.
        error: Option<String>,
    },
    /// A hook ran (one per command: `tern hooks` lists them).
    Hook {
        /// The hook event: `SessionStart`, `UserPromptSubmit`, `PreToolUse`, `PostToolUse`,
        /// `Stop`, `SubagentStop`, `PreCompact`, `SessionEnd`.
        event: HookEvent,
        /// The command as configured.
        command: String,
        /// Its exit code; null when it timed out, was interrupted, died of a signal or did not
        /// start.
        exit_code: Option<i32>,
        /// Its wall time in milliseconds.
        duration_ms: u64,
        /// What it decided.
        decision: HookDecision,
        /// What it said that counts (the reason, stderr of a block or a failure), cut to 2,000
        /// characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A command's `tern mcp call` ran through the session's tern (after its hooks).
    McpCall {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// How `tern mcp call` exited: 0 done, 1 the tool answered an error or a hook blocked
        /// the call, 2 an unknown tool or a protocol failure.
        exit_code: i32,
        /// Its wall time in milliseconds.
        duration_ms: u64,
        /// Why it failed, cut to 2,000 characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The door (DESIGN §10): changes of the model's commands held back from the workspace
    /// (after the command), or files a person's tool runs on its own that it applied (at the
    /// end of the turn).
    Door {
        /// Held back: path, reason and where it is kept.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        held: Vec<Held>,
        /// Applied files a person's tool runs on its own (relative to the workspace).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        listed: Vec<String>,
    },
    /// The last event of `tern exec`, also on failure and Ctrl-C.
    Result(ResultFields),
}

/// One change the door held back (DESIGN §10), for the model's result, the `door` event and
/// `tern held` (a line of `held.jsonl` when kept aside).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The number `tern held take N` takes it by (0 when not kept aside).
    #[serde(default)]
    pub n: u32,
    /// The path in the workspace, relative (an `--add-dir`'s: absolute), as text (bytes that
    /// are not UTF-8 shown as U+FFFD; `path_bytes` then holds them).
    #[serde(with = "path_text")]
    pub path: PathBuf,
    /// The path's bytes, only when they are not UTF-8 (JSON strings cannot hold them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// Why, one clause ([`crate::sandbox::door::Reason`]'s words).
    pub reason: String,
    /// Where the model's version is kept (absolute, as text), when it is.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_path_text"
    )]
    pub kept: Option<PathBuf>,
}

impl Held {
    /// A held change at `path`, its bytes kept apart when they are not UTF-8.
    pub fn new(n: u32, path: PathBuf, reason: String, kept: Option<PathBuf>) -> Held {
        use std::os::unix::ffi::OsStrExt;
        let path_bytes = path
            .to_str()
            .is_none()
            .then(|| path.as_os_str().as_bytes().to_vec());
        Held {
            n,
            path,
            path_bytes,
            reason,
            kept,
        }
    }

    /// The path with its real bytes.
    pub fn real_path(&self) -> PathBuf {
        use std::os::unix::ffi::OsStringExt;
        match &self.path_bytes {
            Some(b) => PathBuf::from(std::ffi::OsString::from_vec(b.clone())),
            None => self.path.clone(),
        }
    }
}

/// A path as JSON text (lossy: see [`Held::path_bytes`]).
mod path_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::{Path, PathBuf};

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_string_lossy())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        String::deserialize(d).map(PathBuf::from)
    }
}

/// An optional path as JSON text (lossy).
mod opt_path_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::PathBuf;

    pub fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_str(&p.to_string_lossy()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Option::<String>::deserialize(d).map(|o| o.map(PathBuf::from))
    }
}

/// What one hook run decided (Claude Code's exit codes and JSON fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookDecision {
    /// Exit 0 with no decision: the work goes on.
    None,
    /// `permissionDecision: allow` (or the older `decision: approve`): no approval question.
    Allow,
    /// `permissionDecision: deny`: the call does not run; the model reads the reason.
    Deny,
    /// `permissionDecision: ask`: the person is asked.
    Ask,
    /// Exit 2 or `decision: block`: blocked (the event says what that means).
    Block,
    /// `continue: false`: the turn stops.
    Stop,
    /// Any other exit code, a timeout, a hook that did not start: a warning; the work goes on.
    Error,
}

/// The fields of a `result` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFields {
    /// How the run ended.
    pub status: Ending,
    /// The final answer (empty on failure).
    pub text: String,
    /// The `--goal` of the turn, when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalResult>,
    /// The failure, if any.
    pub error: Option<String>,
    /// The process exit code (DESIGN.md §8).
    pub exit_code: i32,
    /// Totals of this process's requests; absent before a session existed.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<ResultTotals>,
    /// The worktree the session ran in (`--worktree NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The worktree's branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// How a `--goal` ended, in the `result` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalResult {
    /// The goal's command.
    pub command: String,
    /// Its last run exited 0.
    pub passed: bool,
    /// Times it ran in this turn.
    pub attempts: u32,
    /// Its last output (shaped like a tool result) when it did not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// The totals a `result` carries once a runtime existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultTotals {
    /// Model requests made.
    pub turns: u64,
    /// Usage summed.
    pub usage: Usage,
    /// cached / input tokens.
    pub cache_hit_ratio: f64,
    /// Sum of the common prefixes with the previous request body.
    pub prefix_reuse_bytes: u64,
    /// Reused / sent request bytes.
    pub prefix_reuse_ratio: f64,
    /// Wall time of the run in milliseconds.
    pub duration_ms: u64,
    /// Model requests of its sub-agents (not in `turns`).
    #[serde(default)]
    pub children_turns: u64,
    /// Their usage summed (not in `usage`): the run's whole bill is both.
    #[serde(default)]
    pub children_usage: Usage,
    /// The run's whole bill in USD, its sub-agents' included (absent: no request had a known
    /// price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Requests whose model had no known price (not in `cost_usd`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_requests: u64,
}

impl Event {
    /// Every kind's `type` name, in declaration order.
    pub const KINDS: &'static [&'static str] = &[
        "session_start",
        "turn_start",
        "steer",
        "assistant",
        "tool_call",
        "tool_result",
        "usage",
        "plan_state",
        "work_update",
        "compaction",
        "retry",
        "warning",
        "boundary",
        "nudge",
        "repair",
        "receipt",
        "turn_interrupted",
        "agent_start",
        "agent_end",
        "error",
        "turn_end",
        "hook",
        "mcp_call",
        "door",
        "result",
    ];

    /// The `type` name of this event.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionStart { .. } => "session_start",
            Event::TurnStart { .. } => "turn_start",
            Event::Steer { .. } => "steer",
            Event::Assistant { .. } => "assistant",
            Event::ToolCall { .. } => "tool_call",
            Event::ToolResult { .. } => "tool_result",
            Event::Usage { .. } => "usage",
            Event::PlanState { .. } => "plan_state",
            Event::WorkUpdate { .. } => "work_update",
            Event::Compaction { .. } => "compaction",
            Event::Retry { .. } => "retry",
            Event::Warning { .. } => "warning",
            Event::Boundary { .. } => "boundary",
            Event::Nudge { .. } => "nudge",
            Event::Repair { .. } => "repair",
            Event::Receipt { .. } => "receipt",
            Event::TurnInterrupted { .. } => "turn_interrupted",
            Event::AgentStart { .. } => "agent_start",
            Event::AgentEnd { .. } => "agent_end",
            Event::Error { .. } => "error",
            Event::TurnEnd { .. } => "turn_end",
            Event::Hook { .. } => "hook",
            Event::McpCall { .. } => "mcp_call",
            Event::Door { .. } => "door",
            Event::Result(_) => "result",
        }
    }

    /// A warning event.
    pub fn warning(message: impl Into<String>) -> Event {
        Event::Warning {
            message: message.into(),
        }
    }

    /// One example of every kind (optional fields filled), in [`Event::KINDS`] order: the
    /// documentation test checks each against `state/README.md`.
    #[expect(
        clippy::too_many_lines,
        reason = "one literal example per event kind, in KINDS order: data, checked against state/README.md"
    )]
    pub fn examples() -> Vec<Event> {
        let s = |t: &str| t.to_string();
        vec![
            Event::SessionStart {
                provider: Wire::Openai,
                model: s("m"),
                resumed: false,
                sandbox: crate::policy::Setting {
                    mode: crate::policy::Mode::WorkspaceWrite,
                    no_network: false,
                    landlock_abi: 7,
                    enforced: true,
                    jail: true,
                },
                untrusted_hooks: Some(s(".tern/hooks.json")),
                worktree: Some(s("fix-a")),
                branch: Some(s("tern/fix-a")),
            },
            Event::TurnStart { prompt: s("hi") },
            Event::Steer {
                id: s("01764620000000000000-4242"),
                text: s("use tabs"),
            },
            Event::Assistant {
                text: s("ok"),
                tool_calls: vec![CallView {
                    id: s("c1"),
                    name: s("bash"),
                    arguments: serde_json::json!({"command": "ls"}),
                }],
            },
            Event::ToolCall {
                id: s("c1"),
                name: s("bash"),
                arguments: serde_json::json!({"command": "ls"}),
            },
            Event::ToolResult {
                id: s("c1"),
                name: s("bash"),
                is_error: false,
                duration_ms: 3,
                content: s("a\n[exit 0]"),
                bash: Some(BashFacts {
                    exit_code: Some(0),
                    timed_out: false,
                    interrupted: false,
                    output_bytes: 2,
                    spill: None,
                }),
            },
            Event::Usage {
                purpose: Purpose::Turn,
                model: s("m"),
                input_tokens: 10,
                cached_tokens: 5,
                cache_write_tokens: 0,
                output_tokens: 2,
                reasoning_tokens: 1,
                cache_hit_ratio: 0.5,
                request_bytes: 40,
                prefix_reuse_bytes: 20,
                estimated: true,
                cost_usd: Some(0.0012),
                miss: Some(crate::cost::miss::Miss {
                    reason: crate::cost::miss::Reason::PrefixChanged,
                    at_byte: 20,
                    cause: Some(crate::cost::miss::Cause::Compaction),
                    tokens: 3,
                    cost_usd: Some(0.00001),
                }),
                cache_ttl_s: Some(3600),
            },
            Event::PlanState {
                from: PlanState::Idle,
                to: PlanState::Drafting,
                trigger: crate::domain::plan::Trigger::Draft,
                revision: 1,
            },
            Event::WorkUpdate {
                settled: 0,
                total: 1,
                in_progress: Some(ActiveItem {
                    id: s("1"),
                    content: s("a"),
                }),
                revision: 1,
            },
            Event::Compaction {
                trigger: CompactTrigger::Manual,
                archived_messages: 3,
                kept_messages: 0,
                summary_bytes: Some(40),
                archive: Some(s("archive/conversation-0001.jsonl")),
                note: Some(s("n")),
            },
            Event::Retry {
                attempt: 1,
                delay_ms: 100,
                error: s("HTTP 529"),
                left_ms: 299_000,
            },
            Event::warning("w"),
            Event::Boundary {
                kind: BoundaryKind::ModelSwitch,
                from: Some(s("openai/a")),
                to: Some(s("openai/b")),
                reason: Some(s("r")),
            },
            Event::Nudge {
                command: s("ls -la"),
            },
            Event::Repair {
                dropped_lines: vec![3],
                torn_tail: true,
                answered_calls: vec![s("c1")],
                dropped_messages: 0,
                merged: 0,
                fixed: 0,
                archive: s("archive/conversation-0001.jsonl"),
            },
            Event::Receipt {
                op: crate::op_id::OpId::PlanShow,
                ok: true,
                before: Some(PlanState::Idle),
                after: Some(PlanState::Idle),
                detail: Some(s("d")),
            },
            Event::TurnInterrupted {
                pid: Some(1),
                reason: s("gone"),
            },
            Event::AgentStart {
                call_id: s("c2"),
                child: s("20261201-000000-ab12"),
                member: Some(s("reviewer")),
                fork: true,
                model: s("m"),
                sandbox: crate::policy::Mode::ReadOnly,
                approval: crate::policy::Approval::Never,
            },
            Event::AgentEnd {
                call_id: s("c2"),
                child: s("20261201-000000-ab12"),
                status: Ending::Completed,
                requests: 2,
                usage: Usage::default(),
                duration_ms: 10,
                cost_usd: Some(0.0012),
            },
            Event::Error {
                kind: Ending::Failed,
                message: s("boom"),
            },
            Event::TurnEnd {
                status: TurnStatus::Completed,
                requests: 1,
                error: None,
            },
            Event::Hook {
                event: HookEvent::PreToolUse,
                command: s("./guard.sh"),
                exit_code: Some(2),
                duration_ms: 4,
                decision: HookDecision::Block,
                message: Some(s("no rm")),
            },
            Event::McpCall {
                server: s("github"),
                tool: s("list_issues"),
                exit_code: 2,
                duration_ms: 31,
                error: Some(s("MCP server github: tools/call: no answer in 120 s")),
            },
            Event::Door {
                held: vec![Held::new(
                    1,
                    "vendor/x/.git".into(),
                    s("a new repository is kept aside"),
                    Some(".tern/sessions/s/held/1/vendor/x/.git".into()),
                )],
                listed: vec![s(".husky/pre-commit")],
            },
            Event::Result(ResultFields {
                status: Ending::Completed,
                text: s("done"),
                goal: Some(GoalResult {
                    command: s("make check"),
                    passed: true,
                    attempts: 1,
                    output: Some(s("[exit 0]")),
                }),
                worktree: Some(s("fix-a")),
                branch: Some(s("tern/fix-a")),
                error: None,
                exit_code: 0,
                totals: Some(ResultTotals {
                    turns: 1,
                    usage: Usage::default(),
                    cache_hit_ratio: 0.0,
                    prefix_reuse_bytes: 0,
                    prefix_reuse_ratio: 0.0,
                    duration_ms: 1,
                    children_turns: 0,
                    children_usage: Usage::default(),
                    cost_usd: Some(0.0012),
                    unpriced_requests: 0,
                }),
            }),
        ]
    }
}

/// One event as written: where it belongs and in what order, around the [`Event`] itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// 1, 2, 3… over the session's `events.jsonl`, also across processes; 0 before it is written.
    pub seq: u64,
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The session id (empty only for the sessionless `result` of a usage error).
    pub session: String,
    /// The parent session of a sub-agent's event.
    pub parent: Option<String>,
    /// The event.
    pub event: Event,
}

impl Envelope {
    /// A new envelope of `event` for `session`, stamped now; `seq` is filled when written.
    pub fn new(session: &str, parent: Option<&str>, event: Event) -> Envelope {
        Envelope {
            seq: 0,
            ts: crate::clock::now_rfc3339_millis(),
            session: session.to_string(),
            parent: parent.map(str::to_string),
            event,
        }
    }

    /// The wire object: `type`, `seq`, `ts`, `session`, `parent` (when set), then the fields.
    /// A sessionless envelope (empty `session`) writes `session: null`.
    pub fn to_value(&self) -> Value {
        let fields = match serde_json::to_value(&self.event) {
            Ok(Value::Object(m)) => m,
            // Every variant serializes to an object (internally tagged, no fallible fields).
            _ => Map::new(),
        };
        let mut out = Map::with_capacity(fields.len() + 5);
        out.insert("type".into(), Value::from(self.event.kind()));
        out.insert("seq".into(), Value::from(self.seq));
        out.insert("ts".into(), Value::from(self.ts.as_str()));
        out.insert(
            "session".into(),
            if self.session.is_empty() {
                Value::Null
            } else {
                Value::from(self.session.as_str())
            },
        );
        if let Some(p) = &self.parent {
            out.insert("parent".into(), Value::from(p.as_str()));
        }
        for (k, v) in fields {
            if k != "type" {
                out.insert(k, v);
            }
        }
        Value::Object(out)
    }

    /// Reads an envelope from a wire object. Errors (a line a reader skips): not an object, no
    /// known `type`, fields that do not fit the kind.
    pub fn from_value(v: Value) -> Result<Envelope, String> {
        let Value::Object(mut m) = v else {
            return Err("an event must be a JSON object".into());
        };
        let seq = m.remove("seq").and_then(|s| s.as_u64()).unwrap_or(0);
        let ts = match m.remove("ts") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let session = match m.remove("session") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let parent = match m.remove("parent") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let event: Event = serde_json::from_value(Value::Object(m)).map_err(|e| e.to_string())?;
        Ok(Envelope {
            seq,
            ts,
            session,
            parent,
            event,
        })
    }
}

impl Serialize for Envelope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Envelope::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_match_examples_and_round_trip() {
        let ex = Event::examples();
        assert_eq!(
            ex.iter().map(Event::kind).collect::<Vec<_>>(),
            Event::KINDS.to_vec()
        );
        for e in ex {
            let env = Envelope::new("s1", Some("p1"), e);
            let v = env.to_value();
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(&keys[..5], ["type", "seq", "ts", "session", "parent"]);
            assert_eq!(Envelope::from_value(v).unwrap(), env);
        }
    }

    #[test]
    fn bash_facts_only_on_bash_results() {
        let e = Event::ToolResult {
            id: "c".into(),
            name: "plan_draft".into(),
            is_error: false,
            duration_ms: 0,
            content: "x".into(),
            bash: None,
        };
        let v = Envelope::new("s", None, e.clone()).to_value();
        assert!(v.get("exit_code").is_none() && v.get("parent").is_none());
        assert_eq!(Envelope::from_value(v).unwrap().event, e);
    }
}
