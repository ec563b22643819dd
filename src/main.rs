//! The `tern` command line: clap definitions and dispatch to the library's surfaces.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use tern::config::{Env, ProviderFlags, ProviderKind, vars};
use tern::exec::ExecOptions;
use tern::launcher::{Launcher, Process, SessionRef};
use tern::ops::OpId;
use tern::runtime::{Approval, Config};

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "A bash-first minimal coding agent: draft → confirm → execute → clear.",
    long_about = "A bash-first minimal coding agent. The model works through a bash tool in your \
                  workspace; plans and progress live as plain files in .tern/sessions/<id>/.\n\n\
                  Without a model configured, try `tern demo`.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    chat: ChatArgs,
}

/// Flags of the REPL (`tern` alone or `tern chat`).
#[derive(Args, Clone)]
struct ChatArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// Model requests (agentic turns) allowed per prompt before it stops.
    #[arg(long, default_value_t = 50, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: u32,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    state: StateArgs,
}

/// Flags `exec` and `chat` share: which session, and when bash may run.
#[derive(Args, Clone)]
struct SessionArgs {
    /// Continue the current session of this workspace.
    #[arg(long = "continue", conflicts_with = "resume")]
    continue_: bool,
    /// Resume the session with this id (or a unique part of it).
    #[arg(long)]
    resume: Option<String>,
    /// When bash may run: ask, auto or never (default: ask in the REPL, auto in exec)
    /// [env: TERN_APPROVAL].
    #[arg(long, value_enum)]
    approval: Option<Approval>,
    /// What commands may write: read-only, workspace-write (default) or danger-full-access
    /// (no sandbox) [env: TERN_SANDBOX].
    #[arg(short = 's', long, value_enum)]
    sandbox: Option<tern::policy::Mode>,
    /// Commands have no network: an empty network namespace (and Landlock's TCP rules).
    #[arg(long)]
    no_network: bool,
    /// Another folder commands may write in workspace-write (repeatable) [env: TERN_ADD_DIRS,
    /// separated by ':'].
    #[arg(long = "add-dir", value_name = "DIR")]
    add_dir: Vec<PathBuf>,
    /// Another folder commands may read where the jail hides it, e.g. under the home folder
    /// (repeatable) [env: TERN_READ_DIRS, separated by ':'].
    #[arg(long = "read-dir", value_name = "DIR")]
    read_dir: Vec<PathBuf>,
    /// A variable of tern's environment that commands also get (repeatable) [env: TERN_ENV,
    /// separated by ','].
    #[arg(long = "env", value_name = "NAME")]
    env: Vec<String>,
    /// Sandboxed modes without the jail of namespaces: Landlock alone (README, Sandbox, says
    /// what that leaves open) [env: TERN_NO_JAIL=1].
    #[arg(long)]
    no_jail: bool,
    /// In workspace-write, commands write the workspace directly (behind the bind walls)
    /// instead of a layer tern applies through its door (README, Sandbox) [env:
    /// TERN_NO_LAYER=1].
    #[arg(long)]
    no_layer: bool,
    /// Work in the git worktree NAME: `.tern/worktrees/NAME` of the repository, on branch
    /// `tern/NAME` made from HEAD, made when absent and reused after; it is the workspace (its
    /// own sessions, checkpoints and undo). tern never merges or removes it.
    #[arg(long, value_name = "NAME")]
    worktree: Option<String>,
    /// A spending limit for this run in US dollars: a request whose worst case would pass it
    /// is not sent, and the run ends budget_exhausted (needs the model's price: built in, or
    /// `price` in the config) [config: max_cost].
    #[arg(long, value_name = "USD", allow_negative_numbers = true, value_parser = usd)]
    max_cost: Option<f64>,
}

/// `tern exec` as a worker of a scheduler (GNU parallel, a Kubernetes Job, xargs), and its goal.
#[derive(Args, Clone)]
struct WorkerArgs {
    /// A command that must pass (exit 0) before the turn counts as completed: run in the sandbox
    /// after each final answer; its failing output goes back to the model.
    #[arg(long, value_parser = non_blank)]
    goal: Option<String>,
    /// Runs of --goal allowed before the turn fails.
    #[arg(long, default_value_t = tern::hooks::goal::DEFAULT_ATTEMPTS, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=1000))]
    goal_attempts: u32,
    /// Seconds one run of --goal may take; past it its processes are killed and the run is a
    /// failed attempt [default: the bash tool's, 120].
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = u64_in(1..=tern::hooks::goal::MAX_TIMEOUT_S as i64))]
    goal_timeout: Option<u64>,
    /// Run in DIR (the workspace is found from there).
    #[arg(short = 'C', long = "cd", value_name = "DIR")]
    cd: Option<PathBuf>,
    /// Write the final answer to FILE (atomically) when the run completes.
    #[arg(short = 'o', long, value_name = "FILE")]
    output_last_message: Option<PathBuf>,
    /// The whole run's wall time in seconds; past it the run stops (budget_exhausted, exit 1).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = u64_in(1..=604_800))]
    max_wall_time: Option<u64>,
}

#[derive(Args, Clone)]
struct StateArgs {
    /// State folder to use instead of <workspace>/.tern [env: TERN_STATE_DIR].
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// The parser of a `u64` flag in `range`. It reads the number as signed, so a negative one gets
/// the range error (clap's own `u64` parser stops at the sign with "invalid digit").
fn u64_in(range: impl std::ops::RangeBounds<i64>) -> clap::builder::RangedI64ValueParser<u64> {
    clap::builder::RangedI64ValueParser::new().range(range)
}

/// `--max-cost`: a positive, finite number of dollars.
fn usd(s: &str) -> Result<f64, String> {
    match s.trim().trim_start_matches('$').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err("give a number of US dollars above 0, such as 2.50".into()),
    }
}

/// A flag's text that must say something (`--goal`): empty or only whitespace is refused (a
/// blank command would "pass" or fail for reasons that have nothing to do with the work).
fn non_blank(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("it is empty; give a command".into())
    } else {
        Ok(s.to_string())
    }
}

impl SessionArgs {
    /// `--worktree NAME`: makes or finds the worktree (see `tern::worktree`) and moves into it,
    /// so the workspace found from here is the worktree. Errors (usage, exit 2): not in a git
    /// repository, a bad or taken name, git failing.
    fn enter_worktree(&self) -> Result<Option<tern::worktree::Worktree>, Fail> {
        let Some(name) = &self.worktree else {
            return Ok(None);
        };
        let here =
            std::env::current_dir().map_err(|e| Fail::usage(format!("no current folder: {e}")))?;
        let w = tern::worktree::enter(&here, name).map_err(Fail::usage)?;
        std::env::set_current_dir(&w.start)
            .map_err(|e| Fail::usage(format!("--worktree {name}: {}: {e}", w.start.display())))?;
        tern::errln!(
            "tern: worktree {} at {} (branch {}{})",
            w.name,
            w.path.display(),
            w.branch,
            if w.made { ", made from HEAD" } else { "" }
        );
        Ok(Some(w))
    }

