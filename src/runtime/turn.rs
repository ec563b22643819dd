//! The turn loop: what tern does with one prompt ([`Runtime::run_turn`]).
//!
//! 1. Begin: hold the session (its lease), mark it running, store the prompt.
//! 2. Each step ([`Runtime::steps`]): the checks before a request (cancel, a hook's stop, the
//!    token budget, steers); ask the model ([`Runtime::ask_model`], request.rs: tools + pinned
//!    system prompt + append-only history, the work-state block as a transient tail); store
//!    the answer *before* running any tool, so a crash mid-tool leaves a history that repair
//!    can close.
//! 3. An answer without tool calls goes through the checks after an answer (a call written as
//!    text, a steer, the nudge, the Stop hooks and the goal): each may continue the turn; else
//!    it ends with the answer.
//! 4. Otherwise run its tool calls in order, storing each result before announcing it. Ctrl-C
//!    kills the running tool and stores an error result for every unanswered call, in one
//!    write (case C17). [`LOOP_LIMIT`] identical steps in a row: the next request asks for a
//!    final answer with tools off.
//! 5. End: record how the turn ended; at `--max-turns` requests it stops with exit code 3.

use super::answer::{Call, REPEAT_NOTE};
use super::dispatch::ToolResult;
use super::nudge::Nudge;
use super::request::Ask;
use super::{Failure, Runtime, Surface};
use crate::event::{BoundaryKind, CallView, Event, TurnStatus};
use crate::message::Message;
use crate::store::Status;

/// Identical steps (same calls, same results) in a row after which the next request asks for a
/// final answer with tools off.
pub const LOOP_LIMIT: usize = 3;

/// How a turn ended: the final assistant text, or why it stopped.
pub type TurnOutcome = Result<String, Failure>;

/// What one turn's loop carries from step to step.
struct Step {
    /// The next request's options (tools off once after a loop).
    ask: Ask,
    /// Identical steps in a row.
    repeats: usize,
    /// The last answer was a call written as text that did not run.
    unrun: bool,
    /// The once-per-turn nudge about commands shown in a shell block.
    nudge: Nudge,
    /// The Stop hooks' and the goal's state in this turn.
    gate: super::hooks::StopGate,
    /// Usage before the turn (for its token budget).
    usage_before: crate::message::Usage,
}

/// What an answer without tool calls leads to.
enum Next {
    /// Another request in this turn.
    Continue,
    /// The turn ends with this answer.
    End(String),
}

/// Turns run for messages steered in as a prompt's turn ended (see [`Runtime::run_prompt`]).
const MAX_STEER_TURNS: usize = 4;

impl Runtime {
    /// The result stored for a call that never ran because the turn was stopped: by the user,
    /// or by a budget (which one, in words).
    fn not_run(&self) -> String {
        match self.cancel.budget() {
            Some(why) => format!("Error: not run: stopped: {why}."),
            None => format!("Error: not run: {}.", crate::cancel::who_stopped()),
        }
    }

    /// Answers a person's prompt: one turn, then one more turn for a message steered in as it
    /// ended (`tern steer`, a line typed in the REPL, ACP's `_tern/steer`), a few times at most,
    /// so a run never ends completed while a steer waits unread. A failed or cancelled turn ends
    /// it (the steer stays in the inbox for the next request). The one policy the REPL, `tern
    /// exec` and ACP share; `on_turn` sees each turn's outcome as it ends.
    pub fn run_prompt(
        &mut self,
        prompt: &str,
        ui: &mut dyn Surface,
        on_turn: &mut dyn FnMut(&TurnOutcome),
    ) -> TurnOutcome {
        let mut outcome = self.run_turn(prompt, ui);
        on_turn(&outcome);
        for _ in 0..MAX_STEER_TURNS {
            if outcome.is_err() || self.cancelled() || !super::steer::pending(&self.session) {
                break;
            }
            outcome = self.run_turn("", ui);
            on_turn(&outcome);
        }
        outcome
    }

    /// Sets the `--goal` gate of this session (`cmd` run after each final answer, `attempts`
    /// times at most, each within `timeout_s` seconds or the bash tool's default). Errors: the
    /// goal's file could not be written.
    pub fn set_goal(
        &self,
        cmd: &str,
        attempts: u32,
        timeout_s: Option<u64>,
    ) -> Result<(), Failure> {
        crate::hooks::goal::set_timed(&self.session, Some((cmd, attempts, timeout_s)))
            .map_err(|e| Failure::Failed(format!("could not set the goal: {e}")))
    }

