//! The door of the cost room (`src/cost`): each request is priced as its usage arrives, a
//! request a spending limit would not allow is not sent, and a request billed in full beyond
//! its new messages is explained ([`crate::cost::miss`]). The runtime holds one [`Spend`].

use std::time::Duration;

use super::{Failure, Runtime};
use crate::cost::Priced;
use crate::cost::miss::{self, CacheRules, Cause, Miss, Reason};
use crate::message::Usage;
use crate::provider::Wire;

/// How many `provider_missed` in a row before the person is told once (a proxy that drops
/// cache markers misses every time; one miss is the provider's own business).
const MISSED_IN_A_ROW: u32 = 3;

/// The runtime's cost state (the run's spending limit is the lineage's: shared with every
/// sub-agent, who spend from it).
#[derive(Debug, Default)]
pub(crate) struct Spend {
    /// The request before the next one (this session's, or a fork's parent's).
    prev: Option<miss::Previous>,
    /// A change tern made to the prefix since that request, and its first changed byte.
    changed: Option<(Cause, u64)>,
    /// The stored request's length after the latest change: the next request's new messages
    /// start there.
    new_from: Option<u64>,
    /// Added to the clock (tests of the cache lifetime).
    skew: Duration,
    /// `provider_missed` in a row, and whether the person was told.
    missed: (u32, bool),
    /// The worst case of the request in flight, held against the spending limit until its
    /// usage arrives (then its real cost) or it fails (released).
    held: Option<crate::cost::Reservation>,
}

/// What one request cost and why it missed the cache, for its `usage` event.
pub(super) struct Billed {
    pub(super) cost_usd: Option<f64>,
    pub(super) miss: Option<Miss>,
    /// Said once when the provider keeps missing.
    pub(super) warning: Option<String>,
}

impl Runtime {
    /// The price of this runtime's model (the config's, else the built-in table's).
    pub fn price(&self) -> Option<Priced> {
        self.cfg.prices.lookup(&self.cfg.model)
    }

    /// Now in milliseconds since the Unix epoch, as the cache rules see it.
    fn now_ms(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (now + self.meter.spend.skew).as_millis() as u64
    }

    /// The run's spending limit as it stands: (spent, limit) in USD; None without a limit.
    pub fn budget_state(&self) -> Option<(f64, f64)> {
        self.lineage.budget.as_ref().map(|b| (b.spent(), b.limit()))
    }

    /// Moves this runtime's clock forward by `by` for the cache rules (a test of an idle pause
    /// past the provider's cache lifetime; nothing else reads it).
    pub fn skip_time(&mut self, by: Duration) {
        self.meter.spend.skew += by;
    }

    /// The provider's cache rules for this runtime's wire and model.
    pub(super) fn cache_rules(&self) -> CacheRules {
        match self.provider.name() {
            Wire::Anthropic => CacheRules::anthropic(&self.cfg.model, self.cfg.long_cache),
            _ => CacheRules::OPENAI,
        }
    }

    /// How long the pause since the last request outlived the provider's cache (None: it did
    /// not, or there was no request): the next request reads nothing from the cache.
    pub fn idle_past_cache(&self) -> Option<Duration> {
        let prev = self.meter.spend.prev.as_ref()?;
        let idle = self.now_ms().saturating_sub(prev.at_ms);
        let ttl = self.cache_rules().ttl_s * 1000;
        (idle > ttl).then(|| Duration::from_millis(idle))
    }

    /// Records a change tern made to the prefix (a compaction, a model or sandbox switch, a
    /// rewrite by another process): the next request's miss names it, at the first byte where
    /// the stored prefix now differs from the last request sent. The earliest change wins.
    pub(super) fn note_change(&mut self, cause: Cause) {
        let stored = self.stored_body();
        let at = crate::provider::common_prefix(&self.meter.last_body, &stored) as u64;
        self.meter.spend.new_from = Some(stored.len() as u64);
        self.meter.spend.changed = match self.meter.spend.changed {
            Some((c, a)) if a <= at => Some((c, a)),
            _ => Some((cause, at)),
        };
    }

    /// The request before this runtime's first one: a fork repeats its parent's prefix, so the
    /// parent's last request is where its cache comes from.
    pub(crate) fn follow_requests_of(&mut self, parent: &Runtime) {
        self.meter.spend.prev = parent.meter.spend.prev.clone();
    }

    /// After a resume: the session's last request on record (model, time), so the first request
    /// of this process is measured against it, and a change tern made to the prefix since in
    /// another process (`tern compact`, a plan confirm), which that request's miss names. The
    /// previous process's body is gone, so the first changed byte is not known: 0.
    pub(super) fn recall_last_request(&mut self) {
        if let Some((prev, changed)) = self.session.last_request() {
            // What the previous request sent is at most its size of what is stored now (an
            // answer stored after it was never sent as a prompt).
            let sent = usize::try_from(prev.request_bytes).unwrap_or(usize::MAX);
            self.meter.last_body.truncate(sent);
            self.meter.spend.prev = Some(prev);
            if let Some(cause) = changed
                && self.meter.spend.changed.is_none()
            {
                self.meter.spend.changed = Some((cause, 0));
                self.meter.spend.new_from = Some(self.stored_body().len() as u64);
            }
        }
    }

