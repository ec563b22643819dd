//! The `tern` command line: clap definitions and dispatch to the library's surfaces.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use tern::config::{ProviderFlags, ProviderKind};
use tern::exec::ExecOptions;
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
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: u32,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    state: StateArgs,
}

impl ChatArgs {
    fn run(self) -> i32 {
        let approval = match approval_or_env(self.session.approval, Approval::Ask) {
            Ok(a) => a,
            Err(e) => {
                tern::errln!("tern: {e}");
                return 2;
            }
        };
        tern::repl::run(tern::repl::ChatOptions {
            provider: self.model.flags(),
            config: self.model.config(approval, self.max_turns),
            continue_: self.session.continue_,
            resume: self.session.resume,
            state_dir: self.state.dir(),
            idle_timeout: Duration::from_secs(self.model.idle_timeout),
        })
    }
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
}

#[derive(Args, Clone)]
struct StateArgs {
    /// State folder to use instead of <workspace>/.tern [env: TERN_STATE_DIR].
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

impl StateArgs {
    /// `--state-dir`, else a non-empty TERN_STATE_DIR. Read here rather than by clap, so an
    /// empty or odd variable never breaks a command that has nothing to do with it.
    fn dir(&self) -> Option<PathBuf> {
        self.state_dir.clone().or_else(|| {
            std::env::var_os("TERN_STATE_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }
}

/// `--approval`, else TERN_APPROVAL (ask, auto or never), else `default`. Errors on a bad
/// TERN_APPROVAL, but only for the commands that use it.
fn approval_or_env(flag: Option<Approval>, default: Approval) -> Result<Approval, String> {
    use clap::ValueEnum;
    if let Some(a) = flag {
        return Ok(a);
    }
    match std::env::var("TERN_APPROVAL") {
        Ok(v) if !v.trim().is_empty() => Approval::from_str(v.trim(), true)
            .map_err(|_| format!("TERN_APPROVAL={v:?}: expected ask, auto or never")),
        _ => Ok(default),
    }
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// Wire format: openai (any OpenAI-compatible server) or anthropic.
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// Model name [env: TERN_MODEL].
    #[arg(long)]
    model: Option<String>,
    /// Provider base URL [env: OPENAI_BASE_URL or ANTHROPIC_BASE_URL].
    #[arg(long)]
    base_url: Option<String>,
    /// The model's context window in tokens; compaction starts at 80 % of it.
    #[arg(long, default_value_t = 128_000, value_parser = clap::value_parser!(u64).range(1024..))]
    context_window: u64,
    /// Longest total time spent retrying a failing provider, in seconds (at most a day).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    max_retry_time: u64,
    /// Longest silence from the provider before an attempt fails, in seconds (1 s to a day).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout: u64,
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
        cfg
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// The interactive REPL (the default when no command is given).
    Chat(ChatArgs),
    /// Run one task headless: the model works until it answers without tool calls.
    ///
    /// Bash commands run without asking (--approval auto is the default here).
    Exec {
        /// The task; `-` reads it from stdin.
        prompt: Option<String>,
        /// Print events as JSON lines on stdout (the last one is always `result`).
        #[arg(long)]
        json: bool,
        /// Model requests (agentic turns) allowed before stopping with exit code 3.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        max_turns: u32,
        #[command(flatten)]
        session: SessionArgs,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        state: StateArgs,
    },
    /// Speak the Agent Client Protocol (ACP v1) on stdin/stdout, for editors (Zed, Neovim, …).
    ///
    /// Sessions live in the `.tern/` of each session's cwd. Commands ask the client first
    /// (--approval ask is the default here; the client's mode selector switches ask / auto / plan).
    Acp {
        /// Model requests (agentic turns) allowed per prompt before it stops (stop reason
        /// max_turn_requests).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        max_turns: u32,
        /// When bash may run at first: ask, auto or never (= plan mode) [env: TERN_APPROVAL].
        #[arg(long, value_enum)]
        approval: Option<Approval>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        state: StateArgs,
    },
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
        #[command(flatten)]
        state: StateArgs,
    },
    /// The sidebar: To-do ledger, goal, budget, plan state and cache figures.
    Status {
        #[command(flatten)]
        target: TargetArgs,
        /// Lines available (default: the terminal's height).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        height: Option<u16>,
    },
    /// Redraw `tern status` live when the session changes (for a tmux pane). Ctrl-C leaves.
    Watch {
        #[command(flatten)]
        target: TargetArgs,
        /// Lines available (default: the terminal's height).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        height: Option<u16>,
    },
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
    /// List the op table: every verb and its slash command.
    Ops {
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
    },
}

impl TargetArgs {
    fn as_cli(&self) -> tern::cli::Target {
        tern::cli::Target {
            session: self.session.clone(),
            json: self.json,
            state_dir: self.state.dir(),
        }
    }
}

/// Runs op `id` as a CLI verb and prints its receipt; exit 0 when ok, 1 when not.
fn verb(id: &str, arg: Option<&str>, target: &TargetArgs, wait: bool) -> i32 {
    tern::cli::verb(id, arg, &target.as_cli(), wait)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let code = match cli.cmd {
        None => cli.chat.run(),
        Some(cmd) => run(cmd),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
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
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json_exec = args.iter().any(|a| a == "exec") && args.iter().any(|a| a == "--json");
    let _ = e.print();
    if json_exec {
        let text = e.to_string();
        tern::exec::print_sessionless_result(text.lines().next().unwrap_or("usage error"), 2);
    }
    ExitCode::from(2)
}

fn run(cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Chat(args) => args.run(),
        Cmd::Exec {
            prompt,
            json,
            max_turns,
            session,
            model,
            state,
        } => {
            let approval = match approval_or_env(session.approval, Approval::Auto) {
                Ok(a) => a,
                Err(e) => {
                    tern::errln!("tern: {e}");
                    if json {
                        tern::exec::print_sessionless_result(&e, 2);
                    }
                    return 2;
                }
            };
            tern::exec::run(ExecOptions {
                prompt,
                json,
                provider: model.flags(),
                config: model.config(approval, max_turns),
                continue_: session.continue_,
                resume: session.resume,
                state_dir: state.dir(),
                idle_timeout: Duration::from_secs(model.idle_timeout),
            })
        }
        Cmd::Acp {
            max_turns,
            approval,
            model,
            state,
        } => {
            let approval = match approval_or_env(approval, Approval::Ask) {
                Ok(a) => a,
                Err(e) => {
                    tern::errln!("tern: {e}");
                    return 2;
                }
            };
            tern::acp::run(tern::acp::AcpOptions {
                provider: model.flags(),
                config: model.config(approval, max_turns),
                state_dir: state.dir(),
                idle_timeout: Duration::from_secs(model.idle_timeout),
            })
        }
        Cmd::Demo { workspace, json } => tern::demo::run(workspace, json),
        Cmd::Stats {
            session,
            json,
            state,
        } => {
            let target = TargetArgs {
                session,
                json,
                state,
            };
            if json {
                tern::cli::stats_json(&target.as_cli())
            } else {
                verb("stats", None, &target, false)
            }
        }
        Cmd::Status { target, height } => {
            tern::cli::status(&target.as_cli(), height.map(usize::from))
        }
        Cmd::Watch { target, height } => {
            tern::cli::watch(&target.as_cli(), height.map(usize::from))
        }
        Cmd::Plan { cmd } => match cmd {
            PlanCmd::Show { target } => verb("plan.show", None, &target, false),
            PlanCmd::Path { target } => verb("plan.path", None, &target, false),
            PlanCmd::Draft { file, target } => match tern::cli::read_draft(file.as_deref()) {
                Ok(text) => verb("plan.draft", Some(&text), &target, false),
                Err(e) => {
                    tern::errln!("tern: {e}");
                    2
                }
            },
            PlanCmd::Edit { target } => verb("plan.edit", None, &target, false),
            PlanCmd::Confirm { target, wait } => verb("plan.confirm", None, &target, wait),
            PlanCmd::Cancel { target } => verb("plan.cancel", None, &target, false),
            PlanCmd::Clear { target, wait } => verb("plan.clear", None, &target, wait),
        },
        Cmd::Compact { target, wait } => verb("compact", None, &target, wait),
        Cmd::Relay { target, start } => {
            if start {
                tern::cli::relay_start(&target.as_cli())
            } else {
                verb("relay", None, &target, false)
            }
        }
        Cmd::Sessions { state } => {
            let target = TargetArgs {
                session: None,
                json: false,
                state,
            };
            verb("sessions", None, &target, false)
        }
        Cmd::Ops { json } => tern::cli::ops(json),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
