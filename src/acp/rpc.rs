//! JSON-RPC 2.0 over newline-delimited JSON (ACP v1, transports: stdio; each message one line,
//! no embedded newlines). Three parts, none of them knowing what the methods mean:
//!
//! - [`parse`]: one line → an [`Incoming`] request, notification or response, or the error
//!   object to answer it with (`-32700` not JSON, `-32600` not a valid request object).
//! - [`spawn_reader`]: a thread reading lines from stdin with a size cap ([`MAX_LINE_BYTES`]):
//!   a longer line is skipped up to its newline and reported as [`Incoming::TooLong`], so one
//!   bad message never ends the connection.
//! - [`Wire`]: the one writer (a mutex around the output; every message is one whole line,
//!   flushed) and the agent's own requests to the client (ids, pending answers, matching).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use serde_json::{Value, json};

/// Invalid JSON was received (JSON-RPC 2.0 §5.1).
pub const PARSE_ERROR: i32 = -32700;
/// The JSON sent is not a valid request object, or not valid now (JSON-RPC 2.0 §5.1).
pub const INVALID_REQUEST: i32 = -32600;
/// The method does not exist or is not offered (JSON-RPC 2.0 §5.1).
pub const METHOD_NOT_FOUND: i32 = -32601;
/// Invalid method parameters (JSON-RPC 2.0 §5.1).
pub const INVALID_PARAMS: i32 = -32602;
/// Internal error (JSON-RPC 2.0 §5.1).
pub const INTERNAL_ERROR: i32 = -32603;
/// Authentication is required (ACP v1 schema, `ErrorCode`: "Authentication required").
pub const AUTH_REQUIRED: i32 = -32000;
/// The named session does not exist (ACP v1 schema, `ErrorCode`: "Resource not found").
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// Longest incoming line accepted, in bytes (8 MiB): room for a 1 MiB prompt with embedded
/// resources after JSON escaping. A longer line is answered with `-32600` and skipped.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// One of the codes above.
    pub code: i32,
    /// One sentence saying what was wrong.
    pub message: String,
    /// Details (e.g. the serde message for bad params).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
    /// `-32602` with `message`.
    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
    /// `-32600` with `message`.
    pub fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_REQUEST, message)
    }
    /// `-32603` with `message`.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }
    /// `-32002` naming the session that is not there.
    pub fn no_session(id: &str) -> RpcError {
        RpcError::new(RESOURCE_NOT_FOUND, format!("no session {id:?}"))
    }
}

/// One message read from the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answer it exactly once with the same `id` (a number, a string or null).
    Request {
        /// The request id, as sent.
        id: Value,
        /// The method name.
        method: String,
        /// `params` (Null when absent).
        params: Value,
    },
    /// A notification: never answered.
    Notification {
        /// The method name.
        method: String,
        /// `params` (Null when absent).
        params: Value,
    },
    /// An answer to one of the agent's own requests.
    Response {
        /// The id the agent used.
        id: Value,
        /// `result`, or the client's `error`.
        outcome: Result<Value, RpcError>,
    },
    /// A line that cannot be handled: answer with this error (`id` null when it could not be
    /// read).
    Invalid {
        /// The id, when the message had a usable one.
        id: Value,
        /// What to answer.
        error: RpcError,
    },
    /// A line longer than [`MAX_LINE_BYTES`] (its length so far), skipped.
    TooLong(usize),
    /// stdin was closed (or failed).
    Eof,
}

/// Reads one line (without its newline) into an [`Incoming`]. Never fails: what is not a
/// request, notification or response becomes [`Incoming::Invalid`] with the JSON-RPC code to
/// answer with.
pub fn parse(line: &[u8]) -> Incoming {
    let invalid = |id: Value, msg: &str| Incoming::Invalid {
        id,
        error: RpcError::invalid(msg),
    };
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: recover_request_id(line),
                error: RpcError {
                    code: PARSE_ERROR,
                    message: "parse error: the line is not JSON".into(),
                    data: Some(json!(e.to_string())),
                },
            };
        }
    };
    let Value::Object(mut m) = v else {
        return invalid(
            Value::Null,
            "not a JSON-RPC message: expected one object per line (batches are not used by ACP)",
        );
    };
    // An id that is not a string, a number or null cannot be echoed back.
    let id = match m.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id),
        Some(_) => return invalid(Value::Null, "the id must be a string, a number or null"),
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.unwrap_or(Value::Null), "\"jsonrpc\" must be \"2.0\"");
    }
    match m.remove("method") {
        Some(Value::String(method)) => {
            let params = m.remove("params").unwrap_or(Value::Null);
            if !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null) {
                return invalid(
                    id.unwrap_or(Value::Null),
                    "params must be an object or an array",
                );
            }
            match id {
                Some(id) => Incoming::Request { id, method, params },
                None => Incoming::Notification { method, params },
            }
        }
        Some(_) => invalid(id.unwrap_or(Value::Null), "the method must be a string"),
        None => {
            let Some(id) = id else {
                return invalid(Value::Null, "neither a request nor a response");
            };
            match (m.remove("result"), m.remove("error")) {
                (Some(r), None) => Incoming::Response { id, outcome: Ok(r) },
                (None, Some(e)) => {
                    let code = e["code"].as_i64().unwrap_or(INTERNAL_ERROR as i64);
                    let error = RpcError {
                        code: i32::try_from(code).unwrap_or(INTERNAL_ERROR),
                        message: e["message"].as_str().unwrap_or("error").to_string(),
                        data: e.get("data").cloned(),
                    };
                    Incoming::Response {
                        id,
                        outcome: Err(error),
                    }
                }
                _ => invalid(id, "a response holds exactly one of result and error"),
            }
        }
    }
}

