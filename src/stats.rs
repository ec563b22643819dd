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
    /// When its usage arrived, ms since the Unix epoch (None: unreadable).
    #[serde(skip)]
    pub at_ms: Option<u64>,
    /// The cache lifetime it asked for, seconds (Anthropic; None elsewhere).
    #[serde(skip)]
    pub cache_ttl_s: Option<u64>,
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
                cache_ttl_s,
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
                at_ms: crate::clock::parse_rfc3339_ms(&e.ts),
                cache_ttl_s: *cache_ttl_s,
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

/// What the cache's lifetime did (issue 44): the pauses that outlived the cache (their misses,
/// `cache_expired`), and the requests the one-hour cache kept — asked with a one-hour lifetime
/// after a pause longer than five minutes and shorter than an hour, with tokens read from the
/// cache: under the five-minute cache those tokens would have been billed in full.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Lifetime {
    /// Requests whose pause outlived the cache.
    pub expired_requests: usize,
    /// Their tokens billed in full again.
    pub expired_tokens: u64,
    /// What those cost, USD (None: no price known, or none).
    pub expired_cost_usd: Option<f64>,
    /// Requests the one-hour cache kept warm across a pause of 5 to 60 minutes.
    pub kept_requests: usize,
    /// The tokens they read from the cache.
    pub kept_tokens: u64,
    /// Tokens written with the one-hour lifetime (each costs 2× the input price instead of
    /// 1.25× on Anthropic: the price of the choice).
    pub long_write_tokens: u64,
}

/// [`Lifetime`] of `reqs`.
pub fn lifetime(reqs: &[RequestStats]) -> Lifetime {
    let mut l = Lifetime::default();
    for m in reqs.iter().filter_map(|r| r.miss.as_ref()) {
        if m.reason == Reason::CacheExpired {
            l.expired_requests += 1;
            l.expired_tokens += m.tokens;
            l.expired_cost_usd = match (l.expired_cost_usd, m.cost_usd) {
                (None, c) | (c, None) => c,
                (Some(a), Some(b)) => Some(a + b),
            };
        }
    }
    let mut last_at = None;
    for r in reqs {
        if r.cache_ttl_s == Some(3600) {
            l.long_write_tokens += r.cache_write_tokens;
            let pause = match (last_at, r.at_ms) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            };
            if pause > 300_000 && pause <= 3_600_000 && r.cached_tokens > 0 {
                l.kept_requests += 1;
                l.kept_tokens += r.cached_tokens;
            }
        }
        last_at = r.at_ms.or(last_at);
    }
    l
}

/// `tern stats --why` as text.
pub fn render_why(session_id: &str, reqs: &[RequestStats]) -> String {
    let rows = why(reqs);
    let mut s = format!(
        "session {session_id}: prompt tokens billed in full beyond each request's new messages, by reason\n"
    );
    let life = lifetime(reqs);
    if life.kept_requests > 0 || life.long_write_tokens > 0 {
        s.push_str(&format!(
            "the one-hour cache kept {} request(s) warm across pauses of 5 to 60 minutes ({} tokens read from the cache that five minutes would have billed in full); it wrote {} tokens at the one-hour price\n",
            life.kept_requests, life.kept_tokens, life.long_write_tokens
        ));
    }
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

/// The fixed part of a session's requests that tern writes: the pinned system prompt, and the
/// skills catalog inside it (issue 45: the catalog is prefix bytes every request pays for).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fixed {
    /// Bytes of `system.txt`.
    pub system_bytes: usize,
    /// Skills the catalog lists.
    pub skills: usize,
    /// Bytes of the catalog.
    pub skills_bytes: usize,
}

impl Fixed {
    /// Read from `session`'s `system.txt` (all 0 when it cannot be read).
    pub fn of(session: &Session) -> Fixed {
        let Ok(Some(system)) = session.read_text(crate::store::files::SYSTEM) else {
            return Fixed::default();
        };
        let (skills, skills_bytes) = crate::runtime::system::pinned_skills(&system);
        Fixed {
            system_bytes: system.len(),
            skills,
            skills_bytes,
        }
    }

    /// `fixed prefix: …` as `tern stats` ends (empty when unknown).
    pub fn line(&self) -> String {
        if self.system_bytes == 0 {
            return String::new();
        }
        let skills = if self.skills > 0 {
            format!(
                ", of which the skills catalog {} bytes ({} skills)",
                self.skills_bytes, self.skills
            )
        } else {
            String::new()
        };
        format!(
            "fixed prefix: system prompt {} bytes{skills}\n",
            self.system_bytes
        )
    }
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
        "lifetime": lifetime(reqs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(at_s: u64, ttl: Option<u64>, cached: u64, written: u64) -> RequestStats {
        RequestStats {
            purpose: "turn".into(),
            input_tokens: 5000,
            cached_tokens: cached,
            cache_write_tokens: written,
            at_ms: Some(at_s * 1000),
            cache_ttl_s: ttl,
            ..RequestStats::default()
        }
    }

    #[test]
    fn the_one_hour_cache_is_credited_only_across_pauses_it_outlived() {
        let reqs = [
            req(0, Some(3600), 0, 4000),
            // 2 minutes: five minutes would have kept it too.
            req(120, Some(3600), 4000, 100),
            // 10 minutes: only the hour kept it.
            req(720, Some(3600), 4100, 50),
            // 2 hours: expired anyway (nothing read).
            req(7920, Some(3600), 0, 4150),
            // The five-minute cache after 10 minutes: nothing kept.
            req(8520, Some(300), 0, 10),
        ];
        let l = lifetime(&reqs);
        assert_eq!((l.kept_requests, l.kept_tokens), (1, 4100));
        assert_eq!(l.long_write_tokens, 4000 + 100 + 50 + 4150);
        let mut expired = req(9000, Some(300), 0, 0);
        expired.miss = Some(Miss {
            reason: Reason::CacheExpired,
            at_byte: 0,
            cause: None,
            tokens: 3000,
            cost_usd: Some(0.009),
        });
        let l = lifetime(&[expired]);
        assert_eq!((l.expired_requests, l.expired_tokens), (1, 3000));
        assert_eq!(l.expired_cost_usd, Some(0.009));
    }
}
