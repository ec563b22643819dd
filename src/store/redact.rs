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

/// Registers a secret to redact from now on, with its encoded forms: hex (both cases) and the
/// base64 of it at each of the three byte alignments it can have inside a longer encoded text
/// (standard and URL-safe alphabets), so `base64 /proc/…` or `xxd -p` cannot carry it past
/// redaction. Values shorter than 8 bytes are ignored: they are not real keys, and redacting them
/// would mangle ordinary text; encoded forms shorter than 16 characters are not kept either.
pub fn register(secret: &str) {
    let s = secret.trim();
    if s.len() < 8 {
        return;
    }
    let mut forms = vec![s.to_string()];
    forms.extend(
        encoded_forms(s.as_bytes())
            .into_iter()
            .filter(|f| f.len() >= 16),
    );
    if let Ok(mut v) = SECRETS.write() {
        for f in forms {
            if !v.contains(&f) {
                v.push(f);
            }
        }
    }
}

/// Hex and base64 forms of `secret` that appear in any encoding of a text containing it.
fn encoded_forms(secret: &[u8]) -> Vec<String> {
    let hex_lower: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let hex_upper = hex_lower.to_uppercase();
    let mut out = vec![hex_lower, hex_upper];
    for pad in 0..3usize {
        // The secret preceded by `pad` bytes: the characters that depend only on the secret's
        // bytes are the same whatever those bytes were.
        let mut data = vec![0u8; pad];
        data.extend_from_slice(secret);
        let enc = base64(&data, STANDARD);
        // Skip the characters touched by the padding bytes, and the last (possibly partial) group.
        let skip = (pad * 8).div_ceil(6);
        let full = (data.len() / 3) * 4;
        if full > skip {
            let core = &enc[skip..full];
            out.push(core.to_string());
            out.push(core.replace('+', "-").replace('/', "_"));
        }
    }
    out
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 without padding.
fn base64(data: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// Every registered secret and encoded form (for wiping them from `/proc`).
pub fn registered() -> Vec<String> {
    SECRETS.read().map(|v| v.clone()).unwrap_or_default()
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

/// What a model may read of `text` (a tool result): every secret and encoded form redacted, and
/// when a secret still shows once whitespace is taken out (base64 wrapped at 76 columns, a key
/// printed one character a line), the whole text is withheld with a note saying why.
pub fn for_model(text: &str) -> Cow<'_, str> {
    let out = redact(text);
    let Ok(secrets) = SECRETS.read() else {
        return out;
    };
    if secrets.is_empty() {
        return out;
    }
    let squeezed: String = out.chars().filter(|c| !c.is_whitespace()).collect();
    if secrets.iter().any(|s| squeezed.contains(s.as_str())) {
        return Cow::Owned(format!(
            "[output withheld: it contained a configured API key or credential ({} bytes)]",
            text.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_forms_of_a_key_are_redacted_at_every_alignment() {
        let key = "sk-encoded-0123456789abcdefXYZ";
        register(key);
        // What `base64` and `xxd -p` print for texts holding the key at three offsets.
        for prefix in ["", "K=", "KEY="] {
            let text = format!("{prefix}{key}\n");
            let b64 = base64(text.as_bytes(), STANDARD);
            assert!(redact(&b64).contains(REDACTED), "{prefix}: {b64}");
            let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
            assert!(redact(&hex).contains(REDACTED), "{prefix}: {hex}");
        }
        assert_eq!(base64(b"hello", STANDARD), "aGVsbG8");
        // Wrapped base64 (the `base64` tool's default) is withheld whole.
        let b64 = base64(format!("KEY={key}").as_bytes(), STANDARD);
        let wrapped: String = b64
            .chars()
            .enumerate()
            .flat_map(|(i, c)| (i > 0 && i % 7 == 0).then_some('\n').into_iter().chain([c]))
            .collect();
        assert!(
            for_model(&wrapped).starts_with("[output withheld"),
            "{wrapped}"
        );
        assert_eq!(for_model("nothing here"), "nothing here");
    }

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
