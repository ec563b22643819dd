//! Model providers: request bodies, streaming answers, retries.
//!
//! A [`Provider`] turns a [`Request`] into the exact body bytes sent ([`Provider::body`]) and sends
//! one body, streaming the answer into a [`Completion`] ([`Provider::complete`]). Retries live in
//! [`retry`], above a single attempt. The runtime keeps the previous body to measure prefix reuse.
//!
//! The runtime's call:
//!
//! ```no_run
//! # use tern::cancel::CancelToken;
//! # use tern::event::Purpose;
//! # use tern::provider::{Provider, Request, Streamed, retry::{self, RetryPolicy}};
//! # fn turn(provider: &mut dyn Provider, req: &Request<'_>, cancel: &CancelToken) {
//! let body = provider.body(req);
//! let mut on_text = |t: Streamed<'_>| if let Streamed::Text(t) = t { print!("{t}") };
//! let result = retry::run(
//!     &RetryPolicy::default(),
//!     || provider.complete(&body, Purpose::Turn, &mut on_text, cancel),
//!     |retry, delay, err| eprintln!("retry {retry} in {delay:?}: {err}"),
//!     cancel,
//! );
//! # }
//! ```
//!
//! Wires: [`openai::OpenAi`] (Chat Completions) and [`anthropic::Anthropic`] (Messages), both on
//! the shared [`http::Transport`] (SSE via [`sse::SseParser`]); errors are classified by
//! [`http::classify_error`].

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod reasoning;
pub mod replay;
pub mod responses;
pub mod retry;
pub mod runaway;
pub mod sse;

use std::time::Duration;

use crate::cancel::CancelToken;
use crate::event::Purpose;

use crate::message::Message;
pub use crate::message::Usage;
use crate::tools::ToolSpec;

/// Everything one model request is built from. The prefix is `tools` + `system` + `messages`;
/// `tail` (the work-state block) is appended to the latest message only and never stored.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Model name sent to the server.
    pub model: &'a str,
    /// The pinned system prompt (exact bytes of `system.txt`).
    pub system: &'a str,
    /// Tool schemas in their fixed order.
    pub tools: &'a [ToolSpec],
    /// The stored history; never empty when sent (the last message is a user or tool message).
    pub messages: &'a [Message],
    /// Transient text appended to the latest message of this request only.
    pub tail: Option<&'a str>,
    /// OpenAI `prompt_cache_key` (the session id), sent only where the server is OpenAI's.
    pub cache_key: Option<&'a str>,
    /// Upper bound on output tokens, sent on every request (`max_tokens`; OpenAI's own API:
    /// `max_completion_tokens`, which its newer models require).
    pub max_output_tokens: u32,
    /// Sampling temperature, when set (`--temperature`); else the server's default.
    pub temperature: Option<f64>,
    /// The server is OpenAI's own API (api.openai.com): its parameter names.
    pub official_openai: bool,
    /// False asks for a text answer only (`tool_choice` none): the tools stay in the request so
    /// the prefix keeps its bytes up to that field. Used once to end a loop of repeated calls.
    pub tools_allowed: bool,
    /// Ask for the 1-hour prompt cache where the wire can (Anthropic's `cache_control` `ttl`
    /// `1h`: `cache_ttl` in the config); the others ignore it.
    pub long_cache: bool,
    /// The reasoning effort to ask for and whether stored reasoning goes back
    /// ([`reasoning::Settings`]; the default sends nothing).
    pub reasoning: reasoning::Settings,
}

/// A tool call as streamed: arguments are the joined fragments, not yet parsed (case C11: the
/// runtime parses them once, at the end).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawToolCall {
    /// Provider id; may be empty if the server sent none (the runtime then makes one up).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Concatenated argument fragments, exactly as received.
    pub arguments: String,
}

/// One complete model answer. Only produced when the stream really completed: `[DONE]` or a
/// non-null `finish_reason` (OpenAI), `message_stop` (Anthropic). An early end is an error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// The assistant text, concatenated.
    pub text: String,
    /// Tool calls in index order.
    pub tool_calls: Vec<RawToolCall>,
    /// Why the answer ended; None if the stream ended with `[DONE]` without saying.
    pub finish_reason: Option<Finish>,
    /// Usage as reported (zeros when the server reported none).
    pub usage: Usage,
    /// The reasoning the provider returned with the answer, in its own form (stored with the
    /// assistant message and replayed by the provider's rule; None: none came).
    pub reasoning: Option<crate::message::Reasoning>,
    /// Why the reported usage was not believed (a negative, fractional or absurd figure, more
    /// cached than prompt tokens: [`check_usage`]); `usage` is then all zeros and the runtime
    /// records the request's usage as estimated, with a warning. None when believed.
    pub usage_refused: Option<String>,
}