    /// Approval and sandbox from the flags and the environment, onto `cfg`.
    fn policy(&self, cfg: &mut Config, env: &Env, approval: Approval) -> Result<(), String> {
        cfg.approval = vars::approval(self.approval, env, approval)?;
        cfg.sandbox = vars::sandbox(self.sandbox, env)?;
        cfg.no_network = self.no_network;
        cfg.max_cost = self.max_cost;
        cfg.disk_floor = vars::disk_floor(env)?;
        cfg.reach = vars::reach(
            vars::ReachFlags {
                add_dir: &self.add_dir,
                read_dir: &self.read_dir,
                env: &self.env,
                no_jail: self.no_jail,
                no_layer: self.no_layer,
            },
            env,
        )?;
        Ok(())
    }

    /// The settings these flags give, as the settings table's `flag` source.
    fn note_flags(&self, env: &mut Env) {
        SessionArgs::note_settings(env, self.approval, self.sandbox);
    }

    /// `approval` and `sandbox` given as flags, as the settings table's `flag` source.
    fn note_settings(
        env: &mut Env,
        approval: Option<Approval>,
        sandbox: Option<tern::policy::Mode>,
    ) {
        if let Some(a) = approval {
            env.note_flag("approval", a.as_str());
        }
        if let Some(m) = sandbox {
            env.note_flag("sandbox", m.as_str());
        }
    }

    /// `--continue` / `--resume ID` as a session reference.
    fn continues(&self) -> Option<SessionRef> {
        match (&self.resume, self.continue_) {
            (Some(id), _) => Some(SessionRef::Id(id.clone())),
            (None, true) => Some(SessionRef::Current),
            (None, false) => None,
        }
    }
}

/// The model flags of a verb that calls the model (`compact`, `plan confirm`, `plan clear`).
#[derive(Args, Clone)]
struct VerbModelArgs {
    /// Model for this verb's call (default: TERN_MODEL, else the session's own) [env: TERN_MODEL].
    #[arg(long)]
    model: Option<String>,
    /// Longest total time spent retrying a failing provider, in seconds (at most a day).
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = u64_in(0..=86_400))]
    max_retry_time: u64,
    /// Longest silence from the provider before an attempt fails, in seconds (1 s to a day).
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = u64_in(1..=86_400))]
    idle_timeout: u64,
    /// The most tokens the answer (a summary) may have (default 8192) [env:
    /// TERN_MAX_OUTPUT_TOKENS].
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    max_output_tokens: Option<u32>,
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// Wire format: openai (any OpenAI-compatible server) or anthropic.
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// Model name [env: TERN_MODEL].
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Provider base URL [env: OPENAI_BASE_URL or ANTHROPIC_BASE_URL].
    #[arg(long)]
    base_url: Option<String>,
    /// The model's context window in tokens; compaction starts at 80 % of it.
    #[arg(long, default_value_t = 128_000, allow_negative_numbers = true, value_parser = u64_in(1024..))]
    context_window: u64,
    /// Longest total time spent retrying a failing provider, in seconds (at most a day).
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = u64_in(0..=86_400))]
    max_retry_time: u64,
    /// Longest silence from the provider before an attempt fails, in seconds (1 s to a day).
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = u64_in(1..=86_400))]
    idle_timeout: u64,
    /// The most tokens one answer may have (sent as the output cap of every request; default
    /// 8192) [env: TERN_MAX_OUTPUT_TOKENS].
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    max_output_tokens: Option<u32>,
    /// Sampling temperature sent with every request (default: the server's own; Anthropic
    /// takes 0 to 1) [env: TERN_TEMPERATURE].
    #[arg(long, allow_negative_numbers = true, value_parser = vars::temperature_text)]
    temperature: Option<f64>,
    /// How much a reasoning model thinks, sent in each provider's form (default: the model's
    /// own, nothing sent) [env: TERN_REASONING_EFFORT].
    #[arg(long, value_enum)]
    reasoning_effort: Option<tern::provider::reasoning::Effort>,
    /// How deep sub-agents may nest (0: no sub-agents).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=8))]
    agent_depth: u32,
    /// Sub-agents of one answer running at once.
    #[arg(long, default_value_t = 4, allow_negative_numbers = true, value_parser = u64_in(1..=32))]
    agents_parallel: u64,
    /// Model requests a sub-agent may make.
    #[arg(long, default_value_t = 30, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    agent_max_turns: u32,
    /// Wall time of a sub-agent, in seconds.
    #[arg(long, default_value_t = 600, allow_negative_numbers = true, value_parser = u64_in(1..=86_400))]
    agent_wall_time: u64,
    /// Tokens (input + output) a sub-agent may use.
    #[arg(long, default_value_t = 2_000_000, allow_negative_numbers = true, value_parser = u64_in(1..))]
    agent_token_budget: u64,
    /// Do not tell the model when its first answer shows a shell command in a code block
    /// instead of calling bash (by default it is told once per turn).
    #[arg(long)]
    no_nudge: bool,
}

impl ModelArgs {
    fn flags(&self) -> ProviderFlags {
        ProviderFlags {
            provider: self.provider,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
        }
    }

    fn config(&self, approval: Approval, max_turns: u32) -> Config {
        let mut cfg = Config::new("");
        cfg.context_window = self.context_window;
        cfg.retry.max_total = Duration::from_secs(self.max_retry_time);
        cfg.approval = approval;
        cfg.max_turns = max_turns;
        cfg.max_output_tokens = self.max_output_tokens.unwrap_or(cfg.max_output_tokens);
        cfg.temperature = self.temperature;
        cfg.nudge = !self.no_nudge;
        cfg.agents = tern::runtime::AgentLimits {
            depth: self.agent_depth,
            parallel: usize::try_from(self.agents_parallel).unwrap_or(4),
            max_turns: self.agent_max_turns,
            wall_time: Duration::from_secs(self.agent_wall_time),
            token_budget: self.agent_token_budget,
        };
        cfg
    }

    /// The output cap and temperature from TERN_MAX_OUTPUT_TOKENS / TERN_TEMPERATURE (or the
    /// config file laid under them) where no flag gave them. Errors name the variable.
    fn output_env(&self, cfg: &mut Config, env: &Env) -> Result<(), String> {
        if let Some(n) = vars::max_output_tokens(self.max_output_tokens, env)? {
            cfg.max_output_tokens = n;
        }
        cfg.temperature = vars::temperature(self.temperature, env)?;
        cfg.reasoning.effort = vars::reasoning_effort(self.reasoning_effort, env)?;
        cfg.reasoning_replay = vars::reasoning_replay(env)?;
        Ok(())
    }

