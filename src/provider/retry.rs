//! Retrying one provider attempt: exponential backoff with full jitter, `Retry-After` honoured up
//! to a cap, a bound on the total time, and `cancel` honoured while waiting (case C13).
//!
//! Backoff with "full jitter" (a uniformly random wait between zero and the exponential bound)
//! spreads retries of many clients apart; source: AWS Architecture Blog, "Exponential Backoff And
//! Jitter" (2015).

use crate::cancel::CancelToken;
use std::time::{Duration, Instant};

use super::{ErrorKind, ProviderError};

/// How long to keep retrying and how long to wait between attempts. All fields are durations, so
/// tests can use milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Bound on the whole call, attempts and waits together: a wait that would end past it is not
    /// started and the last error is returned instead. Default 5 min.
    pub max_total: Duration,
    /// Bound of the first wait; retry `n` waits up to `base_delay * 2^(n-1)`. Default 1 s.
    pub base_delay: Duration,
    /// Cap on the exponential bound. Default 60 s.
    pub max_delay: Duration,
    /// Cap on a server's `Retry-After`. Default 120 s.
    pub max_retry_after: Duration,
    /// Retries of an unreachable server (refused connection, unknown host), each after at most
    /// one second: enough for a server being restarted, not a 5-minute silent wait. Default 2.
    pub max_unreachable_retries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_total: Duration::from_secs(300),
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(120),
            max_unreachable_retries: 2,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1 for the first retry) after `error`. `unit` is a
    /// random number in `[0, 1]` (the jitter). With a `Retry-After`, the wait is exactly that,
    /// capped at `max_retry_after`; otherwise `unit * min(max_delay, base_delay * 2^(retry-1))`.
    pub fn delay(&self, retry: u32, error: &ProviderError, unit: f64) -> Duration {
        if let Some(ra) = error.retry_after {
            return ra.min(self.max_retry_after);
        }
        let exp = 2u32.saturating_pow(retry.saturating_sub(1));
        let bound = self.base_delay.saturating_mul(exp).min(self.max_delay);
        bound.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Runs `attempt` until it succeeds, fails with an error that is not
/// [`ProviderError::retryable`] (returned at once: 400, 401, 403, 404, 413, 422, context
/// overflow, cancel…), or retrying would pass `policy.max_total` (the last error is returned,
/// its message saying that no retry fits the time left).
///
/// Before each wait `on_retry(retry, delay, &error)` is called, with `retry` = 1 for the first
/// retry, so the runtime can emit a `retry` event per attempt. Waits sleep in slices of at most
/// 50 ms; `cancel` set during a wait returns [`ErrorKind::Cancelled`] at once.
pub fn run<T>(
    policy: &RetryPolicy,
    mut attempt: impl FnMut() -> Result<T, ProviderError>,
    mut on_retry: impl FnMut(u32, Duration, &ProviderError),
    cancel: &CancelToken,
) -> Result<T, ProviderError> {
    let start = Instant::now();
    let mut retry = 0u32;
    let mut unreachable = 0u32;
    loop {
        let mut error = match attempt() {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !error.retryable() {
            return Err(error);
        }
        retry = retry.saturating_add(1);
        let mut delay = policy.delay(retry, &error, jitter());
        if error.kind == ErrorKind::Unreachable {
            unreachable += 1;
            if unreachable > policy.max_unreachable_retries {
                error.message = format!(
                    "{} (tried {} times; is the server running and the URL right?)",
                    error.message, unreachable
                );
                return Err(error);
            }
            delay = delay.min(Duration::from_secs(1));
        }
        if start.elapsed().saturating_add(delay) > policy.max_total {
            error.message = format!(
                "{} (no retry: waiting {} s more would pass the retry time of {} s)",
                error.message,
                delay.as_secs_f64().ceil(),
                policy.max_total.as_secs_f64().ceil()
            );
            return Err(error);
        }
        on_retry(retry, delay, &error);
        if !sleep(delay, cancel) {
            return Err(ProviderError::new(
                ErrorKind::Cancelled,
                "cancelled while waiting to retry",
            ));
        }
    }
}

/// Sleeps `d` in slices; false when `cancel` became true.
fn sleep(d: Duration, cancel: &CancelToken) -> bool {
    let end = Instant::now() + d;
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// A random number in `[0, 1)`. std's `RandomState` is randomly keyed per process and per call,
/// which is plenty for spreading retries (no cryptographic use).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_total: Duration::from_secs(10),
            base_delay: ms(2),
            max_delay: ms(10),
            max_retry_after: ms(30),
            max_unreachable_retries: 2,
        }
    }

    fn err(kind: ErrorKind) -> ProviderError {
        ProviderError::new(kind, "x")
    }

    #[test]
    fn delay_is_exponential_capped_and_jittered() {
        let p = policy();
        let e = err(ErrorKind::Status(529));
        assert_eq!(p.delay(1, &e, 1.0), ms(2));
        assert_eq!(p.delay(2, &e, 1.0), ms(4));
        assert_eq!(p.delay(3, &e, 1.0), ms(8));
        assert_eq!(p.delay(4, &e, 1.0), ms(10));
        assert_eq!(p.delay(400, &e, 1.0), ms(10));
        assert_eq!(p.delay(3, &e, 0.5), ms(4));
        assert_eq!(p.delay(3, &e, 0.0), Duration::ZERO);
        let j: Vec<f64> = (0..100).map(|_| jitter()).collect();
        assert!(j.iter().all(|x| (0.0..1.0).contains(x)));
        assert!(j.windows(2).any(|w| w[0] != w[1]), "jitter is constant");
    }

    #[test]
    fn c13_retry_after_honoured_up_to_the_cap() {
        let p = policy();
        let mut e = err(ErrorKind::Status(429));
        e.retry_after = Some(ms(7));
        assert_eq!(p.delay(1, &e, 0.0), ms(7));
        e.retry_after = Some(Duration::from_secs(7));
        assert_eq!(p.delay(1, &e, 0.0), ms(30));
    }

    #[test]
    fn c13_retries_until_success_with_a_callback_each() {
        let calls = Cell::new(0);
        let mut retries = Vec::new();
        let r = run(
            &policy(),
            || {
                calls.set(calls.get() + 1);
                if calls.get() <= 3 {
                    Err(err(ErrorKind::Status(529)))
                } else {
                    Ok("ok")
                }
            },
            |n, d, e| retries.push((n, d, e.kind.clone())),
            &CancelToken::new(),
        );
        assert_eq!(r, Ok("ok"));
        assert_eq!(calls.get(), 4);
        assert_eq!(
            retries.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(retries.iter().all(|r| r.1 <= ms(10)));
    }

    #[test]
    fn c13_non_retryable_statuses_return_at_once() {
        for s in [400, 401, 403, 404, 413, 422] {
            let calls = Cell::new(0);
            let r: Result<(), _> = run(
                &policy(),
                || {
                    calls.set(calls.get() + 1);
                    Err(err(ErrorKind::Status(s)))
                },
                |_, _, _| panic!("retried {s}"),
                &CancelToken::new(),
            );
            assert_eq!(r.unwrap_err().kind, ErrorKind::Status(s));
            assert_eq!(calls.get(), 1);
        }
    }

    #[test]
    fn total_time_is_bounded() {
        let p = RetryPolicy {
            max_total: ms(150),
            ..policy()
        };
        let mut e = err(ErrorKind::Status(503));
        e.retry_after = Some(ms(30));
        let calls = Cell::new(0);
        let t = Instant::now();
        let r: Result<(), _> = run(
            &p,
            || {
                calls.set(calls.get() + 1);
                Err(e.clone())
            },
            |_, _, _| {},
            &CancelToken::new(),
        );
        assert_eq!(r.unwrap_err().kind, ErrorKind::Status(503));
        // 150 ms allows at most 5 waits of 30 ms.
        assert!((2..=6).contains(&calls.get()), "{} calls", calls.get());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn cancel_stops_the_wait() {
        let p = RetryPolicy {
            max_retry_after: Duration::from_secs(60),
            max_total: Duration::from_secs(600),
            ..policy()
        };
        let cancel = CancelToken::new();
        let t = Instant::now();
        let r: Result<(), _> = run(
            &p,
            || {
                let mut e = err(ErrorKind::Status(429));
                e.retry_after = Some(Duration::from_secs(60));
                Err(e)
            },
            |_, _, _| cancel.cancel(),
            &cancel,
        );
        assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
