//! Wall-clock helpers. Times go into state files and events only, never into the prompt prefix
//! (case C18).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now as RFC 3339 UTC with seconds, e.g. `2026-11-30T00:59:25Z`.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Now as RFC 3339 UTC with milliseconds, for event `ts`.
pub fn now_rfc3339_millis() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Now as whole seconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parses an RFC 3339 time into Unix seconds (None when it does not parse).
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    humantime::parse_rfc3339_weak(s)
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// Parses an RFC 3339 time into Unix milliseconds (None when it does not parse).
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    humantime::parse_rfc3339_weak(s)
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

/// A new session id `YYYYMMDD-HHMMSS-xxxx` (UTC), the suffix from the clock's nanoseconds and the
/// process id so two sessions started in the same second differ.
pub fn new_session_id() -> String {
    let now = SystemTime::now();
    let stamp = humantime::format_rfc3339_seconds(now).to_string();
    // "2026-11-30T00:59:25Z" → "20261130-005925"
    let digits: String = stamp.chars().filter(char::is_ascii_digit).collect();
    let (date, time) = digits.split_at(digits.len().min(8));
    let nanos = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mix = (nanos ^ std::process::id().rotate_left(16)).wrapping_mul(2_654_435_761);
    format!("{date}-{time}-{:04x}", mix >> 16 & 0xffff)
}
