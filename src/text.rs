//! Text helpers shared by every room: cutting on a character boundary and the one rule for a
//! session's title. A leaf module (no `crate::` imports).

/// Characters kept of a prompt or task as a session's title (`meta.json` `title`, shown by
/// `tern sessions` and ACP `session/list`).
pub const TITLE_CHARS: usize = 80;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A session's title from the prompt or task that started it: trimmed, at most [`TITLE_CHARS`]
/// characters (never cut inside one).
pub fn title(prompt: &str) -> String {
    prompt.trim().chars().take(TITLE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_on_char_boundary() {
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("", 0), "");
    }

    #[test]
    fn a_title_is_trimmed_and_cut_by_characters() {
        assert_eq!(title("  fix the test \n"), "fix the test");
        let long = "é".repeat(100);
        assert_eq!(title(&long).chars().count(), TITLE_CHARS);
    }
}
