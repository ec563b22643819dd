//! The one door of hooks (src/hooks) into the runtime: each event's input, what its hooks' answers do, and
//! the `hook` event of every run. The turn loop calls these methods at its fixed points and does
//! nothing else with hooks; with no hook configured each is one check of an empty list.
//!
//! What a hook's answer means is the hooks room's pure core (`hooks::answer`); this door applies
//! it. What a hook adds for the model goes into the newest message only: the tool result of the
//! call, the stored user message, the message that continues a stopped turn.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Failure, Runtime, Surface};
use crate::event::{Event, GoalResult, HookDecision};
use crate::hooks::answer::{Permission, Verdict, read_answer};
use crate::hooks::goal::{self, Goal, LastRun};
use crate::hooks::{HookEvent, Hooks};
use crate::message::ToolCall;
use crate::store::files;

/// Characters of a hook's message kept in its `hook` event.
const EVENT_MESSAGE_CHARS: usize = 2000;
/// Bytes of what hooks add for the model in one message (the rest is cut, with a note).
const MODEL_TEXT_BYTES: usize = 16_000;

/// A runtime's hooks and what they left pending.
#[derive(Debug, Default)]
pub struct HookState {
    hooks: Arc<Hooks>,
    /// SessionStart ran (at this runtime's first turn).
    started: bool,
    /// SessionEnd ran.
    ended: bool,
    /// What SessionStart added for the model, for the next stored prompt.
    pending: Vec<String>,
    /// A hook said `continue: false`: the turn stops at the next step.
    pub(crate) stop: Option<String>,
    /// A PreToolUse hook's permission for the call about to run.
    pub(crate) permission: Option<Permission>,
    /// What the PreToolUse hooks of the call about to run added for the model
    /// (`additionalContext`): appended to its result.
    pub(crate) pre_context: Vec<String>,
    /// How the goal ended in the last turn (for the `result` event).
    pub(crate) goal: Option<crate::event::GoalResult>,
    /// The hooks files and the trust record (the state-folder guard keeps them).
    protected: Vec<std::path::PathBuf>,
    /// `"async": true` hooks started and not yet waited for.
    asyncs: Vec<AsyncRun>,
}

/// An async hook running on a thread of its own: waited for when the run ends, within its own
/// timeout, so its last upload or notification is not lost (issue 46).
#[derive(Debug)]
pub(super) struct AsyncRun {
    command: String,
    timeout: std::time::Duration,
    /// Whether its timeout killed it.
    thread: std::thread::JoinHandle<bool>,
}

impl HookState {
    /// The files a model's command must not change (see [`crate::hooks::Files::protected`]).
    pub(crate) fn protected(&self) -> &[std::path::PathBuf] {
        &self.protected
    }
}

/// What a PreToolUse gate decided.
pub enum PreTool {
    /// Run the call, with these arguments when a hook replaced them (`updatedInput`).
    Run(Option<Value>),
    /// Do not run it: the model reads this as the tool result.
    Deny(String),
}

/// How many times the Stop (or SubagentStop) hooks may send the model back to work in one turn.
/// Claude Code leaves the loop to the hook (`stop_hook_active` tells it it is re-running); a
/// hook that ignores it and always exits 2 would loop until `--max-turns`, spending tokens for
/// nothing. After this many continuations the next block ends the turn as failed, saying why.
pub const STOP_HOOK_CONTINUATIONS: u32 = 5;

/// Per-turn state of the Stop gate.
#[derive(Debug, Default)]
pub struct StopGate {
    /// A Stop hook continued this turn already (`stop_hook_active`).
    pub hook_active: bool,
    /// Times the Stop hooks continued this turn (bounded by [`STOP_HOOK_CONTINUATIONS`]).
    pub hook_continues: u32,
    /// Goal runs in this turn.
    pub attempts: u32,
}

/// Claude Code's name for a tool: `Bash` for bash (as Claude and Codex name it), tern's own
/// names for the others.
pub fn tool_name(name: &str) -> &str {
    if name == "bash" { "Bash" } else { name }
}

