//! The turn loop: what tern does with one prompt.
//!
//! 1. Store the prompt and mark the session running (`meta.json`, with our pid).
//! 2. Ask the model ([`Runtime::ask_model`], request.rs): tools + pinned system prompt +
//!    append-only history, with the work-state block as a transient tail.
//! 3. Store the assistant message *before* running any tool, so a crash mid-tool leaves a history
//!    that repair can close (it answers the dangling calls).
//! 4. Run its tool calls in order, storing each result. Ctrl-C kills the running tool and stores
//!    an error result for every unanswered call, in one write (case C17).
//! 5. Repeat until the model answers without tool calls, or `--max-turns` requests were made.
//!
//! A completion becomes a stored message in answer.rs. When the model makes the same calls with
//! the same results [`LOOP_LIMIT`] times in a row (small models do, once the work is done), the
//! next request asks for a final answer with tools off.

use serde_json::{Value, json};

use super::answer::{Call, REPEAT_NOTE};
use super::{Failure, Runtime, Surface};
use crate::message::Message;
use crate::store::Status;

/// Identical steps (same calls, same results) in a row after which the next request asks for a
/// final answer with tools off.
pub const LOOP_LIMIT: usize = 3;

/// How a turn ended: the final assistant text, or why it stopped.
pub type TurnOutcome = Result<String, Failure>;

impl Runtime {
    /// Runs one turn for `prompt` (empty: continue from the stored history, e.g. after resume).
    pub fn run_turn(&mut self, prompt: &str, ui: &mut dyn Surface) -> TurnOutcome {
        let requests_before = self.totals.requests;
        let usage_before = self.totals.usage;
        self.begin_turn(prompt, ui)?;
        let outcome = self.steps(ui);
        self.end_turn(&outcome, requests_before, usage_before, ui);
        outcome
    }

    fn steps(&mut self, ui: &mut dyn Surface) -> TurnOutcome {
        self.tools_allowed = true;
        let mut repeats = 0;
        for _ in 0..self.cfg.max_turns {
            if self.cancelled() {
                return Err(Failure::Interrupted);
            }
            let mut answer = self.ask_model(ui)?;
            let text_only = !self.tools_allowed;
            if text_only {
                // The final-answer request after a loop: whatever calls came back are not run.
                self.tools_allowed = true;
                answer.tool_calls.clear();
                if answer.text.trim().is_empty() {
                    return Err(Failure::Failed(format!(
                        "the model repeated the same tool call {LOOP_LIMIT} times with the same result and gave no final answer"
                    )));
                }
            }
            let (message, calls) = self.assistant_message(answer, text_only);
            let Some(message) = message else {
                // No text and no tool calls: nothing a provider would accept later (case C12).
                self.emit(
                    ui,
                    "warning",
                    json!({"message": "the model answered with no text and no tool call; nothing was stored"}),
                );
                return Ok(String::new());
            };
            let text = match &message {
                Message::Assistant { text, .. } => text.clone(),
                _ => String::new(),
            };
            self.store(vec![message])?;
            let listed: Vec<Value> = calls
                .iter()
                .map(|c| json!({"id": c.call.id, "name": c.call.name, "arguments": c.call.arguments}))
                .collect();
            self.emit(ui, "assistant", json!({"text": text, "tool_calls": listed}));
            if calls.is_empty() {
                return Ok(text);
            }
            repeats = if self.run_calls(calls, ui)? {
                repeats + 1
            } else {
                0
            };
            if repeats >= LOOP_LIMIT - 1 {
                // Small models can loop on a finished task: ask once for the answer, tools off.
                self.tools_allowed = false;
                repeats = 0;
                // A declared boundary: `tool_choice` none changes this one request's prefix.
                self.emit(
                    ui,
                    "boundary",
                    json!({"kind": "tools_off", "reason": format!("the model made the same tool call with the same result {LOOP_LIMIT} times in a row; asking it once for a final answer without tools")}),
                );
            }
        }
        Err(Failure::MaxTurns(self.cfg.max_turns))
    }

