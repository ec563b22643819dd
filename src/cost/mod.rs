//! What requests cost: prices ([`Price`], from the person's config or the built-in
//! [`table`]), the cost of a request's usage, the worst case of the next request for a spending
//! limit ([`Budget`]), and why a request's prompt was not read from the provider's cache
//! ([`miss`]). Money is in US dollars; prices are per million tokens, as providers publish them.
//!
//! A model with no known price has no cost: tern shows its tokens and "cost unknown", never a
//! guess; a spending limit needs a price (refused at start without one).

pub mod miss;
pub mod table;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// The highest price tern accepts, USD per million tokens: far above any model's, and low
/// enough that no request's cost overflows what the records can hold.
pub const MAX_PRICE: f64 = 100_000.0;

/// A model's prices in USD per million tokens. In a config file `input` and `output` are
/// required; `cached_input` and `cache_write` default to `input` (no discount assumed) and
/// `cache_write_1h` to `cache_write`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens read in full.
    pub input: f64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default = "nan")]
    pub cached_input: f64,
    /// Prompt tokens written to the cache (Anthropic's 5-minute write).
    #[serde(default = "nan")]
    pub cache_write: f64,
    /// A 1-hour cache write (Anthropic, `cache_ttl: "1h"`).
    #[serde(default = "nan")]
    pub cache_write_1h: f64,
    /// Generated tokens.
    pub output: f64,
}

/// Serde's mark for "not given": filled by [`Price::complete`].
fn nan() -> f64 {
    f64::NAN
}

impl Price {
    /// The defaults of the fields a config left out (see the type's docs).
    pub fn complete(mut self) -> Price {
        if self.cached_input.is_nan() {
            self.cached_input = self.input;
        }
        if self.cache_write.is_nan() {
            self.cache_write = self.input;
        }
        if self.cache_write_1h.is_nan() {
            self.cache_write_1h = self.cache_write;
        }
        self
    }

    /// Why this price cannot be used (a negative or non-finite figure), in words.
    pub fn check(&self) -> Result<(), String> {
        let all = [
            ("input", self.input),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
            ("cache_write_1h", self.cache_write_1h),
            ("output", self.output),
        ];
        match all
            .iter()
            .find(|(_, v)| !v.is_finite() || *v < 0.0 || *v > MAX_PRICE)
        {
            Some((name, v)) => Err(format!(
                "price.{name} is {v}: give USD per million tokens, from 0 to {MAX_PRICE}"
            )),
            None => Ok(()),
        }
    }

    /// What `u` cost in USD: prompt tokens read in full, read from the cache and written to it,
    /// and output tokens, each at its price; `long_cache` prices writes as 1-hour writes.
    pub fn cost(&self, u: &Usage, long_cache: bool) -> f64 {
        let full = u
            .input_tokens
            .saturating_sub(u.cached_tokens)
            .saturating_sub(u.cache_write_tokens);
        let write = if long_cache {
            self.cache_write_1h
        } else {
            self.cache_write
        };
        (full as f64 * self.input
            + u.cached_tokens as f64 * self.cached_input
            + u.cache_write_tokens as f64 * write
            + u.output_tokens as f64 * self.output)
            / 1e6
    }

    /// The most the next request can cost: `input_tokens` of prompt, of which `proven_cached`
    /// were read from the cache by the previous request and are repeated unchanged (priced as
    /// cached; the rest in full, or as a cache write where that costs more), plus the whole
    /// output cap at the output price.
    pub fn worst_case(
        &self,
        input_tokens: u64,
        proven_cached: u64,
        max_output: u64,
        long_cache: bool,
    ) -> f64 {
        let cached = proven_cached.min(input_tokens);
        let write = if long_cache {
            self.cache_write_1h
        } else {
            self.cache_write
        };
        ((input_tokens - cached) as f64 * self.input.max(write)
            + cached as f64 * self.cached_input
            + max_output as f64 * self.output)
            / 1e6
    }
}

