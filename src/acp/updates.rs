//! The one mapping from tern's events to ACP `session/update`s, used by a live turn (the events
//! as the runtime emits them) and by `session/load`'s replay (the stored conversation read back
//! as the same events, [`Mapper::replay`]), so both show a call, its result and its failure
//! alike. Pure: no I/O; the caller reads the ledger for a `work_update` and writes the updates.
//!
//! Mapping (ACP v1, prompt turn and tool calls):
//! - `turn_start` → `user_message_chunk` (replay only: a live client shows its own prompt);
//!   `steer` (a message steered into the running turn) → `user_message_chunk`;
//! - `assistant` text → `agent_message_chunk` (live, only text that did not stream);
//! - `tool_call` → `tool_call` (bash: kind `execute`, titled by its command, `pending` until
//!   approved; the plan and progress tools kind `think`; others `other`, `in_progress`);
//! - `tool_result` → `tool_call_update` `completed` / `failed` with the text the model reads;
//!   failed = stored as an error, or a bash command that exited non-zero or died of a signal
//!   (from its process facts live, from the result's footer in a replay: the same footer);
//! - `work_update` → `plan` (the whole ledger); `usage` → `usage_update`;
//! - `warning` → a visible `agent_message_chunk` (a Markdown quote);
//! - a model switch `boundary` → an agent chunk naming the new model.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::protocol::{
    Cost, PlanEntry, SessionUpdate, TextBlock, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolKind,
};
use crate::domain::ledger::{Ledger, Status as ItemStatus};
use crate::event::{BashFacts, BoundaryKind, Event};
use crate::message::Message;

/// Turns events into updates for one session; keeps the tool call ids unique over the session
/// (replay and live turns share one mapper).
#[derive(Default)]
pub struct Mapper {
    ids: IdMap,
    /// The context window in tokens, for `usage_update.size`.
    pub context_window: u64,
    /// The session's cost so far in USD, for `usage_update.cost` (None: no known price yet).
    pub spent: Option<f64>,
}

impl Mapper {
    /// A mapper for a session whose model has `context_window` tokens.
    pub fn new(context_window: u64) -> Mapper {
        Mapper {
            ids: IdMap::default(),
            context_window,
            spent: None,
        }
    }

