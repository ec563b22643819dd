//! `tern stats [SESSION]`: the cache figures, cost and cache misses of a session's requests,
//! from its `usage` events; `--why` sums the misses by reason.

use serde_json::{Value, json};

use crate::cost::miss::{Miss, Reason};
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
    /// Of the output, the tokens spent reasoning (0 where the provider does not say).
    pub reasoning_tokens: u64,
    /// Request body size in bytes.
    pub request_bytes: u64,
    /// Common byte prefix with the previous request body.
    pub prefix_reuse_bytes: u64,
    /// Figures tern estimated: the server never reported them (a runaway answer it cut) or
    /// reported figures tern refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// What it cost, USD (None: no price known).
    pub cost_usd: Option<f64>,
    /// Why more than its new messages was billed in full (None: it was not).
    pub miss: Option<Miss>,
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
                reasoning_tokens,
                request_bytes,
                prefix_reuse_bytes,
                estimated,
                cost_usd,
                miss,
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
                reasoning_tokens: *reasoning_tokens,
                request_bytes: *request_bytes,
                prefix_reuse_bytes: *prefix_reuse_bytes,
                estimated: *estimated,
                cost_usd: *cost_usd,
                miss: miss.clone(),
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
        t.reasoning_tokens = t.reasoning_tokens.saturating_add(r.reasoning_tokens);
        t.request_bytes = t.request_bytes.saturating_add(r.request_bytes);
        t.prefix_reuse_bytes = t.prefix_reuse_bytes.saturating_add(r.prefix_reuse_bytes);
        if let Some(c) = r.cost_usd {
            t.cost_usd = Some(crate::cost::add_usd(t.cost_usd.unwrap_or(0.0), c));
        }
    }
    t
}

/// Requests in `reqs` whose cost is unknown (no price for their model).
pub fn unpriced(reqs: &[RequestStats]) -> usize {
    reqs.iter().filter(|r| r.cost_usd.is_none()).count()
}

/// One line of `tern stats --why`: a reason, its requests, the prompt tokens billed in full
/// beyond the new messages, and what they cost (None: no price known for some).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WhyRow {
    /// The reason.
    pub reason: Reason,
    /// Requests with this reason.
    pub requests: usize,
    /// Their tokens billed in full beyond the new messages.
    pub tokens: u64,
    /// What those tokens cost, USD.
    pub cost_usd: Option<f64>,
}

/// The misses of `reqs` summed by reason, in [`Reason::ALL`] order (reasons with no request
/// left out).
pub fn why(reqs: &[RequestStats]) -> Vec<WhyRow> {
    Reason::ALL
        .iter()
        .filter_map(|&reason| {
            let of: Vec<&Miss> = reqs
                .iter()
                .filter_map(|r| r.miss.as_ref())
                .filter(|m| m.reason == reason)
                .collect();
            (!of.is_empty()).then(|| WhyRow {
                reason,
                requests: of.len(),
                tokens: of.iter().map(|m| m.tokens).sum(),
                cost_usd: of.iter().map(|m| m.cost_usd).sum::<Option<f64>>(),
            })
        })
        .collect()
}

/// `tern stats --why` as text.
pub fn render_why(session_id: &str, reqs: &[RequestStats]) -> String {
    let rows = why(reqs);
    let mut s = format!(
        "session {session_id}: prompt tokens billed in full beyond each request's new messages, by reason\n"
    );
    if rows.is_empty() {
        s.push_str("none: every request read all but its new messages from the provider's cache\n");
        return s;
    }
    s.push_str(&format!(
        "{:<16} {:>8} {:>10} {:>12}\n",
        "reason", "requests", "tokens", "cost"
    ));
    for r in &rows {
        s.push_str(&format!(
            "{:<16} {:>8} {:>10} {:>12}\n",
            r.reason.as_str(),
            r.requests,
            r.tokens,
            crate::cost::usd_text(r.cost_usd)
        ));
    }
    s
}

/// What the `why` column says of a request: `-` when nothing beyond its new messages was
/// billed in full, else the reason (with the cause tern changed).
fn why_cell(r: &RequestStats) -> String {
    match &r.miss {
        None => "-".into(),
        Some(m) => match m.cause {
            Some(c) => format!(
                "{} ({})",
                m.reason.as_str(),
                serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ),
            None => m.reason.as_str().to_string(),
        },
    }
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
        "{:>4}  {:<10} {:>9} {:>9} {:>7} {:>7} {:>6} {:>10} {:>6} {:>9}  {}\n",
        "#",
        "purpose",
        "input",
        "cached",
        "write",
        "output",
        "hit",
        "reuse B",
        "reuse",
        "cost",
        "why"
    ));
    let row = |label: &str, purpose: &str, r: &RequestStats, why: &str| {
        format!(
            "{label:>4}  {purpose:<10} {:>9} {:>9} {:>7} {:>7} {:>5.1}% {:>10} {:>5.1}% {:>9}  {why}\n",
            r.input_tokens,
            r.cached_tokens,
            r.cache_write_tokens,
            r.output_tokens,
            ratio(r.cached_tokens, r.input_tokens) * 100.0,
            r.prefix_reuse_bytes,
            ratio(r.prefix_reuse_bytes, r.request_bytes) * 100.0,
            match r.cost_usd {
                Some(_) => crate::cost::usd_text(r.cost_usd),
                None => "unknown".into(),
            },
        )
        .replace("  \n", "\n")
    };
    for (i, r) in reqs.iter().enumerate() {
        let purpose = if r.estimated {
            format!("{}*", r.purpose)
        } else {
            r.purpose.clone()
        };
        s.push_str(&row(&(i + 1).to_string(), &purpose, r, &why_cell(r)));
    }
    let t = total(reqs);
    s.push_str(&row("", "total", &t, ""));
    if t.reasoning_tokens > 0 {
        s.push_str(&format!(
            "reasoning: {} of the {} output tokens (billed, and priced, as output)\n",
            t.reasoning_tokens, t.output_tokens
        ));
    }
    if unpriced(reqs) > 0 {
        s.push_str(&format!(
            "cost unknown for {} request(s): tern knows no price for their model (set \"price\" in ~/.config/tern/config.json)\n",
            unpriced(reqs)
        ));
    }
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
        if r.reasoning_tokens > 0 {
            v["reasoning_tokens"] = json!(r.reasoning_tokens);
        }
        v["cost_usd"] = json!(r.cost_usd.map(crate::cost::usd_json));
        v
    };
    let requests: Vec<Value> = reqs
        .iter()
        .map(|r| {
            let mut v = one(r);
            v["miss"] = json!(r.miss);
            v
        })
        .collect();
    json!({
        "session": session_id,
        "requests": requests,
        "total": one(&total(reqs)),
        "why": why(reqs),
    })
}
