//! The replay provider behind `tern demo`: plays a bundled lesson's scripted model answers in
//! order, whatever the request says, so the demo needs no model and no network while every tool
//! call still runs for real.
//!
//! Compaction requests (the runtime says which requests are: [`Purpose::Compaction`]) are
//! answered from the lesson's scripted summaries instead. Usage is *simulated* with the same rule as the test
//! server's prefix cache, so `tern stats` has figures to show: input = body bytes / 4; cached =
//! the common prefix with the previous body, in whole 128-token blocks, none under 1024 tokens.

use serde::Deserialize;

use crate::cancel::CancelToken;
use crate::event::Purpose;

use super::{Completion, ErrorKind, Provider, ProviderError, RawToolCall, Request, Usage};

/// Bytes per simulated token.
pub const SIM_BYTES_PER_TOKEN: usize = 4;
/// Simulated cache granularity in tokens.
pub const SIM_BLOCK_TOKENS: usize = 128;
/// Shortest simulated cached prefix in tokens (OpenAI's prompt caching starts at 1024 tokens).
pub const SIM_MIN_CACHED_TOKENS: usize = 1024;

/// Simulated prompt-cache usage for `body` sent after `prev` (see the module docs).
pub fn simulate_usage(prev: &[u8], body: &[u8], output_bytes: usize) -> Usage {
    let common = super::common_prefix(prev, body);
    let common_tokens = common / SIM_BYTES_PER_TOKEN;
    let blocks = common_tokens / SIM_BLOCK_TOKENS * SIM_BLOCK_TOKENS;
    let cached = if blocks >= SIM_MIN_CACHED_TOKENS {
        blocks
    } else {
        0
    };
    Usage {
        reasoning_tokens: 0,
        input_tokens: body.len().div_ceil(SIM_BYTES_PER_TOKEN) as u64,
        cached_tokens: cached as u64,
        cache_write_tokens: 0,
        output_tokens: output_bytes.div_ceil(SIM_BYTES_PER_TOKEN) as u64,
    }
}

/// One scripted model answer.
#[derive(Debug, Clone, Deserialize)]
pub struct ScriptedAnswer {
    /// Assistant text.
    #[serde(default)]
    pub text: String,
    /// Tool calls: name and arguments object.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
}

/// One scripted tool call.
#[derive(Debug, Clone, Deserialize)]
pub struct ScriptedCall {
    /// Tool name.
    pub name: String,
    /// Arguments object.
    pub arguments: serde_json::Value,
}

/// A provider that replays scripted answers (and scripted compaction summaries).
pub struct Replay {
    answers: std::vec::IntoIter<ScriptedAnswer>,
    summaries: std::vec::IntoIter<String>,
    prev_body: Vec<u8>,
    calls: usize,
}

impl Replay {
    /// A replay of `answers` (turn requests, in order) and `summaries` (compaction requests).
    pub fn new(answers: Vec<ScriptedAnswer>, summaries: Vec<String>) -> Replay {
        Replay {
            answers: answers.into_iter(),
            summaries: summaries.into_iter(),
            prev_body: Vec::new(),
            calls: 0,
        }
    }
}

impl Provider for Replay {
    fn name(&self) -> super::Wire {
        super::Wire::Replay
    }

    /// The OpenAI-compatible body, so prefix reuse is measured on real request bytes.
    fn body(&self, req: &Request<'_>) -> Vec<u8> {
        super::openai::body(req)
    }

    fn complete(
        &mut self,
        body: &[u8],
        purpose: Purpose,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        _cancel: &CancelToken,
    ) -> Result<Completion, ProviderError> {
        self.calls += 1;
        let (text, calls) = if purpose == Purpose::Compaction {
            let s = self.summaries.next().ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::BadResponse,
                    "the demo script has no summary left",
                )
            })?;
            (s, Vec::new())
        } else {
            match self.answers.next() {
                Some(a) => (a.text, a.tool_calls),
                None => (
                    "(The demo script has no more model answers.)".to_string(),
                    Vec::new(),
                ),
            }
        };
        // Stream word by word, as a model would.
        for piece in text.split_inclusive(' ') {
            on_text(crate::provider::Streamed::Text(piece));
        }
        let tool_calls: Vec<RawToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| RawToolCall {
                id: format!("call_demo_{}_{i}", self.calls),
                name: c.name,
                arguments: c.arguments.to_string(),
            })
            .collect();
        let usage = simulate_usage(&self.prev_body, body, text.len());
        self.prev_body = body.to_vec();
        Ok(Completion {
            reasoning: None,
            finish_reason: Some(if tool_calls.is_empty() {
                super::Finish::Stop
            } else {
                super::Finish::ToolCalls
            }),
            text,
            tool_calls,
            usage,
            usage_refused: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_cache_counts_whole_blocks_over_the_minimum() {
        let a = vec![b'x'; 10_000];
        let mut b = a.clone();
        b.extend_from_slice(b"more");
        let u = simulate_usage(&a, &b, 0);
        assert_eq!(u.input_tokens, 2501);
        assert_eq!(u.cached_tokens, 2432); // 2500 tokens → 19 blocks of 128
        let small = simulate_usage(&a[..3000], &a[..3001], 0);
        assert_eq!(small.cached_tokens, 0); // 750 tokens < 1024
    }
}
