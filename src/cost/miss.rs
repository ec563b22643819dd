//! Why a request's prompt was billed in full beyond its new messages (pure). tern knows its own
//! prefix byte for byte: for every request it knows what the provider should have read from its
//! cache (the bytes repeated from the previous request on the same model, if that request was
//! recent enough and long enough to be cached) and compares it with what the provider reported.
//!
//! The rule, in order: no earlier request → `first_request` (when more than a few tokens went
//! uncached); nothing beyond the new messages went uncached → no miss; another model before →
//! `model_changed`; tern changed the prefix
//! since (a compaction, a plan confirm, a model switch, the system prompt, the tools) →
//! `prefix_changed` at the first changed byte, naming the cause; the pause outlived the
//! provider's cache → `cache_expired`; what repeats is below the provider's minimum → no miss
//! (nothing could be cached); else `provider_missed` (the provider cached less than it could:
//! a proxy dropping cache markers, a cache evicted early).

use serde::{Deserialize, Serialize};

/// Why a request was billed in full beyond its new messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No earlier request of this session (or its parent) to repeat.
    FirstRequest,
    /// tern changed the prefix since the previous request.
    PrefixChanged,
    /// The time since the previous request passed the provider's cache lifetime.
    CacheExpired,
    /// The previous request went to another model (each model has its own cache).
    ModelChanged,
    /// The provider read less from its cache than the repeated bytes allow.
    ProviderMissed,
}

impl Reason {
    /// Every reason, in the order `tern stats --why` lists them.
    pub const ALL: [Reason; 5] = [
        Reason::FirstRequest,
        Reason::PrefixChanged,
        Reason::CacheExpired,
        Reason::ModelChanged,
        Reason::ProviderMissed,
    ];

    /// The snake_case name used in events and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FirstRequest => "first_request",
            Reason::PrefixChanged => "prefix_changed",
            Reason::CacheExpired => "cache_expired",
            Reason::ModelChanged => "model_changed",
            Reason::ProviderMissed => "provider_missed",
        }
    }
}

/// What tern changed in the prefix (the cause of a `prefix_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The history was summarised (`/compact`, automatic, context overflow, `plan clear`).
    Compaction,
    /// PlanConfirm: a compaction, then the locked plan in the system prompt.
    PlanConfirm,
    /// Another model answers from now on.
    ModelSwitch,
    /// The system prompt changed (a sandbox switch, another process's rewrite).
    SystemPrompt,
    /// The tool list changed.
    Tools,
}

/// A miss as events and `tern stats --json` carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// Why.
    pub reason: Reason,
    /// The first request byte the provider could not read from its cache (0: none).
    pub at_byte: u64,
    /// What tern changed, for `prefix_changed` (and `model_changed` by a switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// Prompt tokens billed in full beyond the new messages (the first request: all it did not
    /// read from a cache).
    #[serde(default)]
    pub tokens: u64,
    /// What those tokens cost at the input price, USD (absent: no price known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The provider's cache rules for one wire and model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRules {
    /// Fewest prompt tokens a provider caches.
    pub min_tokens: u64,
    /// How long an unused cache entry lives, in seconds.
    pub ttl_s: u64,
}

impl CacheRules {
    /// OpenAI's prompt caching (platform.openai.com/docs/guides/prompt-caching): prompts of
    /// 1,024 tokens or more; entries live 5 to 10 minutes unused (up to an hour off-peak): 5
    /// minutes is what is promised.
    pub const OPENAI: CacheRules = CacheRules {
        min_tokens: 1024,
        ttl_s: 300,
    };

    /// Anthropic's (docs.anthropic.com, "Prompt caching": "Cache limitations", minimum
    /// cacheable prompt length): 4,096 tokens for Claude Opus 4.5 and Haiku 4.5 and the models
    /// after them, 2,048 for Haiku 3 and 3.5, 1,024 for the rest (Opus 4.1, Opus 4, Sonnet 4.5,
    /// Sonnet 4, Sonnet 3.7); 5 minutes, or 1 hour with `cache_ttl: "1h"`.
    pub fn anthropic(model: &str, long: bool) -> CacheRules {
        CacheRules {
            min_tokens: anthropic_min_tokens(model),
            ttl_s: if long { 3600 } else { 300 },
        }
    }
}

/// The fewest prompt tokens Anthropic caches for `model` (see [`CacheRules::anthropic`]): by its
/// family (opus, sonnet, haiku) and version (`claude-opus-4-5`, `claude-3-5-haiku-latest`, a
/// `vendor/` prefix and a date tag allowed). A name tern cannot read: 1,024.
pub fn anthropic_min_tokens(model: &str) -> u64 {
    let name = model.trim().to_ascii_lowercase();
    let name = name.rsplit_once('/').map_or(name.as_str(), |(_, m)| m);
    let name = name.split('@').next().unwrap_or(name);
    // The version: the first one or two short numbers (a date is 8 digits).
    let nums: Vec<u32> = name
        .split(['-', '.'])
        .filter(|p| !p.is_empty() && p.len() <= 2 && p.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|p| p.parse().ok())
        .take(2)
        .collect();
    let version = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
    );
    let newer = version >= (4, 5);
    if name.contains("haiku") {
        if newer { 4096 } else { 2048 }
    } else if name.contains("opus") && newer {
        4096
    } else {
        1024
    }
}