    /// The updates for `ev`. `ledger` is the ledger as it is now (read by the caller for a
    /// `work_update`; None otherwise).
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per event kind: renderers match every variant, never a catch-all (tests/it/architecture.rs), so a new kind is a compile error here"
    )]
    pub fn event(&mut self, ev: &Event, ledger: Option<&Ledger>) -> Vec<SessionUpdate> {
        match ev {
            Event::TurnStart { prompt } if !prompt.is_empty() => {
                vec![SessionUpdate::UserMessageChunk {
                    content: TextBlock::new(prompt.clone()),
                }]
            }
            Event::Assistant { text, .. } => chunk(text),
            // A message steered into the running turn (`_tern/steer`, `tern steer`): the
            // person's words, shown where they joined the conversation.
            Event::Steer { text, .. } => vec![SessionUpdate::UserMessageChunk {
                content: TextBlock::new(text.clone()),
            }],
            Event::ToolCall {
                id,
                name,
                arguments,
            } => {
                let (title, kind) = call_look(name, arguments);
                // A bash call waits for approval; the other tools start at once.
                let status = if kind == ToolKind::Execute {
                    ToolCallStatus::Pending
                } else {
                    ToolCallStatus::InProgress
                };
                vec![SessionUpdate::ToolCall(ToolCall {
                    tool_call_id: self.ids.assign(id),
                    title,
                    kind,
                    status,
                    raw_input: arguments.clone(),
                })]
            }
            Event::ToolResult {
                id,
                name,
                is_error,
                content,
                bash,
                ..
            } => {
                let failed = tool_failed(*is_error, name, content, bash.as_ref());
                // Every completed call carries `rawOutput` (issue 34: work_update had none): a
                // bash call its process facts, any other tool its result and whether it failed.
                let raw_output = Some(match bash.as_ref() {
                    Some(b) => json!({
                        "exitCode": b.exit_code,
                        "timedOut": b.timed_out,
                        "interrupted": b.interrupted,
                        "outputBytes": b.output_bytes,
                        "spill": b.spill,
                    }),
                    None => json!({"content": content, "isError": is_error}),
                });
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    tool_call_id: self.ids.get(id),
                    status: Some(if failed {
                        ToolCallStatus::Failed
                    } else {
                        ToolCallStatus::Completed
                    }),
                    content: Some(vec![ToolCallContent::text(content.as_str())]),
                    raw_output,
                    ..ToolCallUpdate::default()
                })]
            }
            Event::Usage {
                purpose,
                model,
                input_tokens,
                cached_tokens,
                cache_write_tokens,
                output_tokens,
                cost_usd,
                miss,
                ..
            } => {
                if let Some(c) = cost_usd {
                    self.spent = Some(self.spent.unwrap_or(0.0) + c);
                }
                vec![SessionUpdate::UsageUpdate {
                    used: input_tokens.saturating_add(*output_tokens),
                    size: self.context_window,
                    cost: self.spent.map(Cost::usd),
                    meta: json!({"tern": {
                        "purpose": purpose.as_str(),
                        "model": model,
                        "inputTokens": input_tokens,
                        "cachedTokens": cached_tokens,
                        "cacheWriteTokens": cache_write_tokens,
                        "outputTokens": output_tokens,
                        "costUsd": cost_usd,
                        "miss": miss,
                    }}),
                }]
            }
            // A sub-agent's cost counts into its parent's session (shown with the next usage).
            Event::AgentEnd {
                cost_usd: Some(c), ..
            } => {
                self.spent = Some(self.spent.unwrap_or(0.0) + c);
                Vec::new()
            }
            Event::WorkUpdate { .. } => match ledger {
                Some(l) => vec![SessionUpdate::Plan {
                    entries: plan_entries(l),
                }],
                None => Vec::new(),
            },
            Event::Warning { message } => chunk(&notice("warning", message)),
            Event::Door { held, listed } => chunk(&notice(
                "door",
                &crate::sandbox::door::describe(held, listed),
            )),
            Event::Boundary {
                kind: BoundaryKind::ModelSwitch,
                to: Some(to),
                ..
            } => chunk(&notice("model", &format!("the next request goes to {to}"))),
            // Not shown in the editor (the client has its own prompt, turn and error display;
            // `_tern/events` carries every event).
            Event::SessionStart { .. }
            | Event::TurnStart { .. }
            | Event::PlanState { .. }
            | Event::Compaction { .. }
            | Event::Retry { .. }
            | Event::Boundary { .. }
            | Event::Nudge { .. }
            | Event::Repair { .. }
            | Event::Receipt { .. }
            | Event::TurnInterrupted { .. }
            | Event::AgentStart { .. }
            | Event::AgentEnd { .. }
            | Event::Error { .. }
            | Event::TurnEnd { .. }
            | Event::Hook { .. }
            | Event::McpCall { .. }
            | Event::Result(_) => Vec::new(),
        }
    }

    /// `session/load`'s replay (ACP v1, session setup: "Loading Sessions"): the stored
    /// conversation read back as the events that wrote it (each user message a `turn_start`,
    /// each answer an `assistant` then a `tool_call` per call, each result a `tool_result`),
    /// mapped by [`Mapper::event`]; then the ledger as a `plan`.
    pub fn replay(&mut self, history: &[Message], ledger: Option<&Ledger>) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        for m in history {
            for ev in as_events(m) {
                out.extend(self.event(&ev, None));
            }
        }
        if let Some(l) = ledger.filter(|l| !l.items.is_empty()) {
            out.push(SessionUpdate::Plan {
                entries: plan_entries(l),
            });
        }
        out
    }

    /// Records the calls of a history not replayed (`session/resume`), so later ids stay unique.
    pub fn learn(&mut self, history: &[Message]) {
        for m in history {
            if let Message::Assistant { tool_calls, .. } = m {
                for c in tool_calls {
                    self.ids.assign(&c.id);
                }
            }
        }
    }

    /// The ACP id of the tool call tern knows as `id` (the latest one so named).
    pub fn acp_id(&self, id: &str) -> String {
        self.ids.get(id)
    }
}

