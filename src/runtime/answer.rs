//! From a model's completion to the assistant message the turn loop stores: tool calls written
//! as text are recovered (see `textcall`), whitespace-only text is dropped (case C12), arguments
//! are parsed once (case C11), and a step that repeats the previous one is noticed.

use serde_json::{Value, json};

use super::Runtime;
use crate::message::{Message, ToolCall};
use crate::provider::{Completion, Finish};

/// Appended to a tool result that repeats the previous step's call and result exactly.
pub const REPEAT_NOTE: &str = "[Same call and same result as your previous step. If the task is done, stop calling tools and answer.]";

/// A tool call the model asked for, with the reason it must not run when its arguments were not
/// one valid JSON object (case C11).
pub(super) struct Call {
    /// The call as stored (arguments `{}` when they did not parse).
    pub call: ToolCall,
    /// Why it must not run: the error result the model gets instead.
    pub bad_arguments: Option<String>,
}

impl Runtime {
    /// True when the previous assistant message made the same tool call (its name and the work
    /// its arguments ask for, [`same_work`]) and got the same result: small models loop like this
    /// once the work is done. For the tools whose result is only a receipt (the To-do, the plan
    /// tools, the strategy) the call alone counts: each receipt differs (a new revision) while
    /// nothing new happens.
    pub(super) fn repeats_previous_step(&self, call: &ToolCall, content: &str) -> bool {
        let mut assistants = self
            .prefix
            .history
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| matches!(m, Message::Assistant { .. }));
        // The first is the message being run; the second is the previous step.
        let (Some(_), Some((prev_at, Message::Assistant { tool_calls, .. }))) =
            (assistants.next(), assistants.next())
        else {
            return false;
        };
        let Some(prev) = tool_calls
            .iter()
            .find(|p| p.name == call.name && same_work(&call.name, &p.arguments, &call.arguments))
        else {
            return false;
        };
        if is_receipt_tool(&call.name) {
            return true;
        }
        self.prefix.history[prev_at..].iter().any(|m| {
            matches!(m, Message::Tool { tool_call_id, content: c, .. }
                if *tool_call_id == prev.id
                    && c.strip_suffix(REPEAT_NOTE).map_or(c.as_str(), |c| c.trim_end()) == content)
        })
    }

    /// Turns a completion into the message to store and the calls to run. A tool call written as
    /// text by a small model is recovered (see `textcall`). Whitespace-only text is
    /// dropped (C12); arguments are parsed once, here (C11): a call whose arguments are not one
    /// JSON object is stored with `{}` and answered with an error instead of running.
    pub(super) fn assistant_message(
        &self,
        mut answer: Completion,
        text_only: bool,
    ) -> (Option<Message>, Vec<Call>) {
        let reasoning = answer.reasoning.take();
        if answer.tool_calls.is_empty() && !text_only {
            let names: Vec<&str> = self.prefix.tools.iter().map(|t| t.name).collect();
            if let Some(calls) = super::textcall::recover(&answer.text, &names) {
                answer.tool_calls = calls;
                answer.text = String::new();
            }
        }
        let runaway = answer.finish_reason == Some(Finish::Repetition);
        let mut text = if answer.text.trim().is_empty() {
            String::new()
        } else {
            answer.text
        };
        if runaway && answer.tool_calls.is_empty() && !text.is_empty() {
            // The text that ran away is kept up to the cut, which says so (the reader, and the
            // model on its next request, must not take it for the whole answer).
            text.push_str(RUNAWAY_NOTE);
        }
        let cut_off = answer.finish_reason.as_ref().is_some_and(Finish::cut_off);
        let mut calls: Vec<Call> = Vec::new();
        for (i, raw) in answer.tool_calls.into_iter().enumerate() {
            let id = if raw.id.trim().is_empty() || calls.iter().any(|c| c.call.id == raw.id) {
                format!("call_tern_{}_{i}", self.prefix.history.len())
            } else {
                raw.id
            };
            let (arguments, bad_arguments) = match parse_arguments(&raw.arguments) {
                Ok(v) => (v, None),
                Err(why) => {
                    let hint = if cut_off {
                        " Your output was cut off (the token limit, or it kept repeating itself); send a shorter call."
                    } else {
                        ""
                    };
                    let snippet = crate::text::cut(&raw.arguments, 200);
                    let msg = format!(
                        "the arguments of {} are not one valid JSON object ({why}), so it did not run. Received: `{snippet}`{}.{hint} Send the call again with valid JSON arguments.",
                        this_call(&raw.name),
                        if snippet.len() < raw.arguments.len() {
                            "…"
                        } else {
                            ""
                        },
                    );
                    (json!({}), Some(msg))
                }
            };
            calls.push(Call {
                call: ToolCall {
                    id,
                    name: raw.name,
                    arguments,
                },
                bad_arguments,
            });
        }
        if text.is_empty() && calls.is_empty() {
            return (None, calls);
        }
        let message = Message::Assistant {
            reasoning,
            text,
            tool_calls: calls.iter().map(|c| c.call.clone()).collect(),
        };
        (Some(message), calls)
    }
}

/// Appended to an answer's text that tern cut because it kept repeating itself
/// (`provider::runaway`).
pub const RUNAWAY_NOTE: &str = "\n\n[tern: the answer was cut here: it kept repeating itself]";

/// The tools whose result never repeats even when the call does, so a repeat is judged by the
/// call: receipts of a state change (each carries a new revision), and `agent` (each result
/// names a new child session; the same task delegated again is the loop).
fn is_receipt_tool(name: &str) -> bool {
    name.starts_with("plan_")
        || name == crate::domain::ledger::UPDATE_PLAN
        || crate::tools::work::is_work_tool(name)
        || name == crate::tools::agent::NAME
}

/// Parses joined tool-call argument fragments: one JSON object (empty text counts as `{}`, which
/// some servers send for tools without parameters).
fn parse_arguments(raw: &str) -> Result<Value, String> {
    let t = raw.trim();
    if t.is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(t) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("not an object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `this bash call`, or for a call that names no tool `this call (it names no tool)`: never
/// a gap where the name goes.
fn this_call(name: &str) -> String {
    if name.trim().is_empty() {
        "this call (it names no tool)".into()
    } else {
        format!("this {name} call")
    }
}

/// Whether two calls of tool `name` do the same work: the same arguments, except that a bash
/// call's `timeout_s` does not count (a small model looping on `echo hello` with 600, 100, 200…
/// as its timeout was never seen looping; found running the README with Qwen2.5-Coder-0.5B).
fn same_work(name: &str, a: &serde_json::Value, b: &serde_json::Value) -> bool {
    if name == "bash" {
        return a.get("command") == b.get("command");
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::{parse_arguments, this_call};

    #[test]
    fn a_call_without_a_name_is_named_in_words() {
        assert_eq!(this_call("bash"), "this bash call");
        assert_eq!(this_call(""), "this call (it names no tool)");
        assert!(!this_call(" ").contains("  "));
    }

    #[test]
    fn c11_arguments_parsed_once_and_checked() {
        assert!(parse_arguments("{\"command\": \"ls").is_err());
        assert!(parse_arguments("{\"command\":\"echo \"hi\"\"}").is_err());
        assert!(parse_arguments("[1]").is_err());
        assert_eq!(parse_arguments("  ").unwrap(), serde_json::json!({}));
        // C21: pretty-printed arguments from llama.cpp
        let v = parse_arguments("{\n  \"command\": \"echo hi > hello.txt\"\n}").unwrap();
        assert_eq!(v["command"], "echo hi > hello.txt");
    }
}