impl Runtime {
    /// Uses `hooks` from now on, and guards `files` (the launcher, when it opens the runtime);
    /// the workspace files the hooks run are read-only to commands.
    pub(crate) fn set_hooks(&mut self, hooks: Arc<Hooks>, files: Vec<std::path::PathBuf>) {
        self.commands.protect(hooks.covered_files());
        self.hook_state.hooks = hooks;
        self.hook_state.protected = files;
    }

    /// The hooks of this runtime.
    pub fn hooks(&self) -> &Hooks {
        &self.hook_state.hooks
    }

    /// The hooks of this runtime, shared (MCP calls run them from the channel's threads).
    pub(crate) fn hook_state_hooks(&self) -> Arc<Hooks> {
        self.hook_state.hooks.clone()
    }

    /// The fields every hook's input carries.
    fn hook_input(&self, event: HookEvent) -> Map<String, Value> {
        common_input(
            &self.session.id,
            &self.session.path(files::CONVERSATION),
            self.commands.workspace(),
            event,
            self.cfg.approval,
        )
    }

    /// Runs the hooks of `event` matching `value`, one at a time in file order, each announced
    /// as a `hook` event, and combines their answers.
    fn run_hooks(
        &mut self,
        event: HookEvent,
        value: Option<&str>,
        fields: Map<String, Value>,
        ui: &mut dyn Surface,
    ) -> Verdict {
        let mut verdict = Verdict::default();
        let hooks = self.hook_state.hooks.clone();
        let mut handlers = hooks.matching(event, value);
        handlers.retain(|h| h.applies(&fields));
        if handlers.is_empty() {
            return verdict;
        }
        let mut input = self.hook_input(event);
        input.extend(fields);
        let input = Value::Object(input).to_string();
        let (session, parent) = (&self.session, self.lineage.parent.as_deref());
        let (commands, cancel) = (&mut self.commands, &self.cancel);
        let asyncs = &mut self.hook_state.asyncs;
        asyncs.retain(|a| !a.thread.is_finished());
        run_each(
            &handlers,
            event,
            &mut verdict,
            ui,
            &mut |h| {
                // A default jail (the hook runs workspace code) is left out only where the
                // model's commands have no jail either; an asked one never is.
                let jail = h.jail && (h.jail_asked == Some(true) || commands.jail_available());
                if h.background && !jail {
                    asyncs.extend(background(
                        h,
                        event,
                        &input,
                        commands.workspace(),
                        commands.groups_arc(),
                        session,
                        parent,
                    ));
                    return Ok(None);
                }
                Ok(Some(if jail {
                    in_jail(
                        commands,
                        &h.command,
                        input.as_bytes(),
                        h.timeout,
                        cancel,
                        session,
                    )
                } else {
                    crate::hooks::run::run(
                        &h.command,
                        input.as_bytes(),
                        commands.workspace(),
                        h.timeout,
                        cancel,
                        commands.groups(),
                    )
                }))
            },
            &|ui, ev| {
                super::emit_to(session, parent, ui, ev);
            },
        );
        if let Some(reason) = &verdict.stop {
            self.hook_state.stop = Some(reason.clone());
        }
        verdict
    }

    /// Before a tool call runs. A deny (exit 2, `permissionDecision: deny`) keeps it from
    /// running; allow / ask set the call's approval; `updatedInput` replaces its arguments.
    pub(crate) fn hook_pre_tool(&mut self, call: &ToolCall, ui: &mut dyn Surface) -> PreTool {
        self.hook_state.permission = None;
        self.hook_state.pre_context.clear();
        if self.hook_state.hooks.is_empty() {
            return PreTool::Run(None);
        }
        let name = tool_name(&call.name).to_string();
        let mut f = Map::new();
        f.insert("tool_name".into(), Value::from(name.as_str()));
        f.insert("tool_input".into(), call.arguments.clone());
        f.insert("tool_use_id".into(), Value::from(call.id.as_str()));
        let v = self.run_hooks(HookEvent::PreToolUse, Some(&name), f, ui);
        let mut reasons = v.block;
        reasons.extend(v.deny);
        if !reasons.is_empty() {
            return PreTool::Deny(format!(
                "blocked by a PreToolUse hook: {}",
                for_model(&reasons.join("\n"))
            ));
        }
        if let Some(reason) = &v.stop {
            return PreTool::Deny(format!(
                "not run: a PreToolUse hook stopped the turn: {reason}"
            ));
        }
        self.hook_state.permission = v.permission;
        self.hook_state.pre_context = v.context;
        PreTool::Run(v.updated_input.filter(Value::is_object))
    }

