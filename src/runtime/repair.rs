//! History repair after a crash or an interrupt: makes a stored history valid for every provider
//! again before any request is sent.
//!
//! Providers reject histories where an assistant tool call has no result (llama.cpp: "Cannot
//! continue an assistant message that contains tool calls"; OpenAI: "tool_calls must be followed
//! by tool messages"), and empty text blocks (Anthropic). A process killed mid-tool leaves exactly
//! that, so a resumed session repairs first.

use std::collections::HashSet;

use crate::message::Message;

/// The text stored as the result of a tool call whose process died before answering.
pub const LOST_RESULT: &str = "Error: no result was recorded: the tern process running this tool call ended (killed or crashed). Check the state before retrying.";

/// What a repair changed; empty when the history was already valid.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RepairReport {
    /// 1-based line numbers of `conversation.jsonl` that did not parse and were dropped.
    pub dropped_lines: Vec<usize>,
    /// The last dropped line had no final newline (a torn write); see [`JsonlRead::torn_tail`].
    ///
    /// [`JsonlRead::torn_tail`]: crate::store::fsutil::JsonlRead::torn_tail
    pub torn_tail: bool,
    /// Ids of tool calls that got an error result because none was stored.
    pub answered_calls: Vec<String>,
    /// Empty messages and tool results that answered no call, dropped.
    pub dropped_messages: usize,
    /// Pairs of adjacent same-role messages merged into one.
    pub merged: usize,
    /// Tool calls whose arguments were not a JSON object (now `{}`: both wires require an
    /// object) and tool results with empty content (now [`EMPTY_RESULT`]: Anthropic refuses
    /// empty blocks).
    pub fixed: usize,
}

/// The content given to a stored tool result that was empty.
pub const EMPTY_RESULT: &str = "(no output)";

impl RepairReport {
    /// True when the history was changed and must be saved.
    pub fn changed(&self) -> bool {
        !self.dropped_lines.is_empty()
            || !self.answered_calls.is_empty()
            || self.dropped_messages > 0
            || self.merged > 0
            || self.fixed > 0
    }

    /// The `repair` event, naming `archive`, the copy of the file as it was.
    pub fn event(&self, archive: String) -> crate::event::Event {
        crate::event::Event::Repair {
            dropped_lines: self.dropped_lines.clone(),
            torn_tail: self.torn_tail,
            answered_calls: self.answered_calls.clone(),
            dropped_messages: self.dropped_messages,
            merged: self.merged,
            fixed: self.fixed,
            archive,
        }
    }
}

/// Repairs `msgs` (the lines that parsed; `skipped` are the line numbers that did not). Returns the
/// repaired history and what changed. Adjacent user messages are valid for every provider, so they
/// are only merged when the history needs saving anyway (a valid history is never rewritten: that
/// would move the cached prefix).
pub fn repair(msgs: Vec<Message>, skipped: &[usize]) -> (Vec<Message>, RepairReport) {
    repair_with(msgs, skipped, &|_, _| (LOST_RESULT.to_string(), true))
}

/// [`repair`], with `lost(call_id, tool_name)` giving the result of a call that has none and
/// whether it is an error (a sub-agent's call reads the child's own record: a child that
/// completed gives its answer, not an error).
pub fn repair_with(
    msgs: Vec<Message>,
    skipped: &[usize],
    lost: &dyn Fn(&str, &str) -> (String, bool),
) -> (Vec<Message>, RepairReport) {
    let mut report = RepairReport {
        dropped_lines: skipped.to_vec(),
        ..RepairReport::default()
    };
    let mut out: Vec<Message> = Vec::with_capacity(msgs.len());
    // Tool calls of the latest assistant message still waiting for a result.
    let mut open: Vec<(String, String)> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();

    for mut m in msgs {
        fix_shapes(&mut m, &mut report);
        match &m {
            Message::Tool { tool_call_id, .. } => {
                if open.iter().any(|(id, _)| id == tool_call_id) && !answered.contains(tool_call_id)
                {
                    answered.insert(tool_call_id.clone());
                    out.push(m);
                } else {
                    report.dropped_messages += 1;
                }
                continue;
            }
            Message::User { content, .. } if content.trim().is_empty() => {
                report.dropped_messages += 1;
                continue;
            }
            Message::Assistant {
                text, tool_calls, ..
            } if text.trim().is_empty() && tool_calls.is_empty() => {
                report.dropped_messages += 1;
                continue;
            }
            _ => {}
        }
        close_open(&mut out, &mut open, &answered, &mut report, lost);
        answered.clear();
        if let Message::Assistant { tool_calls, .. } = &m {
            open = tool_calls
                .iter()
                .map(|c| (c.id.clone(), c.name.clone()))
                .collect();
        }
        // Two assistant messages in a row: the first had no tool calls (else results sit between).
        if let (
            Some(Message::Assistant {
                text: t1,
                tool_calls: c1,
                reasoning: r1,
            }),
            Message::Assistant {
                text: t2,
                tool_calls: c2,
                reasoning: r2,
            },
        ) = (out.last_mut(), &m)
            && c1.is_empty()
        {
            join_text(t1, t2);
            c1.extend(c2.iter().cloned());
            // The reasoning that led to the calls is the second's (the first made none); a
            // provider whose rule wants it back finds it with them.
            if r2.is_some() {
                r1.clone_from(r2);
            }
            report.merged += 1;
            continue;
        }
        out.push(m);
    }
    close_open(&mut out, &mut open, &answered, &mut report, lost);

    if report.changed() {
        let mut merged: Vec<Message> = Vec::with_capacity(out.len());
        for m in out {
            // A steered message keeps its own line: its id is how a restart knows it was
            // delivered; one tern wrote, or the person's words recalled after a compaction,
            // keep theirs too (who wrote them is how they are told apart).
            if let (
                Some(Message::User {
                    content: a,
                    steer: None,
                    by: None,
                }),
                Message::User {
                    content: b,
                    steer: None,
                    by: None,
                },
            ) = (merged.last_mut(), &m)
            {
                join_text(a, b);
                report.merged += 1;
                continue;
            }
            merged.push(m);
        }
        return (merged, report);
    }
    (out, report)
}

