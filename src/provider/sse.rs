//! Server-sent events: a push parser following the WHATWG HTML "Server-sent events" rules
//! (§9.2.6, "Interpreting an event stream").
//!
//! Bytes are split into lines at LF, CRLF or CR; a line is decoded as UTF-8 only once it is
//! complete, so a character or a CRLF split across reads gives the same events as one read.
//! Memory is bounded: a line or an event's data longer than the limit is an error, not growth.

use super::{ErrorKind, ProviderError};

/// Default cap on one line and on one event's joined data: 16 MiB.
pub const DEFAULT_LIMIT: usize = 16 * 1024 * 1024;

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or None when the event had none (the WHATWG default type `message`).
    pub event: Option<String>,
    /// The `data:` lines joined by `\n` (no trailing newline). May be empty when the event had
    /// an empty `data:` line; an event with no data line at all is never dispatched.
    pub data: String,
}

/// Incremental SSE parser: feed it reads with [`SseParser::push`], then call
/// [`SseParser::finish`] at end of stream.
#[derive(Debug)]
pub struct SseParser {
    limit: usize,
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF starting the next chunk belongs to that CRLF.
    after_cr: bool,
    /// No line completed yet: the first line may start with a UTF-8 BOM, which is dropped.
    first_line: bool,
    event: String,
    data: String,
    has_data: bool,
    /// The last byte seen ended a line (so a pending event is made of complete lines only).
    at_line_start: bool,
    /// The last `id:` field seen (the stream's last event id).
    last_id: Option<String>,
    /// The last `retry:` field seen, in milliseconds.
    retry_ms: Option<u64>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default 16 MiB limit ([`DEFAULT_LIMIT`]).
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_LIMIT)
    }

    /// A parser whose line and event-data cap is `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            limit,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            event: String::new(),
            data: String::new(),
            has_data: false,
            at_line_start: true,
            last_id: None,
            retry_ms: None,
        }
    }

    /// The stream's last event id (its last `id:` field), for a reconnection's `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the stream asked for (its last `retry:` field), in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Feeds the next read of the byte stream, appending every event it completes to `out`.
    ///
    /// Errors: [`ErrorKind::BadResponse`] when a line or an event's data exceeds the limit. The
    /// parser should not be used after an error.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.extend_line(rest)?;
                    self.at_line_start = false;
                    break;
                }
                Some(i) => {
                    self.extend_line(&rest[..i])?;
                    let was_cr = rest[i] == b'\r';
                    rest = &rest[i + 1..];
                    if was_cr {
                        if rest.is_empty() {
                            self.after_cr = true;
                        } else if rest[0] == b'\n' {
                            rest = &rest[1..];
                        }
                    }
                    self.end_line(out)?;
                    self.at_line_start = true;
                }
            }
        }
        Ok(())
    }

    /// Ends the stream. WHATWG discards an event whose blank line never came; this parser still
    /// dispatches it when all its lines were complete, because some servers close the connection
    /// right after the last `data:` line. A final line without a line ending is discarded (it may
    /// be cut short).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if self.at_line_start {
            self.dispatch(out);
        }
        self.line.clear();
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), ProviderError> {
        if self.line.len() + bytes.len() > self.limit {
            return Err(too_long("line", self.limit));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let mut line = std::mem::take(&mut self.line);
        if self.first_line {
            self.first_line = false;
            if line.starts_with(b"\xEF\xBB\xBF") {
                line.drain(..3);
            }
        }
        let result = self.process_line(&line, out);
        // Keep the allocation for the next line.
        line.clear();
        self.line = line;
        result
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                self.event = String::from_utf8_lossy(value).into_owned();
            }
            b"data" => {
                let value = String::from_utf8_lossy(value);
                if self.data.len() + value.len() + 1 > self.limit {
                    return Err(too_long("event", self.limit));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            // The last event id and reconnection time (WHATWG: an id holding NUL is ignored; a
            // retry that is not all digits is ignored): a model stream never resumes, an MCP
            // stream may (SEP-1699).
            b"id" if !value.contains(&0) => {
                self.last_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry_ms = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event: if event.is_empty() { None } else { Some(event) },
            data: std::mem::take(&mut self.data),
        });
    }
}