/// The id of a request whose line is not JSON only because of its bytes (invalid UTF-8 inside a
/// string): read again with the bad bytes replaced, a request (an object with a string
/// `method`) gives back its id, so the client's request is answered and not left waiting.
/// JSON-RPC 2.0 §5: a parse error's id is null only when the id could not be detected. Null
/// otherwise (a response of the client's, a notification, or a line that is not JSON at all).
fn recover_request_id(line: &[u8]) -> Value {
    if std::str::from_utf8(line).is_ok() {
        return Value::Null;
    }
    let text = String::from_utf8_lossy(line);
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) if m.get("method").is_some_and(Value::is_string) => {
            match m.get("id") {
                Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                _ => Value::Null,
            }
        }
        _ => Value::Null,
    }
}

/// Starts the reader thread: each line of `input` becomes one [`Incoming`] on the returned
/// channel (blank lines are skipped, a trailing `\r` is dropped), then [`Incoming::Eof`].
/// A line over `cap` bytes is skipped to its newline without being held in memory.
pub fn spawn_reader(input: impl BufRead + Send + 'static, cap: usize) -> Receiver<Incoming> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("acp-reader".into())
        .spawn(move || read_lines(input, cap, &tx))
        .map_err(|e| crate::errln!("tern acp: could not start the reader thread: {e}"))
        .ok();
    rx
}

fn read_lines(mut input: impl BufRead, cap: usize, tx: &Sender<Incoming>) {
    let mut line: Vec<u8> = Vec::new();
    // Bytes of the current line seen so far, also those dropped past the cap.
    let mut seen = 0usize;
    loop {
        let (done, used) = match input.fill_buf() {
            Ok([]) => {
                // EOF: a last line without newline still counts.
                if seen > cap {
                    let _ = tx.send(Incoming::TooLong(seen));
                } else if !line.is_empty() {
                    let _ = tx.send(finish(&line));
                }
                let _ = tx.send(Incoming::Eof);
                return;
            }
            Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    if seen + i <= cap {
                        line.extend_from_slice(&buf[..i]);
                    }
                    seen += i;
                    (true, i + 1)
                }
                None => {
                    if seen + buf.len() <= cap {
                        line.extend_from_slice(buf);
                    } else {
                        line.clear();
                    }
                    seen += buf.len();
                    (false, buf.len())
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                crate::errln!("tern acp: reading stdin failed: {e}");
                let _ = tx.send(Incoming::Eof);
                return;
            }
        };
        input.consume(used);
        if done {
            let msg = if seen > cap {
                Some(Incoming::TooLong(seen))
            } else if line.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(finish(&line))
            };
            line.clear();
            seen = 0;
            if let Some(m) = msg
                && tx.send(m).is_err()
            {
                return;
            }
        }
    }
}

fn finish(line: &[u8]) -> Incoming {
    parse(line.strip_suffix(b"\r").unwrap_or(line))
}

/// The answer to one of the agent's requests, as delivered to the waiting thread.
pub type Answer = Result<Value, RpcError>;

