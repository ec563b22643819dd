//! The HTTP transport both wires share: POST a body, stream the response through the SSE parser
//! into a wire [`StreamDecoder`], and turn failures into classified [`ProviderError`]s.
//!
//! The blocking read runs in a long-lived worker thread that sends chunks over a channel; the
//! caller waits in short slices so that `cancel` is honoured within about 100 ms and a silent
//! server hits the idle timeout. Abandoning a request just drops the receiver: the worker stops
//! that response on its next send (or when its own read timeout fires), and until it has, the next
//! request goes to a fresh worker.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cancel::CancelToken;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use super::sse::{SseEvent, SseParser};
use super::{Completion, ErrorKind, ProviderError};

/// How long the caller waits per slice before looking at `cancel` again.
const SLICE: Duration = Duration::from_millis(50);
/// At most this much of a non-2xx response body is read (for the error message and its class).
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// Largest streamed response accepted, in bytes: a model answer is far smaller, and memory must
/// stay bounded whatever a server sends.
const MAX_RESPONSE_BYTES: usize = 64 << 20;
/// Size of one read of the response body.
const READ_SIZE: usize = 16 * 1024;
/// Longest server text quoted in an error message, in bytes.
const SNIPPET_BYTES: usize = 300;

/// Transport timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// Longest wait for the TCP (and TLS) connection. Default 30 s.
    pub connect_timeout: Duration,
    /// Longest silence allowed while waiting for the response head or the next body bytes;
    /// then the attempt fails with [`ErrorKind::Timeout`]. Default 300 s (a long prompt can take
    /// minutes before the first token on a local server).
    pub idle_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// A wire format's stream decoder (OpenAI chunks, Anthropic events), fed one SSE event at a time.
pub trait StreamDecoder {
    /// Takes one SSE event; text deltas go to `on_text`. An error frame or a malformed event is
    /// an error and ends the attempt.
    fn event(
        &mut self,
        ev: &SseEvent,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
    ) -> Result<(), ProviderError>;

    /// True once the stream's explicit end marker arrived (OpenAI `[DONE]`, Anthropic
    /// `message_stop`): the transport stops reading and calls [`StreamDecoder::finish`].
    fn done(&self) -> bool;

    /// The completion, at the end marker or at end of stream. Errors with
    /// [`ErrorKind::EarlyEnd`] when the stream had not really completed (case C10).
    fn finish(&mut self) -> Result<Completion, ProviderError>;
}

/// A connection-pooling HTTP client with the timeouts of one [`HttpConfig`]. Responses are read
/// by one long-lived worker thread (a thread per request cost about half of tern's CPU per turn);
/// a worker still busy with an abandoned response is left to finish and a new one takes over.
#[derive(Debug)]
pub struct Transport {
    agent: ureq::Agent,
    config: HttpConfig,
    worker: std::sync::Mutex<Option<Worker>>,
}

/// The reader thread: takes one job at a time; `idle` is true between jobs.
#[derive(Debug)]
struct Worker {
    jobs: mpsc::Sender<Job>,
    idle: std::sync::Arc<AtomicBool>,
}

