//! The built-in price table: well-known models' list prices in USD per million tokens, as the
//! providers publish them. Sources, read 2025-09 (prices change: the person's config `price`
//! wins, and `tern status` says which one is used):
//! - OpenAI: <https://openai.com/api/pricing/> (input, cached input, output);
//! - Anthropic: <https://www.anthropic.com/pricing#api> (input, prompt caching write for 5 min
//!   and 1 h, cache read, output);
//! - DeepSeek: <https://api-docs.deepseek.com/quick_start/pricing> (input cache miss, cache hit,
//!   output; the standard price, not the night discount).
//!
//! A model matches an entry when its name, lower-cased and without a `vendor/` prefix (as
//! OpenRouter writes it), starts with the entry's name; the longest match wins
//! (`gpt-4o-mini-2024-07-18` is `gpt-4o-mini`, not `gpt-4o`).

use super::Price;

/// Where the table's figures come from, for `tern status`.
pub const SOURCE: &str = "tern's built-in table (openai.com/api/pricing, anthropic.com/pricing, api-docs.deepseek.com; read 2025-09)";

/// OpenAI: no separate cache-write price (writes cost the input price).
const fn openai(input: f64, cached_input: f64, output: f64) -> Price {
    Price {
        input,
        cached_input,
        cache_write: input,
        cache_write_1h: input,
        output,
    }
}

/// Anthropic: a 5-minute cache write costs 1.25× the input price, a 1-hour write 2×, a read
/// 0.1×.
const fn anthropic(input: f64, output: f64) -> Price {
    Price {
        input,
        cached_input: input / 10.0,
        cache_write: input * 1.25,
        cache_write_1h: input * 2.0,
        output,
    }
}

/// The table, by model-name prefix.
pub const TABLE: &[(&str, Price)] = &[
    ("gpt-4o-mini", openai(0.15, 0.075, 0.60)),
    ("gpt-4o", openai(2.50, 1.25, 10.00)),
    ("gpt-4.1-nano", openai(0.10, 0.025, 0.40)),
    ("gpt-4.1-mini", openai(0.40, 0.10, 1.60)),
    ("gpt-4.1", openai(2.00, 0.50, 8.00)),
    ("gpt-5-nano", openai(0.05, 0.005, 0.40)),
    ("gpt-5-mini", openai(0.25, 0.025, 2.00)),
    ("gpt-5", openai(1.25, 0.125, 10.00)),
    ("o3-mini", openai(1.10, 0.55, 4.40)),
    ("o3", openai(2.00, 0.50, 8.00)),
    ("o4-mini", openai(1.10, 0.275, 4.40)),
    ("claude-opus-4", anthropic(15.00, 75.00)),
    ("claude-sonnet-4", anthropic(3.00, 15.00)),
    ("claude-3-7-sonnet", anthropic(3.00, 15.00)),
    ("claude-3-5-sonnet", anthropic(3.00, 15.00)),
    ("claude-haiku-4", anthropic(1.00, 5.00)),
    ("claude-3-5-haiku", anthropic(0.80, 4.00)),
    ("deepseek-chat", openai(0.56, 0.07, 1.68)),
    ("deepseek-reasoner", openai(0.56, 0.07, 1.68)),
];

/// The table's price of `model`, if any entry matches (see the module docs).
pub fn find(model: &str) -> Option<(&'static str, Price)> {
    let name = model.trim().to_ascii_lowercase();
    let name = name.rsplit_once('/').map_or(name.as_str(), |(_, m)| m);
    TABLE
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(prefix, p)| (*prefix, *p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_vendors_are_dropped() {
        assert_eq!(find("gpt-4o-mini-2024-07-18").unwrap().0, "gpt-4o-mini");
        assert_eq!(find("gpt-4o-2024-08-06").unwrap().0, "gpt-4o");
        assert_eq!(find("o3-mini").unwrap().0, "o3-mini");
        assert_eq!(
            find("anthropic/claude-sonnet-4").unwrap().0,
            "claude-sonnet-4"
        );
        assert_eq!(
            find("Claude-Sonnet-4-20250514").unwrap().0,
            "claude-sonnet-4"
        );
        assert_eq!(find("claude-sonnet-4-5").unwrap().1.input, 3.0);
        // No guess for a model the table does not name.
        assert_eq!(find("qwen2.5-coder-0.5b"), None);
        assert_eq!(find(""), None);
        // Anthropic's cache prices follow its rule.
        let p = find("claude-opus-4-1").unwrap().1;
        assert_eq!(
            (p.cached_input, p.cache_write, p.cache_write_1h),
            (1.5, 18.75, 30.0)
        );
    }
}