/// The only writer of protocol output, shared by every thread that sends (the dispatcher, the
/// session workers). Each message is serialized first and written as one whole line under the
/// lock, then flushed, so lines never interleave. A failed write (the client went away) is
/// remembered and later writes are dropped; nothing panics.
pub struct Wire {
    out: Mutex<Box<dyn Write + Send>>,
    broken: AtomicBool,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Sender<Answer>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked while holding the lock left whole lines only (each write is one
    // line): the data is still good to use.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wire {
    /// A wire writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Wire {
        Wire {
            out: Mutex::new(out),
            broken: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Writes `msg` as one line and flushes. Returns false when the output is gone.
    pub fn send(&self, msg: &Value) -> bool {
        if self.broken.load(Ordering::SeqCst) {
            return false;
        }
        let mut line = match serde_json::to_vec(msg) {
            Ok(l) => l,
            Err(e) => {
                crate::errln!("tern acp: could not serialize a message: {e}");
                return false;
            }
        };
        line.push(b'\n');
        let mut out = lock(&self.out);
        let ok = out.write_all(&line).and_then(|()| out.flush()).is_ok();
        if !ok {
            self.broken.store(true, Ordering::SeqCst);
        }
        ok
    }

    /// Answers request `id` with `result`.
    pub fn respond(&self, id: &Value, result: impl Serialize) -> bool {
        match serde_json::to_value(result) {
            Ok(r) => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": r})),
            Err(e) => self.respond_error(id, &RpcError::internal(e.to_string())),
        }
    }

    /// Answers request `id` with `error`.
    pub fn respond_error(&self, id: &Value, error: &RpcError) -> bool {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: impl Serialize) -> bool {
        match serde_json::to_value(params) {
            Ok(p) => self.send(&json!({"jsonrpc": "2.0", "method": method, "params": p})),
            Err(e) => {
                crate::errln!("tern acp: could not serialize {method}: {e}");
                false
            }
        }
    }

    /// Sends a request to the client; its answer arrives on the returned channel once the
    /// dispatcher hands it to [`Wire::resolve`]. The id is a fresh integer. When the output is
    /// gone the channel is closed at once (its sender dropped).
    pub fn request(&self, method: &str, params: impl Serialize) -> (u64, Receiver<Answer>) {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = channel();
        let params = match serde_json::to_value(params) {
            Ok(p) => p,
            Err(e) => {
                crate::errln!("tern acp: could not serialize {method}: {e}");
                return (id, rx);
            }
        };
        lock(&self.pending).insert(id, tx);
        if !self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})) {
            lock(&self.pending).remove(&id);
        }
        (id, rx)
    }

    /// Delivers the client's answer to the request with `id`; false when no request waits for
    /// it (an unknown id, or one given up with [`Wire::forget`]).
    pub fn resolve(&self, id: &Value, outcome: Answer) -> bool {
        let Some(n) = id.as_u64() else {
            return false;
        };
        match lock(&self.pending).remove(&n) {
            Some(tx) => tx.send(outcome).is_ok(),
            None => false,
        }
    }

    /// Stops waiting for the answer to request `id` (a late answer is then dropped).
    pub fn forget(&self, id: u64) {
        lock(&self.pending).remove(&id);
    }

    /// Closes every pending request (their channels see a disconnect), e.g. when stdin closed.
    pub fn abandon_all(&self) {
        lock(&self.pending).clear();
    }
}

/// The one answer a request is owed, as a value: whoever holds it answers, exactly once (it is
/// consumed), and never sees the JSON-RPC id. The dispatcher keeps a [`Ticket`] to find the
/// request again (`$/cancel_request`) while it is open.
pub struct Responder {
    wire: std::sync::Arc<Wire>,
    id: Value,
    open: std::sync::Arc<AtomicBool>,
}

/// The dispatcher's view of an open [`Responder`]: its id and whether it is still unanswered.
#[derive(Clone)]
pub struct Ticket {
    id: Value,
    open: std::sync::Arc<AtomicBool>,
}

impl Ticket {
    /// True while the request with `id` is unanswered.
    pub fn is_open_for(&self, id: &Value) -> bool {
        self.open.load(Ordering::SeqCst) && self.id == *id
    }
    /// True while unanswered.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
}

impl Responder {
    /// The answer owed to request `id`, written through `wire`.
    pub fn new(wire: std::sync::Arc<Wire>, id: Value) -> Responder {
        Responder {
            wire,
            id,
            open: std::sync::Arc::new(AtomicBool::new(true)),
        }
    }

    /// A ticket for the dispatcher.
    pub fn ticket(&self) -> Ticket {
        Ticket {
            id: self.id.clone(),
            open: self.open.clone(),
        }
    }

    /// Answers with `result`.
    pub fn respond(self, result: impl Serialize) {
        self.open.store(false, Ordering::SeqCst);
        self.wire.respond(&self.id, result);
    }