    /// Whether a PostToolUse hook reads bash calls (then their stdout and stderr are read
    /// apart, for its `tool_response`).
    pub(crate) fn hooks_read_streams(&self) -> bool {
        !self
            .hook_state
            .hooks
            .matching(HookEvent::PostToolUse, Some(tool_name("bash")))
            .is_empty()
    }

    /// After a tool call ran, before its result is stored: what the hooks add (exit 2's stderr,
    /// `decision: block`'s reason, `additionalContext`) is appended to the result the model
    /// reads. A bash call's `tool_response` is Claude Code's: `stdout` and `stderr` apart
    /// (`streams`, read so because a hook is there), `interrupted`, `isImage`; tern adds
    /// `exit_code` and `output` (what the model read: both streams, shaped).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hook_post_tool(
        &mut self,
        call: &ToolCall,
        content: &mut String,
        is_error: bool,
        exit_code: Option<i32>,
        interrupted: bool,
        streams: Option<Box<crate::tools::bash::Streams>>,
        ui: &mut dyn Surface,
    ) {
        let pre = std::mem::take(&mut self.hook_state.pre_context);
        if self.hook_state.hooks.is_empty() || interrupted {
            return;
        }
        if !pre.is_empty() {
            content.push_str("\n[PreToolUse hook]\n");
            content.push_str(&for_model(&pre.join("\n")));
        }
        let name = tool_name(&call.name).to_string();
        let response = if call.name == "bash" {
            // Without streams (a refused call, or no output read): what the model read.
            let s = streams.map_or_else(
                || crate::tools::bash::Streams {
                    stdout: content.clone(),
                    stderr: String::new(),
                },
                |s| *s,
            );
            json!({"stdout": s.stdout, "stderr": s.stderr, "interrupted": interrupted,
                   "isImage": false, "exit_code": exit_code, "output": content.as_str()})
        } else {
            json!({"content": content.as_str(), "is_error": is_error})
        };
        let mut f = Map::new();
        f.insert("tool_name".into(), Value::from(name.as_str()));
        f.insert("tool_input".into(), call.arguments.clone());
        f.insert("tool_response".into(), response);
        f.insert("tool_use_id".into(), Value::from(call.id.as_str()));
        let v = self.run_hooks(HookEvent::PostToolUse, Some(&name), f, ui);
        let mut added = v.block;
        added.extend(v.context);
        if !added.is_empty() {
            content.push_str("\n[PostToolUse hook]\n");
            content.push_str(&for_model(&added.join("\n")));
        }
    }

    /// Before a prompt is stored: SessionStart at this runtime's first turn, then
    /// UserPromptSubmit. Returns the text to store (the prompt, then what the hooks added).
    ///
    /// Errors: a hook refused the prompt (exit 2, `decision: block`, `continue: false`): nothing
    /// is stored.
    pub(crate) fn hook_prompt(
        &mut self,
        prompt: &str,
        ui: &mut dyn Surface,
    ) -> Result<String, Failure> {
        if self.hook_state.hooks.is_empty() {
            return Ok(prompt.to_string());
        }
        self.hook_session_start(ui);
        if prompt.trim().is_empty() {
            return Ok(String::new());
        }
        let mut f = Map::new();
        f.insert("prompt".into(), Value::from(prompt));
        let v = self.run_hooks(HookEvent::UserPromptSubmit, None, f, ui);
        if let Some(reason) = v.block.first().or(v.stop.as_ref()) {
            self.hook_state.stop = None;
            return Err(Failure::Failed(format!(
                "the prompt was refused by a UserPromptSubmit hook: {}",
                if reason.trim().is_empty() {
                    "(it gave no reason)"
                } else {
                    reason.trim()
                }
            )));
        }
        let mut context = std::mem::take(&mut self.hook_state.pending);
        context.extend(v.context);
        if context.is_empty() {
            return Ok(prompt.to_string());
        }
        Ok(format!(
            "{prompt}\n\n[hook context]\n{}",
            for_model(&context.join("\n"))
        ))
    }

    /// SessionStart, once per runtime (not for sub-agents); its context waits for the next
    /// prompt.
    fn hook_session_start(&mut self, ui: &mut dyn Surface) {
        if self.hook_state.started || self.depth() > 0 {
            return;
        }
        self.hook_state.started = true;
        let source = if self.history().is_empty() {
            "startup"
        } else {
            "resume"
        };
        let mut f = Map::new();
        f.insert("source".into(), Value::from(source));
        f.insert("model".into(), Value::from(self.cfg.model.as_str()));
        let v = self.run_hooks(HookEvent::SessionStart, Some(source), f, ui);
        // `continue: false` at start-up has nothing to stop yet.
        self.hook_state.stop = None;
        self.hook_state.pending.extend(v.context);
    }

    /// SessionEnd, once, when SessionStart ran.
    pub fn hook_session_end(&mut self, reason: crate::hooks::EndReason, ui: &mut dyn Surface) {
        if !self.hook_state.started || self.hook_state.ended {
            return;
        }
        self.hook_state.ended = true;
        let reason = reason.as_str();
        let mut f = Map::new();
        f.insert("reason".into(), Value::from(reason));
        // The run's token may be cancelled already (SIGTERM, SIGHUP: the runs a scheduler kills,
        // where cleanup and log-upload hooks matter): SessionEnd runs within its own timeout on a
        // token of its own; a second signal ends the process (see `main`).
        let run_token = std::mem::take(&mut self.cancel);
        self.run_hooks(HookEvent::SessionEnd, Some(reason), f, ui);
        self.cancel = run_token;
        self.wait_async_hooks(ui);
    }

    /// The run ends: waits for the async hooks still running, each within its own timeout (its
    /// runner kills it there), saying so first; one its timeout killed is named, on stderr and
    /// in its `hook` event. A second SIGTERM or SIGHUP leaves at once (see `main`).
    pub(crate) fn wait_async_hooks(&mut self, ui: &mut dyn Surface) {
        let running: Vec<AsyncRun> = std::mem::take(&mut self.hook_state.asyncs)
            .into_iter()
            .filter(|a| !a.thread.is_finished())
            .collect();
        if running.is_empty() {
            return;
        }
        let longest = running.iter().map(|a| a.timeout).max().unwrap_or_default();
        ui.progress(&format!(
            "waiting for {} async hook(s) still running (up to {} s): {}",
            running.len(),
            longest.as_secs(),
            running
                .iter()
                .map(|a| format!("`{}`", crate::text::cut(&a.command, 60)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for a in running {
            if let Ok(true) = a.thread.join() {
                self.emit(
                    ui,
                    Event::warning(format!(
                        "async hook `{}` was still running when the run ended and was killed at its timeout of {} s",
                        crate::text::cut(&a.command, 200),
                        a.timeout.as_secs()
                    )),
                );
            }
        }
    }

    /// Before a compaction (`trigger` `manual` or `auto`). tern compacts anyway: a blocked
    /// automatic compaction would overflow the context; the hook's message is shown.
    pub(crate) fn hook_pre_compact(
        &mut self,
        trigger: crate::event::CompactTrigger,
        ui: &mut dyn Surface,
    ) {
        if self.hook_state.hooks.is_empty() {
            return;
        }
        use crate::event::CompactTrigger as T;
        let t = match trigger {
            T::Auto | T::ContextOverflow => "auto",
            T::Manual | T::PlanConfirm | T::PlanClear => "manual",
        };
        let mut f = Map::new();
        f.insert("trigger".into(), Value::from(t));
        f.insert("custom_instructions".into(), Value::from(""));
        self.run_hooks(HookEvent::PreCompact, Some(t), f, ui);
        self.hook_state.stop = None;
    }

    /// When the model ended its answer: the Stop (a sub-agent: SubagentStop) hooks, then the
    /// goal. Ok(Some(message)): the turn goes on with `message` as the next user message;
    /// Ok(None): the turn ends.
    ///
    /// Errors: the goal did not pass in its attempts.
    pub(crate) fn stop_gate(
        &mut self,
        text: &str,
        gate: &mut StopGate,
        ui: &mut dyn Surface,
    ) -> Result<Option<String>, Failure> {
        if !self.hook_state.hooks.is_empty() {
            let event = if self.depth() > 0 {
                HookEvent::SubagentStop
            } else {
                HookEvent::Stop
            };
            let mut f = Map::new();
            f.insert("stop_hook_active".into(), Value::from(gate.hook_active));
            f.insert("last_assistant_message".into(), Value::from(text));
            if self.depth() > 0 {
                f.insert("agent_id".into(), Value::from(self.session.id.as_str()));
            }
            let v = self.run_hooks(event, None, f, ui);
            if v.stop.is_some() {
                self.hook_state.stop = None;
                return Ok(None);
            }
            if !v.block.is_empty() {
                if gate.hook_continues >= STOP_HOOK_CONTINUATIONS {
                    let said = for_model(&v.block.join("\n"));
                    return Err(Failure::Failed(format!(
                        "a {} hook kept the turn from ending: it blocked again after continuing it {STOP_HOOK_CONTINUATIONS} times (the later runs were told stop_hook_active: true), so tern ends the turn here. Its last message: {}",
                        event.as_str(),
                        if said.is_empty() {
                            "(none)"
                        } else {
                            said.as_str()
                        }
                    )));
                }
                gate.hook_continues += 1;
                gate.hook_active = true;
                return Ok(Some(format!(
                    "[{} hook]\n{}",
                    event.as_str(),
                    for_model(&v.block.join("\n"))
                )));
            }
        }
        self.goal_gate(gate, ui)
    }

    /// A hook's `continue: false` since the last look, as the failure that ends the turn.
    pub(crate) fn hook_stopped(&mut self) -> Option<Failure> {
        self.hook_state
            .stop
            .take()
            .map(|r| Failure::Failed(format!("stopped by a hook (continue: false): {r}")))
    }
}

/// Claude Code's `permission_mode` for an approval policy.
pub(crate) fn permission_mode(approval: crate::policy::Approval) -> &'static str {
    match approval {
        crate::policy::Approval::Ask => "default",
        crate::policy::Approval::Auto => "bypassPermissions",
        crate::policy::Approval::Never => "plan",
    }
}

/// The fields every hook's input carries (Claude Code's common input).
pub(crate) fn common_input(
    session_id: &str,
    transcript: &std::path::Path,
    cwd: &std::path::Path,
    event: HookEvent,
    approval: crate::policy::Approval,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("session_id".into(), Value::from(session_id));
    m.insert(
        "transcript_path".into(),
        Value::from(transcript.display().to_string()),
    );
    m.insert("cwd".into(), Value::from(cwd.display().to_string()));
    m.insert("hook_event_name".into(), Value::from(event.as_str()));
    m.insert(
        "permission_mode".into(),
        Value::from(permission_mode(approval)),
    );
    m
}

/// Starts an `"async": true` handler in the background: it decides nothing, and its outcome is
/// written as a `hook` event of the session when it ends (its output logged, Claude Code's
/// async hooks). It dies with tern (the one child runner's rule). The turn's hooks and MCP calls'
/// hooks start theirs here.
pub(super) fn background(
    h: &crate::hooks::Handler,
    event: HookEvent,
    input: &str,
    cwd: &std::path::Path,
    groups: Arc<crate::procs::ProcessGroups>,
    session: &crate::store::Session,
    parent: Option<&str>,
) -> Option<AsyncRun> {
    let (command, input, cwd, timeout) = (
        h.command.clone(),
        input.to_string(),
        cwd.to_path_buf(),
        h.timeout,
    );
    let (id, dir, parent) = (
        session.id.clone(),
        session.dir.clone(),
        parent.map(str::to_string),
    );
    let shown = command.clone();
    std::thread::Builder::new()
        .name("tern-async-hook".into())
        .spawn(move || {
            let ran = crate::hooks::run::run(
                &command,
                input.as_bytes(),
                &cwd,
                timeout,
                &crate::cancel::CancelToken::default(),
                &groups,
            );
            let mut ignored = Verdict::default();
            let (_, message) = read_answer(event, &ran, timeout, &mut ignored);
            let mut said = message
                .map(|m| crate::store::redact::redact(m.trim()).into_owned())
                .unwrap_or_default();
            if ran.timed_out {
                said = format!("killed at its timeout of {} s; {said}", timeout.as_secs());
            }
            let session = crate::store::Session::at(&id, dir);
            super::emit_to(
                &session,
                parent.as_deref(),
                &mut super::Quiet,
                Event::Hook {
                    event,
                    command,
                    exit_code: ran.exit_code,
                    duration_ms: ran.duration.as_millis() as u64,
                    decision: HookDecision::None,
                    message: Some(
                        crate::text::cut(
                            &format!("async (no decision): {said}"),
                            EVENT_MESSAGE_CHARS,
                        )
                        .trim_end()
                        .to_string(),
                    ),
                },
            );
            ran.timed_out
        })
        .ok()
        .map(|thread| AsyncRun {
            command: shown,
            timeout,
            thread,
        })
}

/// Runs `handlers` of `event` one at a time, combining their answers into `verdict`, each
/// announced on `ui` (a progress note) and through `emit` as a `hook` event. `run` starts one
/// (Ok(None): it went to the background, deciding nothing; Err: it may not run here, why: a
/// jail it cannot reach); one whose covered files changed does not run either. A handler that
/// may not run blocks where its event can block (PreToolUse, UserPromptSubmit). The one loop of
/// the turn's hooks and of MCP calls' hooks.
pub(crate) fn run_each(
    handlers: &[&crate::hooks::Handler],
    event: HookEvent,
    verdict: &mut Verdict,
    ui: &mut dyn Surface,
    run: &mut dyn FnMut(&crate::hooks::Handler) -> Result<Option<crate::hooks::run::Ran>, String>,
    emit: &dyn Fn(&mut dyn Surface, Event),
) {
    for h in handlers {
        // A file the hook runs changed since it was trusted (a command may have written it):
        // the hook does not run; where its event can block, it blocks (issue 29).
        let ran = match h.suspended().map_or_else(
            || {
                ui.progress(&format!("hook {}: {}", event.as_str(), h.command));
                run(h)
            },
            Err,
        ) {
            Ok(Some(ran)) => ran,
            Ok(None) => continue,
            Err(why) => {
                let blocks = matches!(event, HookEvent::PreToolUse | HookEvent::UserPromptSubmit);
                if blocks {
                    verdict.block.push(why.clone());
                }
                emit(
                    ui,
                    Event::Hook {
                        event,
                        command: h.command.clone(),
                        exit_code: None,
                        duration_ms: 0,
                        decision: if blocks {
                            HookDecision::Block
                        } else {
                            HookDecision::Error
                        },
                        message: Some(crate::text::cut(&why, EVENT_MESSAGE_CHARS).to_string()),
                    },
                );
                continue;
            }
        };
        // An async hook decides nothing, also when it ran in the jail (where it runs to its end
        // before the call: the jail is the runtime's, not a background thread's).
        let (decision, message) = if h.background {
            let (_, m) = read_answer(event, &ran, h.timeout, &mut Verdict::default());
            (HookDecision::None, m)
        } else {
            read_answer(event, &ran, h.timeout, verdict)
        };
        let message = message.map(|m| {
            let m = crate::store::redact::redact(m.trim()).into_owned();
            crate::text::cut(&m, EVENT_MESSAGE_CHARS).to_string()
        });
        emit(
            ui,
            Event::Hook {
                event,
                command: h.command.clone(),
                exit_code: ran.exit_code,
                duration_ms: ran.duration.as_millis() as u64,
                decision,
                message,
            },
        );
    }
}

/// Runs a hook that asks for the jail (`"jail": true`) through the commands room, with the
/// model's authority, and reads how it ended as a hook's [`Ran`](crate::hooks::run::Ran). Never
/// fails: a hook that cannot run there (no jail in this mode, the kernel refused it) is a `Ran`
/// with `spawn_error`.
fn in_jail(
    commands: &mut crate::commands::Commands,
    command: &str,
    input: &[u8],
    timeout: std::time::Duration,
    cancel: &crate::cancel::CancelToken,
    session: &crate::store::Session,
) -> crate::hooks::run::Ran {
    use std::os::unix::process::ExitStatusExt;
    let started = std::time::Instant::now();
    let max = crate::hooks::run::MAX_OUTPUT_BYTES;
    let split = commands.run_in_jail(command, input, (timeout, max), cancel, session);
    let mut ran = crate::hooks::run::Ran {
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        timed_out: false,
        interrupted: false,
        spawn_error: None,
        duration: Default::default(),
    };
    match split {
        Err(why) => ran.spawn_error = Some(why.to_string()),
        Ok(s) => {
            let stopped = s.stop.is_some();
            if !stopped {
                ran.exit_code = s.status.and_then(|st| st.code());
            }
            ran.stdout = String::from_utf8_lossy(&s.stdout).into_owned();
            ran.stderr = String::from_utf8_lossy(&s.stderr).into_owned();
            ran.timed_out = s.stop == Some(crate::child::Stop::Timeout);
            ran.interrupted = matches!(s.stop, Some(crate::child::Stop::Interrupt(_)));
            ran.spawn_error = match s.status {
                Some(st) if st.code().is_none() && !stopped => {
                    Some(format!("killed by signal {}", st.signal().unwrap_or(0)))
                }
                _ => None,
            };
        }
    }
    ran.duration = started.elapsed();
    ran
}

/// What the model reads of hook text: keys redacted, bounded.
fn for_model(text: &str) -> String {
    let t = crate::store::redact::for_model(text.trim()).into_owned();
    if t.len() <= MODEL_TEXT_BYTES {
        return t;
    }
    format!(
        "{}\n[hook output cut at {MODEL_TEXT_BYTES} bytes]",
        crate::text::cut(&t, MODEL_TEXT_BYTES)
    )
}

impl Runtime {
    /// The goal part of the Stop gate (see the module docs).
    pub(crate) fn goal_gate(
        &mut self,
        gate: &mut StopGate,
        ui: &mut dyn Surface,
    ) -> Result<Option<String>, Failure> {
        if self.depth() > 0 {
            return Ok(None);
        }
        let goal: Goal = match goal::read(&self.session) {
            Ok(Some(g)) => g,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Failure::Failed(e.into())),
        };
        gate.attempts += 1;
        let n = gate.attempts;
        ui.progress(&format!("goal: {}", goal.command));
        let timeout = goal.timeout();
        let mut out = self.bash_for_person(&goal.command, timeout, ui);
        let passed = out.exit_code == Some(0) && !out.refused && !out.timed_out;
        if out.timed_out {
            // A failed attempt that says why in words, first: the output's footer is easy to miss.
            out.content = format!(
                "[the goal command timed out after {} s (--goal-timeout) and was killed; this attempt failed]\n{}",
                timeout.as_secs(),
                out.content
            );
        }
        let kept = crate::text::cut(&out.content, goal::KEPT_OUTPUT_BYTES).to_string();
        self.emit(
            ui,
            Event::Hook {
                event: crate::hooks::HookEvent::Stop,
                command: format!("--goal {}", goal.command),
                exit_code: out.exit_code,
                duration_ms: out.duration_ms,
                decision: if passed {
                    HookDecision::None
                } else {
                    HookDecision::Block
                },
                message: (!passed).then(|| crate::text::cut(&kept, 2000).to_string()),
            },
        );
        let last = LastRun {
            attempts: n,
            passed,
            output: kept.clone(),
            at: crate::clock::now_rfc3339(),
        };
        if let Ok(lock) = self.session.lock() {
            let g = Goal {
                last: Some(last),
                ..goal.clone()
            };
            let _ = self.session.write_json_locked(&lock, goal::FILE, &g);
        }
        self.guard_accept(&self.session.path(goal::FILE));
        self.hook_state.goal = Some(GoalResult {
            command: goal.command.clone(),
            passed,
            attempts: n,
            output: (!passed).then(|| kept.clone()),
        });
        if passed {
            return Ok(None);
        }
        if n >= goal.max_attempts {
            return Err(Failure::Failed(format!(
                "the goal `{}` did not pass in {n} attempt{}; its last output:\n{kept}",
                goal.command,
                if n == 1 { "" } else { "s" }
            )));
        }
        Ok(Some(format!(
            "[tern: the goal `{}` did not pass (attempt {n} of {}); keep working until it does. Its output:]\n{}",
            goal.command, goal.max_attempts, out.content
        )))
    }
}