/// A price and where it came from (for `tern status`).
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    /// The price.
    pub price: Price,
    /// `"price" in ~/.config/tern/config.json`, or the built-in table's source and entry.
    pub source: String,
}

/// The prices the person configured, looked up by model before the built-in table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceBook {
    /// `models` entries with a price: model name → price, source.
    pub models: Vec<(String, Priced)>,
    /// The file's top-level `price`: of the file's `model` when it names one (`Some(model)`),
    /// else of every model not priced otherwise (`None`).
    pub default: Option<(Option<String>, Priced)>,
}

impl PriceBook {
    /// The price of `model`: a `models` entry of that name, the top-level `price` (see
    /// [`PriceBook::default`]), the built-in table; None when nothing names it.
    pub fn lookup(&self, model: &str) -> Option<Priced> {
        if let Some((_, p)) = self.models.iter().find(|(m, _)| m == model) {
            return Some(p.clone());
        }
        match &self.default {
            Some((Some(m), p)) if m == model => return Some(p.clone()),
            Some((None, p)) => return Some(p.clone()),
            _ => {}
        }
        table::find(model).map(|(entry, price)| Priced {
            price,
            source: format!("{} (entry {entry:?})", table::SOURCE),
        })
    }
}

/// Dollars as shown: `$0.0123` (4 decimals under $1, 2 above), `<$0.0001` for a positive
/// amount that would show as zero, or "cost unknown".
pub fn usd_text(usd: Option<f64>) -> String {
    match usd {
        None => "cost unknown".into(),
        Some(v) if v > 0.0 && v < 0.00005 => "<$0.0001".into(),
        Some(v) if v.abs() < 1.0 => format!("${v:.4}"),
        Some(v) => format!("${v:.2}"),
    }
}

/// The most a total may hold, USD: sums read from records stop here, so a damaged record
/// never makes a total infinite (which JSON cannot hold: `meta.json` would not read back).
pub const MAX_TOTAL_USD: f64 = 1e12;

/// `total + amount` for amounts read from records: a negative or non-finite amount is left
/// out, and the sum stops at [`MAX_TOTAL_USD`].
pub fn add_usd(total: f64, amount: f64) -> f64 {
    if amount.is_finite() && amount >= 0.0 {
        (total + amount).min(MAX_TOTAL_USD)
    } else {
        total
    }
}

/// Dollars rounded for JSON (6 decimals: a millionth of a dollar).
pub fn usd_json(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

/// A spending limit shared by a run and its sub-agents (the whole session tree: one budget):
/// what they spent so far and what requests in flight may still cost, checked before each
/// request against the limit (`--max-cost`). A request **reserves** its worst case before it is
/// sent — atomically, under one lock, so two requests sent at once by parallel children cannot
/// both fit where only one does (issue 44) — and the reservation becomes the real cost when the
/// usage arrives ([`Reservation::settle`]), or is released if the request fails (dropped).
/// Amounts are nano-dollars.
#[derive(Debug)]
pub struct Budget {
    limit_usd: f64,
    /// (spent, reserved by requests in flight), nano-dollars.
    state: Mutex<(u64, u64)>,
}

/// A request's worst case held against a [`Budget`] while it is in flight: [`Reservation::settle`]
/// replaces it by what the request cost; dropped unsettled, it is released.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    nusd: u64,
}

impl Reservation {
    /// The request cost `usd`: counted as spent, the reservation released.
    pub fn settle(mut self, usd: f64) {
        let mut s = self.budget.lock();
        s.1 = s.1.saturating_sub(self.nusd);
        s.0 = s.0.saturating_add(nusd(usd));
        self.nusd = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.nusd > 0 {
            let mut s = self.budget.lock();
            s.1 = s.1.saturating_sub(self.nusd);
        }
    }
}

/// Dollars as nano-dollars (negative and non-finite amounts: none).
fn nusd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd.min(MAX_TOTAL_USD) * 1e9).round() as u64
    } else {
        0
    }
}