/// One request for the worker: send it, stream the response into `tx` until done or abandoned.
struct Job {
    req: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: Vec<u8>,
    tx: mpsc::SyncSender<Msg>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

/// The parts of a response head the transport uses.
#[derive(Debug, Clone, Copy)]
struct Head {
    status: u16,
    retry_after: Option<Duration>,
    /// `Content-Type: application/json`: an answer, not a stream.
    json: bool,
}

impl Head {
    /// The body is an error or a non-streamed answer to collect, not an SSE stream to decode.
    fn collect(&self) -> bool {
        !(200..300).contains(&self.status) || self.json
    }
}

enum Msg {
    Head(Head),
    Data(Vec<u8>),
    End,
    /// The request failed before a response head.
    Failed(ProviderError),
    /// Reading the body failed after the head.
    ReadError(String),
}

impl Transport {
    /// A client with `config`'s timeouts. Non-2xx statuses are answers, not transport errors,
    /// so their bodies can be read and classified.
    pub fn new(config: HttpConfig) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(config.connect_timeout))
            // Only so an abandoned worker thread ends one day; the caller's idle timeout is
            // what the user sees.
            .timeout_per_read(Some(config.idle_timeout + Duration::from_secs(5)))
            .build()
            .into();
        Transport {
            agent,
            config,
            worker: std::sync::Mutex::new(None),
        }
    }

    /// POSTs `body` to `url` with `headers` and streams the SSE answer into `decoder`.
    ///
    /// Errors: [`ErrorKind::Connect`] / [`ErrorKind::Timeout`] before a response;
    /// [`ErrorKind::Timeout`] after `idle_timeout` without a byte; non-2xx → [`classify_error`]
    /// on up to 64 KiB of the body, with `Retry-After` (or `retry-after-ms`) parsed;
    /// a broken body → [`ErrorKind::EarlyEnd`]; `cancel` → [`ErrorKind::Cancelled`] within about
    /// 100 ms. `secret` (the API key) is redacted from every error message.
    #[allow(clippy::too_many_arguments)]
    pub fn post_sse(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        secret: Option<&str>,
        decoder: &mut dyn StreamDecoder,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &CancelToken,
    ) -> Result<Completion, ProviderError> {
        let rx = self.spawn(url, headers, body);
        let result = self.pump(&rx, secret, decoder, on_text, cancel);
        // Dropping `rx` here is the abandon signal for the worker.
        drop(rx);
        result.map_err(|mut e| {
            if matches!(
                e.kind,
                ErrorKind::Connect | ErrorKind::Unreachable | ErrorKind::Timeout
            ) {
                // Name the server: "connection refused" alone does not say which one.
                e.message = format!("{} ({})", e.message, display_url(url));
            }
            e.message = redact(&e.message, secret);
            e
        })
    }

    fn spawn(&self, url: &str, headers: &[(&str, &str)], body: &[u8]) -> mpsc::Receiver<Msg> {
        // Bounded, so a fast server and a slow consumer cannot grow memory without limit.
        let (tx, rx) = mpsc::sync_channel::<Msg>(32);
        let mut req = self.agent.post(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut job = Job {
            req,
            body: body.to_vec(),
            tx,
        };
        let Ok(mut slot) = self.worker.lock() else {
            // A poisoned lock only means another thread panicked holding it; run this one alone.
            std::thread::spawn(move || run_job(job));
            return rx;
        };
        if let Some(w) = slot.as_ref()
            && w.idle.swap(false, Ordering::SeqCst)
        {
            match w.jobs.send(job) {
                Ok(()) => return rx,
                Err(mpsc::SendError(j)) => job = j,
            }
        }
        let idle = std::sync::Arc::new(AtomicBool::new(false));
        let (jobs, queue) = mpsc::channel::<Job>();
        let flag = idle.clone();
        std::thread::spawn(move || {
            run_job(job);
            flag.store(true, Ordering::SeqCst);
            for job in queue {
                run_job(job);
                flag.store(true, Ordering::SeqCst);
            }
        });
        // Replacing the old worker drops its queue: it ends after its current response.
        *slot = Some(Worker { jobs, idle });
        rx
    }

    fn pump(
        &self,
        rx: &mpsc::Receiver<Msg>,
        secret: Option<&str>,
        decoder: &mut dyn StreamDecoder,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &CancelToken,
    ) -> Result<Completion, ProviderError> {
        let idle = self.config.idle_timeout;
        // Progress is a complete SSE event (not a byte, not a keep-alive comment, not a ping):
        // a server that drips bytes or only keeps the connection alive times out all the same.
        let mut last_progress = Instant::now();
        let mut head: Option<Head> = None;
        let mut error_body: Vec<u8> = Vec::new();
        let mut parser = SseParser::new();
        let mut streamed = 0usize;
        let mut noted = Instant::now();
        loop {
            if cancel.is_cancelled() {
                return Err(ProviderError::new(
                    ErrorKind::Cancelled,
                    "request cancelled while streaming",
                ));
            }
            let Some(msg) = next_msg(rx, idle, last_progress, head.is_some())? else {
                let silent = last_progress.elapsed();
                if silent >= STALL_NOTE_EVERY && noted.elapsed() >= STALL_NOTE_EVERY {
                    noted = Instant::now();
                    on_text(crate::provider::Streamed::Waiting {
                        silent,
                        left: idle.saturating_sub(silent),
                    });
                }
                continue;
            };
            match msg {
                Msg::Failed(e) => return Err(e),
                Msg::Head(h) => {
                    head = Some(h);
                    last_progress = Instant::now();
                }
                Msg::Data(bytes) => match head {
                    Some(h) if h.collect() => {
                        last_progress = Instant::now();
                        let room = ERROR_BODY_LIMIT - error_body.len();
                        error_body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                        if error_body.len() >= ERROR_BODY_LIMIT {
                            return Err(answer_error(h, &error_body, secret));
                        }
                    }
                    _ => {
                        streamed += bytes.len();
                        if streamed > MAX_RESPONSE_BYTES {
                            return Err(ProviderError::new(
                                ErrorKind::BadResponse,
                                format!(
                                    "the response is larger than {} MiB; not a model answer tern can keep",
                                    MAX_RESPONSE_BYTES >> 20
                                ),
                            ));
                        }
                        let (done, progressed) = feed(&mut parser, &bytes, decoder, on_text)?;
                        if let Some(c) = done {
                            return Ok(c);
                        }
                        if progressed {
                            last_progress = Instant::now();
                        }
                    }
                },
                Msg::End => match head {
                    Some(h) if h.collect() => return Err(answer_error(h, &error_body, secret)),
                    _ => return end(&mut parser, decoder, on_text),
                },
                Msg::ReadError(text) => match head {
                    Some(h) if h.collect() => return Err(answer_error(h, &error_body, secret)),
                    // What arrived may already be complete (OpenAI: a finish_reason came).
                    _ => return end_broken(&mut parser, decoder, on_text, &text),
                },
            }
        }
    }
}