/// The most tokens tern believes one request reports for any usage figure: 100 M, fifty times
/// the largest context window offered today (2 M). A figure above it is a server bug, not a bill.
pub const MAX_USAGE_TOKENS: u64 = 100_000_000;

/// One usage figure of a provider's JSON, named `name` in the error: Ok(None) when absent or
/// null; Ok(n) for a whole number from 0 to [`MAX_USAGE_TOKENS`] (a float with no fraction, as
/// some servers send, counts). Negative, fractional, absurd or non-numeric figures are errors.
pub(crate) fn usage_figure(
    v: Option<&serde_json::Value>,
    name: &str,
) -> Result<Option<u64>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = match (v.as_u64(), v.as_f64()) {
        (Some(n), _) => Some(n),
        // Exact: a whole float within the cap converts without loss.
        (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f <= MAX_USAGE_TOKENS as f64 => {
            Some(f as u64)
        }
        _ => None,
    };
    match n {
        Some(n) if n <= MAX_USAGE_TOKENS => Ok(Some(n)),
        _ => Err(format!(
            "{name} = {v} is not a token count from 0 to {MAX_USAGE_TOKENS}"
        )),
    }
}

/// Checks a whole usage reading: no figure above [`MAX_USAGE_TOKENS`], cached and cache-write
/// tokens within the prompt tokens (they are parts of it, see [`Usage`]). Err says why.
pub fn check_usage(u: &Usage) -> Result<(), String> {
    for (name, n) in [
        ("input tokens", u.input_tokens),
        ("cached tokens", u.cached_tokens),
        ("cache-write tokens", u.cache_write_tokens),
        ("output tokens", u.output_tokens),
        ("reasoning tokens", u.reasoning_tokens),
    ] {
        if n > MAX_USAGE_TOKENS {
            return Err(format!("{name} = {n} is more than {MAX_USAGE_TOKENS}"));
        }
    }
    if u.cached_tokens > u.input_tokens {
        return Err(format!(
            "cached tokens ({}) are more than the prompt tokens ({})",
            u.cached_tokens, u.input_tokens
        ));
    }
    if u.reasoning_tokens > u.output_tokens {
        return Err(format!(
            "reasoning tokens ({}) are more than the output tokens ({})",
            u.reasoning_tokens, u.output_tokens
        ));
    }
    if u.cache_write_tokens > u.input_tokens {
        return Err(format!(
            "cache-write tokens ({}) are more than the prompt tokens ({})",
            u.cache_write_tokens, u.input_tokens
        ));
    }
    Ok(())
}

/// The usage a decoder hands over: `u` when [`check_usage`] and every figure read passed
/// (`refused` None), else zeros and why.
pub(crate) fn believed(u: Usage, refused: Option<String>) -> (Usage, Option<String>) {
    match refused.map_or_else(|| check_usage(&u), Err) {
        Ok(()) => (u, None),
        Err(why) => (Usage::default(), Some(why)),
    }
}

/// Why an answer ended: the provider's `finish_reason` (OpenAI) or `stop_reason` (Anthropic),
/// or tern's own cut of a runaway answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// A natural end: `stop` (OpenAI), `end_turn` or `stop_sequence` (Anthropic).
    Stop,
    /// The answer ends in tool calls: `tool_calls` (OpenAI), `tool_use` (Anthropic).
    ToolCalls,
    /// The output token cap cut it: `length` (OpenAI), `max_tokens` (Anthropic).
    Length,
    /// tern cut it: it kept repeating itself ([`runaway`]).
    Repetition,
    /// Any other reason the server gave (`content_filter`, `refusal`, `pause_turn`…), as sent.
    Other(String),
}

impl Finish {
    /// The reason named by a server's `finish_reason` / `stop_reason` string.
    pub fn from_wire(s: &str) -> Finish {
        match s {
            "stop" | "end_turn" | "stop_sequence" => Finish::Stop,
            "tool_calls" | "tool_use" => Finish::ToolCalls,
            "length" | "max_tokens" => Finish::Length,
            other => Finish::Other(other.to_string()),
        }
    }

    /// The answer was cut before its end (the token cap, or a runaway).
    pub fn cut_off(&self) -> bool {
        match self {
            Finish::Length | Finish::Repetition => true,
            Finish::Stop | Finish::ToolCalls | Finish::Other(_) => false,
        }
    }
}

/// What went wrong with one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect, or the connection broke before a response status.
    Connect,
    /// Nobody is there: the host name does not resolve, or the connection is refused. Retried
    /// only a few times, briefly (a server being restarted), not for the whole retry budget.
    Unreachable,
    /// No byte arrived within the idle-read timeout, or connect timed out.
    Timeout,
    /// The server answered with a non-success HTTP status.
    Status(u16),
    /// An overload or rate-limit error frame inside a 200 stream (e.g. Anthropic `event: error`
    /// with `overloaded_error`).
    Overloaded,
    /// The stream ended before `[DONE]` / a `finish_reason` / `message_stop` (case C10).
    EarlyEnd,
    /// The prompt is longer than the model's context window (recognised from the error body).
    ContextOverflow,
    /// The person interrupted (Ctrl-C) while the request was streaming.
    Cancelled,
    /// The server sent something that is not the protocol (bad JSON in a data line, etc.).
    BadResponse,
}

