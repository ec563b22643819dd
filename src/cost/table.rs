//! The built-in price table: well-known models' list prices in USD per million tokens, as the
//! providers publish them, each entry with its source and the date it was read (prices change:
//! the person's config wins — `price`, `prices`, a `models` entry — and `tern status` and `tern
//! prices` say which is used).
//!
//! **Matching** (issue 44): a model name, lower-cased and without a `vendor/` prefix (as
//! OpenRouter writes it), matches an entry only when it *is* one of the entry's names, or one of
//! them followed by a tag the provider uses for the same model: a date (`-20251001`,
//! `-2025-08-07`, Vertex AI's `@20251001`) or `-latest`. Anything else — a newer model whose name
//! extends an older one's (`claude-opus-4-5` is not `claude-opus-4`, `o3-pro` is not `o3`) — is
//! not priced: "cost unknown", never a neighbour's price. A dated name the provider priced apart
//! (`gpt-4o-2024-05-13`) is its own entry, and a name matches it before the tagged family.

use super::Price;

/// Where the table's figures come from, for `tern status`.
pub const SOURCE: &str = "tern's built-in table (`tern prices` lists each entry's source and date)";

/// OpenAI's pricing page (input, cached input, output per million tokens).
const OPENAI: &str = "https://openai.com/api/pricing/";
/// Anthropic's pricing page (input, cache writes, cache reads, output per million tokens).
const ANTHROPIC: &str = "https://docs.anthropic.com/en/docs/about-claude/pricing";
/// DeepSeek's pricing page (standard price, cache hit and miss, output).
const DEEPSEEK: &str = "https://api-docs.deepseek.com/quick_start/pricing";

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
/// 0.1× (Anthropic, "Prompt caching": pricing multipliers).
const fn anthropic(input: f64, output: f64) -> Price {
    Price {
        input,
        cached_input: input / 10.0,
        cache_write: input * 1.25,
        cache_write_1h: input * 2.0,
        output,
    }
}

/// One model's price: the names it goes by (the first is the one shown), the price, where it
/// was read and when (ISO date).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Entry {
    /// The model's names: the provider's id and its aliases.
    pub names: &'static [&'static str],
    /// USD per million tokens.
    pub price: Price,
    /// The page the figures were read on.
    pub source: &'static str,
    /// When they were read (YYYY-MM-DD).
    pub read: &'static str,
}

const fn e(
    names: &'static [&'static str],
    price: Price,
    source: &'static str,
    read: &'static str,
) -> Entry {
    Entry {
        names,
        price,
        source,
        read,
    }
}