    /// Refuses a request of `body_bytes` whose worst case (the prompt not proven cached at full
    /// price, the whole output cap at the output price) would pass the run's spending limit.
    /// Errors: [`Failure::Budget`] saying what was spent and what the request could cost.
    pub(super) fn within_budget(&mut self, body: &[u8]) -> Result<(), Failure> {
        // A reservation of an earlier attempt goes first.
        self.meter.spend.held = None;
        let Some(budget) = self.lineage.budget.clone() else {
            return Ok(());
        };
        let (body_bytes, reuse) = (
            body.len(),
            crate::provider::common_prefix(&self.meter.last_body, body),
        );
        let Some(p) = self.price() else {
            // Refused at start (`Launcher::parts_with`); a model switched since has no price.
            return Err(Failure::Budget(format!(
                "the spending limit needs the price of {}, and tern knows none: set \"price\" in ~/.config/tern/config.json",
                self.cfg.model
            )));
        };
        let per_byte = self.tokens_per_byte_or(1.0 / 3.0);
        let input = (body_bytes as f64 * per_byte).ceil() as u64;
        // Proven: what the previous request on this model read from the cache or wrote to it,
        // repeated unchanged and within the cache's lifetime.
        let proven = match (&self.meter.spend.prev, self.meter.spend.changed) {
            (Some(prev), None)
                if prev.model == self.cfg.model && self.idle_past_cache().is_none() =>
            {
                let repeated = (reuse as f64 * per_byte) as u64;
                repeated.min(self.meter.last_cacheable)
            }
            _ => 0,
        };
        // The most the answer may bill: its cap, and on Anthropic with thinking on the thinking
        // budget above it (`max_tokens` is both; elsewhere reasoning counts within the cap).
        let thinking = match self.provider.name() {
            Wire::Anthropic => self
                .cfg
                .reasoning
                .effort
                .and_then(crate::provider::reasoning::Effort::anthropic_budget)
                .unwrap_or(0),
            Wire::Openai | Wire::Responses | Wire::Replay => 0,
        };
        let worst = p.price.worst_case(
            input,
            proven,
            u64::from(self.cfg.max_output_tokens) + u64::from(thinking),
            self.cfg.long_cache,
        );
        let held = budget.reserve(worst).map_err(|over| {
            Failure::Budget(format!(
                "{over}. Nothing was sent; the session is kept: go on with a higher limit (tern --continue --max-cost USD, tern exec --continue --max-cost USD, or max_cost in the config)"
            ))
        })?;
        self.meter.spend.held = Some(held);
        Ok(())
    }

    /// The request in flight failed with no usage: its reservation is released.
    pub(super) fn release_held(&mut self) {
        self.meter.spend.held = None;
    }

    /// Prices a request that reached the server and explains a cache miss; counts the spend
    /// against the limit and into the totals, and remembers the request for the next one.
    pub(super) fn price_request(&mut self, u: &Usage, request_bytes: u64, reuse: u64) -> Billed {
        let price = self.price();
        let cost = price.as_ref().map(|p| p.price.cost(u, self.cfg.long_cache));
        match cost {
            Some(c) => {
                self.meter.totals.cost_usd += c;
                match self.meter.spend.held.take() {
                    Some(r) => r.settle(c),
                    None => {
                        if let Some(b) = &self.lineage.budget {
                            b.spend(c);
                        }
                    }
                }
            }
            None => {
                self.meter.spend.held = None;
                self.meter.totals.unpriced += 1;
            }
        }
        let now_ms = self.now_ms();
        let sent = miss::Sent {
            model: self.cfg.model.clone(),
            at_ms: now_ms,
            request_bytes,
            reuse_bytes: reuse,
            changed: self.meter.spend.changed.take(),
            new_from: self.meter.spend.new_from.take(),
            input_tokens: u.input_tokens,
            cached_tokens: u.cached_tokens,
        };
        let mut found = miss::diagnose(self.meter.spend.prev.as_ref(), &sent, self.cache_rules());
        if let (Some(m), Some(p)) = (found.as_mut(), price) {
            m.cost_usd = Some(crate::cost::usd_json(m.tokens as f64 * p.price.input / 1e6));
        }
        self.meter.spend.prev = Some(miss::Previous {
            model: sent.model,
            at_ms: now_ms,
            request_bytes,
        });
        self.meter.last_cacheable = u.cached_tokens.saturating_add(u.cache_write_tokens);
        let warning = match found.as_ref().map(|m| m.reason) {
            Some(Reason::ProviderMissed) => {
                self.meter.spend.missed.0 += 1;
                (self.meter.spend.missed.0 >= MISSED_IN_A_ROW && !self.meter.spend.missed.1).then(|| {
                    self.meter.spend.missed.1 = true;
                    format!(
                        "the provider read less from its prompt cache than tern's unchanged prefix allows, {MISSED_IN_A_ROW} requests in a row: a proxy that drops cache markers, or a server without prompt caching, bills the whole prompt each time (tern stats --why)"
                    )
                })
            }
            _ => {
                self.meter.spend.missed.0 = 0;
                None
            }
        };
        Billed {
            cost_usd: cost,
            miss: found,
            warning,
        }
    }
}
