//! Tool dispatch: one tool call in, one tool result out. Errors are results the model reads
//! ([`ToolError`], prefixed `Error: ` in one place, [`ToolResult::from`]), never crashes.

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
    /// A bash call's stdout and stderr apart, when a PostToolUse hook reads them.
    pub streams: Option<Box<bash::Streams>>,
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
            streams: None,
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
                result.streams.take(),
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
        let parent = self.lineage.parent.clone();
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
        use crate::hooks::answer::Permission;
        // A PreToolUse hook's allow skips the question, its ask asks whatever the policy.
        let ask = match (self.hook_state.permission.take(), self.cfg.approval) {
            (_, Approval::Never) => true,
            (Some(Permission::Allow), _) => false,
            (Some(Permission::Ask), _) => true,
            (None, Approval::Ask) => true,
            (None, Approval::Auto) => false,
        };
        match self.cfg.approval {
            Approval::Never => Err(ToolError::Refused(
                "bash is disabled in this session (--approval never). You can only plan: write the plan with plan_draft.".into(),
            )),
            _ if ask => match ui.approve(command) {
                Answer::Yes => Ok(()),
                Answer::Always => {
                    // "Always" for the rest of this runtime: its commands run without a question,
                    // as under --approval auto (and so do its sub-agents').
                    self.cfg.approval = Approval::Auto;
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
            Err(e) => return Err(e).into(),
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

    /// Runs `command` through the commands room (the bash tool's path after its approval):
    /// sandbox, jail and guard; what tern refused or undid of it ends its result as an error.
    fn bash_sandboxed(
        &mut self,
        command: &str,
        timeout: std::time::Duration,
        ui: &mut dyn Surface,
    ) -> ToolResult {
        use crate::commands::{Ran, Request, Verdict};
        ui.progress("running… (Ctrl-C stops it)");
        let cancel = self.cancel.clone();
        let inherit = self.mcp.inherit();
        let req = Request {
            command,
            timeout,
            cancel: &cancel,
            streams: self.hooks_read_streams(),
            channel: inherit.as_ref(),
        };
        let ran = {
            let (commands, mut site) = self.site();
            commands.run(&req, &mut site)
        };
        // What the command's MCP calls wrote meanwhile (from the channel's threads) is shown
        // now, before its result, in the order it was written.
        for env in self.mcp.take_events() {
            ui.event(&env);
        }
        let (out, verdict, door) = match ran {
            Ran::Refused(why) => return Err(ToolError::Refused(why)).into(),
            Ran::Failed(why) => return Err(ToolError::Failed(why)).into(),
            Ran::Done { out, verdict, door } => (out, verdict, door),
        };
        match &verdict {
            // tern put its files back: memory and disk agree again.
            Some(Verdict::Guard(_)) => self.note_disk(),
            Some(v @ Verdict::DiskFloor(_)) => {
                self.emit(ui, Event::warning(v.to_string()));
            }
            Some(Verdict::Jail(notes)) => {
                for note in &notes.git {
                    self.emit(ui, Event::warning(note.clone()));
                }
            }
            None => {}
        }
        let mut content = out.content;
        if let Some(v) = &verdict {
            content.push_str("\nError: ");
            content.push_str(&v.to_string());
        }
        if let Some(r) = door.filter(|r| !r.is_quiet_for_model()) {
            // The model reads what the door held back and named; the person sees the same.
            content.push('\n');
            content.push_str(&r.to_string());
            self.door_events(&r, ui);
        }
        ToolResult {
            is_error: out.timed_out || out.interrupted || verdict.is_some(),
            interrupted: out.interrupted,
            bash: Some(BashFacts {
                exit_code: out.exit_code,
                timed_out: out.timed_out,
                interrupted: out.interrupted,
                output_bytes: out.output_bytes,
                spill: out.spill_path.as_ref().map(|p| p.display().to_string()),
            }),
            streams: out.streams,
            content,
            duration_ms: 0,
        }
    }

    /// The door's report as the person sees it: held back changes as a `door` event, its
    /// one-time notices and failures as warnings.
    fn door_events(&mut self, r: &crate::sandbox::door::Report, ui: &mut dyn Surface) {
        if !r.held.is_empty() {
            let ev = Event::Door {
                held: r.held.clone(),
                listed: Vec::new(),
            };
            self.emit(ui, ev);
        }
        for line in r.said.iter().chain(&r.failed) {
            self.emit(ui, Event::warning(line.clone()));
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
        // A damaged ledger (not JSON, not a ledger) is kept in the archive and rebuilt from the history (or started anew),
        // said to the model and the person: nobody else can fix it (the session folder is
        // read-only to commands), and the work must go on (issue 46).
        let mut anew = None;
        let ledger: Ledger = match self.session.read_json(files::LEDGER) {
            Ok(l) => l.unwrap_or_default(),
            Err(e) => {
                let text = self.session.read_text(files::LEDGER).ok().flatten();
                let kept = self
                    .session
                    .write_archive_locked(&lock, "ledger", "json", &text.unwrap_or_default())
                    .map_err(|w| {
                        ToolError::Failed(format!(
                            "the ledger cannot be read ({e}), and could not be kept aside ({w}); fix or delete ledger.json"
                        ))
                    })?;
                // Rebuilt from the history: the ledger calls the model made, replayed in order.
                let rebuilt = ledger_from_history(&self.prefix.history);
                let said = match &rebuilt {
                    Some(l) => format!(
                        "ledger.json could not be read ({e}): it is kept at {} and the ledger was rebuilt from this session's history ({} items)",
                        kept.display(),
                        l.items.len()
                    ),
                    None => format!(
                        "ledger.json could not be read ({e}): it is kept at {} and the ledger starts anew",
                        kept.display()
                    ),
                };
                // Said once the lock is let go (an event takes it too).
                anew = Some(said);
                rebuilt.unwrap_or_default()
            }
        };
        let with_note = |reply: String| match &anew {
            Some(said) => format!("{reply}\n[tern: {said}]"),
            None => reply,
        };
        if name == "todo_list" {
            if anew.is_some() {
                self.session
                    .write_json_locked(&lock, files::LEDGER, &ledger)
                    .map_err(|e| ToolError::Failed(format!("could not save the ledger: {e}")))?;
            }
            drop(lock);
            if let Some(said) = &anew {
                self.emit(ui, Event::warning(said.clone()));
            }
            // Reads only: the rendered To-do body, the same bytes as the work-state block's.
            return Ok(with_note(work::todo_list(&ledger)));
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
        .map_err(|e| ToolError::Arguments(e.into()))?;
        // Any accepted write counts (the reply names the new revision).
        let changed = applied.ledger != ledger;
        if changed || anew.is_some() {
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
        if let Some(said) = &anew {
            self.emit(ui, Event::warning(said.clone()));
        }
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
        Ok(with_note(applied.reply))
    }

    fn tool_strategy(&mut self, args: &serde_json::Value) -> Result<String, ToolError> {
        let (strategy, ack) = crate::domain::strategy::apply_strategy(args)
            .map_err(|e| ToolError::Arguments(e.into()))?;
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

/// The ledger the stored history's ledger calls make, replayed in order from an empty one (a
/// damaged `ledger.json` is rebuilt so; issue 46): each call the model made to a ledger tool
/// whose result was not an error. None: the history holds none (a compaction took them).
fn ledger_from_history(history: &[crate::message::Message]) -> Option<Ledger> {
    use crate::message::Message;
    // Only calls answered without an error: the call being run now has no result yet, and
    // replaying it here would apply it twice.
    let answered: std::collections::HashSet<&str> = history
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                is_error: false,
                ..
            } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut ledger = Ledger::default();
    let mut any = false;
    for m in history {
        let Message::Assistant { tool_calls, .. } = m else {
            continue;
        };
        for c in tool_calls {
            let is_ledger = c.name == crate::domain::ledger::WORK_UPDATE
                || crate::domain::ledger::LEGACY_ALIASES.contains(&c.name.as_str());
            if !is_ledger || !answered.contains(c.id.as_str()) {
                continue;
            }
            if let Ok(a) = ledger::apply(&ledger, &c.name, &c.arguments, false, 0) {
                ledger = a.ledger;
                any = true;
            }
        }
    }
    any.then_some(ledger)
}