    /// Runs one turn for `prompt` (empty: continue from the stored history, e.g. after resume).
    pub fn run_turn(&mut self, prompt: &str, ui: &mut dyn Surface) -> TurnOutcome {
        let expanded = self.skill_prompt(prompt, ui);
        let prompt = expanded.as_deref().unwrap_or(prompt);
        let requests_before = self.meter.totals.requests;
        self.hook_state.goal = None;
        self.meter.answer_cut = false;
        self.begin_turn(prompt, ui)?;
        let outcome = match self.steps(ui) {
            // A cancel by a budget (a sub-agent's wall time) is no interrupt by a person.
            Err(Failure::Interrupted) => match self.cancel.budget() {
                Some(why) => Err(Failure::Budget(why)),
                None => Err(Failure::Interrupted),
            },
            other => other,
        };
        self.end_turn(&outcome, requests_before, ui);
        outcome
    }

    /// A person's `$name` / `/name` naming a skill: the message with the skill's instructions
    /// (`crate::skills::invoke`, read now, so a skill added mid-session works too). None: it
    /// names no skill; a skill that cannot be read is said and the message goes as typed.
    fn skill_prompt(&mut self, prompt: &str, ui: &mut dyn Surface) -> Option<String> {
        let t = prompt.trim_start();
        if !(t.starts_with('$') || t.starts_with('/')) {
            return None;
        }
        let found = crate::skills::discover(self.cfg.skills.as_ref()?);
        match crate::skills::invoke(prompt, &found)? {
            Ok(text) => Some(text),
            Err(e) => {
                self.emit(
                    ui,
                    Event::warning(format!("the skill could not be read: {e}")),
                );
                None
            }
        }
    }

    /// The loop: check, ask, answer, run the calls; until an answer ends the turn or
    /// `--max-turns` requests were made.
    fn steps(&mut self, ui: &mut dyn Surface) -> TurnOutcome {
        let mut st = Step {
            ask: Ask {
                tools_allowed: true,
            },
            repeats: 0,
            unrun: false,
            nudge: self.nudge_for_turn(),
            gate: super::hooks::StopGate::default(),
            usage_before: self.meter.totals.usage,
        };
        for _ in 0..self.cfg.max_turns {
            self.before_request(&st, ui)?;
            let answer = self.ask_model(st.ask, ui)?;
            let Some((text, calls, cut)) = self.take_answer(answer, &mut st, ui)? else {
                // No text and no tool calls: nothing was stored (case C12).
                return Ok(st.nudge.final_text(String::new()));
            };
            if calls.is_empty() {
                match self.after_final_answer(text, cut, &mut st, ui)? {
                    Next::Continue => continue,
                    Next::End(text) => return Ok(text),
                }
            }
            st.unrun = false;
            st.nudge.called();
            let repeated = self.run_calls(calls, ui)?;
            self.after_calls(repeated, &mut st, ui);
        }
        Err(Failure::MaxTurns(self.cfg.max_turns))
    }

    /// The checks before each request: a cancel, a hook's `continue: false`, the token budget;
    /// then what the person steered in since the last request goes after the last tool result.
    fn before_request(&mut self, st: &Step, ui: &mut dyn Surface) -> Result<(), Failure> {
        if self.cancelled() {
            return Err(Failure::Interrupted);
        }
        if let Some(f) = self.hook_stopped() {
            return Err(f);
        }
        if let Some(budget) = self.cfg.token_budget {
            let used = self.meter.totals.usage.since(&st.usage_before);
            let spent = used.input_tokens.saturating_add(used.output_tokens);
            if spent >= budget {
                return Err(Failure::Budget(format!(
                    "its token budget of {budget} tokens ran out ({spent} used)"
                )));
            }
        }
        self.deliver_steers(ui)
    }

