//! Provider-neutral conversation messages: one [`Message`] is one line of `conversation.jsonl`.
//!
//! The wire formats (OpenAI Chat Completions, Anthropic Messages) are produced from these by the
//! provider modules; the stored form never depends on which provider answered.

use serde::{Deserialize, Serialize};

/// One message of the history. Serialized as a compact JSON object tagged by `role`:
/// `{"role":"user","content":"…"}`, `{"role":"assistant","text":"…","tool_calls":[…]}`,
/// `{"role":"tool","tool_call_id":"…","name":"bash","content":"…","is_error":true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Text from the person (or the compaction summary that opens a compacted history).
    User {
        /// Never empty or whitespace-only (case C12).
        content: String,
    },
    /// One model answer: optional text and the tool calls it asked for, in order.
    Assistant {
        /// Empty when the answer was tool calls only; never whitespace-only.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        /// Tool calls in the order the model emitted them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with the same id.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// The tool's name (Anthropic does not need it; OpenAI-compatible servers sometimes do).
        name: String,
        /// What the model reads: UTF-8 text, never empty.
        content: String,
        /// True when the call failed (bad arguments, refused, interrupted, non-zero exit is *not* an error).
        #[serde(default, skip_serializing_if = "is_false")]
        is_error: bool,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A tool call as stored: the arguments are always a JSON object (case C11: invalid JSON is
/// never stored; such a call is stored with `{}` and answered by an error result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id (OpenAI `call_…`, Anthropic `toolu_…`), or one tern made up when absent.
    pub id: String,
    /// Tool name as the model sent it.
    pub name: String,
    /// Parsed arguments, a JSON object.
    pub arguments: serde_json::Value,
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// A tool result.
    pub fn tool(call: &ToolCall, content: impl Into<String>, is_error: bool) -> Self {
        Message::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error,
        }
    }
}