fn too_long(what: &str, limit: usize) -> ProviderError {
    ProviderError::new(
        ErrorKind::BadResponse,
        format!("SSE {what} longer than {limit} bytes: the server is not sending a model stream"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out).unwrap();
        }
        p.finish(&mut out);
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn c09_comments_pings_and_spacing() {
        let body = b":\n\n: PROCESSING\n\nevent: ping\ndata: {}\n\ndata:{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
        let events = parse_all(&[body]);
        assert_eq!(
            events,
            vec![
                ev(Some("ping"), "{}"),
                ev(None, r#"{"choices":[{"delta":{"content":"hi"}}]}"#),
                ev(None, "[DONE]"),
            ]
        );
    }

    #[test]
    fn line_endings_and_fields() {
        let body = b"id: 7\r\nretry: 10\rfoo: bar\nevent:x\ndata\ndata:  two spaces\r\n\r\nevent: lost\n\ndata: a\n\n";
        assert_eq!(
            parse_all(&[body]),
            vec![ev(Some("x"), "\n two spaces"), ev(None, "a")]
        );
    }

    #[test]
    fn crlf_split_across_reads_is_one_line_ending() {
        // If the LF were taken as a second line ending, the empty line would dispatch early.
        let events = parse_all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(events, vec![ev(None, "a\nb")]);
    }

    #[test]
    fn utf8_split_across_reads() {
        let body = "data: héllo → ✓\n\n".as_bytes();
        for i in 0..body.len() {
            assert_eq!(
                parse_all(&[&body[..i], &body[i..]]),
                vec![ev(None, "héllo → ✓")]
            );
        }
    }

    #[test]
    fn bom_is_dropped_even_when_split() {
        let body = b"\xEF\xBB\xBFdata: x\n\n";
        assert_eq!(parse_all(&[&body[..1], &body[1..]]), vec![ev(None, "x")]);
    }

    #[test]
    fn finish_dispatches_complete_lines_but_not_a_cut_line() {
        assert_eq!(parse_all(&[b"data: [DONE]\n"]), vec![ev(None, "[DONE]")]);
        assert_eq!(
            parse_all(&[b"data: x\n\ndata: {\"cho"]),
            vec![ev(None, "x")]
        );
    }

    #[test]
    fn over_limit_line_is_an_error() {
        let mut p = SseParser::with_limit(16);
        let mut out = Vec::new();
        p.push(b"data: 0123456789", &mut out).unwrap();
        let e = p.push(b"abc", &mut out).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadResponse);
    }

    #[test]
    fn over_limit_event_is_an_error() {
        let mut p = SseParser::with_limit(16);
        let mut out = Vec::new();
        let e = p
            .push(b"data: 01234567\ndata: 01234567\n", &mut out)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadResponse);
    }

    fn arb_stream() -> impl Strategy<Value = Vec<u8>> {
        let line_end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
        let value = "[a-z é✓:{}\" ]{0,12}";
        let line = prop_oneof![
            (value, line_end.clone()).prop_map(|(v, e)| format!("data: {v}{e}")),
            (value, line_end.clone()).prop_map(|(v, e)| format!("data:{v}{e}")),
            ("[a-z_]{0,6}", line_end.clone()).prop_map(|(v, e)| format!("event: {v}{e}")),
            (value, line_end.clone()).prop_map(|(v, e)| format!(":{v}{e}")),
            (value, line_end.clone()).prop_map(|(v, e)| format!("id: {v}{e}")),
            line_end.clone().prop_map(|e| e.to_string()),
        ];
        proptest::collection::vec(line, 0..40).prop_map(|lines| lines.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_events(
            stream in arb_stream(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let whole = parse_all(&[&stream]);
            let mut offsets: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            offsets.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut start = 0;
            for o in offsets {
                chunks.push(&stream[start..o]);
                start = o;
            }
            chunks.push(&stream[start..]);
            prop_assert_eq!(parse_all(&chunks), whole.clone());
            // One byte at a time is the harshest split.
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(parse_all(&bytes), whole);
        }
    }
}