/// An error from one provider attempt. The message never contains the API key (redacted by the
/// transport before it is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderError {
    /// Classification used by [`retry`] and by the runtime (overflow → compaction).
    pub kind: ErrorKind,
    /// Human-readable text, including a short snippet of the server's error body when there is one.
    pub message: String,
    /// The server's `Retry-After` (seconds or HTTP date), already converted to a duration.
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// Builds an error of `kind` with `message` and no Retry-After.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether a new attempt may succeed: connection errors, timeouts, early ends, overload frames
    /// and HTTP 408, 409, 429, 5xx and 529. Never 400, 401, 403, 404, 413, 422 (case C13).
    pub fn retryable(&self) -> bool {
        match self.kind {
            ErrorKind::Connect
            | ErrorKind::Unreachable
            | ErrorKind::Timeout
            | ErrorKind::EarlyEnd
            | ErrorKind::Overloaded => true,
            ErrorKind::Status(s) => matches!(s, 408 | 409 | 429 | 500..=599),
            ErrorKind::ContextOverflow | ErrorKind::Cancelled | ErrorKind::BadResponse => false,
        }
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProviderError {}

/// Length of the common byte prefix of two request bodies: the prefix reuse tern measures, and
/// what the replay provider's simulated cache counts.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub use crate::event::Wire;

/// A model provider. `body` is pure and deterministic (same request, same bytes); `complete`
/// One piece of a streamed answer, as it arrives: text of the answer, or a piece of the model's
/// reasoning where the provider streams it (OpenAI-compatible `reasoning_content`, Anthropic
/// `thinking` blocks). Display only: the answer's text is also in the [`Completion`], the
/// reasoning is kept nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streamed<'a> {
    /// Answer text.
    Text(&'a str),
    /// Reasoning.
    Thought(&'a str),
    /// Nothing has come for `silent` (a stalled stream, or a server still thinking); tern gives
    /// up on it after `left` more. Sent at most every [`http::STALL_NOTE_EVERY`].
    Waiting {
        /// Since the last complete event (or the request).
        silent: std::time::Duration,
        /// Until the idle timeout ends the attempt.
        left: std::time::Duration,
    },
}

/// makes exactly one attempt.
pub trait Provider: Send {
    /// Which provider this is, for events and `meta.json`.
    fn name(&self) -> Wire;

    /// The exact request body bytes for `req`. Deterministic: field order fixed, `tools` first and
    /// `messages` last, so consecutive bodies share the longest byte prefix.
    fn body(&self, req: &Request<'_>) -> Vec<u8>;

    /// Sends one body and streams the answer. `purpose` says what the request is for (the replay
    /// provider answers a compaction from its summaries; real servers ignore it). `on_text`
    /// receives assistant text deltas as they arrive (for display). Returns when the stream completed, failed, or `cancel` became true
    /// (then [`ErrorKind::Cancelled`], within about 100 ms).
    fn complete(
        &mut self,
        body: &[u8],
        purpose: Purpose,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &CancelToken,
    ) -> Result<Completion, ProviderError>;
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_figures_are_whole_counts_within_the_cap() {
        let f = |v: serde_json::Value| usage_figure(Some(&v), "x");
        assert_eq!(f(json!(12)), Ok(Some(12)));
        assert_eq!(f(json!(12.0)), Ok(Some(12)));
        assert_eq!(f(json!(null)), Ok(None));
        assert_eq!(usage_figure(None, "x"), Ok(None));
        assert_eq!(f(json!(MAX_USAGE_TOKENS)), Ok(Some(MAX_USAGE_TOKENS)));
        for bad in [
            json!(-1),
            json!(-0.5),
            json!(1.5),
            json!(u64::MAX),
            json!(MAX_USAGE_TOKENS + 1),
            json!(1e300),
            json!("12"),
        ] {
            assert!(f(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reading_with_more_cached_than_input_is_refused_whole() {
        let u = Usage {
            input_tokens: 10,
            cached_tokens: 11,
            ..Usage::default()
        };
        let (kept, why) = believed(u, None);
        assert_eq!(kept, Usage::default());
        assert!(why.unwrap().contains("cached"));
        let ok = Usage {
            reasoning_tokens: 0,
            input_tokens: 10,
            cached_tokens: 10,
            cache_write_tokens: 0,
            output_tokens: 3,
        };
        assert_eq!(believed(ok, None), (ok, None));
    }
}
