//! Sending requests: the token preflight, retries, context-overflow recovery, and the usage and
//! prefix-reuse figures. Bodies come from the [`super::Prefix`] with per-request options.

use std::cell::RefCell;

use super::prefix::RequestOptions;
use super::{Failure, Runtime, Surface};
use crate::event::{CompactTrigger, Event, Purpose};
use crate::message::Message;
use crate::message::Usage;
use crate::provider::{Completion, ErrorKind, Finish, ProviderError, retry};
use crate::render::work_state;
use crate::store::files;

/// Tokens per byte assumed before a provider reported any usage: 1/3 overestimates typical
/// English and code (≈ 1/4), so the preflight stays conservative.
const DEFAULT_TOKENS_PER_BYTE: f64 = 1.0 / 3.0;

/// What one request of the turn loop asks for beyond the prefix.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask {
    /// False: a text answer only (`tool_choice` none), once after a loop.
    pub tools_allowed: bool,
}

impl Runtime {
    /// The per-request options for this runtime's model and a tail.
    pub(super) fn options<'a>(
        &'a self,
        tail: Option<&'a str>,
        tools_allowed: bool,
    ) -> RequestOptions<'a> {
        RequestOptions {
            model: &self.cfg.model,
            tail,
            cache_key: self.cfg.send_cache_key.then(|| {
                self.lineage
                    .cache_key
                    .as_deref()
                    .unwrap_or(self.session.id.as_str())
            }),
            max_output_tokens: self.cfg.max_output_tokens,
            temperature: self.cfg.temperature,
            official_openai: self.cfg.send_cache_key,
            tools_allowed,
            long_cache: self.cfg.long_cache,
            reasoning: self.cfg.reasoning,
        }
    }

    /// The body of the stored prefix with no tail: what the next request repeats.
    pub fn stored_body(&self) -> Vec<u8> {
        self.prefix.body(&*self.provider, &self.options(None, true))
    }

    /// One model request for the turn loop: notices plan-file changes, builds the body with the
    /// current work-state tail, compacts first when the preflight estimate passes the threshold,
    /// sends with retries, and on a context-overflow error compacts and retries exactly once.
    pub(super) fn ask_model(
        &mut self,
        ask: Ask,
        ui: &mut dyn Surface,
    ) -> Result<Completion, Failure> {
        // A process an earlier command left behind may have changed tern's files since: undone
        // now, and the model is told in this request's tail (the history stays as it was).
        let refused = self.guard_check();
        self.observe_plan_files(ui)?;
        let mut tail = self.work_state_tail();
        if let Some(report) = refused {
            let msg = report.to_string();
            self.emit(ui, Event::warning(msg.clone()));
            let note = format!("[tern: {msg}]");
            tail = Some(match tail {
                Some(t) => format!("{note}\n{t}"),
                None => note,
            });
        }
        let body = |rt: &Runtime| {
            rt.prefix.body(
                &*rt.provider,
                &rt.options(tail.as_deref(), ask.tools_allowed),
            )
        };
        let mut b = body(self);
        if self.over_threshold(b.len()) && self.prefix.history.len() > 1 {
            let keep = self.new_prompt_index();
            self.compact(CompactTrigger::Auto, keep, ui)?;
            b = body(self);
        }
        self.within_budget(&b)?;
        match self.send(b, Purpose::Turn, ui) {
            Err(e) if self.flip_reasoning_replay(&e, ui) => {
                let b = body(self);
                self.within_budget(&b)?;
                self.send(b, Purpose::Turn, ui).map_err(provider_failure)
            }
            Err(e) if e.kind == ErrorKind::ContextOverflow => {
                let keep = self.new_prompt_index();
                if !self.compact(CompactTrigger::ContextOverflow, keep, ui)? {
                    // Nothing could be summarised: the same request would fail the same way.
                    return Err(Failure::Failed(format!(
                        "the request is longer than the model's context window and there is nothing left to compact: {e}"
                    )));
                }
                let b = body(self);
                self.within_budget(&b)?;
                self.send(b, Purpose::Turn, ui).map_err(|e| match e.kind {
                    ErrorKind::ContextOverflow => Failure::Failed(format!(
                        "the request is still longer than the model's context window after compaction: {e}"
                    )),
                    _ => provider_failure(e),
                })
            }
            other => other.map_err(provider_failure),
        }
    }

    /// A Chat Completions server refused the request over its reasoning field (HTTP 400 naming
    /// it): the host's replay rule was wrong for this server, so the session takes the other
    /// choice, once, and says so (a rule the person set in the config is never changed).
    /// Whether the request should be sent again.
    pub(super) fn flip_reasoning_replay(
        &mut self,
        e: &ProviderError,
        ui: &mut dyn Surface,
    ) -> bool {
        let about_reasoning = e.kind == ErrorKind::Status(400)
            && crate::provider::reasoning::names_reasoning(&e.message);
        if !about_reasoning
            || self.cfg.reasoning_replay.is_some()
            || self.provider.name() != crate::provider::Wire::Openai
        {
            return false;
        }
        let was = self.cfg.reasoning.replay;
        let now = was.flipped();
        self.cfg.reasoning.replay = now;
        self.cfg.reasoning_replay = Some(now);
        self.emit(
            ui,
            Event::warning(format!(
                "the provider refused the request over its reasoning field, so this session now sends reasoning back by the rule `{}` (was `{}`; set \"reasoning_replay\" in the config to choose): {}",
                now.as_str(),
                was.as_str(),
                crate::text::cut(e.message.trim(), 300)
            )),
        );
        true
    }

    /// When the history ends with the person's new prompt (the first request of a turn), its
    /// index: a compaction then keeps it word for word after the summary instead of summarising
    /// the very request it is about to answer. When the prompt is all there is, it is summarised
    /// with the rest: there is nothing else to make room.
    fn new_prompt_index(&self) -> Option<usize> {
        let h = &self.prefix.history;
        match h.last() {
            Some(Message::User { .. }) if h.len() > 1 => Some(h.len() - 1),
            _ => None,
        }
    }

    /// The `<tern:work_state>` block for the current ledger (None when the ledger is empty or
    /// unreadable: a damaged ledger must not stop the work; it is reported by `tern status`).
    pub(super) fn work_state_tail(&mut self) -> Option<String> {
        let now = crate::store::fsutil::stamp(&self.session.path(files::LEDGER));
        if let Some((seen, block)) = &self.seen.tail
            && *seen == now
        {
            return block.clone();
        }
        let ledger: Option<crate::domain::ledger::Ledger> =
            self.session.read_json(files::LEDGER).ok().flatten();
        let block = ledger.and_then(|l| work_state::block(&l));
        self.seen.tail = Some((now, block.clone()));
        block
    }

    /// Preflight: whether a body of `bytes` would pass the compaction threshold. Uses the
    /// tokens-per-byte of the last reported usage when there is one.
    fn over_threshold(&self, bytes: usize) -> bool {
        let t = &self.meter.totals;
        let per_byte = if t.usage.input_tokens > 0 && t.request_bytes > 0 {
            (t.usage.input_tokens as f64 / t.request_bytes as f64).max(0.2) * 1.1
        } else {
            DEFAULT_TOKENS_PER_BYTE
        };
        let estimate = bytes as f64 * per_byte;
        estimate > self.cfg.context_window as f64 * self.cfg.compact_threshold
    }

    /// Sends one body with retries; emits `retry` events, then a `usage` event with the measured
    /// prefix reuse (common byte prefix with the previous body). Text deltas of a turn request
    /// stream to the surface.
    pub(super) fn send(
        &mut self,
        body: Vec<u8>,
        purpose: Purpose,
        ui: &mut dyn Surface,
    ) -> Result<Completion, ProviderError> {
        let reuse = crate::provider::common_prefix(&self.meter.last_body, &body) as u64;
        ui.progress(match purpose {
            Purpose::Compaction => "compacting: the model writes a summary…",
            Purpose::Turn => "waiting for the model…",
        });
        let cancel = self.cancel.clone();
        let (session, parent) = (&self.session, self.lineage.parent.as_deref());
        let provider = &mut self.provider;
        let ui = RefCell::new(ui);
        let started = std::time::Instant::now();
        let max_total = self.cfg.retry.max_total;
        let result = retry::run(
            &self.cfg.retry,
            || {
                let mut on_text = |t: crate::provider::Streamed<'_>| {
                    if purpose == Purpose::Turn {
                        match t {
                            crate::provider::Streamed::Text(t) => ui.borrow_mut().text_delta(t),
                            crate::provider::Streamed::Thought(t) => {
                                ui.borrow_mut().thought_delta(t)
                            }
                            crate::provider::Streamed::Waiting { silent, left } => {
                                super::emit_to(
                                    session,
                                    parent,
                                    &mut **ui.borrow_mut(),
                                    Event::warning(format!(
                                        "nothing from the model for {} s; tern waits {} s more before it retries",
                                        silent.as_secs(),
                                        left.as_secs_f64().ceil()
                                    )),
                                );
                            }
                        }
                    }
                };
                provider.complete(&body, purpose, &mut on_text, &cancel)
            },
            |attempt, delay, err| {
                super::emit_to(
                    session,
                    parent,
                    &mut **ui.borrow_mut(),
                    Event::Retry {
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        error: err.message.clone(),
                        left_ms: max_total
                            .saturating_sub(started.elapsed() + delay)
                            .as_millis() as u64,
                    },
                );
            },
            &cancel,
        );
        let ui = ui.into_inner();
        let mut answer = match result {
            Ok(a) => a,
            Err(e) => {
                // The server read the request and refused it (HTTP 400, context too long): it
                // counts as a request, with the usage known (none is reported for a refusal).
                // A server error that outlasted the retries is no answer to the request.
                if matches!(e.kind, ErrorKind::Status(_) | ErrorKind::ContextOverflow)
                    && !e.retryable()
                {
                    self.record_request(purpose, Usage::default(), false, body, reuse, ui);
                }
                self.release_held();
                return Err(e);
            }
        };
        // A server that reports more cached than prompt tokens is not believed past all of them.
        answer.usage.cached_tokens = answer.usage.cached_tokens.min(answer.usage.input_tokens);
        // A runaway answer was cut and its stream abandoned before the usage that ends it: what
        // the server did not report is estimated from the bytes sent and received. So is a
        // report the provider layer refused (negative, absurd): it never reaches the totals.
        let estimated = match answer.usage_refused.take() {
            Some(why) => {
                self.emit(
                    ui,
                    Event::warning(format!(
                        "the provider's usage report was not believed ({why}): this request's tokens are estimated"
                    )),
                );
                estimate_unreported(&mut answer, body.len(), self.tokens_per_byte());
                true
            }
            None => {
                answer.finish_reason == Some(Finish::Repetition)
                    && estimate_unreported(&mut answer, body.len(), self.tokens_per_byte())
            }
        };
        self.record_request(purpose, answer.usage, estimated, body, reuse, ui);
        Ok(answer)
    }

    /// Tokens per request byte measured over this runtime's requests, or a typical 1/4 before
    /// any was reported.
    fn tokens_per_byte(&self) -> f64 {
        self.tokens_per_byte_or(0.25)
    }

    /// [`Runtime::tokens_per_byte`] with `unknown` before any usage was reported.
    pub(super) fn tokens_per_byte_or(&self, unknown: f64) -> f64 {
        let t = &self.meter.totals;
        if t.usage.input_tokens > 0 && t.request_bytes > 0 {
            t.usage.input_tokens as f64 / t.request_bytes as f64
        } else {
            unknown
        }
    }

    /// Counts one request that reached the server: the totals, a `usage` event, `meta.json`.
    fn record_request(
        &mut self,
        purpose: Purpose,
        u: Usage,
        estimated: bool,
        body: Vec<u8>,
        reuse: u64,
        ui: &mut dyn Surface,
    ) {
        let priced = self.price_request(&u, body.len() as u64, reuse);
        let t = &mut self.meter.totals;
        t.requests += 1;
        t.usage.add(&u);
        t.prefix_reuse_bytes += reuse;
        t.request_bytes += body.len() as u64;
        self.emit(
            ui,
            Event::Usage {
                purpose,
                model: self.cfg.model.clone(),
                input_tokens: u.input_tokens,
                cached_tokens: u.cached_tokens,
                cache_write_tokens: u.cache_write_tokens,
                output_tokens: u.output_tokens,
                reasoning_tokens: u.reasoning_tokens,
                cache_hit_ratio: super::ratio(u.cached_tokens, u.input_tokens),
                request_bytes: body.len() as u64,
                prefix_reuse_bytes: reuse,
                estimated,
                cost_usd: priced.cost_usd.map(crate::cost::usd_json),
                miss: priced.miss,
                cache_ttl_s: (self.provider.name() == crate::provider::Wire::Anthropic)
                    .then(|| self.cache_rules().ttl_s),
            },
        );
        if let Some(w) = priced.warning {
            self.emit(ui, Event::warning(w));
        }
        // The session's record counts every request the moment its usage arrives: the `usage`
        // event above. `meta.json` takes the totals once, when the turn (or the verb) lets go of
        // the session (`Runtime::release`); a reader of a running session, or of one a crash
        // cut, takes them from `events.jsonl` (`Meta::take_totals`): one total everywhere, and
        // no rewrite of `meta.json` per request.
        let unsaved = &mut self.meter.unsaved;
        unsaved.requests += 1;
        unsaved.usage.add(&u);
        match priced.cost_usd {
            Some(c) => unsaved.cost_usd += c,
            None => unsaved.unpriced += 1,
        }
        self.meter.last_body = body;
    }
}

/// Fills the usage a cut stream never reported: prompt tokens from the request's `body_bytes`
/// at `per_byte`, output tokens from the bytes received (text and call arguments) at 1/4 token
/// a byte. Figures the server did report are kept. True when anything was estimated.
fn estimate_unreported(answer: &mut Completion, body_bytes: usize, per_byte: f64) -> bool {
    let u = &mut answer.usage;
    let mut estimated = false;
    if u.input_tokens == 0 && body_bytes > 0 {
        u.input_tokens = (body_bytes as f64 * per_byte).ceil() as u64;
        estimated = true;
    }
    let received = answer.text.len()
        + answer
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    if u.output_tokens == 0 && received > 0 {
        u.output_tokens = received.div_ceil(4) as u64;
        estimated = true;
    }
    estimated
}

/// Maps a provider error that ended the attempts to a turn failure: cancelled → interrupted;
/// retryable (retries exhausted) → provider unavailable (exit 75); anything else → failed.
pub(super) fn provider_failure(e: ProviderError) -> Failure {
    if e.kind == ErrorKind::Cancelled {
        Failure::Interrupted
    } else if e.retryable() {
        Failure::ProviderUnavailable(e.message)
    } else {
        Failure::Failed(format!("provider error: {}", e.message))
    }
}
