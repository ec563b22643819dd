//! Request assembly and sending: the stable prefix (tools + system prompt + history) with the
//! work-state block as a transient tail, the token preflight, retries, context-overflow recovery,
//! and the usage and prefix-reuse figures.

use std::cell::RefCell;

use serde_json::json;

use super::{Failure, Runtime, Surface};
use crate::provider::{Completion, ErrorKind, ProviderError, Request, retry};
use crate::render::work_state;
use crate::store::files;
use crate::tools::work::Ledger;

/// Tokens per byte assumed before a provider reported any usage: 1/3 overestimates typical
/// English and code (≈ 1/4), so the preflight stays conservative.
const DEFAULT_TOKENS_PER_BYTE: f64 = 1.0 / 3.0;

impl Runtime {
    /// One model request for the turn loop: notices plan-file changes, builds the body with the
    /// current work-state tail, compacts first when the preflight estimate passes the threshold,
    /// sends with retries, and on a context-overflow error compacts and retries exactly once.
    pub(super) fn ask_model(&mut self, ui: &mut dyn Surface) -> Result<Completion, Failure> {
        self.observe_plan_files(ui)?;
        let tail = self.work_state_tail();
        let mut body = self.body(tail.as_deref());
        if self.over_threshold(body.len()) && self.history.len() > 1 {
            let keep = self.new_prompt_index();
            self.compact("auto", keep, ui)?;
            body = self.body(tail.as_deref());
        }
        match self.send(body, "turn", true, ui) {
            Err(e) if e.kind == ErrorKind::ContextOverflow => {
                let keep = self.new_prompt_index();
                if !self.compact("context_overflow", keep, ui)? {
                    // Nothing could be summarised: the same request would fail the same way.
                    return Err(Failure::Failed(format!(
                        "the request is longer than the model's context window and there is nothing left to compact: {e}"
                    )));
                }
                let body = self.body(tail.as_deref());
                self.send(body, "turn", true, ui).map_err(|e| match e.kind {
                    ErrorKind::ContextOverflow => Failure::Failed(format!(
                        "the request is still longer than the model's context window after compaction: {e}"
                    )),
                    _ => provider_failure(e),
                })
            }
            other => other.map_err(provider_failure),
        }
    }

    /// When the history ends with the person's new prompt (the first request of a turn), its
    /// index: a compaction then keeps it word for word after the summary instead of summarising
    /// the very request it is about to answer.
    /// When the prompt is all there is, it is summarised with the rest: there is nothing else
    /// to make room.
    fn new_prompt_index(&self) -> Option<usize> {
        match self.history.last() {
            Some(crate::message::Message::User { .. }) if self.history.len() > 1 => {
                Some(self.history.len() - 1)
            }
            _ => None,
        }
    }

    /// The exact body bytes for the current history plus `tail`.
    pub(super) fn body(&self, tail: Option<&str>) -> Vec<u8> {
        self.body_for(&self.history, tail)
    }

    /// The exact body bytes for `messages` (a compaction sends a different message list).
    pub(super) fn body_for(
        &self,
        messages: &[crate::message::Message],
        tail: Option<&str>,
    ) -> Vec<u8> {
        let req = Request {
            model: &self.cfg.model,
            system: &self.system,
            tools: &self.tools,
            messages,
            tail,
            cache_key: self.cfg.send_cache_key.then_some(self.session.id.as_str()),
            max_output_tokens: self.cfg.max_output_tokens,
            tools_allowed: self.tools_allowed,
        };
        self.provider.body(&req)
    }

    /// The `<tern:work_state>` block for the current ledger (None when the ledger is empty or
    /// unreadable: a damaged ledger must not stop the work; it is reported by `tern status`).
    pub(super) fn work_state_tail(&mut self) -> Option<String> {
        let now = super::stamp(&self.session.path(files::LEDGER));
        if let Some((seen, block)) = &self.tail_cache
            && *seen == now
        {
            return block.clone();
        }
        let ledger: Option<Ledger> = self.session.read_json(files::LEDGER).ok().flatten();
        let block = ledger.and_then(|l| work_state::block(&l));
        self.tail_cache = Some((now, block.clone()));
        block
    }

    /// Preflight: whether a body of `bytes` would pass the compaction threshold. Uses the
    /// tokens-per-byte of the last reported usage when there is one.
    fn over_threshold(&self, bytes: usize) -> bool {
        let per_byte = if self.totals.usage.input_tokens > 0 && self.totals.request_bytes > 0 {
            (self.totals.usage.input_tokens as f64 / self.totals.request_bytes as f64).max(0.2)
                * 1.1
        } else {
            DEFAULT_TOKENS_PER_BYTE
        };
        let estimate = bytes as f64 * per_byte;
        estimate > self.cfg.context_window as f64 * self.cfg.compact_threshold
    }

    /// Sends one body with retries; emits `retry` events, then a `usage` event with the measured
    /// prefix reuse (common byte prefix with the previous body). `purpose` is `turn` or
    /// `compaction`; `show_text` streams text deltas to the surface.
    pub(super) fn send(
        &mut self,
        body: Vec<u8>,
        purpose: &str,
        show_text: bool,
        ui: &mut dyn Surface,
    ) -> Result<Completion, ProviderError> {
        let reuse = crate::provider::common_prefix(&self.last_body, &body) as u64;
        ui.progress(if purpose == "compaction" {
            "compacting: the model writes a summary…"
        } else {
            "waiting for the model…"
        });
        let cancel = self.cancel.clone();
        let session = &self.session;
        let provider = &mut self.provider;
        let ui = RefCell::new(ui);
        let result = retry::run(
            &self.cfg.retry,
            || {
                let mut on_text = |t: &str| {
                    if show_text {
                        ui.borrow_mut().text_delta(t);
                    }
                };
                provider.complete(&body, &mut on_text, &cancel)
            },
            |attempt, delay, err| {
                super::emit_to(
                    session,
                    &mut **ui.borrow_mut(),
                    "retry",
                    json!({"attempt": attempt, "delay_ms": delay.as_millis() as u64, "error": err.message}),
                );
            },
            &cancel,
        );
        let ui = ui.into_inner();
        let mut answer = result?;
        // A server that reports more cached than prompt tokens is not believed past all of them.
        answer.usage.cached_tokens = answer.usage.cached_tokens.min(answer.usage.input_tokens);
        let u = answer.usage;
        self.totals.requests += 1;
        self.totals.usage.add(&u);
        self.totals.prefix_reuse_bytes += reuse;
        self.totals.request_bytes += body.len() as u64;
        self.emit(
            ui,
            "usage",
            json!({
                "purpose": purpose,
                "input_tokens": u.input_tokens,
                "cached_tokens": u.cached_tokens,
                "cache_write_tokens": u.cache_write_tokens,
                "output_tokens": u.output_tokens,
                "cache_hit_ratio": super::ratio(u.cached_tokens, u.input_tokens),
                "request_bytes": body.len(),
                "prefix_reuse_bytes": reuse,
            }),
        );
        self.last_body = body;
        Ok(answer)
    }
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
