//! Runaway generation: a small model that repeats itself (the same call 125 times in one
//! answer, one phrase for thousands of tokens) is stopped mid-stream instead of running to the
//! output cap. A stream counts as running away when its end is one unit of 8 to 512 bytes
//! repeated over at least [`RUN_BYTES`] bytes (and 4 times or more). Checked every
//! [`CHECK_EVERY`] bytes of growth, so the cost stays small.

/// Bytes of the same repeated unit at the end of a stream that count as a runaway.
pub const RUN_BYTES: usize = 1500;
/// Bytes of growth between checks.
pub const CHECK_EVERY: usize = 512;

/// Watches one growing text (an answer's text, one call's arguments).
#[derive(Debug, Default, Clone)]
pub struct Watch {
    checked: usize,
}

impl Watch {
    /// True when `s` (the whole text so far) ends in a runaway repetition.
    pub fn runaway(&mut self, s: &str) -> bool {
        if s.len() < RUN_BYTES || s.len() < self.checked + CHECK_EVERY {
            return false;
        }
        self.checked = s.len();
        repeats_at_end(s.as_bytes())
    }
}

/// Whether `b` ends in one unit of 8..=512 bytes repeated over [`RUN_BYTES`] bytes, 4 times or
/// more.
pub fn repeats_at_end(b: &[u8]) -> bool {
    let n = b.len();
    for p in 8..=512usize.min(n / 4) {
        let unit = &b[n - p..];
        let mut k = 1;
        while (k + 1) * p <= n && &b[n - (k + 1) * p..n - k * p] == unit {
            k += 1;
            if k >= 4 && k * p >= RUN_BYTES {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_call_is_a_runaway_and_prose_is_not() {
        let call = "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```\n";
        assert!(repeats_at_end(call.repeat(40).as_bytes()));
        assert!(repeats_at_end("Buy milk. ".repeat(300).as_bytes()));
        let prose: String = (0..400)
            .map(|i| format!("line {i} of a real answer\n"))
            .collect();
        assert!(!repeats_at_end(prose.as_bytes()));
        // A few repeated rows in a table are no runaway.
        let table = format!("{}{}", prose, "| a | b | c |\n".repeat(6));
        assert!(!repeats_at_end(table.as_bytes()));
        let mut w = Watch::default();
        assert!(!w.runaway("short"));
        assert!(w.runaway(&"again! ".repeat(400)));
    }
}