/// Gives `m` the shapes every provider requires: object arguments, non-empty results.
fn fix_shapes(m: &mut Message, report: &mut RepairReport) {
    match m {
        Message::Assistant { tool_calls, .. } => {
            for c in tool_calls.iter_mut().filter(|c| !c.arguments.is_object()) {
                c.arguments = serde_json::Value::Object(serde_json::Map::new());
                report.fixed += 1;
            }
        }
        Message::Tool { content, .. } if content.trim().is_empty() => {
            *content = EMPTY_RESULT.to_string();
            report.fixed += 1;
        }
        _ => {}
    }
}

fn join_text(a: &mut String, b: &str) {
    if b.trim().is_empty() {
        return;
    }
    if !a.trim().is_empty() {
        a.push_str("\n\n");
    }
    a.push_str(b);
}

/// Adds an error result for every call of the latest assistant message that has none.
fn close_open(
    out: &mut Vec<Message>,
    open: &mut Vec<(String, String)>,
    answered: &HashSet<String>,
    report: &mut RepairReport,
    lost: &dyn Fn(&str, &str) -> (String, bool),
) {
    for (id, name) in open.drain(..) {
        if !answered.contains(&id) {
            let (content, is_error) = lost(&id, &name);
            out.push(Message::Tool {
                tool_call_id: id.clone(),
                content,
                name,
                is_error,
            });
            report.answered_calls.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: json!({"command": "sleep 60"}),
        }
    }

    #[test]
    fn shapes_fixed_once() {
        let mut bad = call("1");
        bad.arguments = json!("ls -la");
        let h = vec![
            Message::user("a"),
            Message::Assistant {
                reasoning: None,
                text: String::new(),
                tool_calls: vec![bad],
            },
            Message::tool(&call("1"), " ", false),
        ];
        let (out, report) = repair(h, &[]);
        assert_eq!(report.fixed, 2);
        let Message::Assistant { tool_calls, .. } = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(tool_calls[0].arguments, json!({}));
        assert!(matches!(&out[2], Message::Tool { content, .. } if content == EMPTY_RESULT));
        assert!(!repair(out, &[]).1.changed());
    }

    #[test]
    fn valid_history_untouched() {
        let h = vec![
            Message::user("a"),
            Message::user("b"),
            Message::Assistant {
                reasoning: None,
                text: "x".into(),
                tool_calls: vec![call("1")],
            },
            Message::tool(&call("1"), "ok", false),
            Message::Assistant {
                reasoning: None,
                text: "done".into(),
                tool_calls: vec![],
            },
        ];
        let (r, rep) = repair(h.clone(), &[]);
        assert_eq!(r, h);
        assert!(!rep.changed());
    }

    #[test]
    fn dangling_calls_answered_and_users_merged() {
        let h = vec![
            Message::user("a"),
            Message::Assistant {
                reasoning: None,
                text: String::new(),
                tool_calls: vec![call("1"), call("2")],
            },
            Message::tool(&call("1"), "ok", false),
            Message::user("continue"),
        ];
        let (r, rep) = repair(h, &[5]);
        assert_eq!(rep.answered_calls, vec!["2".to_string()]);
        assert_eq!(r.len(), 5);
        assert!(matches!(&r[4], Message::User { content, .. } if content == "continue"));
        assert!(
            matches!(&r[3], Message::Tool { tool_call_id, is_error: true, .. } if tool_call_id == "2")
        );
    }

    #[test]
    fn orphans_and_empties_dropped_and_assistants_merged() {
        let h = vec![
            Message::user("a"),
            Message::tool(&call("9"), "orphan", false),
            Message::Assistant {
                reasoning: None,
                text: "  ".into(),
                tool_calls: vec![],
            },
            Message::Assistant {
                reasoning: None,
                text: "one".into(),
                tool_calls: vec![],
            },
            Message::Assistant {
                reasoning: None,
                text: "two".into(),
                tool_calls: vec![],
            },
            Message::user(" "),
            Message::user("b"),
        ];
        let (r, rep) = repair(h, &[]);
        assert_eq!(rep.dropped_messages, 3);
        assert_eq!(r.len(), 3);
        assert!(matches!(&r[1], Message::Assistant { text, .. } if text == "one\n\ntwo"));
    }

    /// Two answers in a row merged by the repair keep the reasoning that led to the calls.
    #[test]
    fn a_merged_answer_keeps_the_reasoning_of_its_calls() {
        let r = crate::message::Reasoning::Chat {
            field: "reasoning_content".into(),
            text: "why".into(),
        };
        let h = vec![
            Message::user("a"),
            Message::Assistant {
                reasoning: None,
                text: "first".into(),
                tool_calls: vec![],
            },
            Message::Assistant {
                reasoning: Some(r.clone()),
                text: String::new(),
                tool_calls: vec![call("1")],
            },
            Message::tool(&call("1"), "ok", false),
        ];
        let (out, report) = repair(h, &[]);
        assert_eq!(report.merged, 1);
        let Message::Assistant { reasoning, .. } = &out[1] else {
            panic!("{out:?}");
        };
        assert_eq!(reasoning.as_ref(), Some(&r));
    }
}