/// The least time between two [`crate::provider::Streamed::Waiting`] notes, and the silence
/// before the first: a stalled stream is said every 10 s with the time left, not 300 s of
/// nothing (issue 46).
pub const STALL_NOTE_EVERY: Duration = Duration::from_secs(10);

/// The reader's next message, waiting at most one slice: None when none came yet. Errors: the
/// server was silent past `idle` since the last progress, or the reader stopped without a
/// result.
fn next_msg(
    rx: &mpsc::Receiver<Msg>,
    idle: Duration,
    last_progress: Instant,
    answered: bool,
) -> Result<Option<Msg>, ProviderError> {
    let wait = SLICE.min(idle.saturating_sub(last_progress.elapsed()));
    match rx.recv_timeout(wait) {
        Ok(m) => Ok(Some(m)),
        Err(RecvTimeoutError::Timeout) if last_progress.elapsed() >= idle => {
            let what = if answered {
                "no complete event (keep-alive bytes do not count)"
            } else {
                "no response"
            };
            Err(ProviderError::new(
                ErrorKind::Timeout,
                format!("{what} from the server for {} s", idle.as_secs_f64()),
            ))
        }
        Err(RecvTimeoutError::Timeout) => Ok(None),
        Err(RecvTimeoutError::Disconnected) => Err(ProviderError::new(
            ErrorKind::EarlyEnd,
            "the HTTP reader stopped without a result",
        )),
    }
}

/// The stream broke (`text`): what arrived may already be a complete answer; else the early
/// end names the break.
fn end_broken(
    parser: &mut SseParser,
    decoder: &mut dyn StreamDecoder,
    on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
    text: &str,
) -> Result<Completion, ProviderError> {
    end(parser, decoder, on_text).map_err(|e| {
        if e.kind == ErrorKind::EarlyEnd {
            ProviderError::new(
                ErrorKind::EarlyEnd,
                format!("the response stream broke before it completed: {text}"),
            )
        } else {
            e
        }
    })
}

/// Feeds one read to the parser and its events to the decoder: the completion once the decoder
/// saw the end marker, and whether an event that counts as progress came (anything but a
/// `ping`; comments never reach here).
fn feed(
    parser: &mut SseParser,
    bytes: &[u8],
    decoder: &mut dyn StreamDecoder,
    on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
) -> Result<(Option<Completion>, bool), ProviderError> {
    let mut events = Vec::new();
    parser.push(bytes, &mut events)?;
    let progressed = events.iter().any(|e| e.event.as_deref() != Some("ping"));
    for ev in &events {
        decoder.event(ev, on_text)?;
        if decoder.done() {
            return decoder.finish().map(|c| (Some(c), true));
        }
    }
    Ok((None, progressed))
}