/// The table.
pub const TABLE: &[Entry] = &[
    e(&["gpt-4o"], openai(2.50, 1.25, 10.00), OPENAI, "2025-09-15"),
    // The first gpt-4o snapshot kept its launch price (and has no cached-input discount).
    e(
        &["gpt-4o-2024-05-13"],
        openai(5.00, 5.00, 15.00),
        OPENAI,
        "2025-09-15",
    ),
    e(
        &["gpt-4o-mini"],
        openai(0.15, 0.075, 0.60),
        OPENAI,
        "2025-09-15",
    ),
    e(&["gpt-4.1"], openai(2.00, 0.50, 8.00), OPENAI, "2025-09-15"),
    e(
        &["gpt-4.1-mini"],
        openai(0.40, 0.10, 1.60),
        OPENAI,
        "2025-09-15",
    ),
    e(
        &["gpt-4.1-nano"],
        openai(0.10, 0.025, 0.40),
        OPENAI,
        "2025-09-15",
    ),
    e(&["gpt-5"], openai(1.25, 0.125, 10.00), OPENAI, "2025-09-15"),
    e(
        &["gpt-5-mini"],
        openai(0.25, 0.025, 2.00),
        OPENAI,
        "2025-09-15",
    ),
    e(
        &["gpt-5-nano"],
        openai(0.05, 0.005, 0.40),
        OPENAI,
        "2025-09-15",
    ),
    e(&["o3"], openai(2.00, 0.50, 8.00), OPENAI, "2025-09-15"),
    // o3-pro has no cached-input price.
    e(
        &["o3-pro"],
        openai(20.00, 20.00, 80.00),
        OPENAI,
        "2025-09-15",
    ),
    e(&["o3-mini"], openai(1.10, 0.55, 4.40), OPENAI, "2025-09-15"),
    e(
        &["o4-mini"],
        openai(1.10, 0.275, 4.40),
        OPENAI,
        "2025-09-15",
    ),
    e(
        &["claude-opus-4-5"],
        anthropic(5.00, 25.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-opus-4-1"],
        anthropic(15.00, 75.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-opus-4", "claude-opus-4-0"],
        anthropic(15.00, 75.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-sonnet-4-5"],
        anthropic(3.00, 15.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-sonnet-4", "claude-sonnet-4-0"],
        anthropic(3.00, 15.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-3-7-sonnet"],
        anthropic(3.00, 15.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-3-5-sonnet"],
        anthropic(3.00, 15.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-haiku-4-5"],
        anthropic(1.00, 5.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-3-5-haiku"],
        anthropic(0.80, 4.00),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["claude-3-haiku"],
        anthropic(0.25, 1.25),
        ANTHROPIC,
        "2025-12-01",
    ),
    e(
        &["deepseek-chat"],
        openai(0.56, 0.07, 1.68),
        DEEPSEEK,
        "2025-09-15",
    ),
    e(
        &["deepseek-reasoner"],
        openai(0.56, 0.07, 1.68),
        DEEPSEEK,
        "2025-09-15",
    ),
];

/// Whether `rest` (what follows an entry's name) is a tag the provider uses for the same model:
/// empty, `-latest`, a date `-YYYYMMDD` / `-YYYY-MM-DD`, or Vertex AI's `@YYYYMMDD`.
fn same_model_tag(rest: &str) -> bool {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let date = |d: &str| {
        digits(d, 8)
            || (d.len() == 10
                && digits(&d[..4], 4)
                && &d[4..5] == "-"
                && digits(&d[5..7], 2)
                && &d[7..8] == "-"
                && digits(&d[8..], 2))
    };
    match rest {
        "" | "-latest" => true,
        _ => rest
            .strip_prefix('-')
            .or_else(|| rest.strip_prefix('@'))
            .is_some_and(date),
    }
}

/// The table's entry for `model` (see the module docs): its shown name and price. None: no
/// entry names this model.
pub fn find(model: &str) -> Option<(&'static str, Price)> {
    entry(model).map(|e| (e.names[0], e.price))
}

/// The table's entry for `model` (see the module docs).
pub fn entry(model: &str) -> Option<&'static Entry> {
    let name = model.trim().to_ascii_lowercase();
    let name = name.rsplit_once('/').map_or(name.as_str(), |(_, m)| m);
    // An exact name first (a dated snapshot priced apart), then a family with its tag.
    TABLE.iter().find(|e| e.names.contains(&name)).or_else(|| {
        TABLE.iter().find(|e| {
            e.names.iter().any(|n| {
                name.strip_prefix(n)
                    .is_some_and(|rest| !rest.is_empty() && same_model_tag(rest))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_dates_and_vendors_find_their_own_entry() {
        assert_eq!(find("gpt-4o-mini-2024-07-18").unwrap().0, "gpt-4o-mini");
        assert_eq!(find("gpt-4o-2024-08-06").unwrap().0, "gpt-4o");
        assert_eq!(find("gpt-5-mini-2025-08-07").unwrap().0, "gpt-5-mini");
        assert_eq!(find("o3-mini").unwrap().0, "o3-mini");
        assert_eq!(
            find("anthropic/claude-sonnet-4").unwrap().0,
            "claude-sonnet-4"
        );
        assert_eq!(
            find("Claude-Sonnet-4-20250514").unwrap().0,
            "claude-sonnet-4"
        );
        assert_eq!(find("claude-sonnet-4-0").unwrap().0, "claude-sonnet-4");
        assert_eq!(
            find("claude-haiku-4-5-20251001").unwrap().0,
            "claude-haiku-4-5"
        );
        assert_eq!(
            find("claude-3-7-sonnet-latest").unwrap().0,
            "claude-3-7-sonnet"
        );
        assert_eq!(
            find("claude-opus-4-1@20250805").unwrap().0,
            "claude-opus-4-1"
        );
        assert_eq!(find("").map(|f| f.0), None);
        // Anthropic's cache prices follow its rule.
        let p = find("claude-opus-4-1").unwrap().1;
        assert_eq!(
            (p.cached_input, p.cache_write, p.cache_write_1h),
            (1.5, 18.75, 30.0)
        );
    }

    /// Issue 44's names: a newer model whose name extends an older one's gets its own price or
    /// none, never the older one's.
    #[test]
    fn a_newer_model_never_gets_a_neighbours_price() {
        let opus45 = find("claude-opus-4-5-20251101").unwrap().1;
        assert_eq!((opus45.input, opus45.output), (5.0, 25.0));
        let opus45 = find("anthropic/claude-opus-4-5").unwrap().1;
        assert_eq!((opus45.input, opus45.output), (5.0, 25.0));
        let pro = find("o3-pro").unwrap().1;
        assert_eq!((pro.input, pro.output), (20.0, 80.0));
        let launch = find("gpt-4o-2024-05-13").unwrap().1;
        assert_eq!((launch.input, launch.output), (5.0, 15.0));
        for unknown in [
            "claude-opus-4-6",
            "claude-sonnet-4-7",
            "o3-deep-research",
            "gpt-4o-audio-preview",
            "gpt-5-codex",
            "gpt-4.1-mini-fast",
            "gpt-5.1",
            "claude-haiku-4",
            "deepseek-chat-v4",
            "qwen2.5-coder-0.5b",
            "gpt-4o-2024-13",
        ] {
            assert_eq!(find(unknown).map(|f| f.0), None, "{unknown}");
        }
    }

    /// No name outside the table's names (with a provider's tag) gets a price: random names
    /// built from the table's own names and other pieces.
    #[test]
    fn only_the_tables_names_and_their_tags_are_priced() {
        let pieces = [
            "-pro",
            "-mini",
            "-2",
            "-preview",
            ".1",
            "-codex",
            "x",
            "-4",
            "-latest-2",
            "-2025",
            "-202510011",
            "@latest",
            "-v1",
            "/",
        ];
        let mut seed = 11u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let all: Vec<&str> = TABLE.iter().flat_map(|e| e.names.iter().copied()).collect();
        for _ in 0..5000 {
            let base = all[next() % all.len()];
            let mut name = base.to_string();
            for _ in 0..(1 + next() % 2) {
                name.push_str(pieces[next() % pieces.len()]);
            }
            if all.contains(&name.as_str()) {
                continue;
            }
            let tagged = all.iter().any(|n| {
                name.strip_prefix(n)
                    .is_some_and(|r| !r.is_empty() && same_model_tag(r))
            });
            assert_eq!(find(&name).is_some(), tagged, "{name}");
            assert!(!tagged, "a piece made a provider's tag: {name}");
        }
    }

    #[test]
    fn every_entry_has_a_source_and_a_date_and_no_name_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for e in TABLE {
            assert!(e.source.starts_with("https://"));
            assert!(same_model_tag(&format!("-{}", e.read)), "{}", e.read);
            for n in e.names {
                assert!(seen.insert(*n), "{n} twice");
            }
        }
    }
}
