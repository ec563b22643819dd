//! Tool dispatch: one tool call in, one tool result out. Errors are results the model reads
//! ([`ToolError`], prefixed `Error: ` in one place, [`ToolResult::from`]), never crashes.

use std::path::PathBuf;
use std::time::Instant;

use super::answer::Call;
use super::{Answer, Approval, Runtime, Surface};
use crate::domain::ledger::{self, Ledger};
use crate::event::{ActiveItem, BashFacts, Event};
use crate::message::Message;
use crate::store::files;
use crate::tools::{ToolError, bash, work};

/// One tool result before it is stored.
pub(super) struct ToolResult {
    /// What the model reads.
    pub content: String,
    /// Stored as an error result.
    pub is_error: bool,
    /// The person interrupted this tool: the turn ends after storing it.
    pub interrupted: bool,
    /// The process facts of a bash call, for the `tool_result` event.
    pub bash: Option<BashFacts>,
    /// Wall time of the call.
    pub duration_ms: u64,
}

/// A command the person set, after it ran (see [`Runtime::bash_for_person`]).
pub(crate) struct PersonRun {
    /// The shell's exit code (None: killed, timed out, or refused before it ran).
    pub exit_code: Option<i32>,
    /// It did not run, or tern refused what it did (the state-folder guard).
    pub refused: bool,
    /// Its output as a tool result shapes it.
    pub content: String,
    /// Its timeout passed and its process group was killed.
    pub timed_out: bool,
    /// Wall time.
    pub duration_ms: u64,
}

impl From<Result<String, ToolError>> for ToolResult {
    fn from(r: Result<String, ToolError>) -> Self {
        let (content, is_error, interrupted) = match r {
            Ok(s) => (s, false, false),
            Err(e) => {
                let interrupted = matches!(e, ToolError::Interrupted(_));
                (e.to_model(), true, interrupted)
            }
        };
        ToolResult {
            content,
            is_error,
            interrupted,
            bash: None,
            duration_ms: 0,
        }
    }
}