    /// Stores the model's answer (before any tool runs) and announces it. Returns its text,
    /// its calls and whether it was cut at the output cap; None when it had neither text nor
    /// calls (nothing a provider would accept later is stored). Errors: the final-answer request
    /// after a loop gave no answer.
    fn take_answer(
        &mut self,
        mut answer: crate::provider::Completion,
        st: &mut Step,
        ui: &mut dyn Surface,
    ) -> Result<Option<(String, Vec<Call>, bool)>, Failure> {
        let text_only = !st.ask.tools_allowed;
        if text_only {
            // The final-answer request after a loop: whatever calls came back are not run.
            st.ask.tools_allowed = true;
            answer.tool_calls.clear();
            if answer.text.trim().is_empty() || super::textcall::unrun_call(&answer.text).is_some()
            {
                return Err(Failure::Failed(format!(
                    "the model repeated the same tool call {LOOP_LIMIT} times with the same result and gave no final answer"
                )));
            }
        }
        if answer.finish_reason == Some(crate::provider::Finish::Repetition) {
            self.emit(
                ui,
                Event::warning(if answer.tool_calls.is_empty() {
                    "the model's answer kept repeating itself: tern cut it (the stored answer ends with a note)"
                } else {
                    "the model's answer kept repeating itself (the same call again, or arguments that repeat): tern cut it and kept what came before"
                }),
            );
        }
        let cut = answer.finish_reason == Some(crate::provider::Finish::Length);
        let (message, calls) = self.assistant_message(answer, text_only);
        let Some(message) = message else {
            self.emit(
                ui,
                Event::warning(
                    "the model answered with no text and no tool call; nothing was stored",
                ),
            );
            return Ok(None);
        };
        let text = match &message {
            Message::Assistant { text, .. } => text.clone(),
            _ => String::new(),
        };
        self.store(vec![message])?;
        let tool_calls = calls
            .iter()
            .map(|c| CallView {
                id: c.call.id.clone(),
                name: c.call.name.clone(),
                arguments: c.call.arguments.clone(),
            })
            .collect();
        self.emit(
            ui,
            Event::Assistant {
                text: text.clone(),
                tool_calls,
            },
        );
        Ok(Some((text, calls, cut)))
    }

    /// The checks after an answer without tool calls: a call written as text (told once, failed
    /// the second time), a steer that arrived meanwhile, a command shown in a shell block (told
    /// once), the Stop hooks and the goal. Any of them continues the turn; else it ends with
    /// `text`.
    fn after_final_answer(
        &mut self,
        text: String,
        cut: bool,
        st: &mut Step,
        ui: &mut dyn Surface,
    ) -> Result<Next, Failure> {
        // An answer that is a call tern did not run (an unknown tool, arguments that are not
        // JSON) is not a final answer: the model is told, once; a second one in a row ends the
        // turn as failed, never "completed".
        if let Some(name) = super::textcall::unrun_call(&text) {
            if st.unrun {
                return Err(Failure::Failed(format!(
                    "the model answered twice with a tool call written as text ({name}) that could not run"
                )));
            }
            st.unrun = true;
            let tools: Vec<&str> = self.prefix.tools.iter().map(|t| t.name).collect();
            self.store(vec![Message::note(format!(
                "[tern: your answer is a tool call written as text ({name}), and it did not run: the tools are {}, called as tool calls with JSON arguments. Call one, or answer in words.]",
                tools.join(", ")
            ))])?;
            self.emit(
                ui,
                Event::warning(format!(
                    "the model wrote a call to {name} as text; it did not run, and the model was told"
                )),
            );
            return Ok(Next::Continue);
        }
        if super::steer::pending(&self.session) {
            // Steered while the model answered: the model reads it before the turn ends.
            return Ok(Next::Continue);
        }
        // A command shown in a shell block before any call: the model is told, once.
        if self.nudge_if_shown(&mut st.nudge, &text, ui)? {
            return Ok(Next::Continue);
        }
        // The person's Stop hooks and the goal may send the model back to work.
        if let Some(next) = self.stop_gate(&text, &mut st.gate, ui)? {
            self.store(vec![Message::note(next)])?;
            return Ok(Next::Continue);
        }
        if cut {
            self.meter.answer_cut = true;
            self.emit(
                ui,
                Event::warning(format!(
                    "the model's answer was cut at the output cap ({} tokens, --max-output-tokens): it may be incomplete",
                    self.cfg.max_output_tokens
                )),
            );
        }
        Ok(Next::End(
            std::mem::replace(&mut st.nudge, Nudge::Off).final_text(text),
        ))
    }

