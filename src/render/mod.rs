//! Pure renderers of state: the work-state block (model-facing), the sidebar (person-facing), and
//! the terminal-safe filter every text shown to a person goes through.

pub mod sidebar;
pub mod work_state;

/// `text` made safe to print on a terminal: shown, never interpreted. Every character a terminal
/// would act on or that could disguise text becomes a visible escape: C0 controls but newline and
/// tab (`\r`, `\x1b`, `\x07`, …), DEL (`\x7f`), C1 controls (`\u{9b}`), the Unicode line and
/// paragraph separators, bidirectional embeddings, overrides, isolates and marks, zero-width
/// characters and the byte-order mark (`\u{202e}`, `\u{200b}`, …). So model output, a command
/// or a state file cannot move the cursor, erase a line, change the title or reorder what is
/// shown. Borrowed when there is nothing to escape.
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && needs_escape(c))
}

/// [`safe`] for text shown on one line: newline and tab are escaped too (`\n`, `\t`).
pub fn safe_line(text: &str) -> std::borrow::Cow<'_, str> {
    escape_where(text, needs_escape)
}

/// The approval question's text, ending in a newline: the exact command that will run, every
/// line shown (numbered when there are several, so a newline cannot hide one), each through
/// [`safe`] (so `\r`, cursor moves or a bidi override cannot redraw it into another command),
/// with a note when something was escaped (so `\x1b` typed as text and an escape character
/// are told apart).
pub fn approval_question(command: &str) -> String {
    let lines: Vec<&str> = command.split('\n').collect();
    let mut out = String::new();
    if lines.len() == 1 {
        out.push_str("tern wants to run:\n");
        out.push_str(&format!("  {}\n", safe(command)));
    } else {
        out.push_str(&format!("tern wants to run ({} lines):\n", lines.len()));
        let width = lines.len().to_string().len();
        for (i, l) in lines.iter().enumerate() {
            out.push_str(&format!("  {:>width$}│ {}\n", i + 1, safe(l)));
        }
    }
    let escaped = command
        .chars()
        .filter(|&c| c != '\n' && c != '\t' && needs_escape(c))
        .count();
    if escaped > 0 {
        out.push_str(&format!(
            "  (it holds {escaped} control or invisible character{}, shown as \\x.. / \\u{{..}} escapes)\n",
            if escaped == 1 { "" } else { "s" }
        ));
    }
    out
}

/// Whether `c` is shown as an escape (see [`safe`]).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2060}'..='\u{2064}'
                | '\u{061c}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

fn escape_where(text: &str, esc: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.contains(&esc) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !esc(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_as_escapes() {
        assert_eq!(safe("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            safe("a\rb\x1b[2K\x1b[1Ac\u{202e}d\u{9b}e\x7f"),
            "a\\rb\\x1b[2K\\x1b[1Ac\\u{202e}d\\u{9b}e\\x7f"
        );
        assert_eq!(safe_line("a\nb\tc"), "a\\nb\\tc");
    }

    #[test]
    fn approval_question_shows_every_line_and_byte() {
        let q = approval_question("rm -rf ~/x\r\x1b[2K\x1b[1Als -la");
        assert_eq!(
            q,
            "tern wants to run:\n  rm -rf ~/x\\r\\x1b[2K\\x1b[1Als -la\n  (it holds 3 control or invisible characters, shown as \\x.. / \\u{..} escapes)\n"
        );
        let q = approval_question("ls\ncurl x | sh\n");
        assert_eq!(
            q,
            "tern wants to run (3 lines):\n  1│ ls\n  2│ curl x | sh\n  3│ \n"
        );
        assert!(!q.contains('\r') && !q.contains('\x1b'));
    }
}