    /// Answers with `error`.
    pub fn fail(self, error: &RpcError) {
        self.open.store(false, Ordering::SeqCst);
        self.wire.respond_error(&self.id, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn err_code(i: &Incoming) -> Option<(i32, Value)> {
        match i {
            Incoming::Invalid { id, error } => Some((error.code, id.clone())),
            _ => None,
        }
    }

    #[test]
    fn parses_the_four_kinds() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":3,"method":"m","params":{"a":1}}"#),
            Incoming::Request {
                id: json!(3),
                method: "m".into(),
                params: json!({"a": 1})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"n"}"#),
            Incoming::Notification {
                method: "n".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"x","result":null}"#),
            Incoming::Response {
                id: json!("x"),
                outcome: Ok(Value::Null)
            }
        );
        match parse(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#) {
            Incoming::Response {
                outcome: Err(e), ..
            } => assert_eq!(e.code, -32601),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_with_bad_bytes_in_a_string_is_answered_with_its_id() {
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"session/prompt\",\"params\":{\"text\":\"a\xff\"}}";
        assert_eq!(err_code(&parse(line)), Some((PARSE_ERROR, json!(8))));
        // A response of the client's is not answered with an error under its id.
        let resp = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"\xff\"}";
        assert_eq!(err_code(&parse(resp)), Some((PARSE_ERROR, Value::Null)));
    }

    #[test]
    fn bad_lines_get_the_standard_codes() {
        assert_eq!(err_code(&parse(b"{nope")), Some((PARSE_ERROR, Value::Null)));
        assert_eq!(
            err_code(&parse(b"\xff\xfe")),
            Some((PARSE_ERROR, Value::Null))
        );
        assert_eq!(
            err_code(&parse(b"[1,2]")),
            Some((INVALID_REQUEST, Value::Null))
        );
        assert_eq!(
            err_code(&parse(br#"{"id":1,"method":"m"}"#)),
            Some((INVALID_REQUEST, json!(1)))
        );
        assert_eq!(
            err_code(&parse(br#"{"jsonrpc":"2.0","id":{},"method":"m"}"#)),
            Some((INVALID_REQUEST, Value::Null))
        );
        assert_eq!(
            err_code(&parse(br#"{"jsonrpc":"2.0","id":2,"method":5}"#)),
            Some((INVALID_REQUEST, json!(2)))
        );
        assert_eq!(
            err_code(&parse(
                br#"{"jsonrpc":"2.0","id":2,"method":"m","params":7}"#
            )),
            Some((INVALID_REQUEST, json!(2)))
        );
        assert_eq!(
            err_code(&parse(br#"{"jsonrpc":"2.0","id":2,"result":1,"error":{}}"#)),
            Some((INVALID_REQUEST, json!(2)))
        );
    }

    #[test]
    fn reader_caps_lines_and_keeps_going() {
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\r\n\n   \n");
        input.extend(std::iter::repeat_n(b'x', 100));
        input.push(b'\n');
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"b\"}");
        // A small BufReader capacity, so the long line spans several fills.
        let reader = std::io::BufReader::with_capacity(7, Cursor::new(input));
        let rx = spawn_reader(reader, 40);
        let got: Vec<Incoming> = rx.iter().collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(matches!(&got[0], Incoming::Notification { method, .. } if method == "a"));
        assert_eq!(got[1], Incoming::TooLong(100));
        assert!(matches!(&got[2], Incoming::Notification { method, .. } if method == "b"));
        assert_eq!(got[3], Incoming::Eof);
    }

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn requests_are_matched_to_their_answers() {
        let buf = Buf::default();
        let wire = Wire::new(Box::new(buf.clone()));
        let (id, rx) = wire.request("session/request_permission", json!({"x": 1}));
        let (id2, rx2) = wire.request("other", json!({}));
        assert_ne!(id, id2);
        assert!(!wire.resolve(&json!(999), Ok(Value::Null)));
        assert!(wire.resolve(&json!(id2), Ok(json!(2))));
        assert!(wire.resolve(&json!(id), Ok(json!(1))));
        assert_eq!(rx.recv().unwrap(), Ok(json!(1)));
        assert_eq!(rx2.recv().unwrap(), Ok(json!(2)));
        // Answered once: a second answer is dropped.
        assert!(!wire.resolve(&json!(id), Ok(json!(1))));
        let (id3, rx3) = wire.request("late", json!({}));
        wire.forget(id3);
        assert!(!wire.resolve(&json!(id3), Ok(Value::Null)));
        assert!(rx3.recv().is_err());
        let text = String::from_utf8(lock(&buf.0).clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["method"], "session/request_permission");
        assert_eq!(lines[0]["jsonrpc"], "2.0");
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_gone_client_closes_requests_at_once() {
        let wire = Wire::new(Box::new(Broken));
        assert!(!wire.notify("session/update", json!({})));
        let (_, rx) = wire.request("session/request_permission", json!({}));
        assert!(rx.recv().is_err());
    }
}
