//! The request prefix as a value: tools + pinned system prompt + stored history. It builds every
//! request body (the one place bodies are made); what varies per request (the work-state tail,
//! whether tools may be called, the output cap) is passed in as [`RequestOptions`], never kept as
//! runtime state, so the same prefix always gives the same bytes (DESIGN.md §4).
//!
//! A fork is a prefix cut before a given message ([`Prefix::fork`]): a child session starts from
//! its parent's exact system bytes and history, so its first request extends the parent's cached
//! prefix.

use crate::message::Message;
use crate::provider::{Provider, Request};
use crate::tools::ToolSpec;

/// Tools, the pinned system prompt and the stored history.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefix {
    /// Tool schemas in their fixed order (the same bytes in every process and session).
    pub tools: Vec<ToolSpec>,
    /// The exact bytes of `system.txt`.
    pub system: String,
    /// The stored, append-only history.
    pub history: Vec<Message>,
}

/// What one request adds to or sets on the prefix.
#[derive(Debug, Clone, Copy)]
pub struct RequestOptions<'a> {
    /// Model name.
    pub model: &'a str,
    /// The transient work-state block, appended to the latest message only.
    pub tail: Option<&'a str>,
    /// OpenAI `prompt_cache_key`.
    pub cache_key: Option<&'a str>,
    /// Output cap (`max_tokens`).
    pub max_output_tokens: u32,
    /// Sampling temperature, when set.
    pub temperature: Option<f64>,
    /// The server is OpenAI's own API.
    pub official_openai: bool,
    /// False asks for text only (`tool_choice` none); the tools stay in the body so the prefix
    /// keeps its bytes.
    pub tools_allowed: bool,
    /// The 1-hour prompt cache (Anthropic, `cache_ttl: "1h"`).
    pub long_cache: bool,
    /// The reasoning effort and replay rule.
    pub reasoning: crate::provider::reasoning::Settings,
}

impl Prefix {
    /// The body for the stored history plus the options.
    pub fn body(&self, provider: &dyn Provider, opts: &RequestOptions<'_>) -> Vec<u8> {
        self.body_with(&self.history, provider, opts)
    }

    /// The body for `messages` in place of the history (a compaction sends the history up to its
    /// cut plus the instruction), with this prefix's tools and system prompt.
    pub fn body_with(
        &self,
        messages: &[Message],
        provider: &dyn Provider,
        opts: &RequestOptions<'_>,
    ) -> Vec<u8> {
        provider.body(&Request {
            model: opts.model,
            system: &self.system,
            tools: &self.tools,
            messages,
            tail: opts.tail,
            cache_key: opts.cache_key,
            max_output_tokens: opts.max_output_tokens,
            temperature: opts.temperature,
            official_openai: opts.official_openai,
            tools_allowed: opts.tools_allowed,
            long_cache: opts.long_cache,
            reasoning: opts.reasoning,
        })
    }

    /// The prefix a fork starts from: the same tools and system bytes and the history before
    /// message `at` (the assistant message whose tool call made the fork).
    pub fn fork(&self, at: usize) -> Prefix {
        Prefix {
            tools: self.tools.clone(),
            system: self.system.clone(),
            history: self.history[..at.min(self.history.len())].to_vec(),
        }
    }
}
