//! `tern stats [SESSION]`: the cache figures of a session's requests, from its `usage` events.

use serde_json::{Value, json};

use crate::event::{Envelope, Event};
use crate::runtime::ratio;
use crate::store::Session;

/// One request's figures, from a `usage` event.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RequestStats {
    /// `turn` or `compaction`.
    pub purpose: String,
    /// All prompt tokens.
    pub input_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached_tokens: u64,
    /// Prompt tokens written to the cache.
    pub cache_write_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Request body size in bytes.
    pub request_bytes: u64,
    /// Common byte prefix with the previous request body.
    pub prefix_reuse_bytes: u64,
    /// Figures tern estimated: the server never reported them (a runaway answer it cut) or
    /// reported figures tern refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

/// Reads the `usage` events of `session`, oldest first.
pub fn requests(session: &Session) -> std::io::Result<Vec<RequestStats>> {
    Ok(requests_from(&session.read_envelopes()?))
}

/// The figures of the `usage` events among `events`, oldest first.
pub fn requests_from(events: &[Envelope]) -> Vec<RequestStats> {
    events
        .iter()
        .filter_map(|e| {
            // Only `usage` events carry a request's figures.
            let Event::Usage {
                purpose,
                input_tokens,
                cached_tokens,
                cache_write_tokens,
                output_tokens,
                request_bytes,
                prefix_reuse_bytes,
                estimated,
                ..
            } = &e.event
            else {
                return None;
            };
            Some(RequestStats {
                purpose: purpose.as_str().to_string(),
                input_tokens: *input_tokens,
                cached_tokens: *cached_tokens,
                cache_write_tokens: *cache_write_tokens,
                output_tokens: *output_tokens,
                request_bytes: *request_bytes,
                prefix_reuse_bytes: *prefix_reuse_bytes,
                estimated: *estimated,
            })
        })
        .collect()
}

/// Sums of `reqs`.
pub fn total(reqs: &[RequestStats]) -> RequestStats {
    let mut t = RequestStats {
        purpose: "total".into(),
        ..RequestStats::default()
    };
    for r in reqs {
        t.input_tokens = t.input_tokens.saturating_add(r.input_tokens);
        t.cached_tokens = t.cached_tokens.saturating_add(r.cached_tokens);
        t.cache_write_tokens = t.cache_write_tokens.saturating_add(r.cache_write_tokens);
        t.output_tokens = t.output_tokens.saturating_add(r.output_tokens);
        t.request_bytes = t.request_bytes.saturating_add(r.request_bytes);
        t.prefix_reuse_bytes = t.prefix_reuse_bytes.saturating_add(r.prefix_reuse_bytes);
    }
    t
}

/// The stats table: one row per request and a total row; hit = cached / input tokens, reuse =
/// reused / sent request bytes.
pub fn render(session_id: &str, reqs: &[RequestStats]) -> String {
    let n = reqs.len();
    let mut s = format!(
        "session {session_id}: {n} request{}\n",
        if n == 1 { "" } else { "s" }
    );
    s.push_str(&format!(
        "{:>4}  {:<10} {:>9} {:>9} {:>7} {:>7} {:>6} {:>10} {:>6}\n",
        "#", "purpose", "input", "cached", "write", "output", "hit", "reuse B", "reuse"
    ));
    let row = |label: &str, purpose: &str, r: &RequestStats| {
        format!(
            "{label:>4}  {purpose:<10} {:>9} {:>9} {:>7} {:>7} {:>5.1}% {:>10} {:>5.1}%\n",
            r.input_tokens,
            r.cached_tokens,
            r.cache_write_tokens,
            r.output_tokens,
            ratio(r.cached_tokens, r.input_tokens) * 100.0,
            r.prefix_reuse_bytes,
            ratio(r.prefix_reuse_bytes, r.request_bytes) * 100.0,
        )
    };
    for (i, r) in reqs.iter().enumerate() {
        let purpose = if r.estimated {
            format!("{}*", r.purpose)
        } else {
            r.purpose.clone()
        };
        s.push_str(&row(&(i + 1).to_string(), &purpose, r));
    }
    s.push_str(&row("", "total", &total(reqs)));
    if reqs.iter().any(|r| r.estimated) {
        s.push_str("* estimated: the server never reported this request's usage (tern cut a runaway answer), or reported figures tern did not believe\n");
    }
    s
}

/// The stats as JSON: `{session, requests: [...], total: {..., cache_hit_ratio, prefix_reuse_ratio}}`.
pub fn to_json(session_id: &str, reqs: &[RequestStats]) -> Value {
    let one = |r: &RequestStats| {
        let mut v = json!({
            "purpose": r.purpose,
            "input_tokens": r.input_tokens,
            "cached_tokens": r.cached_tokens,
            "cache_write_tokens": r.cache_write_tokens,
            "output_tokens": r.output_tokens,
            "request_bytes": r.request_bytes,
            "prefix_reuse_bytes": r.prefix_reuse_bytes,
            "cache_hit_ratio": ratio(r.cached_tokens, r.input_tokens),
            "prefix_reuse_ratio": ratio(r.prefix_reuse_bytes, r.request_bytes),
        });
        if r.estimated {
            v["estimated"] = Value::Bool(true);
        }
        v
    };
    json!({
        "session": session_id,
        "requests": reqs.iter().map(one).collect::<Vec<_>>(),
        "total": one(&total(reqs)),
    })
}