/// A stored message as the events that wrote it.
fn as_events(m: &Message) -> Vec<Event> {
    match m {
        Message::User { content, .. } => vec![Event::TurnStart {
            prompt: content.clone(),
        }],
        Message::Assistant {
            text, tool_calls, ..
        } => {
            let mut v = vec![Event::Assistant {
                text: text.clone(),
                tool_calls: Vec::new(),
            }];
            v.extend(tool_calls.iter().map(|c| Event::ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            }));
            v
        }
        Message::Tool {
            tool_call_id,
            name,
            content,
            is_error,
        } => vec![Event::ToolResult {
            id: tool_call_id.clone(),
            name: name.clone(),
            is_error: *is_error,
            duration_ms: 0,
            content: content.clone(),
            bash: None,
        }],
    }
}

fn chunk(text: &str) -> Vec<SessionUpdate> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![SessionUpdate::AgentMessageChunk {
        content: TextBlock::new(text),
    }]
}

/// A note from tern in the answer, as its own Markdown paragraph: `> **tern (warning):** …`.
pub fn notice(label: &str, text: &str) -> String {
    let quoted = text.trim_end().replace('\n', "\n> ");
    format!("\n\n> **tern ({label}):** {quoted}\n\n")
}

/// Whether a tool result failed: stored as an error, or a bash command that exited non-zero or
/// died of a signal (its process facts when known, else the footer the bash tool wrote).
pub fn tool_failed(is_error: bool, name: &str, content: &str, bash: Option<&BashFacts>) -> bool {
    if is_error {
        return true;
    }
    match bash {
        Some(b) => b.exit_code != Some(0),
        None => name == "bash" && bash_footer_failed(content),
    }
}

/// Whether a stored bash result reads as failed: its last `[exit N]` marker is not 0, or it was
/// killed by a signal (the footer the bash tool writes).
fn bash_footer_failed(content: &str) -> bool {
    if let Some(i) = content.rfind("[exit ") {
        let rest = &content[i + 6..];
        let code = rest.split(']').next().unwrap_or("");
        return code.trim() != "0";
    }
    content.contains("[killed by signal")
}

/// tern tool call ids → ACP `toolCallId`s, unique within the session: a provider may reuse an
/// id in a later turn (`call_1` again), which would merge two calls in the client, so a repeat
/// gets `~N` appended.
#[derive(Default)]
struct IdMap {
    seen: HashMap<String, u32>,
    live: HashMap<String, String>,
}

impl IdMap {
    fn assign(&mut self, id: &str) -> String {
        let base = if id.is_empty() { "call" } else { id };
        let n = self.seen.entry(base.to_string()).or_insert(0);
        let acp = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}~{n}")
        };
        *n += 1;
        self.live.insert(id.to_string(), acp.clone());
        acp
    }

    fn get(&self, id: &str) -> String {
        self.live.get(id).cloned().unwrap_or_else(|| id.to_string())
    }
}

/// How a tool call is shown: bash as its command (kind execute), the plan and progress tools by
/// name (kind think), anything else by name (kind other).
fn call_look(name: &str, args: &Value) -> (String, ToolKind) {
    match name {
        "bash" => (
            args["command"]
                .as_str()
                .filter(|c| !c.trim().is_empty())
                .unwrap_or("bash")
                .to_string(),
            ToolKind::Execute,
        ),
        n if n.starts_with("plan_")
            || n == "update_plan"
            || crate::tools::work::is_work_tool(n) =>
        {
            (n.to_string(), ToolKind::Think)
        }
        n => (n.to_string(), ToolKind::Other),
    }
}