/// End of stream: the parser's last event, then the decoder's verdict.
fn end(
    parser: &mut SseParser,
    decoder: &mut dyn StreamDecoder,
    on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
) -> Result<Completion, ProviderError> {
    let mut events = Vec::new();
    parser.finish(&mut events);
    for ev in &events {
        if decoder.done() {
            break;
        }
        decoder.event(ev, on_text)?;
    }
    decoder.finish()
}

/// Decodes a whole response delivered as `chunks` (the reads), exactly as [`Transport::post_sse`]
/// would; for tests of the wire decoders without a server.
#[cfg(test)]
pub(crate) fn decode_chunks(
    chunks: &[&[u8]],
    decoder: &mut dyn StreamDecoder,
    on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
) -> Result<Completion, ProviderError> {
    let mut parser = SseParser::new();
    for c in chunks {
        if let (Some(done), _) = feed(&mut parser, c, decoder, on_text)? {
            return Ok(done);
        }
    }
    end(&mut parser, decoder, on_text)
}

/// The error for a collected body: a non-2xx status, or a 2xx JSON answer where a stream was
/// asked for (an error object some proxies send with 200, or a server ignoring `stream: true`).
fn answer_error(head: Head, body: &[u8], secret: Option<&str>) -> ProviderError {
    let text = String::from_utf8_lossy(body);
    if (200..300).contains(&head.status) {
        let has_error = serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v.get("error").is_some_and(|e| !e.is_null()));
        if !has_error {
            return ProviderError::new(
                ErrorKind::BadResponse,
                format!(
                    "expected an SSE stream but the server answered with JSON (does it support \"stream\": true?): {}",
                    snippet(&redact(&text, secret), SNIPPET_BYTES)
                ),
            );
        }
        let mut e = classify_error(None, &text, secret);
        e.retry_after = head.retry_after;
        return e;
    }
    let mut e = classify_error(Some(head.status), &text, secret);
    e.retry_after = head.retry_after;
    e
}

/// The URL of `path` under `base`, keeping a query string after the path (Azure-style
/// `…/v1?api-version=…`) and dropping a fragment: `endpoint("http://h/v1/?x=1", "/chat")` is
/// `http://h/v1/chat?x=1`. `strip` is a path suffix to remove from the base first (`/v1` for a
/// base that already names the version the path adds).
pub fn endpoint(base: &str, strip: &str, path: &str) -> String {
    let base = base.split('#').next().unwrap_or(base);
    let (base, query) = match base.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (base, None),
    };
    let base = base.trim_end_matches('/');
    let base = base.strip_suffix(strip).unwrap_or(base);
    match query {
        Some(q) if !q.is_empty() => format!("{base}{path}?{q}"),
        _ => format!("{base}{path}"),
    }
}

/// Sends one request and streams its response into the job's channel until the body ends, fails,
/// or the receiver is gone (the caller abandoned it).
fn run_job(job: Job) {
    let Job { req, body, tx } = job;
    let resp = match req.send(&body[..]) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Msg::Failed(transport_error(e)));
            return;
        }
    };
    let head = Head {
        status: resp.status().as_u16(),
        retry_after: retry_after(resp.headers(), SystemTime::now()),
        json: resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json")),
    };
    if tx.send(Msg::Head(head)).is_err() {
        return;
    }
    let mut reader = resp.into_body().into_reader();
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let msg = match reader.read(&mut buf) {
            Ok(0) => Msg::End,
            Ok(n) => Msg::Data(buf[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Msg::ReadError(e.to_string()),
        };
        let last = !matches!(msg, Msg::Data(_));
        if tx.send(msg).is_err() || last {
            return;
        }
    }
}

fn transport_error(e: ureq::Error) -> ProviderError {
    let kind = match &e {
        ureq::Error::Timeout(_) => ErrorKind::Timeout,
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        // A URL that cannot work will not work on a retry either.
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::RequireHttpsOnly(_) => {
            ErrorKind::BadResponse
        }
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => ErrorKind::Unreachable,
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            ) =>
        {
            ErrorKind::Unreachable
        }
        // A name that does not resolve reaches us as a plain I/O error from getaddrinfo.
        ureq::Error::Io(io) if io.to_string().contains("failed to lookup address") => {
            ErrorKind::Unreachable
        }
        _ => ErrorKind::Connect,
    };
    ProviderError::new(kind, format!("request failed: {e}"))
}