    /// The launcher for these flags in the current folder's workspace.
    fn launcher(&self, mut cfg: Config, state: &StateArgs, ctx: &Ctx) -> Result<Launcher, Fail> {
        self.output_env(&mut cfg, &ctx.env).map_err(Fail::usage)?;
        let mut l = ctx.launcher(state, cfg, self.flags())?;
        l.idle_timeout = Duration::from_secs(self.idle_timeout);
        self.note_flags(&mut l.env);
        Ok(l)
    }

    /// The settings these flags give, as the settings table's `flag` source.
    fn note_flags(&self, env: &mut Env) {
        if let Some(p) = self.provider {
            env.note_flag("provider", p.as_str());
        }
        if let Some(u) = &self.base_url {
            env.note_flag("base_url", &tern::provider::http::display_url(u));
        }
        if let Some(m) = &self.model {
            env.note_flag("model", m);
        }
        if let Some(n) = self.max_output_tokens {
            env.note_flag("max_output_tokens", &n.to_string());
        }
        if let Some(t) = self.temperature {
            env.note_flag("temperature", &t.to_string());
        }
        if let Some(e) = self.reasoning_effort {
            env.note_flag("reasoning_effort", e.as_str());
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// The interactive REPL (the default when no command is given).
    Chat(ChatArgs),
    /// Run one task headless: the model works until it answers without tool calls.
    ///
    /// Bash commands run without asking (--approval auto is the default here).
    Exec(ExecArgs),
    /// Speak the Agent Client Protocol (ACP v1) on stdin/stdout, for editors (Zed, Neovim, …).
    ///
    /// Sessions live in the `.tern/` of each session's cwd. Commands ask the client first
    /// (--approval ask is the default here; the client's mode selector switches ask / auto / plan).
    Acp(AcpArgs),
    /// Set up the model provider once: asks for provider, base URL, model and key (or takes
    /// them as flags), tests them with one tiny request, writes ~/.config/tern/config.json
    /// (mode 0600).
    Setup(tern::setup::SetupArgs),
    /// Play the bundled lesson: a scripted model, real bash, a real session folder.
    Demo {
        /// Workspace folder (default: a fresh temporary folder, kept afterwards).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print events as JSON lines instead of the narrated lesson.
        #[arg(long)]
        json: bool,
    },
    /// Cache figures of a session's requests (default: the current session).
    Stats {
        /// Session id (or unique prefix).
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Sum the prompt tokens billed in full beyond each request's new messages, and their
        /// cost, by why the cache missed them.
        #[arg(long)]
        why: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// The prices tern uses: yours (config `price`, `prices`, `models`), then the built-in
    /// table with each entry's source and the date it was read.
    Prices {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// The Agent Skills tern finds here (SKILL.md folders in the project's `.claude/skills`,
    /// `.agents/skills`, `.tern/skills` and your `~/.config/tern/skills`, `~/.agents/skills`,
    /// `~/.claude/skills`, `~/.codex/skills`): each with its source, size and validity; `show
    /// NAME` prints one.
    Skills {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        show: Option<SkillsCmd>,
        #[command(flatten)]
        state: StateArgs,
    },
    /// What the door kept aside instead of applying (a new repository, your concurrent
    /// change's rival): list them, or `take N` to copy one into the workspace.
    Held {
        #[command(flatten)]
        target: TargetArgs,
        #[command(subcommand)]
        take: Option<HeldCmd>,
    },
    /// The sidebar: To-do ledger, goal, budget, plan state and cache figures.
    Status {
        #[command(flatten)]
        target: TargetArgs,
        /// Lines available (default: the terminal's height).
        #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..))]
        height: Option<u16>,
        /// The model a run would use (shown as a `flag` setting, as `tern exec -m` would).
        #[arg(short = 'm', long)]
        model: Option<String>,
        /// The approval a run would use.
        #[arg(long, value_enum)]
        approval: Option<Approval>,
        /// The sandbox a run would use.
        #[arg(short = 's', long, value_enum)]
        sandbox: Option<tern::policy::Mode>,
    },
    /// Redraw `tern status` live when the session changes (for a tmux pane). Ctrl-C leaves.
    Watch {
        #[command(flatten)]
        target: TargetArgs,
        /// Lines available (default: the terminal's height).
        #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..))]
        height: Option<u16>,
    },
    /// The op table's verbs (plan, compact, relay, sessions, undo, …): one path, `run_op`.
    #[command(flatten)]
    Op(OpCmd),
    /// Send a message into the running turn of a session: the model reads it at its next
    /// request, after the last tool result (the turn is not stopped).
    Steer {
        /// The message (none, or `-`: read stdin).
        text: Vec<String>,
        /// With no turn running, keep it for the session's next turn instead of refusing.
        #[arg(long)]
        queue: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The Fleet: the members a sub-agent can be (.tern/fleet.json over ~/.config/tern/fleet.json).
    Fleet {
        #[command(subcommand)]
        cmd: FleetCmd,
    },
    /// The sandbox: what this machine supports, and a self-test.
    Sandbox {
        #[command(subcommand)]
        cmd: SandboxCmd,
    },
    /// MCP servers' tools from the shell (~/.config/tern/mcp.json, .mcp.json): list, schema,
    /// call, trust. Inside a session's command it asks the session's tern, which runs the
    /// servers outside the jail.
    Mcp {
        #[command(subcommand)]
        cmd: McpCmd,
        #[command(flatten)]
        state: StateArgs,
    },
    /// The hooks that run here (~/.config/tern/hooks.json, .tern/hooks.json) and their trust.
    Hooks {
        #[command(subcommand)]
        cmd: Option<HooksCmd>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// List the op table: every verb and its slash command.
    Ops {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The CLI verbs of the op table (`tern ops`): each runs as its op, through [`run_op`], with
/// the same receipt as its slash command and an editor's command.
#[derive(Subcommand)]
enum OpCmd {
    /// The plan lifecycle: show, path, draft, edit, confirm, cancel, clear.
    Plan {
        #[command(subcommand)]
        cmd: PlanCmd,
    },
    /// Summarise the conversation and archive it (calls the session's model).
    Compact {
        #[command(flatten)]
        target: TargetArgs,
        /// Wait for a turn running in another process instead of refusing.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        model: VerbModelArgs,
    },
    /// Write handoff.md for the next thread and print it.
    Relay {
        #[command(flatten)]
        target: TargetArgs,
        /// Also open a new session seeded with the handoff.
        #[arg(long)]
        start: bool,
    },
    /// List sessions with status, turns, tokens and last activity.
    Sessions {
        #[command(flatten)]
        state: StateArgs,
    },
    /// Put the workspace's files back as they were before the last turn (or the last N turns).
    Undo {
        /// How many turns (default 1).
        n: Option<u32>,
        /// Undo even over files you changed after the turn ended (saved first: `tern redo`
        /// brings them back); without it such an undo is refused.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Put back what the last undo or rewind replaced.
    Redo {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// List the session's checkpoints: turn, time, files changed, size.
    Checkpoints {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Show what a turn changed (default: the last turn that ran a command).
    Diff {
        /// The turn.
        turn: Option<u32>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Branch the conversation into a new session (it becomes the current one).
    Fork {
        /// Cut after this turn (default: the last).
        #[arg(long)]
        at: Option<u32>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Fork at the end of TURN and restore the workspace's files to that point.
    Rewind {
        /// The turn to go back to the end of.
        turn: u32,
        #[command(flatten)]
        target: TargetArgs,
    },
}

#[derive(Args, Clone)]
struct TargetArgs {
    /// Session id (or unique prefix); default: the current session.
    #[arg(long)]
    session: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Subcommand)]
enum SkillsCmd {
    /// Print skill NAME's SKILL.md.
    Show {
        /// Its name.
        name: String,
    },
}

#[derive(Subcommand)]
enum HeldCmd {
    /// Copy kept-aside change N into the workspace, replacing what is at its path.
    Take {
        /// Its number (`tern held` lists them).
        n: u32,
    },
}

#[derive(Subcommand)]
enum FleetCmd {
    /// List the members: id, role, route, ceilings, budgets.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// Resolve each member's route here (key present, URL valid), without a model call. Exit 1
    /// when a member cannot run.
    Check {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
}

#[derive(Subcommand)]
enum HooksCmd {
    /// Trust the project's .tern/hooks.json as it is now (by its SHA-256): its hooks run from
    /// the next session on; any change needs trust again.
    Trust {
        #[command(flatten)]
        state: StateArgs,
    },
}

/// `tern mcp`: the verbs (declared once, in the MCP room) and trust.
#[derive(Subcommand)]
enum McpCmd {
    #[command(flatten)]
    Verb(tern::mcp::Verb),
    /// Trust the project's .mcp.json as it is now (by its SHA-256, with the workspace files its
    /// servers run): its servers start from then on; any change needs trust again.
    Trust,
}

#[derive(Subcommand)]
enum SandboxCmd {
    /// Print the Landlock ABI and network rules of this kernel, the rights each mode applies, and
    /// run a self-test (a write outside the workspace must fail, inside must succeed).
    Check {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Show the plan state, the draft and the locked plan.
    Show {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Print the paths of PLAN_DRAFT_FILE and PLAN_FILE.
    Path {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Replace the draft with stdin (or --file).
    Draft {
        /// Read the draft from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Edit the draft in $VISUAL / $EDITOR.
    Edit {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Compact, then lock the draft into the system prompt.
    Confirm {
        #[command(flatten)]
        target: TargetArgs,
        /// Wait for a turn running in another process instead of refusing.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        model: VerbModelArgs,
    },
    /// Discard the draft (archived).
    Cancel {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Compact, then remove the locked plan from the system prompt.
    Clear {
        #[command(flatten)]
        target: TargetArgs,
        /// Wait for a turn running in another process instead of refusing.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        model: VerbModelArgs,
    },
}

impl TargetArgs {
    fn as_cli(&self) -> tern::cli::Target {
        tern::cli::Target {
            session: self.session.clone(),
            json: self.json,
        }
    }
}

/// What every command shares: the environment snapshot (taken before the secrets left the
/// process) and the per-process parts the signal handlers act on.
struct Ctx {
    env: Env,
    process: Process,
    /// The config file's `models` (offered over ACP).
    models: Vec<String>,
    /// The config files' prices, spending limit and cache lifetime.
    costs: tern::config_file::Costs,
}

/// Why a command could not run: the message and the exit code to leave with (2 for a usage
/// error such as a bad TERN_STATE_DIR). [`report`] is the one way it reaches the person.
struct Fail {
    message: String,
    code: i32,
}

impl Fail {
    /// A usage error (exit 2).
    fn usage(message: impl Into<String>) -> Fail {
        Fail {
            message: message.into(),
            code: 2,
        }
    }
}

/// The exit code of a command: its own, or its failure's, said on stderr as `tern: …`.
fn report(r: Result<i32, Fail>) -> i32 {
    match r {
        Ok(code) => code,
        Err(f) => {
            tern::errln!("tern: {}", f.message);
            f.code
        }
    }
}

impl Ctx {
    /// The config files' prices and cache lifetime onto `cfg`, and their spending limit where
    /// no flag gave one. The lifetime where no file sets `cache_ttl`: five minutes (what `exec`
    /// and the verbs keep; [`Ctx::surface_cache`] gives the REPL and editors an hour).
    fn costs_onto(&self, cfg: &mut Config) {
        cfg.prices = self.costs.prices.clone();
        cfg.long_cache = self.costs.long_cache.unwrap_or(false);
        if cfg.max_cost.is_none() {
            cfg.max_cost = self.costs.max_cost;
        }
    }

    /// The cache lifetime of a surface where a person thinks between turns (the REPL, an
    /// editor): one hour unless a config file's `cache_ttl` says otherwise (issue 44: a pause
    /// outlives a 5-minute cache, and its expiry bills the whole prefix again; an hour's write
    /// costs 2× the input price instead of 1.25× on Anthropic, and nothing elsewhere).
    fn surface_cache(&self) -> bool {
        self.costs.long_cache.unwrap_or(true)
    }

    /// A launcher for the current folder's workspace (or `--state-dir`).
    fn launcher(
        &self,
        state: &StateArgs,
        cfg: Config,
        flags: ProviderFlags,
    ) -> Result<Launcher, Fail> {
        let mut cfg = cfg;
        cfg.checkpoints = vars::checkpoints(&self.env).map_err(Fail::usage)?;
        self.costs_onto(&mut cfg);
        let cwd = std::env::current_dir().map_err(|e| Fail {
            message: format!("no current folder: {e}"),
            code: 1,
        })?;
        let state_dir = vars::state_dir(state.state_dir.clone(), &self.env).map_err(Fail::usage)?;
        let dir = Launcher::locate(&cwd, state_dir, &self.env);
        let mut l = Launcher::new(dir, self.env.clone(), flags, cfg, &self.process);
        // AGENTS.md files are read from the workspace root down to here.
        l.here = cwd;
        Ok(l)
    }

    /// A launcher for a verb: the session's model unless `--model` / TERN_MODEL says otherwise.
    fn verb_launcher(&self, state: &StateArgs) -> Result<Launcher, Fail> {
        self.launcher(state, Config::new(""), ProviderFlags::default())
    }

    /// [`Ctx::verb_launcher`] for a verb that calls the model, with its `--model` and
    /// `--max-retry-time`.
    /// The run's settings apply as in `tern exec` (issue 41): the output cap
    /// (`TERN_MAX_OUTPUT_TOKENS` too), the idle timeout and the retry budget.
    fn model_verb_launcher(&self, state: &StateArgs, m: &VerbModelArgs) -> Result<Launcher, Fail> {
        let mut cfg = Config::new("");
        cfg.retry.max_total = Duration::from_secs(m.max_retry_time);
        if let Some(n) = vars::max_output_tokens(m.max_output_tokens, &self.env)
            .map_err(|e| Fail::usage(e.to_string()))?
        {
            cfg.max_output_tokens = n;
        }
        let flags = ProviderFlags {
            model: m.model.clone(),
            ..ProviderFlags::default()
        };
        let mut l = self.launcher(state, cfg, flags)?;
        l.idle_timeout = Duration::from_secs(m.idle_timeout);
        Ok(l)
    }
}

/// A verb with its own printing (`status`, `watch`, `steer`, …): `f` with a launcher for
/// `state`.
fn with_launcher(ctx: &Ctx, state: &StateArgs, f: impl FnOnce(&Launcher) -> i32) -> i32 {
    report(ctx.verb_launcher(state).map(|l| f(&l)))
}

/// Installs the handlers of this process (the only place the library's process is set up):
/// SIGINT, SIGTERM and SIGHUP cancel the running turn (the command is killed, results stored, a
/// final `result` event); SIGTERM and SIGHUP also ask a long-lived surface to leave. A third
/// SIGINT within one turn is the escape hatch if the orderly stop hangs: it kills every running
/// command's process group and exits at once with 130.
fn install_signals(p: &Process) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let (sigints, groups) = (p.sigints.clone(), p.groups.clone());
    // SAFETY: the handler only touches atomics and calls kill(2), write(2) and _exit(2), all
    // async-signal-safe.
    let _ = unsafe {
        signal_hook::low_level::register(SIGINT, move || {
            if sigints.fetch_add(1, Ordering::SeqCst) >= 2 {
                groups.kill_all(libc::SIGKILL);
                // One fixed line, written raw: nothing else is safe here (no allocation, no
                // lock, so no `result` event either; the next open marks the session
                // interrupted).
                const NOTE: &[u8] =
                    b"\ntern: a third Ctrl-C: killed the running commands and left at once\n";
                libc::write(2, NOTE.as_ptr().cast(), NOTE.len());
                libc::_exit(130);
            }
        })
    };
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // Which signal it was, first: the cancel it sets is read by threads at once.
        // SAFETY: an atomic store only, async-signal-safe.
        let _ = unsafe {
            signal_hook::low_level::register(sig, move || tern::cancel::note_signal(sig))
        };
        let _ = signal_hook::flag::register(sig, p.cancel.flag());
    }
    for sig in [SIGTERM, SIGHUP] {
        // A second SIGTERM or SIGHUP leaves at once (130): the first one's orderly stop runs the
        // SessionEnd hooks within their timeout, and a scheduler that cannot wait says so twice.
        // Registered before the flag it reads is set by the same signal.
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 130, p.term.clone());
        let _ = signal_hook::flag::register(sig, p.term.clone());
    }
}

fn main() -> ExitCode {
    // The jail's own process (src/sandbox/jail/init.rs): before anything else, while this
    // process is still single-threaded, as namespaces and fork require.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(tern::sandbox::jail::JAIL_ARG))
    {
        return ExitCode::from(u8::try_from(tern::sandbox::jail::init::main()).unwrap_or(1));
    }
    // One malloc arena for the whole process (glibc makes one per thread otherwise, each with
    // pages of its own): tern's threads (HTTP, output readers, the disk watcher) allocate
    // little and rarely at once, and the peak RSS is a cost figure (BENCHMARKS.md §1).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a malloc tunable; called while the process has one thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // `tern mcp` in a session's command: the session's tern answers; nothing of this process's
    // configuration is read (inside the jail tern's config folder is hidden).
    if let Some(Cmd::Mcp { cmd, .. }) = &cli.cmd
        && !matches!(cmd, McpCmd::Trust)
        && std::env::var_os(tern::mcp::channel::ENV).is_none()
        && std::env::var_os("TERN_SESSION_DIR").is_some()
    {
        // A session's command, and the session gave it no channel: it has no server.
        tern::errln!(
            "tern: this session has no MCP server (they come from ~/.config/tern/mcp.json, a trusted .mcp.json or the editor, read when a session opens)"
        );
        return ExitCode::from(2);
    }
    if let Some(Cmd::Mcp {
        cmd: McpCmd::Verb(verb),
        ..
    }) = &cli.cmd
        && std::env::var_os(tern::mcp::channel::ENV).is_some()
    {
        let code = mcp_ask(verb);
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    // Still one thread: read what tern needs from the environment, then take the keys out of
    // it before anything else runs (no command the model runs may find them).
    let env = Env::capture();
    if let Some(url) = cli_base_url(&cli) {
        tern::config::register_url_secrets(&url);
    }
    // The config files, laid under the environment (config < environment < flags). `tern setup`
    // and `tern demo` run without them, so a broken file can be fixed.
    let (env, models, costs) = match &cli.cmd {
        Some(
            Cmd::Setup(_)
            | Cmd::Demo { .. }
            | Cmd::Acp(AcpArgs {
                action: Some(_), ..
            }),
        ) => (env, Vec::new(), Default::default()),
        _ => match load_config(env) {
            Ok(x) => x,
            Err(e) => {
                tern::errln!("tern: config: {e}");
                return ExitCode::from(2);
            }
        },
    };
    tern::config::scrub_environment();
    tern::config::hide_from_proc();
    let ctx = Ctx {
        env,
        process: Process::default(),
        models,
        costs,
    };
    // A verb that only reads or writes state files keeps the default dispositions: SIGTERM
    // ends it at once (its writes are atomic), where a handler that only sets a flag would
    // leave it deaf. Commands that run a turn, a model call or a loop poll the flags.
    let polls = match &cli.cmd {
        // An op polls when it calls the model (the op table says which); `relay --start`
        // runs a turn.
        Some(Cmd::Op(OpCmd::Relay { start: true, .. })) => true,
        Some(Cmd::Op(op)) => tern::ops::get(op.id()).model_call(),
        None
        | Some(
            Cmd::Chat(_)
            | Cmd::Exec(_)
            | Cmd::Acp(_)
            | Cmd::Demo { .. }
            | Cmd::Watch { .. }
            | Cmd::Setup(_)
            | Cmd::Ops { .. },
        ) => true,
        Some(
            Cmd::Stats { .. }
            | Cmd::Prices { .. }
            | Cmd::Skills { .. }
            | Cmd::Status { .. }
            | Cmd::Held { .. }
            | Cmd::Steer { .. }
            | Cmd::Fleet { .. }
            | Cmd::Hooks { .. }
            | Cmd::Mcp { .. }
            | Cmd::Sandbox { .. },
        ) => false,
    };
    if polls {
        install_signals(&ctx.process);
        // A killed command's orphans come to tern, which reaps them (procs::reap_group), rather
        // than lingering as zombies of a PID 1 that may never reap.
        tern::procs::become_subreaper();
    }
    let code = match cli.cmd {
        None => chat(&ctx, cli.chat),
        Some(cmd) => run(&ctx, cmd),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Reads `~/.config/tern/config.json` and the project's `.tern/config.json` (the workspace of
/// the current folder, or TERN_STATE_DIR) and lays them under `env`.
fn load_config(env: Env) -> Result<(Env, Vec<String>, tern::config_file::Costs), String> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let state = Launcher::locate(&cwd, None, &env);
    let loaded = tern::config_file::load(&env, &state.root)?;
    let models = loaded
        .merged
        .models
        .iter()
        .map(|m| m.name().to_string())
        .collect();
    let costs = tern::config_file::costs(&loaded)?;
    let env = tern::config_file::layer(env, &loaded)?;
    Ok((env, models, costs))
}

/// The `--base-url` given on the command line, whose credentials must leave `cmdline` too.
fn cli_base_url(cli: &Cli) -> Option<String> {
    let model = match &cli.cmd {
        None => &cli.chat.model,
        Some(Cmd::Chat(a)) => &a.model,
        Some(Cmd::Exec(a)) => &a.model,
        Some(_) => return None,
    };
    model.base_url.clone()
}

fn chat(ctx: &Ctx, args: ChatArgs) -> i32 {
    let mut cfg = args.model.config(Approval::Ask, args.max_turns);
    report(
        args.session
            .policy(&mut cfg, &ctx.env, Approval::Ask)
            .map_err(Fail::usage)
            .and_then(|()| args.session.enter_worktree())
            .and_then(|w| {
                let mut l = args.model.launcher(cfg, &args.state, ctx)?;
                l.worktree = w;
                l.config.long_cache = ctx.surface_cache();
                args.session.note_flags(&mut l.env);
                Ok(l)
            })
            .map(|l| tern::repl::run(&l, &ctx.process, args.session.continues())),
    )
}

/// A command line clap refused: its message on stderr, exit 2, and for `tern exec --json` a final
/// `result` event on stdout too (stdout then still ends with `result`, as promised).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    // `tern mcp call`'s arguments: one line, as every `tern mcp` failure (exit 2).
    if e.kind() == ErrorKind::ValueValidation
        && let Some(clap::error::ContextValue::String(arg)) =
            e.get(clap::error::ContextKind::InvalidArg)
        && arg == "[ARGS]"
        && let Some(why) = std::error::Error::source(&e)
    {
        tern::errln!("tern: {why}");
        return ExitCode::from(2);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json_exec = args.iter().any(|a| a == "exec") && args.iter().any(|a| a == "--json");
    let _ = e.print();
    if json_exec {
        let text = e.to_string();
        tern::output::print_sessionless_result(text.lines().next().unwrap_or("usage error"), 2);
    }
    ExitCode::from(2)
}

/// One function per subcommand.
fn run(ctx: &Ctx, cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Chat(args) => chat(ctx, args),
        Cmd::Exec(args) => exec(ctx, args),
        Cmd::Acp(AcpArgs {
            action: Some(_), ..
        }) => setup(ctx, tern::setup::SetupArgs::default(), false),
        Cmd::Acp(args) => report(acp(ctx, args)),
        Cmd::Demo { workspace, json } => tern::demo::run(&ctx.process, workspace, json),
        Cmd::Setup(args) => {
            let yes = args.yes;
            setup(ctx, args, yes)
        }
        Cmd::Stats {
            session,
            json,
            why,
            state,
        } => stats(
            ctx,
            TargetArgs {
                session,
                json,
                state,
            },
            why,
        ),
        Cmd::Status {
            target,
            height,
            model,
            approval,
            sandbox,
        } => with_launcher(ctx, &target.state, |l| {
            // The setting flags a run would take, shown where they would come from.
            let mut l = l.clone();
            if let Some(m) = &model {
                l.env.note_flag("model", m);
            }
            SessionArgs::note_settings(&mut l.env, approval, sandbox);
            tern::cli::status(&l, &target.as_cli(), height.map(usize::from))
        }),
        Cmd::Prices { json, state } => with_launcher(ctx, &state, |l| tern::cli::prices(l, json)),
        Cmd::Skills { json, show, state } => with_launcher(ctx, &state, |l| {
            let name = show.map(|SkillsCmd::Show { name }| name);
            tern::cli::skills(l, json, name.as_deref())
        }),
        Cmd::Held { target, take } => with_launcher(ctx, &target.state, |l| {
            let n = take.map(|HeldCmd::Take { n }| n);
            tern::cli::held(l, &target.as_cli(), n)
        }),
        Cmd::Watch { target, height } => with_launcher(ctx, &target.state, |l| {
            tern::cli::watch(l, &ctx.process, &target.as_cli(), height.map(usize::from))
        }),
        Cmd::Steer {
            text,
            queue,
            target,
        } => with_launcher(ctx, &target.state, |l| {
            tern::cli::steer(l, &target.as_cli(), &text.join(" "), queue)
        }),
        // Not an op: it opens a new session seeded with the handoff.
        Cmd::Op(OpCmd::Relay {
            target,
            start: true,
        }) => with_launcher(ctx, &target.state, |l| {
            tern::cli::relay_start(l, &target.as_cli())
        }),
        Cmd::Op(op) => match op.call() {
            Ok(call) => run_op(ctx, &call),
            Err(f) => report(Err(f)),
        },
        Cmd::Ops { json } => tern::cli::ops(json),
        Cmd::Hooks { cmd, json, state } => hooks(ctx, cmd, json, state),
        Cmd::Mcp { cmd, state } => mcp(ctx, cmd, state),
        Cmd::Fleet { cmd } => {
            let (json, state, check) = match cmd {
                FleetCmd::List { json, state } => (json, state, false),
                FleetCmd::Check { json, state } => (json, state, true),
            };
            with_launcher(ctx, &state, |l| tern::cli::fleet(l, json, check))
        }
        Cmd::Sandbox {
            cmd: SandboxCmd::Check { json, state },
        } => with_launcher(ctx, &state, |l| tern::cli::sandbox_check(l, json)),
    }
}

/// A CLI verb of the op table, read off the command line: the op, its argument, its target
/// session, and (for an op that calls the model) `--wait` and the model flags.
struct OpCall {
    id: OpId,
    arg: Option<String>,
    target: TargetArgs,
    wait: bool,
    model: Option<VerbModelArgs>,
}

impl OpCmd {
    /// The op this verb runs (pure: which signals the process polls depends on it).
    fn id(&self) -> OpId {
        match self {
            OpCmd::Plan { cmd } => match cmd {
                PlanCmd::Show { .. } => OpId::PlanShow,
                PlanCmd::Path { .. } => OpId::PlanPath,
                PlanCmd::Draft { .. } => OpId::PlanDraft,
                PlanCmd::Edit { .. } => OpId::PlanEdit,
                PlanCmd::Confirm { .. } => OpId::PlanConfirm,
                PlanCmd::Cancel { .. } => OpId::PlanCancel,
                PlanCmd::Clear { .. } => OpId::PlanClear,
            },
            OpCmd::Compact { .. } => OpId::Compact,
            OpCmd::Relay { .. } => OpId::Relay,
            OpCmd::Sessions { .. } => OpId::Sessions,
            OpCmd::Undo { .. } => OpId::Undo,
            OpCmd::Redo { .. } => OpId::Redo,
            OpCmd::Checkpoints { .. } => OpId::Checkpoints,
            OpCmd::Diff { .. } => OpId::Diff,
            OpCmd::Fork { .. } => OpId::Fork,
            OpCmd::Rewind { .. } => OpId::Rewind,
        }
    }

    /// The call: the op with its argument and target. Errors: `plan draft`'s text could not
    /// be read (a usage error).
    fn call(self) -> Result<OpCall, Fail> {
        let id = self.id();
        let plain = |arg: Option<String>, target: TargetArgs| OpCall {
            id,
            arg,
            target,
            wait: false,
            model: None,
        };
        let with_model = |target, wait, model| OpCall {
            id,
            arg: None,
            target,
            wait,
            model: Some(model),
        };
        Ok(match self {
            OpCmd::Plan { cmd } => match cmd {
                PlanCmd::Draft { file, target } => {
                    let text = tern::cli::read_draft(file.as_deref()).map_err(Fail::usage)?;
                    plain(Some(text), target)
                }
                PlanCmd::Confirm {
                    target,
                    wait,
                    model,
                }
                | PlanCmd::Clear {
                    target,
                    wait,
                    model,
                } => with_model(target, wait, model),
                PlanCmd::Show { target }
                | PlanCmd::Path { target }
                | PlanCmd::Edit { target }
                | PlanCmd::Cancel { target } => plain(None, target),
            },
            OpCmd::Compact {
                target,
                wait,
                model,
            } => with_model(target, wait, model),
            OpCmd::Sessions { state } => plain(
                None,
                TargetArgs {
                    session: None,
                    json: false,
                    state,
                },
            ),
            OpCmd::Undo { n, force, target } => {
                let arg = [n.map(|n| n.to_string()), force.then(|| "--force".into())]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<String>>()
                    .join(" ");
                plain((!arg.is_empty()).then_some(arg), target)
            }
            OpCmd::Diff { turn, target } => plain(turn.map(|t| t.to_string()), target),
            OpCmd::Fork { at, target } => plain(at.map(|t| t.to_string()), target),
            OpCmd::Rewind { turn, target } => plain(Some(turn.to_string()), target),
            OpCmd::Relay { target, .. }
            | OpCmd::Redo { target }
            | OpCmd::Checkpoints { target } => plain(None, target),
        })
    }
}

/// Runs a CLI verb as its op (the one path: `tern::cli::verb`), the model flags applied for
/// an op that calls the model.
fn run_op(ctx: &Ctx, call: &OpCall) -> i32 {
    let launcher = match &call.model {
        Some(m) => ctx.model_verb_launcher(&call.target.state, m),
        None => ctx.verb_launcher(&call.target.state),
    };
    report(launcher.map(|l| {
        tern::cli::verb(
            &l,
            call.id,
            call.arg.as_deref(),
            &call.target.as_cli(),
            call.wait,
        )
    }))
}

/// `tern exec`'s flags.
#[derive(Args, Clone)]
struct ExecArgs {
    /// The task; `-` reads it from stdin.
    prompt: Option<String>,
    /// Print events as JSON lines on stdout (the last one is always `result`).
    #[arg(long)]
    json: bool,
    /// Model requests (agentic turns) allowed before stopping with exit code 3.
    #[arg(long, default_value_t = 50, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: u32,
    #[command(flatten)]
    session: SessionArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    state: StateArgs,
    #[command(flatten)]
    worker: WorkerArgs,
}

/// `tern acp`'s flags.
#[derive(Args, Clone)]
struct AcpArgs {
    /// `setup`: run `tern setup` instead (the terminal auth method offered in `initialize`;
    /// a client may append its args to the agent's own command line, `tern acp`).
    #[arg(value_parser = ["setup"])]
    action: Option<String>,
    /// Model requests (agentic turns) allowed per prompt before it stops (stop reason
    /// max_turn_requests).
    #[arg(long, default_value_t = 50, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: u32,
    /// When bash may run at first: ask, auto or never (= plan mode) [env: TERN_APPROVAL].
    #[arg(long, value_enum)]
    approval: Option<Approval>,
    /// What commands may write: read-only, workspace-write (default) or danger-full-access
    /// [env: TERN_SANDBOX].
    #[arg(long, value_enum)]
    sandbox: Option<tern::policy::Mode>,
    /// Commands may not open or accept TCP connections.
    #[arg(long)]
    no_network: bool,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    state: StateArgs,
}

/// `tern exec`: a failure before the run still ends a `--json` stream with a `result` line.
fn exec(ctx: &Ctx, a: ExecArgs) -> i32 {
    let json = a.json;
    match exec_launch(ctx, a) {
        Ok(code) => code,
        Err(f) => {
            tern::errln!("tern: {}", f.message);
            if json {
                tern::output::print_sessionless_result(&f.message, f.code);
            }
            f.code
        }
    }
}

fn exec_launch(ctx: &Ctx, a: ExecArgs) -> Result<i32, Fail> {
    let ExecArgs {
        prompt,
        json,
        max_turns,
        session,
        model,
        mut state,
        worker,
    } = a;
    // Paths given on the command line stay relative to where tern was started.
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let output_last_message = worker.output_last_message.map(|p| here.join(p));
    state.state_dir = state.state_dir.map(|p| here.join(p));
    if let Some(dir) = &worker.cd {
        std::env::set_current_dir(dir)
            .map_err(|e| Fail::usage(format!("--cd {}: {e}", dir.display())))?;
    }
    let worktree = session.enter_worktree()?;
    let mut cfg = model.config(Approval::Auto, max_turns);
    session
        .policy(&mut cfg, &ctx.env, Approval::Auto)
        .map_err(Fail::usage)?;
    let mut launcher = model.launcher(cfg, &state, ctx)?;
    launcher.worktree = worktree;
    session.note_flags(&mut launcher.env);
    Ok(tern::exec::run(
        &launcher,
        ExecOptions {
            prompt,
            json,
            continues: session.continues(),
            goal: worker.goal.map(|g| (g, worker.goal_attempts)),
            goal_timeout: worker.goal_timeout,
            output_last_message,
            max_wall_time: worker.max_wall_time.map(Duration::from_secs),
        },
    ))
}

/// `tern acp`: ACP v1 on stdio.
fn acp(ctx: &Ctx, a: AcpArgs) -> Result<i32, Fail> {
    let AcpArgs {
        max_turns,
        approval,
        sandbox,
        no_network,
        model,
        state,
        ..
    } = a;
    let mut cfg = model.config(Approval::Ask, max_turns);
    cfg.approval = vars::approval(approval, &ctx.env, Approval::Ask).map_err(Fail::usage)?;
    cfg.sandbox = vars::sandbox(sandbox, &ctx.env).map_err(Fail::usage)?;
    cfg.no_network = no_network;
    cfg.disk_floor = vars::disk_floor(&ctx.env).map_err(Fail::usage)?;
    cfg.checkpoints = vars::checkpoints(&ctx.env).map_err(Fail::usage)?;
    ctx.costs_onto(&mut cfg);
    cfg.long_cache = ctx.surface_cache();
    model.output_env(&mut cfg, &ctx.env).map_err(Fail::usage)?;
    // An editor stops `tern acp` with SIGINT as readily as with SIGTERM: both leave.
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, ctx.process.term.clone());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let state_dir = vars::state_dir(state.state_dir.clone(), &ctx.env)
        .map_err(Fail::usage)?
        .map(|d| if d.is_relative() { cwd.join(d) } else { d });
    Ok(tern::acp::run(tern::acp::AcpOptions {
        env: ctx.env.clone(),
        flags: model.flags(),
        config: cfg,
        state_dir,
        idle_timeout: Duration::from_secs(model.idle_timeout),
        process: ctx.process.clone(),
        models: ctx.models.clone(),
    }))
}

/// `tern setup` (and `tern acp setup`): asks on a terminal unless `--yes`.
fn setup(ctx: &Ctx, args: tern::setup::SetupArgs, yes: bool) -> i32 {
    use std::io::IsTerminal;
    let ask = !yes && std::io::stdin().is_terminal();
    tern::setup::run(&ctx.env, args, &mut std::io::stdin().lock(), ask)
}

/// `tern stats`: the table is an op's receipt; `--json` prints the rows.
fn stats(ctx: &Ctx, target: TargetArgs, why: bool) -> i32 {
    if target.json || why {
        with_launcher(ctx, &target.state, |l| {
            tern::cli::stats_json(l, &target.as_cli(), why)
        })
    } else {
        run_op(
            ctx,
            &OpCall {
                id: OpId::Stats,
                arg: None,
                target,
                wait: false,
                model: None,
            },
        )
    }
}

/// `tern hooks` (list) and `tern hooks trust`.
fn hooks(ctx: &Ctx, cmd: Option<HooksCmd>, json: bool, state: StateArgs) -> i32 {
    let (state, trust) = match cmd {
        Some(HooksCmd::Trust { state: s }) => (if s.state_dir.is_some() { s } else { state }, true),
        None => (state, false),
    };
    with_launcher(ctx, &state, |l| {
        if !trust {
            tern::outln!("{}", tern::hooks::cli::list(&l.hook_files(), json));
            return 0;
        }
        match tern::hooks::cli::trust(&l.hook_files()) {
            Ok(receipt) => {
                tern::outln!("{receipt}");
                0
            }
            Err(e) => report(Err(Fail {
                message: e.into(),
                code: 1,
            })),
        }
    })
}

/// `tern mcp` outside a session's command: straight to the servers of this workspace (a
/// command of a session asks its tern first, in `main`).
fn mcp(ctx: &Ctx, cmd: McpCmd, state: StateArgs) -> i32 {
    let McpCmd::Verb(verb) = cmd else {
        return with_launcher(ctx, &state, |l| {
            let files = tern::mcp::Files::new(&l.state.workspace, &ctx.env);
            match tern::mcp::config::trust(&files, &tern::mcp::config::process_vars()) {
                Ok(receipt) => {
                    tern::outln!("{receipt}");
                    0
                }
                Err(e) => report(Err(Fail {
                    message: e,
                    code: 1,
                })),
            }
        });
    };
    let l = match ctx.verb_launcher(&state) {
        Ok(l) => l,
        Err(f) => return report(Err(f)),
    };
    let hub = l.mcp_hub(None);
    let reply = hub.run(&verb);
    hub.close();
    mcp_print(&reply)
}

/// Asks the session's tern through the channel this command inherited.
fn mcp_ask(verb: &tern::mcp::Verb) -> i32 {
    use tern::mcp::channel;
    let value = std::env::var(channel::ENV).ok();
    let Some(fd) = channel::inherited(value.as_deref()) else {
        tern::errln!(
            "tern: {} is set but descriptor {} is not the session's channel here (a program closed it?): run tern mcp straight from the command",
            channel::ENV,
            channel::FD
        );
        return 2;
    };
    match channel::ask(fd, verb) {
        Ok(r) => mcp_print(&r),
        Err(e) => {
            tern::errln!("tern: could not ask the session's tern: {e}");
            2
        }
    }
}

/// Prints a verb's reply (on a terminal through the terminal-safe filter: a server's text may
/// carry escape sequences; into a pipe as it is); its exit code.
fn mcp_print(reply: &tern::mcp::Reply) -> i32 {
    use std::io::{IsTerminal as _, Write as _};
    let shown = |text: &str, tty: bool| {
        if tty {
            tern::render::safe(text).into_owned()
        } else {
            text.to_string()
        }
    };
    {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(shown(&reply.stdout, std::io::stdout().is_terminal()).as_bytes());
        let _ = o.flush();
    }
    let _ = std::io::stderr()
        .lock()
        .write_all(shown(&reply.stderr, std::io::stderr().is_terminal()).as_bytes());
    reply.exit
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