    /// After the calls ran: small models can loop on a finished task; after [`LOOP_LIMIT`]
    /// identical steps the next request asks once for the answer, tools off (a declared
    /// boundary: `tool_choice` none changes that one request's prefix).
    fn after_calls(&mut self, repeated: bool, st: &mut Step, ui: &mut dyn Surface) {
        st.repeats = if repeated { st.repeats + 1 } else { 0 };
        if st.repeats < LOOP_LIMIT - 1 {
            return;
        }
        st.ask.tools_allowed = false;
        st.repeats = 0;
        self.emit(
            ui,
            Event::Boundary {
                kind: BoundaryKind::ToolsOff,
                from: None,
                to: None,
                reason: Some(format!(
                    "the model made the same tool call with the same result {LOOP_LIMIT} times in a row; asking it once for a final answer without tools"
                )),
            },
        );
    }

    /// Runs the tool calls of the stored assistant message in order. Each result is stored, then
    /// announced (`tool_result`), so an announced result is never lost. On interrupt, the
    /// interrupted call's result and a "not run" result for each later call are stored together,
    /// then the turn ends. Returns true when every call repeated the previous step's call and
    /// result exactly.
    fn run_calls(&mut self, calls: Vec<Call>, ui: &mut dyn Surface) -> Result<bool, Failure> {
        let mut all_repeated = true;
        let at = self.inflight_at();
        let mut pending = calls.into_iter().peekable();
        while let Some(c) = pending.next() {
            // The workspace as it is before the turn's first command (once per turn).
            if c.call.name == "bash" {
                self.checkpoint(crate::checkpoint::Moment::BeforeCommand, ui);
            } else if c.call.name == crate::tools::agent::NAME {
                self.checkpoint(crate::checkpoint::Moment::BeforeAgents, ui);
            }
            if c.call.name == crate::tools::agent::NAME && !self.cancelled() {
                // Consecutive agent calls run at once; their results are stored in call order.
                let mut group = vec![c];
                while let Some(n) = pending.next_if(|n| n.call.name == crate::tools::agent::NAME) {
                    group.push(n);
                }
                let refs: Vec<&Call> = group.iter().collect();
                let results = self.run_agents(&refs, at, ui);
                for (c, r) in group.iter().zip(results) {
                    let mut content = crate::store::redact::for_model(&r.content).into_owned();
                    let repeated = self.repeats_previous_step(&c.call, &content);
                    all_repeated &= repeated;
                    if repeated {
                        content = format!("{content}\n{REPEAT_NOTE}");
                    }
                    self.store(vec![Message::tool(&c.call, content.clone(), r.is_error)])?;
                    self.emit(
                        ui,
                        Event::ToolResult {
                            id: c.call.id.clone(),
                            name: c.call.name.clone(),
                            is_error: r.is_error,
                            duration_ms: r.duration_ms,
                            content,
                            bash: None,
                        },
                    );
                }
                continue;
            }
            if self.cancelled() {
                // Not run: the turn was interrupted before this call's turn came.
                let results: Vec<Message> = std::iter::once(c)
                    .chain(pending.by_ref())
                    .map(|c| Message::tool(&c.call, self.not_run(), true))
                    .collect();
                self.store(results)?;
                return Err(Failure::Interrupted);
            }
            let r: ToolResult = self.run_tool(&c, ui);
            let repeated = self.repeats_previous_step(&c.call, &r.content);
            all_repeated &= repeated;
            let interrupted = r.interrupted || self.cancelled();
            // The model never reads a configured key, whatever the command printed.
            let content = crate::store::redact::for_model(&r.content).into_owned();
            let r = ToolResult {
                content: if repeated {
                    format!("{content}\n{REPEAT_NOTE}")
                } else {
                    content
                },
                ..r
            };
            let mut results = vec![Message::tool(&c.call, r.content.clone(), r.is_error)];
            if interrupted {
                for rest in pending.by_ref() {
                    results.push(Message::tool(&rest.call, self.not_run(), true));
                }
            }
            // The commit point of a tool call: its result is stored before anything else is
            // written or announced, so a crash after the command ran never loses its result.
            self.store(results)?;
            self.emit(
                ui,
                Event::ToolResult {
                    id: c.call.id.clone(),
                    name: c.call.name.clone(),
                    is_error: r.is_error,
                    duration_ms: r.duration_ms,
                    content: r.content,
                    bash: r.bash,
                },
            );
            if c.call.name == "bash" {
                // The command may have written the draft through $PLAN_DRAFT_FILE; a file that
                // cannot be read now is reported again before the next request.
                if let Err(e) = self.observe_plan_files(ui) {
                    self.emit(ui, Event::warning(e.to_string()));
                }
            }
            if interrupted {
                return Err(Failure::Interrupted);
            }
        }
        Ok(all_repeated)
    }