fn retry_after(headers: &ureq::http::HeaderMap, now: SystemTime) -> Option<Duration> {
    // OpenAI sends `retry-after-ms` beside `retry-after`; it is the more precise of the two.
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(1e9)));
    }
    let v = headers.get("retry-after")?.to_str().ok()?;
    parse_retry_after(v, now)
}

/// Parses a `Retry-After` value (RFC 9110 §10.2.3): delay-seconds, or an HTTP date (any of the
/// three formats of RFC 9110 §5.6.7) turned into the time left from `now` (zero when past).
/// None when the value is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    // Not in the RFC, but some servers send fractional seconds.
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Error-body wording that means the prompt does not fit the model's context window, lowercase.
/// Sources: OpenAI (`context_length_exceeded`, "This model's maximum context length is …",
/// "reduce the length of the messages", "exceeds the context window"), DeepSeek and OpenRouter
/// (OpenAI's wording), Anthropic ("prompt is too long: N tokens > M maximum"), llama.cpp server
/// (`exceed_context_size_error`, "the request exceeds the available context size"), vLLM
/// ("maximum context length", "is longer than the model's …", "longer than the maximum model
/// length").
const OVERFLOW_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "reduce the length of the messages",
    "context window",
    "prompt is too long",
    "exceed_context_size_error",
    "exceeds the available context size",
    "context size",
    "is longer than the model's",
    "longer than the maximum model length",
];

/// Classifies a provider error from its HTTP status (None for an error frame inside a 200
/// stream) and body text. One function for both wires.
///
/// - Context overflow wording (see the marker list in the source) → [`ErrorKind::ContextOverflow`].
/// - Otherwise an HTTP status → [`ErrorKind::Status`] (its retryability is the status's).
/// - An in-stream frame: Anthropic `overloaded_error` / `rate_limit_error`, OpenAI-style
///   `rate_limit_exceeded` or a message saying "overloaded" / "rate limit" →
///   [`ErrorKind::Overloaded`]; a numeric `code` (OpenRouter, llama.cpp) or an Anthropic error
///   type with a documented status (`api_error` 500, `invalid_request_error` 400, …) →
///   [`ErrorKind::Status`]; anything else → [`ErrorKind::BadResponse`].
///
/// The message holds a short snippet of the body, cut at a char boundary, with `secret`
/// redacted before cutting (so no part of it can survive).
pub fn classify_error(status: Option<u16>, body: &str, secret: Option<&str>) -> ProviderError {
    let body = redact(body, secret);
    let lower = body.to_lowercase();
    let snip = snippet(&body, SNIPPET_BYTES);
    let prefix = match status {
        Some(s) => format!("HTTP {s}"),
        None => "error in the response stream".to_string(),
    };
    if OVERFLOW_MARKERS.iter().any(|m| lower.contains(m)) {
        return ProviderError::new(
            ErrorKind::ContextOverflow,
            format!("{prefix}: the prompt is longer than the model's context window: {snip}"),
        );
    }
    let kind = match status {
        Some(s) => ErrorKind::Status(s),
        None => stream_error_kind(&body, &lower),
    };
    ProviderError::new(kind, format!("{prefix}: {snip}"))
}

fn stream_error_kind(body: &str, lower: &str) -> ErrorKind {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    // Anthropic: {"type":"error","error":{"type":…}}; OpenAI-style: {"error":{"type","code"}}.
    let err = v.get("error").unwrap_or(&v);
    let ty = err.get("type").and_then(|t| t.as_str()).unwrap_or("");
    let code = err.get("code");
    let code_str = code.and_then(|c| c.as_str()).unwrap_or("");
    if matches!(ty, "overloaded_error" | "rate_limit_error")
        || matches!(code_str, "rate_limit_exceeded" | "overloaded")
        || lower.contains("overloaded")
        || lower.contains("rate limit")
    {
        return ErrorKind::Overloaded;
    }
    if let Some(n) = code.and_then(|c| c.as_u64())
        && (400..600).contains(&n)
    {
        return match n {
            429 | 529 => ErrorKind::Overloaded,
            // Proven by the range check on the line above.
            _ => ErrorKind::Status(n as u16),
        };
    }
    // Anthropic Messages API, errors: the documented status of each error type.
    match ty {
        "invalid_request_error" => ErrorKind::Status(400),
        "authentication_error" => ErrorKind::Status(401),
        "permission_error" => ErrorKind::Status(403),
        "not_found_error" => ErrorKind::Status(404),
        "request_too_large" => ErrorKind::Status(413),
        "api_error" | "server_error" => ErrorKind::Status(500),
        _ => ErrorKind::BadResponse,
    }
}