impl Runtime {
    /// Runs one tool call: its PreToolUse hooks, then its `tool_call` event (with the arguments
    /// that will run), then the tool. The `tool_result` event follows
    /// once the result is stored (see `turn.rs`); so does noticing a draft the command wrote.
    pub(super) fn run_tool(&mut self, c: &Call, ui: &mut dyn Surface) -> ToolResult {
        let call = &c.call;
        let started = Instant::now();
        // The person's PreToolUse hooks run first: they may deny the call or replace its
        // arguments, and the `tool_call` the person sees (and the question they answer) must be
        // what will run, not what the model first asked for.
        let pre = self.hook_pre_tool(call, ui);
        let updated = match (&c.bad_arguments, &pre) {
            (None, super::hooks::PreTool::Run(Some(u))) if *u != call.arguments => Some(u.clone()),
            _ => None,
        };
        if updated.is_some() {
            let asked = match call.arguments.get("command").and_then(|v| v.as_str()) {
                Some(cmd) => format!("`{}`", crate::render::safe_line(cmd)),
                None => call.arguments.to_string(),
            };
            self.emit(
                ui,
                Event::warning(format!(
                    "a PreToolUse hook replaced the arguments of this {} call (the model asked for {asked}); what runs is shown next",
                    call.name
                )),
            );
        }
        self.emit(
            ui,
            Event::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: updated.clone().unwrap_or_else(|| call.arguments.clone()),
            },
        );
        let args = match (&c.bad_arguments, pre) {
            (None, super::hooks::PreTool::Deny(why)) => {
                let mut r: ToolResult = Err(ToolError::Refused(why)).into();
                r.duration_ms = started.elapsed().as_millis() as u64;
                return r;
            }
            _ => updated,
        };
        let args = args.as_ref().unwrap_or(&call.arguments);
        let mut result = match (&c.bad_arguments, call.name.as_str()) {
            (Some(why), _) => Err(ToolError::Arguments(why.clone())).into(),
            (None, "bash") => self.tool_bash(args, ui),
            (None, name) => {
                let r = self.tool_other(name, args, ui).into();
                // The ledger and plan tools wrote tern's files themselves.
                self.guard_refresh();
                r
            }
        };
        if c.bad_arguments.is_none() {
            let exit = result.bash.as_ref().and_then(|b| b.exit_code);
            // PostToolUse sees the input that ran.
            let ran = crate::message::ToolCall {
                arguments: args.clone(),
                ..call.clone()
            };
            self.hook_post_tool(
                &ran,
                &mut result.content,
                result.is_error,
                exit,
                result.interrupted,
                ui,
            );
        }
        result.duration_ms = started.elapsed().as_millis() as u64;
        result
    }

    /// The tools other than bash: plan tools, the ledger, strategy.
    fn tool_other(
        &mut self,
        name: &str,
        args: &serde_json::Value,
        ui: &mut dyn Surface,
    ) -> Result<String, ToolError> {
        let parent = self.parent.clone();
        match name {
            "plan_draft" => match args.get("content").and_then(|v| v.as_str()) {
                Some(content) => super::plan::draft(&self.session, parent.as_deref(), content, ui)
                    .map(|_| "Draft saved; it is not in your prompt.".to_string()),
                None => Err(ToolError::Arguments(
                    "plan_draft needs {\"content\": \"…\"} (a string).".into(),
                )),
            },
            "plan_confirm" => {
                let keep = self.inflight_index();
                self.plan_confirm(keep, ui).map(|_| {
                    "Plan confirmed: it is now <locked_plan> in your system prompt.".to_string()
                })
            }
            "plan_cancel" => super::plan::cancel(&self.session, parent.as_deref(), ui),
            "plan_clear" => {
                let keep = self.inflight_index();
                self.plan_clear(keep, ui)
            }
            "update_plan" => self.tool_strategy(args),
            name if work::is_work_tool(name) => self.tool_work(name, args, ui),
            name => Err(ToolError::Arguments(format!(
                "there is no tool named {name:?}. The tools are: {}.",
                self.prefix
                    .tools
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Index of the assistant message whose tool calls are running (the history's length when
    /// there is none).
    pub(super) fn inflight_at(&self) -> usize {
        self.inflight_index().unwrap_or(self.prefix.history.len())
    }

    /// Index of the assistant message whose tool calls are running (the last one stored).
    fn inflight_index(&self) -> Option<usize> {
        self.prefix
            .history
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
    }

    /// Whether bash may run this command now (approval policy, the person's answer).
    fn approve(&mut self, command: &str, ui: &mut dyn Surface) -> Result<(), ToolError> {
        use super::hooks::Permission;
        // A PreToolUse hook's allow skips the question, its ask asks whatever the policy.
        let ask = match (self.hook_state.permission.take(), self.cfg.approval) {
            (_, Approval::Never) => true,
            (Some(Permission::Allow), _) => false,
            (Some(Permission::Ask), _) => true,
            (None, Approval::Ask) => !self.approved_always,
            (None, Approval::Auto) => false,
        };
        match self.cfg.approval {
            Approval::Never => Err(ToolError::Refused(
                "bash is disabled in this session (--approval never). You can only plan: write the plan with plan_draft.".into(),
            )),
            _ if ask => match ui.approve(command) {
                Answer::Yes => Ok(()),
                Answer::Always => {
                    self.approved_always = true;
                    Ok(())
                }
                Answer::No => Err(ToolError::Refused(
                    "the person declined to run this command.".into(),
                )),
                Answer::Unavailable => Err(ToolError::Refused(
                    "not run: commands need the person's approval (--approval ask) and there is no terminal to ask on.".into(),
                )),
                Answer::Disconnected => Err(ToolError::Refused(
                    "not run: the client disconnected before answering the permission question (no one declined it).".into(),
                )),
                Answer::Cancelled => Err(ToolError::Refused(
                    "not run: the turn was cancelled while the permission question was open (no one declined it).".into(),
                )),
            },
            _ => Ok(()),
        }
    }

    fn tool_bash(&mut self, args: &serde_json::Value, ui: &mut dyn Surface) -> ToolResult {
        let args = match bash::parse_args(args) {
            Ok(a) => a,
            Err(e) => return Err(ToolError::Arguments(e)).into(),
        };
        if let Err(e) = self.approve(&args.command, ui) {
            return Err(e).into();
        }
        self.bash_sandboxed(&args.command, args.timeout, ui)
    }

    /// A command the person set (the `--goal`), run exactly as the model's commands run (the
    /// same sandbox, environment, guard and output shaping) but without an approval question.
    pub(crate) fn bash_for_person(
        &mut self,
        command: &str,
        timeout: std::time::Duration,
        ui: &mut dyn Surface,
    ) -> PersonRun {
        let started = Instant::now();
        let r = self.bash_sandboxed(command, timeout, ui);
        PersonRun {
            exit_code: r.bash.as_ref().and_then(|b| b.exit_code),
            refused: r.bash.is_none() || r.is_error,
            timed_out: r.bash.as_ref().is_some_and(|b| b.timed_out),
            content: crate::store::redact::for_model(&r.content).into_owned(),
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }

    /// Runs `command` in the sandbox (the bash tool's path after its approval).
    fn bash_sandboxed(
        &mut self,
        command: &str,
        timeout: std::time::Duration,
        ui: &mut dyn Surface,
    ) -> ToolResult {
        // The paths as they are, bytes and all: a workspace whose path is not UTF-8 must still
        // give the command a $PLAN_DRAFT_FILE it can write.
        let env = [
            ("PLAN_DRAFT_FILE", self.session.path(files::DRAFT).into()),
            ("PLAN_FILE", self.session.path(files::PLAN).into()),
            ("TERN_SESSION_DIR", self.session.dir.clone().into()),
        ];
        let spill = self.session.path(files::SPILL);
        // Full outputs go to spill/: never through a link planted in its place.
        if let Err(e) = crate::store::fsutil::ensure_dir(&spill) {
            return Err(ToolError::Failed(format!("not run: {e}"))).into();
        }
        // A sandboxed mode that this machine cannot enforce refuses, never runs unsandboxed.
        // Emptied before the call too: a job an earlier call left running may have written.
        if self.tmp.as_ref().is_some_and(|t| t.clear().is_err()) {
            self.tmp = None;
        }
        if self.cfg.sandbox.is_sandboxed() && self.tmp.is_none() {
            match crate::sandbox::TempFolder::new() {
                Ok(t) => self.tmp = Some(t),
                Err(e) => return Err(ToolError::Refused(format!("not run: {e}"))).into(),
            }
        }
        let jail = match self.jail_for_commands() {
            Ok(j) => j,
            Err(e) => return Err(ToolError::Refused(format!("not run: {e}"))).into(),
        };
        let policy = crate::sandbox::Policy {
            mode: self.cfg.sandbox,
            workspace: self.workspace.clone(),
            no_network: self.cfg.no_network,
            // In the jail the network namespace holds it, and loopback inside still works.
            network_in_namespace: jail.is_some(),
            add_dirs: self.cfg.reach.add_dirs.clone(),
            draft_file: Some(self.session.path(files::DRAFT)),
            tmpdir: self.tmp.as_ref().map(|t| t.path().to_path_buf()),
        };
        let prepared = match crate::sandbox::prepare(&policy) {
            Ok(p) => p,
            Err(e) => return Err(ToolError::Refused(format!("not run: {e}"))).into(),
        };
        // Without a jail (danger-full-access, --no-jail), changes since tern last wrote its
        // files (a process an earlier command left behind) are undone before this command
        // runs, and reported with its result. In the jail the state folder is read-only.
        let before = if jail.is_none() {
            let b = self.guard_check();
            if self.guard.is_none() {
                self.guard_refresh();
            }
            b
        } else {
            None
        };
        // The git index's submodules as this command finds them (what a job left running added
        // since the last command is reported with this one).
        let mut subs: Vec<String> = jail
            .as_ref()
            .map(|j| j.new_submodules())
            .unwrap_or_default();
        let req = bash::BashRequest {
            command,
            timeout,
            cwd: &self.workspace,
            env: &env,
            env_remove: crate::config::SECRET_ENV,
            pass_env: &self.cfg.reach.pass_env,
            spill_dir: &spill,
            groups: &self.groups,
            sandbox: Some(&prepared),
            jail: jail.as_deref(),
        };
        self.ran_commands = true;
        ui.progress("running… (Ctrl-C stops it)");
        let out = match bash::run(&req, &self.cancel) {
            Ok(out) => out,
            Err(e) => return Err(ToolError::Failed(format!("could not run bash: {e}"))).into(),
        };
        if out.spill_path.is_some() {
            crate::tools::output::enforce_spill_budget(
                &spill,
                crate::tools::bash::SPILL_BUDGET_BYTES,
            );
        }
        // Nothing a call leaves in its TMPDIR reaches the next one; a folder that cannot be
        // emptied (a command changed its mode) is dropped and made anew.
        if self.tmp.as_ref().is_some_and(|t| t.clear().is_err()) {
            self.tmp = None;
        }
        let refused = match &jail {
            None => self.guard_check().or(before),
            Some(j) => {
                let planted = j.unplant();
                subs.extend(j.new_submodules());
                let sub_note = (!subs.is_empty()).then(|| {
                    let msg = format!(
                        "this command added {} to the git index as a submodule: git reads that folder's own .git configuration (which the command wrote, and which can name a command to run) at the person's next git status; check `git diff --cached` before running git there.",
                        subs.join(", ")
                    );
                    self.emit(ui, crate::event::Event::Warning { message: msg.clone() });
                    msg
                });
                let plant_note = (!planted.is_empty()).then(|| {
                    let names: Vec<String> =
                        planted.iter().map(|p| p.display().to_string()).collect();
                    let msg = format!(
                        "this command created {}, which would make git read another folder's configuration and hooks at the person's next git command; tern removed it.",
                        names.join(", ")
                    );
                    self.emit(ui, crate::event::Event::Warning { message: msg.clone() });
                    msg
                });
                match (plant_note, sub_note) {
                    (Some(a), Some(b)) => Some(format!("{a} {b}")),
                    (a, b) => a.or(b),
                }
            }
        };
        let mut content = out.content;
        if let Some(msg) = &refused {
            content.push_str("\nError: ");
            content.push_str(msg);
        }
        ToolResult {
            is_error: out.timed_out || out.interrupted || refused.is_some(),
            interrupted: out.interrupted,
            bash: Some(BashFacts {
                exit_code: out.exit_code,
                timed_out: out.timed_out,
                interrupted: out.interrupted,
                output_bytes: out.output_bytes,
                spill: out.spill_path.as_ref().map(|p| p.display().to_string()),
            }),
            content,
            duration_ms: 0,
        }
    }

    /// The jail this runtime's commands run in: `None` in danger-full-access and with
    /// `--no-jail` (Landlock alone); started at the first command (its cost is paid once, not
    /// per session that never runs one) and restarted only when its private `TMPDIR` had to be
    /// made anew.
    ///
    /// Errors: the one line of [`crate::sandbox::jail::refusal`], for this and every later
    /// command (the kernel's answer does not change within a run).
    pub(crate) fn jail_for_commands(
        &mut self,
    ) -> Result<Option<std::sync::Arc<crate::sandbox::jail::Jail>>, String> {
        use crate::sandbox::jail::{Jail, JailError, JailPaths, JailSlot, JailSpec, refusal};
        if !self.cfg.sandbox.is_sandboxed() || self.cfg.reach.no_jail {
            return Ok(None);
        }
        let tmp = self.tmp.as_ref().map(|t| t.path().to_path_buf());
        if let JailSlot::Running(j) = &self.jail {
            // The same private TMPDIR (it is made anew only when it could not be emptied) and
            // the jail still there: keep it. Else a new one.
            let same_tmp = tmp.as_ref().is_none_or(|t| {
                j.spec().writable.contains(t)
                    || std::fs::canonicalize(t).is_ok_and(|t| j.spec().writable.contains(&t))
            });
            if same_tmp && j.is_alive() {
                return Ok(Some(j.clone()));
            }
            self.jail = JailSlot::Unstarted;
        }
        if let JailSlot::Refused(why) = &self.jail {
            return Err(why.clone());
        }
        let draft = self.session.path(files::DRAFT);
        let state = self
            .state_root()
            .unwrap_or_else(|| self.session.dir.clone());
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let spec = JailSpec::new(&JailPaths {
            workspace: &self.workspace,
            workspace_writable: self.cfg.sandbox == crate::policy::Mode::WorkspaceWrite,
            state_dir: &state,
            draft: Some(&draft),
            tmpdir: tmp.as_deref(),
            add_dirs: &self.cfg.reach.add_dirs,
            read_dirs: &self.cfg.reach.read_dirs,
            home: home.as_deref(),
            no_network: self.cfg.no_network,
        });
        // Debug builds only: a test switch that makes the kernel's refusal happen here.
        #[cfg(debug_assertions)]
        let fake = std::env::var_os(crate::sandbox::jail::FAKE_REFUSAL_ENV).is_some();
        #[cfg(not(debug_assertions))]
        let fake = false;
        let started = if fake {
            Err(JailError {
                step: "user namespace".into(),
                reason: format!(
                    "Operation not permitted ({} is set, a test switch)",
                    crate::sandbox::jail::FAKE_REFUSAL_ENV
                ),
            })
        } else {
            let exe = self
                .cfg
                .jail_exe
                .clone()
                .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
            Jail::start(&exe, &spec, Some(&self.groups))
        };
        match started {
            Ok(j) => {
                let j = std::sync::Arc::new(j);
                self.jail = JailSlot::Running(j.clone());
                Ok(Some(j))
            }
            Err(e) => {
                let why = refusal(self.cfg.sandbox, &e);
                self.jail = JailSlot::Refused(why.clone());
                Err(why)
            }
        }
    }

    fn tool_work(
        &mut self,
        name: &str,
        args: &serde_json::Value,
        ui: &mut dyn Surface,
    ) -> Result<String, ToolError> {
        let io = |e: std::io::Error| ToolError::Failed(e.to_string());
        let lock = self.session.lock().map_err(io)?;
        let ledger: Ledger = self
            .session
            .read_json(files::LEDGER)
            .map_err(|e| {
                ToolError::Failed(format!(
                    "the ledger cannot be read ({e}); fix or delete ledger.json"
                ))
            })?
            .unwrap_or_default();
        if name == "todo_list" {
            // Reads only: the rendered To-do body, the same bytes as the work-state block's.
            return Ok(work::todo_list(&ledger));
        }
        let mut plan =
            super::plan::plan_file(&self.session).map_err(|e| ToolError::Failed(e.to_string()))?;
        let applied = ledger::apply(
            &ledger,
            name,
            args,
            plan.draft_pending(),
            crate::clock::now_unix(),
        )
        .map_err(ToolError::Arguments)?;
        // Any accepted write counts (the reply names the new revision).
        let changed = applied.ledger != ledger;
        if changed {
            self.session
                .write_json_locked(&lock, files::LEDGER, &applied.ledger)
                .map_err(|e| ToolError::Failed(format!("could not save the ledger: {e}")))?;
        }
        let transition = if applied.started_or_finished {
            let t = plan.work_started();
            if t.is_some() {
                self.session
                    .write_json_locked(&lock, files::PLAN_STATE, &plan)
                    .map_err(io)?;
            }
            t
        } else {
            None
        };
        drop(lock);
        if changed {
            let l = &applied.ledger;
            let in_progress = l.in_progress().map(|(_, i)| ActiveItem {
                id: i.id.clone(),
                content: i.content.clone(),
            });
            self.emit(
                ui,
                Event::WorkUpdate {
                    settled: l.settled(),
                    total: l.items.len(),
                    in_progress,
                    revision: l.revision,
                },
            );
        }
        if let Some(t) = transition {
            self.emit(ui, super::plan::transition_event(&t));
        }
        Ok(applied.reply)
    }

    fn tool_strategy(&mut self, args: &serde_json::Value) -> Result<String, ToolError> {
        let (strategy, ack) =
            crate::domain::strategy::apply_strategy(args).map_err(ToolError::Arguments)?;
        let lock = self
            .session
            .lock()
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        self.session
            .write_json_locked(&lock, files::STRATEGY, &strategy)
            .map_err(|e| ToolError::Failed(format!("could not save the strategy: {e}")))?;
        Ok(ack)
    }
}
