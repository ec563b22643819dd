//! Redaction of configured secrets (API keys) from everything tern writes: state files, events,
//! logs and error messages. A key is registered once at start-up; every writer calls [`redact`].
//!
//! The list is process-wide and append-only, on purpose: a secret known to any runtime of the
//! process (a parent, a sub-agent with its own route) must be redacted from every file any of
//! them writes, and nothing is ever taken off it.

use std::borrow::Cow;
use std::sync::RwLock;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// The text that replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Registers a secret to redact from now on. Values shorter than 8 bytes are ignored: they are not
/// real keys, and redacting them would mangle ordinary text.
pub fn register(secret: &str) {
    let s = secret.trim();
    if s.len() < 8 {
        return;
    }
    if let Ok(mut v) = SECRETS.write()
        && !v.iter().any(|k| k == s)
    {
        v.push(s.to_string());
    }
}

/// Returns `text` with every registered secret replaced by [`REDACTED`]; borrows when nothing
/// matched (the common case costs one substring search per secret).
pub fn redact(text: &str) -> Cow<'_, str> {
    let Ok(secrets) = SECRETS.read() else {
        return Cow::Borrowed(text);
    };
    let mut out = Cow::Borrowed(text);
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), REDACTED));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_registered_keys_only() {
        register("sk-test-1234567890");
        register("short");
        assert_eq!(
            redact("key=sk-test-1234567890 short"),
            "key=[REDACTED] short"
        );
    }
}