/// The ledger as plan entries (ACP v1, agent plan). ACP has no `cancelled` status: such an item
/// is `completed` with `[cancelled]` before its content.
pub fn plan_entries(ledger: &Ledger) -> Vec<PlanEntry> {
    ledger
        .items
        .iter()
        .map(|i| {
            let (status, content) = match i.status {
                ItemStatus::Pending => ("pending", i.content.clone()),
                ItemStatus::InProgress => ("in_progress", i.content.clone()),
                ItemStatus::Completed => ("completed", i.content.clone()),
                ItemStatus::Cancelled => ("completed", format!("[cancelled] {}", i.content)),
            };
            PlanEntry {
                content,
                priority: "medium",
                status,
            }
        })
        .collect()
}

/// A receipt or other tern text as Markdown that reads right in an editor: one line as it is;
/// several lines (tables, aligned figures, a plan) in a fenced block, so line breaks and
/// columns survive a Markdown view.
pub fn markdown(text: &str) -> String {
    let text = text.trim_end();
    if !text.contains('\n') {
        return text.to_string();
    }
    // A fence longer than any run of backticks inside.
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}text\n{text}\n{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_ids_stay_unique() {
        let mut m = IdMap::default();
        assert_eq!(m.assign("call_1"), "call_1");
        assert_eq!(m.get("call_1"), "call_1");
        assert_eq!(m.assign("call_1"), "call_1~1");
        assert_eq!(m.get("call_1"), "call_1~1");
        assert_eq!(m.assign(""), "call");
    }

    #[test]
    fn one_judgment_of_failure_for_live_and_replay() {
        let facts = |code| BashFacts {
            exit_code: code,
            timed_out: false,
            interrupted: false,
            output_bytes: 0,
            spill: None,
        };
        for (content, code, failed) in [
            ("hi\n[exit 0]", Some(0), false),
            ("[no output] [exit 2]", Some(2), true),
            ("[killed by signal 9 (SIGKILL)]", None, true),
            ("[exit 1] in the output\n[exit 0]", Some(0), false),
        ] {
            assert_eq!(
                tool_failed(false, "bash", content, None),
                failed,
                "{content}"
            );
            assert_eq!(
                tool_failed(false, "bash", content, Some(&facts(code))),
                failed,
                "{content}"
            );
        }
        assert!(tool_failed(true, "work_update", "bad", None));
        assert!(!tool_failed(false, "work_update", "[exit 3]", None));
    }

    #[test]
    fn replay_and_live_give_the_same_updates() {
        let call = crate::message::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"command": "false"}),
        };
        let history = vec![
            Message::user("go"),
            Message::Assistant {
                reasoning: None,
                text: "ok".into(),
                tool_calls: vec![call],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "bash".into(),
                content: "[no output] [exit 1]".into(),
                is_error: false,
            },
        ];
        let replayed = serde_json::to_value(Mapper::new(1).replay(&history, None)).unwrap();
        let mut live = Mapper::new(1);
        let mut events = Vec::new();
        for m in &history {
            events.extend(as_events(m));
        }
        let live: Vec<SessionUpdate> = events.iter().flat_map(|e| live.event(e, None)).collect();
        assert_eq!(replayed, serde_json::to_value(live).unwrap());
        assert_eq!(replayed[3]["status"], "failed", "{replayed:#}");
        assert_eq!(replayed[2]["status"], "pending");
    }

    #[test]
    fn cancelled_items_are_marked() {
        let l: Ledger = serde_json::from_value(json!({"items": [
            {"id": "1", "content": "a", "status": "completed"},
            {"id": "2", "content": "b", "status": "cancelled"},
            {"id": "3", "content": "c", "status": "in_progress"},
        ]}))
        .unwrap();
        let e = plan_entries(&l);
        assert_eq!(e[1].content, "[cancelled] b");
        assert_eq!(
            e.iter().map(|e| e.status).collect::<Vec<_>>(),
            ["completed", "completed", "in_progress"]
        );
    }

    #[test]
    fn receipts_keep_their_lines_in_markdown() {
        assert_eq!(markdown("one line\n"), "one line");
        assert_eq!(markdown("a\n  b"), "```text\na\n  b\n```");
        assert_eq!(markdown("x\n````y"), "`````text\nx\n````y\n`````");
    }
}