    /// Runs the tool calls of the stored assistant message in order, storing each result. On
    /// interrupt, the interrupted call's result and a "not run" result for each later call are
    /// stored together, then the turn ends. Returns true when every call repeated the previous
    /// step's call and result exactly.
    fn run_calls(&mut self, calls: Vec<Call>, ui: &mut dyn Surface) -> Result<bool, Failure> {
        let mut all_repeated = true;
        let mut pending = calls.into_iter();
        while let Some(c) = pending.next() {
            let mut results = Vec::new();
            let interrupted = if self.cancelled() {
                results.push(Message::tool(
                    &c.call,
                    "Error: not run: interrupted by the user.",
                    true,
                ));
                true
            } else {
                let r = self.run_tool(&c, ui);
                let repeated = self.repeats_previous_step(&c.call, &r.content);
                all_repeated &= repeated;
                let content = if repeated {
                    format!("{}\n{REPEAT_NOTE}", r.content)
                } else {
                    r.content
                };
                results.push(Message::tool(&c.call, content, r.is_error));
                r.interrupted || self.cancelled()
            };
            if interrupted {
                for rest in pending.by_ref() {
                    results.push(Message::tool(
                        &rest.call,
                        "Error: not run: interrupted by the user.",
                        true,
                    ));
                }
            }
            self.store(results)?;
            if interrupted {
                return Err(Failure::Interrupted);
            }
        }
        Ok(all_repeated)
    }

    /// Marks the session running with our pid, stores the prompt, emits `turn_start`.
    fn begin_turn(&mut self, prompt: &str, ui: &mut dyn Surface) -> Result<(), Failure> {
        // Claim first: only the process holding the session may reload (and repair) it.
        let before = self.claim(Some(prompt))?;
        if let Err(e) = self.sync_from_disk(ui) {
            let _ = self.release(before);
            return Err(e);
        }
        // The session a person is working in is the one other panes should follow.
        if let Err(e) = self.session.mark_current() {
            crate::errln!("tern: could not update .tern/current: {e}");
        }
        if !prompt.trim().is_empty()
            && let Err(e) = self.store(vec![Message::user(prompt)])
        {
            let _ = self.release(before);
            return Err(e);
        }
        self.emit(ui, "turn_start", json!({"prompt": prompt}));
        Ok(())
    }

    /// Records how the turn ended in `meta.json` and emits `turn_end`.
    fn end_turn(
        &mut self,
        outcome: &TurnOutcome,
        requests_before: u64,
        usage_before: crate::provider::Usage,
        ui: &mut dyn Surface,
    ) {
        let status = match outcome {
            Ok(_) => Status::Completed,
            Err(Failure::Interrupted) => Status::Interrupted,
            Err(_) => Status::Failed,
        };
        let requests = self.totals.requests - requests_before;
        let mut usage = self.totals.usage;
        usage.input_tokens = usage.input_tokens.saturating_sub(usage_before.input_tokens);
        usage.cached_tokens = usage
            .cached_tokens
            .saturating_sub(usage_before.cached_tokens);
        usage.cache_write_tokens = usage
            .cache_write_tokens
            .saturating_sub(usage_before.cache_write_tokens);
        usage.output_tokens = usage
            .output_tokens
            .saturating_sub(usage_before.output_tokens);
        if let Err(e) = self.session.update_meta(|m| {
            m.status = status;
            m.pid = None;
            m.pid_start = None;
            m.turns = m.turns.saturating_add(requests);
            m.usage.add(&usage);
        }) {
            crate::errln!("tern: could not update meta.json: {e}");
        }
        let error = outcome.as_ref().err().map(|e| e.to_string());
        if let Err(f) = outcome
            && *f != Failure::Interrupted
        {
            self.emit(
                ui,
                "error",
                json!({"kind": f.kind(), "message": f.to_string()}),
            );
        }
        self.emit(
            ui,
            "turn_end",
            json!({"status": status.as_str(), "requests": requests, "error": error}),
        );
    }
}