/// The request before this one on the same session (or a fork's parent).
#[derive(Debug, Clone, PartialEq)]
pub struct Previous {
    /// Its model.
    pub model: String,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Its body size in bytes.
    pub request_bytes: u64,
}

/// This request as sent and as billed.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// Its model.
    pub model: String,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Its body size in bytes.
    pub request_bytes: u64,
    /// The bytes it shares with the previous request's body, from the start (its new messages
    /// come after).
    pub reuse_bytes: u64,
    /// A change tern made to the prefix since the previous request, and its first changed byte.
    pub changed: Option<(Cause, u64)>,
    /// Where this request's new messages begin, when tern knows it: after a change, the length
    /// of the prefix it left (a compaction's summary and kept messages are not new).
    pub new_from: Option<u64>,
    /// Prompt tokens billed.
    pub input_tokens: u64,
    /// Prompt tokens the provider read from its cache.
    pub cached_tokens: u64,
}

/// Tokens of slack in "everything but the new messages was cached": providers cache in blocks
/// (OpenAI in 128-token steps) and bytes are only a proxy for tokens.
const SLACK_TOKENS: u64 = 256;

/// Why `now` was billed in full beyond its new messages (None: it was not). See the module
/// docs for the rule.
pub fn diagnose(prev: Option<&Previous>, now: &Sent, rules: CacheRules) -> Option<Miss> {
    if now.input_tokens == 0 || now.request_bytes == 0 {
        return None;
    }
    // The prompt tokens of the repeated bytes (tokens are spread over bytes evenly enough).
    let tokens_of = |bytes: u64| {
        (now.input_tokens as u128 * bytes.min(now.request_bytes) as u128
            / now.request_bytes as u128) as u64
    };
    let at_cached = (now.request_bytes as u128 * now.cached_tokens.min(now.input_tokens) as u128
        / now.input_tokens as u128) as u64;
    let uncached = now.input_tokens.saturating_sub(now.cached_tokens);
    // The session's first request: everything in it is new to this session, and whatever was
    // not read from a cache (another session's system prompt) was billed in full.
    let Some(prev) = prev else {
        return (uncached > SLACK_TOKENS).then_some(Miss {
            reason: Reason::FirstRequest,
            at_byte: at_cached,
            cause: None,
            tokens: uncached,
            cost_usd: None,
        });
    };
    // The new messages: what follows the repeated bytes; but when tern changed the prefix or
    // the model, the repeated bytes say nothing of what is new: they follow the prefix the
    // change left, when tern knows it, else they are what the request grew by.
    let new_bytes = match now.new_from {
        Some(from) => now.request_bytes.saturating_sub(from),
        None if now.changed.is_some() || prev.model != now.model => {
            now.request_bytes.saturating_sub(prev.request_bytes)
        }
        None => now.request_bytes - now.reuse_bytes.min(now.request_bytes),
    };
    let beyond_new = uncached.saturating_sub(tokens_of(new_bytes));
    let miss = |reason, at_byte, cause| {
        Some(Miss {
            reason,
            at_byte,
            cause,
            tokens: beyond_new,
            cost_usd: None,
        })
    };
    if beyond_new <= SLACK_TOKENS {
        return None;
    }
    let repeated = tokens_of(now.reuse_bytes);
    if prev.model != now.model {
        let cause =
            matches!(now.changed, Some((Cause::ModelSwitch, _))).then_some(Cause::ModelSwitch);
        return miss(Reason::ModelChanged, at_cached, cause);
    }
    if let Some((cause, at)) = now.changed {
        return miss(Reason::PrefixChanged, at, Some(cause));
    }
    if now.at_ms.saturating_sub(prev.at_ms) > rules.ttl_s * 1000 {
        return miss(Reason::CacheExpired, at_cached, None);
    }
    if repeated < rules.min_tokens {
        return None;
    }
    miss(Reason::ProviderMissed, at_cached, None)
}

#[cfg(test)]
mod tests {

    #[test]
    fn anthropic_s_cache_minimum_follows_the_model() {
        for (model, min) in [
            ("claude-haiku-4-5", 4096),
            ("claude-haiku-4-5-20251001", 4096),
            ("anthropic/claude-opus-4-5", 4096),
            ("claude-opus-4-6", 4096),
            ("claude-opus-4-1-20250805", 1024),
            ("claude-opus-4", 1024),
            ("claude-sonnet-4-5", 1024),
            ("claude-sonnet-4-20250514", 1024),
            ("claude-3-7-sonnet-latest", 1024),
            ("claude-3-5-haiku-20241022", 2048),
            ("claude-3-haiku-20240307", 2048),
            ("claude-haiku-4-5@20251001", 4096),
            ("something-else", 1024),
        ] {
            assert_eq!(anthropic_min_tokens(model), min, "{model}");
        }
    }

