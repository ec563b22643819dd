//! Pure renderers of state: the work-state block (model-facing), the sidebar (person-facing), and
//! the terminal-safe filter every text shown to a person goes through.

pub mod sidebar;
pub mod work_state;

/// `text` made safe to print on a terminal: escape characters become `^[` and other control
/// characters (but newline and tab) are dropped, so model output or a command cannot move the
/// cursor, change the title or hide text.
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{9b}';
    if !text.contains(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\u{1b}' {
            out.push_str("^[");
        } else if !bad(c) {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}