/// A request the limit refused: what was spent and what it could have cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverBudget {
    /// The limit in USD.
    pub limit: f64,
    /// Spent so far by the run (and its sub-agents), USD.
    pub spent: f64,
    /// Reserved by its other requests in flight (a sub-agent's), USD.
    pub reserved: f64,
    /// The refused request's worst case, USD.
    pub next: f64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the spending limit of {} (--max-cost) would be passed: {} spent so far{}, and the next request could cost up to {}",
            usd_text(Some(self.limit)),
            usd_text(Some(self.spent)),
            if self.reserved > 0.0 {
                format!(
                    ", {} held by requests in flight",
                    usd_text(Some(self.reserved))
                )
            } else {
                String::new()
            },
            usd_text(Some(self.next))
        )
    }
}

impl Budget {
    /// A limit of `limit_usd` dollars, nothing spent.
    pub fn new(limit_usd: f64) -> Arc<Budget> {
        Arc::new(Budget {
            limit_usd,
            state: Mutex::new((0, 0)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limit in USD.
    pub fn limit(&self) -> f64 {
        self.limit_usd
    }

    /// Spent so far, USD.
    pub fn spent(&self) -> f64 {
        self.lock().0 as f64 / 1e9
    }

    /// Reserves `next` dollars (a request's worst case) if the spent amount, what requests in
    /// flight hold and `next` stay within the limit. Errors: what it would pass (nothing held).
    pub fn reserve(self: &Arc<Self>, next: f64) -> Result<Reservation, OverBudget> {
        let n = nusd(next);
        let mut s = self.lock();
        let (spent, held) = (s.0 as f64 / 1e9, s.1 as f64 / 1e9);
        if spent + held + n as f64 / 1e9 > self.limit_usd {
            return Err(OverBudget {
                limit: self.limit_usd,
                spent,
                reserved: held,
                next,
            });
        }
        s.1 = s.1.saturating_add(n);
        Ok(Reservation {
            budget: self.clone(),
            nusd: n,
        })
    }

    /// Counts `usd` spent (a request that had no reservation).
    pub fn spend(&self, usd: f64) {
        let mut s = self.lock();
        s.0 = s.0.saturating_add(nusd(usd));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(input: u64, cached: u64, write: u64, output: u64) -> Usage {
        Usage {
            reasoning_tokens: 0,
            input_tokens: input,
            cached_tokens: cached,
            cache_write_tokens: write,
            output_tokens: output,
        }
    }

    #[test]
    fn a_requests_cost_prices_each_kind_of_token() {
        let p = table::find("claude-sonnet-4").unwrap().1;
        // 1 M in full, 2 M read from the cache, 1 M written, 0.1 M out.
        let c = p.cost(&u(4_000_000, 2_000_000, 1_000_000, 100_000), false);
        assert!((c - (3.0 + 0.6 + 3.75 + 1.5)).abs() < 1e-9, "{c}");
        let long = p.cost(&u(4_000_000, 2_000_000, 1_000_000, 100_000), true);
        assert!((long - (3.0 + 0.6 + 6.0 + 1.5)).abs() < 1e-9, "{long}");
        // A server reporting more cached than input tokens bills no negative tokens.
        assert!(p.cost(&u(10, 50, 50, 0), false) >= 0.0);
    }

    #[test]
    fn a_configured_price_fills_its_defaults_and_refuses_nonsense() {
        let p: Price = serde_json::from_str(r#"{"input": 2, "output": 8}"#).unwrap();
        let p = p.complete();
        assert_eq!(
            (p.cached_input, p.cache_write, p.cache_write_1h),
            (2.0, 2.0, 2.0)
        );
        assert!(p.check().is_ok());
        let bad: Price = serde_json::from_str(r#"{"input": -1, "output": 8}"#).unwrap();
        assert!(bad.complete().check().unwrap_err().contains("price.input"));
        let huge: Price = serde_json::from_str(r#"{"input": 1e300, "output": 8}"#).unwrap();
        assert!(huge.complete().check().is_err(), "a cost must stay finite");
        assert!(serde_json::from_str::<Price>(r#"{"input": 1, "outptu": 2}"#).is_err());
    }

    #[test]
    fn the_book_looks_up_models_then_the_default_then_the_table() {
        let p = |x: f64| Priced {
            price: Price {
                input: x,
                cached_input: x,
                cache_write: x,
                cache_write_1h: x,
                output: x,
            },
            source: format!("config {x}"),
        };
        let mut book = PriceBook {
            models: vec![("mine".into(), p(1.0))],
            default: Some((Some("qwen".into()), p(2.0))),
        };
        assert_eq!(book.lookup("mine").unwrap().price.input, 1.0);
        assert_eq!(book.lookup("qwen").unwrap().price.input, 2.0);
        assert!(book.lookup("gpt-4o").unwrap().source.contains("built-in"));
        assert_eq!(book.lookup("llama"), None, "never a guess");
        book.default = Some((None, p(3.0)));
        assert_eq!(book.lookup("llama").unwrap().price.input, 3.0);
    }

    #[test]
    fn the_worst_case_and_the_limit() {
        let p = table::find("gpt-4o").unwrap().1;
        // 10 k prompt tokens, 8 k proven cached, 1 k output cap.
        let w = p.worst_case(10_000, 8_000, 1_000, false);
        assert!((w - (2_000.0 * 2.5 + 8_000.0 * 1.25 + 1_000.0 * 10.0) / 1e6).abs() < 1e-12);
        let b = Budget::new(0.05);
        drop(b.reserve(0.05).unwrap());
        b.spend(0.03);
        let over = b.reserve(0.03).unwrap_err();
        assert!((over.spent - 0.03).abs() < 1e-9);
        assert!(over.to_string().contains("$0.0500"), "{over}");
        assert!(b.reserve(0.02).is_ok());
    }

    /// Two requests at once: the second sees the first's reservation; a settled one counts its
    /// real cost, a dropped one frees its place. Threads racing never pass the limit.
    #[test]
    fn reservations_hold_the_limit_for_requests_in_flight() {
        let b = Budget::new(1.0);
        let first = b.reserve(0.6).unwrap();
        let over = b.reserve(0.6).unwrap_err();
        assert!((over.reserved - 0.6).abs() < 1e-9, "{over}");
        assert!(over.to_string().contains("held by requests in flight"));
        first.settle(0.1);
        assert!((b.spent() - 0.1).abs() < 1e-9);
        let second = b.reserve(0.6).unwrap();
        drop(second);
        assert!(
            (b.spent() - 0.1).abs() < 1e-9,
            "a failed request spends nothing"
        );
        // 8 threads, each reserving its worst case and spending all of it.
        let b = Budget::new(1.0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let b = b.clone();
                s.spawn(move || {
                    for _ in 0..100 {
                        if let Ok(r) = b.reserve(0.013) {
                            r.settle(0.013);
                        }
                    }
                });
            }
        });
        assert!(b.spent() <= 1.0 + 1e-9, "{}", b.spent());
    }

    #[test]
    fn dollars_are_shown_and_rounded() {
        assert_eq!(usd_text(None), "cost unknown");
        assert_eq!(usd_text(Some(0.012345)), "$0.0123");
        assert_eq!(
            usd_text(Some(1e-10)),
            "<$0.0001",
            "never a positive $0.0000"
        );
        assert_eq!(usd_text(Some(0.0)), "$0.0000");
        assert_eq!(usd_text(Some(12.345)), "$12.35");
        assert_eq!(usd_json(0.1234567), 0.123457);
        assert_eq!(add_usd(1.0, f64::INFINITY), 1.0);
        assert_eq!(add_usd(1.0, -2.0), 1.0);
        assert_eq!(add_usd(1e308, 1e308), MAX_TOTAL_USD);
    }
}