    /// Holds the session, marks it running with our pid, stores the prompt, emits `turn_start`.
    fn begin_turn(&mut self, prompt: &str, ui: &mut dyn Surface) -> Result<(), Failure> {
        // A turn without a prompt continues what is waiting for the model (a seeded handoff, the
        // results of an interrupted turn); after the model's own answer there is nothing to
        // answer, and a request ending in it would make the model talk to itself.
        if prompt.trim().is_empty()
            && !super::steer::pending(&self.session)
            && !matches!(
                self.prefix.history.last(),
                Some(Message::User { .. } | Message::Tool { .. })
            )
        {
            return Err(Failure::Usage(
                "nothing to continue without a prompt: the session's last message is the model's answer. Give a prompt (tern exec --continue \"…\")".into(),
            ));
        }
        // Hold first: only the process holding the session may reload (and repair) it.
        self.hold()?;
        // The person's hooks see the prompt before it is stored; a refused one changes nothing.
        let stored = match self.hook_prompt(prompt, ui) {
            Ok(p) => p,
            Err(e) => {
                self.release();
                return Err(e);
            }
        };
        let started = (|| -> Result<(), Failure> {
            self.session.update_meta(|m| {
                m.status = Status::Running;
                m.pid = Some(std::process::id());
                if m.title.is_empty() {
                    m.title = crate::text::title(prompt);
                }
            })?;
            self.sync_from_disk(ui)?;
            self.checkpoint(crate::checkpoint::Moment::TurnStart, ui);
            if !prompt.trim().is_empty() {
                self.store(vec![Message::user(stored)])?;
            }
            // The state files as this turn starts are tern's baseline for the sandbox guard.
            self.guard_refresh();
            Ok(())
        })();
        if let Err(e) = started {
            let _ = self.session.update_meta(|m| {
                m.status = Status::Ended(e.kind());
                m.pid = None;
            });
            self.release();
            return Err(e);
        }
        // The session a person is working in is the one other panes should follow.
        if self.lineage.mark_current
            && let Err(e) = self.session.mark_current()
        {
            self.emit(
                ui,
                Event::warning(format!("could not update .tern/current: {e}")),
            );
        }
        self.emit(
            ui,
            Event::TurnStart {
                prompt: prompt.to_string(),
            },
        );
        Ok(())
    }

    /// Records how the turn ended in `meta.json`, emits `error` / `turn_end`, lets go of the
    /// session.
    fn end_turn(&mut self, outcome: &TurnOutcome, requests_before: u64, ui: &mut dyn Surface) {
        let status = match outcome {
            Ok(_) => TurnStatus::Completed,
            Err(f) => f.kind(),
        };
        let stored = Status::from(status);
        let requests = self.meter.totals.requests - requests_before;
        // The turn's requests and usage go into meta.json with its ending: one write.
        let unsaved = std::mem::take(&mut self.meter.unsaved);
        if let Err(e) = self.session.update_meta(|m| {
            m.status = stored;
            m.pid = None;
            unsaved.onto(m);
        }) {
            self.meter.unsaved = unsaved;
            super::records_lost(format!("meta.json: {e}{}", super::full_disk_hint(&e)));
            self.emit(
                ui,
                Event::warning(format!("could not update meta.json: {e}")),
            );
        }
        self.release();
        let error = outcome.as_ref().err().map(|e| e.to_string());
        if let Err(f) = outcome
            && *f != Failure::Interrupted
        {
            self.emit(
                ui,
                Event::Error {
                    kind: f.kind(),
                    message: f.to_string(),
                },
            );
        }
        // The files a person's tool runs on its own that the door applied this turn, named
        // once at its end on every surface (DESIGN §10).
        let mut listed = self.commands.take_listed();
        // And those the MCP servers in jails of their own wrote (issue 42).
        listed.extend(self.mcp.hub().map(|h| h.take_listed()).unwrap_or_default());
        if !listed.is_empty() {
            let listed = listed.iter().map(|p| p.display().to_string()).collect();
            self.emit(
                ui,
                Event::Door {
                    held: Vec::new(),
                    listed,
                },
            );
        }
        self.emit(
            ui,
            Event::TurnEnd {
                status,
                requests,
                error,
            },
        );
    }
}
