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
        /// A steered message (`tern steer`, a line typed during a turn): the id of the inbox
        /// entry it was delivered from, so a restart recognises an entry already delivered.
        /// Kept in `conversation.jsonl` only; never sent to a provider.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steer: Option<String>,
        /// Who wrote it when not the person typing it now (None: the person, a prompt or a
        /// steer). Kept in `conversation.jsonl` only; never sent to a provider.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Written>,
    },
    /// One model answer: optional text and the tool calls it asked for, in order.
    Assistant {
        /// Empty when the answer was tool calls only; never whitespace-only.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        /// Tool calls in the order the model emitted them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The reasoning its provider returned with it, in that provider's form and byte for
        /// byte (DESIGN §19); replayed by the provider's rule (`provider::reasoning`). Read
        /// leniently: a form this tern does not know (a newer tern's, a hand edit) is no
        /// reasoning, never a lost message.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient_reasoning"
        )]
        reasoning: Option<Reasoning>,
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

/// Who wrote a user message that is not the person's own prompt (see [`Message::User`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Written {
    /// tern, to the model: a compaction's summary, a note that a call written as text or a
    /// shell block did not run, a Stop hook or the goal sending it back to work.
    Tern,
    /// The person, earlier in the session: their words carried over a compaction verbatim,
    /// after a label that says so.
    Recalled,
}

/// The reasoning a provider returned with an assistant message, in its own form, exactly as
/// received (DESIGN §19). Stored in `conversation.jsonl` as `{"form": …, …}`; part of the
/// prefix when it is sent back, so it is never rewritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum Reasoning {
    /// OpenAI-compatible Chat Completions: the streamed `reasoning_content` (DeepSeek, Kimi,
    /// GLM, vLLM, llama.cpp) or `reasoning` (OpenRouter) deltas, joined.
    Chat {
        /// The field it came in (`reasoning_content` or `reasoning`): sent back under it.
        field: String,
        /// The text, joined as received (may be empty: Kimi wants the key even then).
        text: String,
    },
    /// Anthropic Messages: the `thinking` and `redacted_thinking` content blocks, in order,
    /// each exactly as the API gave it (`{"type":"thinking","thinking":…,"signature":…}`,
    /// `{"type":"redacted_thinking","data":…}`).
    Anthropic {
        /// The blocks, in the order they came.
        blocks: Vec<serde_json::Value>,
    },
    /// OpenAI's Responses API: the `reasoning` output items (`id`, `summary`,
    /// `encrypted_content`), in output order, exactly as the stream's `output_item.done` gave
    /// them.
    Responses {
        /// The items.
        items: Vec<serde_json::Value>,
    },
}

/// [`Reasoning`] when the stored value is one this tern knows; None otherwise (see
/// [`Message::Assistant`]'s `reasoning`).
fn lenient_reasoning<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Reasoning>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
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
            steer: None,
            by: None,
        }
    }

    /// A user message tern writes to the model (see [`Written::Tern`]).
    pub fn note(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
            steer: None,
            by: Some(Written::Tern),
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

/// Token usage of one request, normalised across providers (DESIGN.md §4).
///
/// Sources: OpenAI `usage.prompt_tokens` / `prompt_tokens_details.cached_tokens`; DeepSeek
/// `prompt_cache_hit_tokens`; Anthropic `input_tokens + cache_read_input_tokens +
/// cache_creation_input_tokens`; llama.cpp `timings.cache_n`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// All prompt tokens of the request, cached or not.
    pub input_tokens: u64,
    /// Prompt tokens served from the provider's prefix cache.
    pub cached_tokens: u64,
    /// Prompt tokens written to the cache (Anthropic `cache_creation_input_tokens`).
    pub cache_write_tokens: u64,
    /// Generated tokens (a reasoning model's reasoning included: it is billed as output).
    pub output_tokens: u64,
    /// Of the output, the tokens the model spent reasoning (OpenAI
    /// `completion_tokens_details.reasoning_tokens`, Responses
    /// `output_tokens_details.reasoning_tokens`); 0 where the provider does not say.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

/// Whether a count is 0 (an optional figure left out of what is written; `event` uses it too).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds another request's usage to this running total.
    pub fn add(&mut self, other: &Usage) {
        // Saturating: the figures come from the server.
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// This running total minus an earlier reading of it (saturating).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            cached_tokens: self.cached_tokens.saturating_sub(earlier.cached_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_sub(earlier.cache_write_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            reasoning_tokens: self
                .reasoning_tokens
                .saturating_sub(earlier.reasoning_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_round_trips_and_an_unknown_form_loses_nothing_else() {
        let m = Message::Assistant {
            text: "ok".into(),
            tool_calls: Vec::new(),
            reasoning: Some(Reasoning::Chat {
                field: "reasoning_content".into(),
                text: "hmm".into(),
            }),
        };
        let line = serde_json::to_string(&m).unwrap();
        assert_eq!(
            line,
            r#"{"role":"assistant","text":"ok","reasoning":{"form":"chat","field":"reasoning_content","text":"hmm"}}"#
        );
        assert_eq!(serde_json::from_str::<Message>(&line).unwrap(), m);
        for odd in [
            r#"{"role":"assistant","text":"ok","reasoning":{"form":"from-the-future","x":1}}"#,
            r#"{"role":"assistant","text":"ok","reasoning":"text"}"#,
            r#"{"role":"assistant","text":"ok","reasoning":null}"#,
        ] {
            let m: Message = serde_json::from_str(odd).unwrap();
            assert_eq!(
                m,
                Message::Assistant {
                    text: "ok".into(),
                    tool_calls: Vec::new(),
                    reasoning: None
                },
                "{odd}"
            );
        }
    }
}