    use super::*;

    const MIN: u64 = 60_000;

    fn sent(reuse: u64, cached: u64) -> Sent {
        Sent {
            model: "m".into(),
            at_ms: 10 * MIN,
            request_bytes: 40_000,
            reuse_bytes: reuse,
            changed: None,
            new_from: None,
            input_tokens: 10_000,
            cached_tokens: cached,
        }
    }

    fn prev(model: &str, at_ms: u64) -> Previous {
        Previous {
            model: model.into(),
            at_ms,
            request_bytes: 36_000,
        }
    }

    const R: CacheRules = CacheRules::OPENAI;

    #[test]
    fn everything_but_the_new_messages_cached_is_no_miss() {
        // 36 KB of 40 KB repeated (9,000 tokens), 8,960 cached: within the slack.
        assert_eq!(
            diagnose(Some(&prev("m", 9 * MIN)), &sent(36_000, 8_960), R),
            None
        );
        // Nothing repeated, nothing expected.
        assert_eq!(diagnose(Some(&prev("m", 9 * MIN)), &sent(0, 0), R), None);
    }

    #[test]
    fn each_reason_in_its_order() {
        let p = prev("m", 9 * MIN);
        let first = diagnose(None, &sent(36_000, 0), R).unwrap();
        assert_eq!((first.reason, first.at_byte), (Reason::FirstRequest, 0));
        let other = diagnose(Some(&prev("n", 9 * MIN)), &sent(36_000, 0), R).unwrap();
        assert_eq!(other.reason, Reason::ModelChanged);
        let mut s = sent(36_000, 2_000);
        s.changed = Some((Cause::Compaction, 8_000));
        let changed = diagnose(Some(&p), &s, R).unwrap();
        assert_eq!(
            (changed.reason, changed.at_byte, changed.cause),
            (Reason::PrefixChanged, 8_000, Some(Cause::Compaction))
        );
        // 10,000 billed, 2,000 cached, 1,000 new (4 KB of 40 KB): 7,000 beyond the new.
        assert_eq!(changed.tokens, 7_000);
        let late = diagnose(Some(&prev("m", 2 * MIN)), &sent(36_000, 0), R).unwrap();
        assert_eq!(late.reason, Reason::CacheExpired);
        let missed = diagnose(Some(&p), &sent(36_000, 4_000), R).unwrap();
        assert_eq!(
            (missed.reason, missed.at_byte),
            (Reason::ProviderMissed, 16_000)
        );
        // Within the lifetime with the 1-hour cache, a 8-minute pause is no expiry.
        let long = CacheRules::anthropic("claude-sonnet-4", true);
        assert_eq!(
            diagnose(Some(&prev("m", 2 * MIN)), &sent(36_000, 0), long)
                .unwrap()
                .reason,
            Reason::ProviderMissed
        );
    }

    /// After a compaction the request may be shorter than the one before, yet the summary and
    /// the kept messages moved: billed in full, they are a miss, and only what follows the
    /// prefix the compaction left is new.
    #[test]
    fn a_compaction_that_shrinks_the_request_still_names_what_moved() {
        let mut s = sent(16_000, 2_000);
        s.request_bytes = 30_000;
        s.input_tokens = 7_500;
        s.changed = Some((Cause::Compaction, 8_000));
        // Without knowing where the new messages begin, growth over 36 KB is none.
        assert_eq!(
            diagnose(Some(&prev("m", 9 * MIN)), &s, R).unwrap().tokens,
            5_500
        );
        // The compaction left 28 KB: the last 2 KB (500 tokens) are new.
        s.new_from = Some(28_000);
        let m = diagnose(Some(&prev("m", 9 * MIN)), &s, R).unwrap();
        assert_eq!((m.reason, m.tokens), (Reason::PrefixChanged, 5_000));
        // Everything up to the new messages cached: no miss.
        s.cached_tokens = 7_000;
        assert_eq!(diagnose(Some(&prev("m", 9 * MIN)), &s, R), None);
    }

    #[test]
    fn below_the_providers_minimum_nothing_is_expected() {
        // 2,000 tokens of 10,000 repeated... but only 800 of them: below 1,024.
        let mut s = sent(3_200, 0);
        s.input_tokens = 10_000;
        assert_eq!(diagnose(Some(&prev("m", 9 * MIN)), &s, R), None);
        assert_eq!(
            CacheRules::anthropic("claude-3-5-haiku", false).min_tokens,
            2048
        );
    }

    #[test]
    fn a_miss_is_written_and_read_back() {
        let m = Miss {
            reason: Reason::PrefixChanged,
            at_byte: 12,
            cause: Some(Cause::PlanConfirm),
            tokens: 7,
            cost_usd: Some(0.5),
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"reason": "prefix_changed", "at_byte": 12, "cause": "plan_confirm", "tokens": 7, "cost_usd": 0.5})
        );
        assert_eq!(serde_json::from_value::<Miss>(v).unwrap(), m);
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }
}