/// `text` with every occurrence of `secret` replaced by `[REDACTED]` (no-op for None or "").
pub fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, crate::store::redact::REDACTED),
        _ => text.to_string(),
    }
}

/// The first `max` bytes of `text` (cut back to a char boundary) with runs of whitespace
/// collapsed to one space, and `…` when something was cut.
pub fn snippet(text: &str, max: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.len() <= max {
        return collapsed;
    }
    let mut end = max;
    while !collapsed.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &collapsed[..end])
}

#[cfg(test)]
mod endpoint_tests {
    use super::endpoint;

    #[test]
    fn query_kept_after_the_path_and_fragment_dropped() {
        assert_eq!(
            endpoint("http://h:1/v1/", "", "/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            endpoint(
                "https://x.openai.azure.com/v1?api-version=2024-01-01",
                "",
                "/chat/completions"
            ),
            "https://x.openai.azure.com/v1/chat/completions?api-version=2024-01-01"
        );
        assert_eq!(
            endpoint("http://h/v1#frag", "", "/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(
            endpoint("https://api.anthropic.com/v1/", "/v1", "/v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
    }
}

/// `url` without credentials and query, for `meta.json` and messages: `https://host/path`.
pub fn display_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT, in all three RFC 9110 formats.
        for v in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                parse_retry_after(v, now),
                Some(Duration::from_secs(7)),
                "{v}"
            );
        }
        let later = now + Duration::from_secs(100);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", later),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn snippet_cuts_at_char_boundary() {
        let s = "é".repeat(400);
        let sn = snippet(&s, 301);
        assert!(sn.ends_with('…'));
        assert_eq!(sn.len(), 300 + '…'.len_utf8());
        assert_eq!(snippet("a \n\t b", 10), "a b");
    }

    #[test]
    fn secret_never_survives_even_at_the_cut() {
        let key = "sk-SECRET-0123456789";
        let body = format!("{}{key}{}", "x".repeat(SNIPPET_BYTES - 5), "y".repeat(50));
        let e = classify_error(Some(401), &body, Some(key));
        assert!(!e.message.contains("sk-SE"), "{}", e.message);
        let e = classify_error(Some(401), &format!("bad key {key}"), Some(key));
        assert!(e.message.contains(crate::store::redact::REDACTED) && !e.message.contains(key));
    }

    #[test]
    fn context_overflow_wording_of_each_provider() {
        let bodies = [
            // OpenAI
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            // DeepSeek
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            // Anthropic
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            // llama.cpp
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
            // vLLM
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","code":400}"#,
        ];
        for b in bodies {
            let e = classify_error(Some(400), b, None);
            assert_eq!(e.kind, ErrorKind::ContextOverflow, "{b}");
            assert!(!e.retryable());
        }
        assert_eq!(
            classify_error(
                Some(400),
                r#"{"error":{"message":"bad tool schema"}}"#,
                None
            )
            .kind,
            ErrorKind::Status(400)
        );
    }

    #[test]
    fn stream_error_frames() {
        let k = |b: &str| classify_error(None, b, None).kind;
        assert_eq!(
            k(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            ErrorKind::Overloaded
        );
        assert_eq!(
            k(r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
            ErrorKind::Overloaded
        );
        assert_eq!(
            k(r#"{"error":{"code":502,"message":"Provider returned error"}}"#),
            ErrorKind::Status(502)
        );
        assert_eq!(
            k(r#"{"type":"error","error":{"type":"api_error","message":"Internal"}}"#),
            ErrorKind::Status(500)
        );
        assert_eq!(k(r#"{"error":"something odd"}"#), ErrorKind::BadResponse);
    }
}
