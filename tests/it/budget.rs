//! The byte budget of the fixed prefix (the tool schemas + the system prompt), measured where it
//! is billed: on the wire, in the first request of a session with the default tools, on both
//! wire formats (issue 18, item 7).
//!
//! The budget has two sides because its goal is the bill, not the byte count (BENCHMARKS.md §5,
//! "The bill"). Every byte of the fixed prefix is sent on every request; but the providers cache
//! nothing under 1,024 tokens (OpenAI prompt caching: prompts of 1,024 tokens or more, hits in
//! 128-token increments; Anthropic prompt caching: the minimum cacheable prompt of Sonnet 4.x and
//! Opus 4/4.1), so a fixed prefix under it is never reused by the next session and leaves each
//! session's first requests billed in full. Measured side by side on the 40-step script, the
//! prefix that just reaches the minimum (the lifecycle and bash teaching the lean prefix had cut)
//! has the fewest uncached and cost-weighted bytes on both wire formats: fewer than the lean
//! one, and fewer than one with a further 128 tokens of guidance. The lower bound keeps the
//! prefix cacheable, the upper bound keeps it within one 128-token increment of the minimum.

use crate::support::Wire;
use crate::support::cli::WireWs;
use crate::support::script::text;
use tern::policy::Mode;
use tern::runtime::system;

/// Bytes a token, as the fake provider and the bill model count them.
pub const BYTES_PER_TOKEN: usize = 4;
/// The smallest prefix either provider caches, in tokens.
pub const CACHE_MIN_TOKENS: usize = 1024;
/// OpenAI's cache-hit increment, in tokens.
pub const CACHE_INCREMENT_TOKENS: usize = 128;
/// The fixed prefix on the wire (tools + system prompt, bytes as sent; the Anthropic
/// `cache_control` marker is request metadata and left out) is at least the cache minimum…
pub const WIRE_PREFIX_MIN_BYTES: usize = CACHE_MIN_TOKENS * BYTES_PER_TOKEN;
/// …and at most one increment above it: more is billed on every request for nothing.
pub const WIRE_PREFIX_MAX_BYTES: usize =
    (CACHE_MIN_TOKENS + CACHE_INCREMENT_TOKENS) * BYTES_PER_TOKEN;

/// The Anthropic breakpoint marker inside the system block.
const MARKER: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// Tool descriptions stay one or two sentences, and the `agent` tool is among the default tools
/// the budget counts.
#[test]
fn tool_descriptions_are_short_and_the_agent_tool_is_counted() {
    let tools = tern::tools::specs();
    assert!(
        tools.iter().any(|t| t.name == "agent"),
        "the agent tool is inside the budget"
    );
    for t in &tools {
        let sentences = t.description.matches(". ").count() + 1;
        assert!(sentences <= 2, "{}: {sentences} sentences", t.name);
    }
}

/// No example a model could copy into an argument or run verbatim: no JSON call, no command
/// in backticks, no `echo … >` line in the system prompt or a tool description.
#[test]
fn no_copyable_examples_in_the_prefix() {
    let d = tempfile::tempdir().expect("tempdir");
    let sys = system::base(
        d.path(),
        &system::sandbox_lines(Mode::default(), false, &[]),
    );
    let mut texts = vec![("system".to_string(), sys)];
    texts.extend(
        tern::tools::specs()
            .into_iter()
            .map(|t| (t.name.to_string(), t.description)),
    );
    for (name, text) in texts {
        for bad in ["{\"", "`", "echo ", "Example", "e.g."] {
            assert!(!text.contains(bad), "{name} holds {bad:?}: {text}");
        }
    }
}

/// The fixed prefix as the first request of a new session carries it on the wire, with the
/// default tools: the `tools` value and the system prompt (OpenAI: the first message's
/// `content`; Anthropic: the `system` value without its breakpoint marker), in bytes, between
/// [`WIRE_PREFIX_MIN_BYTES`] and [`WIRE_PREFIX_MAX_BYTES`] on both wire formats.
#[test]
fn the_first_request_on_the_wire_fits_the_budget() {
    let mut report = Vec::new();
    for w in [Wire::OpenAi, Wire::Anthropic] {
        let ws = WireWs::new(w, vec![text(w, "Done.")]);
        ws.ok(&["exec", "hello"]);
        let body = ws.fake.requests()[0].body_str();
        let tools = crate::support::body::raw_value(&body, "tools").len();
        let system = match w {
            Wire::OpenAi => {
                let msgs = crate::support::body::raw_value(&body, "messages");
                crate::support::body::raw_value(msgs, "content").len()
            }
            Wire::Anthropic => crate::support::body::raw_value(&body, "system")
                .replace(MARKER, "")
                .len(),
        };
        let total = tools + system;
        report.push(format!(
            "{w:?}: tools {tools} + system {system} = {total} B"
        ));
        assert!(
            (WIRE_PREFIX_MIN_BYTES..=WIRE_PREFIX_MAX_BYTES).contains(&total),
            "{w:?}: the first request carries tools {tools} + system {system} = {total} bytes, \
             outside {WIRE_PREFIX_MIN_BYTES}..={WIRE_PREFIX_MAX_BYTES} (the 1,024-token cache \
             minimum and one 128-token increment above it, at {BYTES_PER_TOKEN} bytes a token)"
        );
    }
    println!("{}", report.join("; "));
}

/// What the lower bound is for: a new session's first request finds the fixed prefix another
/// session sent already cached. Two `tern exec` sessions with different tasks through one fake
/// provider, whose simulated cache (whole 128-token blocks of 4 bytes, nothing under 1,024
/// tokens) answers each request against the one before: the usage tern records for the second
/// session's first request reads at least the 1,024-token minimum (0 with the lean prefix).
#[test]
fn a_new_session_reads_the_fixed_prefix_from_the_cache() {
    for w in [Wire::OpenAi, Wire::Anthropic] {
        let ws = WireWs::new(w, vec![text(w, "Done."), text(w, "Done again.")]);
        ws.ok(&["exec", "hello"]);
        ws.ok(&["exec", "a different task"]);
        assert_eq!(ws.fake.requests().len(), 2, "{w:?}: one request a session");
        let events = std::fs::read_to_string(ws.session().join("events.jsonl")).expect("events");
        let cached: Vec<u64> = events
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["type"] == "usage")
            .filter_map(|e| e["cached_tokens"].as_u64())
            .collect();
        assert_eq!(
            cached.len(),
            1,
            "{w:?}: one usage event in the second session"
        );
        assert!(
            cached[0] >= CACHE_MIN_TOKENS as u64,
            "{w:?}: the second session's first request read {} cached tokens, under the \
             {CACHE_MIN_TOKENS}-token minimum",
            cached[0]
        );
    }
}
