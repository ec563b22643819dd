//! The fake model provider for integration tests and benchmarks: a real HTTP/1.1 server on
//! 127.0.0.1, port 0, in background threads, answering from a script of [`Reply`]s.
//!
//! Self-contained: std, serde_json, tempfile and libc only (available to every target of this
//! package), no tern types in the server itself, so the integration test binary includes it
//! with `mod support;` (tests/it/main.rs) and the benchmarks with
//! `#[path = "../tests/it/support/mod.rs"] mod support;`.
//!
//! What it offers:
//! - scripted SSE answers in both wires ([`openai_text`], [`openai_tool_calls`],
//!   [`anthropic_text`], [`anthropic_tool_calls`]), raw bytes ([`Reply::sse`]), error statuses
//!   with headers ([`Reply::status`]);
//! - delivery faults: delays before and between chunks, re-chunking at chosen byte offsets (each
//!   chunk its own HTTP chunk, flushed), an early close after N bytes, a close-delimited body;
//! - a strict mode that answers 400 like llama.cpp / Anthropic do when a request's messages are
//!   invalid (tool calls without results, empty content, bad tool-call arguments);
//! - a simulated prefix cache: with [`Reply::auto_usage`], usage reports input = body bytes / 4
//!   and cached = the common byte prefix with the previous request to the same model, in
//!   128-token blocks, nothing under 1024 tokens; [`Reply::uncached`] reports nothing cached
//!   (a proxy that drops cache markers);
//! - routes ([`FakeServer::route`]): replies kept for requests that contain a needle, so
//!   clients that call at once (sub-agents) each follow their own script.
//!
//! Every request is recorded ([`FakeServer::requests`]); each connection is answered and closed
//! (`Connection: close`).
//!
//! The submodules hold what the integration tests share on top of the server: [`cli`] runs the
//! real binary in a temporary workspace, [`files`] reads what it leaves, [`body`] reads recorded
//! requests and stored messages, [`script`] builds scripted tool calls, [`procs`] finds processes
//! and waits with a bound, [`seed`] holds the seed's expected Work surface, [`harness`] runs a
//! library runtime in-process.
#![allow(dead_code)]

pub mod body;
pub mod cli;
pub mod files;
pub mod harness;
pub mod procs;
pub mod script;
pub mod seed;

/// Says a test (or a part of one) was skipped, and why: on stderr as `SKIPPED TEST: WHY`, and as
/// one line appended to `$TERN_SKIPPED_LOG` when set, so the runner can count what a plain
/// `ok` hides. `ci` marks a skip CI must never have (its tools are installed by `.ci/run`):
/// `.ci/run` prints every skip and fails on one of those.
pub fn skipped(test: &str, why: &str, ci: bool) {
    eprintln!("SKIPPED {test}: {why}");
    if let Ok(log) = std::env::var("TERN_SKIPPED_LOG")
        && !log.is_empty()
    {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let tag = if ci { "ci-required" } else { "allowed" };
            let _ = writeln!(f, "{tag}\t{test}\t{why}");
        }
    }
}

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// Bytes per simulated token.
pub const BYTES_PER_TOKEN: usize = 4;
/// The simulated cache reuses whole blocks of this many tokens.
pub const CACHE_BLOCK_TOKENS: u64 = 128;
/// The simulated cache reports nothing below this many tokens.
pub const CACHE_MIN_TOKENS: u64 = 1024;

/// One recorded HTTP request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`…
    pub method: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names lowercased, values as sent, in order.
    pub headers: Vec<(String, String)>,
    /// The raw body bytes.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON (Null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Which wire a request or scripted answer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Wire {
    /// Anthropic for paths ending in `/messages`, else OpenAI.
    pub fn of_path(path: &str) -> Wire {
        if path.trim_end_matches('/').ends_with("/messages") {
            Wire::Anthropic
        } else {
            Wire::OpenAi
        }
    }
}

/// What a reply's body is made of. Scripted answers are rendered when served, so their usage can
/// come from the simulated cache.
#[derive(Debug, Clone)]
pub enum Content {
    /// These exact bytes.
    Raw(Vec<u8>),
    /// A streamed answer: text, then tool calls `(id, name, arguments)`, in `wire`'s format.
    Answer {
        /// The wire format.
        wire: Wire,
        /// Assistant text (may be empty).
        text: String,
        /// Tool calls: id, name, arguments text exactly as streamed.
        calls: Vec<(String, String, String)>,
    },
}

/// One scripted HTTP answer. Build with the helpers and the `with_`/builder methods.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Extra response headers (e.g. `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub content: Content,
    /// Byte offsets at which the body is cut into separately written and flushed chunks.
    pub split_at: Vec<usize>,
    /// Also cut the body every this many bytes.
    pub split_every: Option<usize>,
    /// Sleep before the response head.
    pub delay_before: Duration,
    /// Sleep before each chunk after the first.
    pub delay_between: Duration,
    /// Close the connection after this many body bytes, without ending the body properly.
    pub close_after: Option<usize>,
    /// Abort that close with a TCP reset (RST) instead of an orderly FIN.
    pub reset: bool,
    /// Chunked transfer encoding (true for streams) or a body ended by closing the connection.
    pub chunked: bool,
    /// Fill in usage from the simulated prefix cache.
    pub auto_usage: bool,
    /// Report nothing read from the cache, whatever the simulated cache holds.
    pub uncached: bool,
    content_type: String,
}

impl Reply {
    fn stream(content: Content) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            content,
            split_at: Vec::new(),
            split_every: None,
            delay_before: Duration::ZERO,
            delay_between: Duration::ZERO,
            close_after: None,
            reset: false,
            chunked: true,
            auto_usage: false,
            uncached: false,
            content_type: "text/event-stream".into(),
        }
    }

    /// A 200 SSE stream of exactly these bytes.
    pub fn sse(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply::stream(Content::Raw(bytes.into()))
    }

    /// A non-streamed answer: `status` with a JSON (or any) `body` and a Content-Length.
    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            chunked: false,
            content_type: "application/json".into(),
            ..Reply::stream(Content::Raw(body.as_bytes().to_vec()))
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Cuts the body into chunks at these byte offsets (each written and flushed separately).
    pub fn split_at(mut self, offsets: &[usize]) -> Reply {
        self.split_at = offsets.to_vec();
        self
    }

    /// Cuts the body every `n` bytes (in addition to any `split_at` offsets).
    pub fn split_every(mut self, n: usize) -> Reply {
        self.split_every = Some(n.max(1));
        self
    }

    /// Sleeps `d` before answering at all.
    pub fn delay_before(mut self, d: Duration) -> Reply {
        self.delay_before = d;
        self
    }

    /// Sleeps `d` before each chunk after the first.
    pub fn delay_between(mut self, d: Duration) -> Reply {
        self.delay_between = d;
        self
    }

    /// Closes the connection after `n` body bytes (no terminating chunk).
    pub fn close_after(mut self, n: usize) -> Reply {
        self.close_after = Some(n);
        self
    }

    /// Resets the connection (TCP RST) after `n` body bytes: a connection reset mid-stream.
    pub fn reset_after(mut self, n: usize) -> Reply {
        self.close_after = Some(n);
        self.reset = true;
        self
    }

    /// Sends the body without chunked encoding, ended by closing the connection.
    pub fn close_delimited(mut self) -> Reply {
        self.chunked = false;
        self
    }

    /// Reports usage from the simulated prefix cache.
    pub fn auto_usage(mut self) -> Reply {
        self.auto_usage = true;
        self
    }

    /// Reports usage as if the provider read nothing from its cache (with [`Reply::auto_usage`]).
    pub fn uncached(mut self) -> Reply {
        self.uncached = true;
        self
    }

    /// The body bytes as they would be served with `usage` (input, cached) tokens.
    pub fn render(&self, usage: (u64, u64)) -> Vec<u8> {
        self.render_with(usage, false)
    }

    /// [`Reply::render`], an answer streaming the model's reasoning first when `thinking`
    /// (OpenAI-compatible `reasoning_content` deltas; an Anthropic thinking block with its
    /// signature: [`thought`], [`signature`]).
    pub fn render_with(&self, usage: (u64, u64), thinking: bool) -> Vec<u8> {
        self.render_for(usage, thinking, false)
    }

    /// [`Reply::render_with`]; `responses`: an OpenAI-wire answer served on `/responses` is
    /// rendered as OpenAI's Responses stream ([`render_responses`]).
    pub fn render_for(&self, usage: (u64, u64), thinking: bool, responses: bool) -> Vec<u8> {
        match &self.content {
            Content::Raw(b) => b.clone(),
            Content::Answer { wire, text, calls } => {
                let usage = if self.uncached { (usage.0, 0) } else { usage };
                let usage = self.auto_usage.then_some(usage);
                let thought = thinking.then(|| thought(calls));
                match wire {
                    Wire::OpenAi if responses => {
                        render_responses(text, calls, usage, thought.as_deref())
                    }
                    Wire::OpenAi => render_openai(text, calls, usage, thought.as_deref()),
                    Wire::Anthropic => render_anthropic(text, calls, usage, thought.as_deref()),
                }
            }
        }
    }
}

/// An OpenAI stream answering `text` (split into several deltas), `finish_reason: "stop"`,
/// `[DONE]`.
pub fn openai_text(text: &str) -> Reply {
    Reply::stream(Content::Answer {
        wire: Wire::OpenAi,
        text: text.into(),
        calls: Vec::new(),
    })
}

/// An OpenAI stream of tool calls `(id, name, arguments)`; arguments are streamed in several
/// fragments exactly as given; `finish_reason: "tool_calls"`.
pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
    Reply::stream(Content::Answer {
        wire: Wire::OpenAi,
        text: String::new(),
        calls: owned(calls),
    })
}

/// An Anthropic stream answering `text`, `stop_reason: "end_turn"`, `message_stop`.
pub fn anthropic_text(text: &str) -> Reply {
    Reply::stream(Content::Answer {
        wire: Wire::Anthropic,
        text: text.into(),
        calls: Vec::new(),
    })
}

/// An Anthropic stream of `tool_use` blocks `(id, name, input JSON text)` streamed as
/// `input_json_delta` fragments; `stop_reason: "tool_use"`.
pub fn anthropic_tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
    Reply::stream(Content::Answer {
        wire: Wire::Anthropic,
        text: String::new(),
        calls: owned(calls),
    })
}

/// The default answer of `wire` when the script is exhausted: a final text answer.
pub fn default_answer(wire: Wire) -> Reply {
    match wire {
        Wire::OpenAi => openai_text("Done."),
        Wire::Anthropic => anthropic_text("Done."),
    }
}

fn owned(calls: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    calls
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

/// Splits `s` into pieces of about `n` bytes at char boundaries.
fn pieces(s: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < s.len() {
        let mut end = (start + n).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[start..end]);
        start = end;
    }
    out
}

fn data(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(format!("data: {v}\n\n").as_bytes());
}

fn output_tokens(text: &str, calls: &[(String, String, String)]) -> u64 {
    let bytes = text.len() + calls.iter().map(|c| c.2.len() + c.1.len()).sum::<usize>();
    (bytes / BYTES_PER_TOKEN + 1) as u64
}

/// The reasoning the fake streams before an answer whose first tool call is `calls[0]` (a
/// text answer: "…before answering"): what a strict server wants back, byte for byte.
pub fn thought(calls: &[(String, String, String)]) -> String {
    match calls.first() {
        Some((id, name, _)) => format!("Thinking before {name} call {id}: the plan holds."),
        None => "Thinking before answering.".into(),
    }
}

/// The signature the fake gives a thinking block of `thought` (as Anthropic's, bound to its
/// content: a changed block no longer matches).
pub fn signature(thought: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in thought.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("sig-{h:016x}")
}

fn render_openai(
    text: &str,
    calls: &[(String, String, String)],
    usage: Option<(u64, u64)>,
    thought: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let chunk = |delta: Value, finish: Value| {
        json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","model":"fake",
               "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    };
    data(
        &mut out,
        &chunk(json!({"role":"assistant","content":""}), Value::Null),
    );
    for p in thought.map(|t| pieces(t, 9)).unwrap_or_default() {
        data(
            &mut out,
            &chunk(json!({"reasoning_content":p}), Value::Null),
        );
    }
    for p in pieces(text, 8) {
        data(&mut out, &chunk(json!({"content":p}), Value::Null));
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        data(
            &mut out,
            &chunk(
                json!({"tool_calls":[{"index":i,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
                Value::Null,
            ),
        );
        for p in pieces(args, 7) {
            data(
                &mut out,
                &chunk(
                    json!({"tool_calls":[{"index":i,"function":{"arguments":p}}]}),
                    Value::Null,
                ),
            );
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    data(&mut out, &chunk(json!({}), json!(finish)));
    if let Some((input, cached)) = usage {
        let output = output_tokens(text, calls);
        data(
            &mut out,
            &json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","choices":[],
                    "usage":{"prompt_tokens":input,"completion_tokens":output,"total_tokens":input+output,
                             "prompt_tokens_details":{"cached_tokens":cached}}}),
        );
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// The encrypted content the fake gives a Responses reasoning item of `thought`.
pub fn encrypted(thought: &str) -> String {
    format!("enc:{}", signature(thought))
}

/// An answer as OpenAI's Responses stream: a reasoning item (when `thought`: its summary
/// streamed, `encrypted_content` at `output_item.done`), the text, the function calls, then
/// `response.completed` with usage.
fn render_responses(
    text: &str,
    calls: &[(String, String, String)],
    usage: Option<(u64, u64)>,
    thought: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ev = |v: Value| {
        let name = v["type"].as_str().unwrap_or("").to_string();
        out.extend_from_slice(format!("event: {name}\ndata: {v}\n\n").as_bytes());
    };
    ev(json!({"type":"response.created","response":{"id":"resp_fake","status":"in_progress"}}));
    let mut index = 0;
    if let Some(t) = thought {
        let id = format!("rs_{index}");
        ev(
            json!({"type":"response.output_item.added","output_index":index,"item":{"type":"reasoning","id":id,"summary":[]}}),
        );
        for p in pieces(t, 9) {
            ev(
                json!({"type":"response.reasoning_summary_text.delta","output_index":index,"delta":p}),
            );
        }
        ev(
            json!({"type":"response.output_item.done","output_index":index,
                  "item":{"type":"reasoning","id":id,"summary":[{"type":"summary_text","text":t}],
                          "encrypted_content":encrypted(t)}}),
        );
        index += 1;
    }
    if !text.is_empty() {
        ev(
            json!({"type":"response.output_item.added","output_index":index,"item":{"type":"message","role":"assistant","content":[]}}),
        );
        for p in pieces(text, 8) {
            ev(
                json!({"type":"response.output_text.delta","output_index":index,"content_index":0,"delta":p}),
            );
        }
        index += 1;
    }
    for (id, name, args) in calls {
        ev(
            json!({"type":"response.output_item.added","output_index":index,
                  "item":{"type":"function_call","id":format!("fc_{index}"),"call_id":id,"name":name,"arguments":""}}),
        );
        for p in pieces(args, 7) {
            ev(
                json!({"type":"response.function_call_arguments.delta","output_index":index,"delta":p}),
            );
        }
        ev(
            json!({"type":"response.function_call_arguments.done","output_index":index,"arguments":args}),
        );
        index += 1;
    }
    let (input, cached) = usage.unwrap_or((0, 0));
    let output = output_tokens(text, calls);
    ev(
        json!({"type":"response.completed","response":{"id":"resp_fake","status":"completed",
              "usage":{"input_tokens":input,"input_tokens_details":{"cached_tokens":cached},
                       "output_tokens":output,"output_tokens_details":{"reasoning_tokens":0},
                       "total_tokens":input+output}}}),
    );
    out
}

fn render_anthropic(
    text: &str,
    calls: &[(String, String, String)],
    usage: Option<(u64, u64)>,
    thought: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ev = |name: &str, v: Value| {
        out.extend_from_slice(format!("event: {name}\ndata: {v}\n\n").as_bytes());
    };
    let (input, cached) = usage.unwrap_or((0, 0));
    ev(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant",
               "content":[],"model":"fake","stop_reason":null,"stop_sequence":null,
               "usage":{"input_tokens":input - cached,"cache_creation_input_tokens":0,
                        "cache_read_input_tokens":cached,"output_tokens":1}}}),
    );
    ev("ping", json!({"type":"ping"}));
    let mut index = 0;
    if let Some(t) = thought {
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":index,"content_block":{"type":"thinking","thinking":""}}),
        );
        for p in pieces(t, 9) {
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":index,"delta":{"type":"thinking_delta","thinking":p}}),
            );
        }
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":index,"delta":{"type":"signature_delta","signature":signature(t)}}),
        );
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        );
        index += 1;
    }
    if !text.is_empty() {
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":index,"content_block":{"type":"text","text":""}}),
        );
        for p in pieces(text, 8) {
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":index,"delta":{"type":"text_delta","text":p}}),
            );
        }
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        );
        index += 1;
    }
    for (id, name, args) in calls {
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":index,
                   "content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
        );
        for p in pieces(args, 7) {
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":index,
                       "delta":{"type":"input_json_delta","partial_json":p}}),
            );
        }
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        );
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    ev(
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},
               "usage":{"output_tokens":output_tokens(text, calls)}}),
    );
    ev("message_stop", json!({"type":"message_stop"}));
    out
}

/// The simulated prefix cache's usage for `body` after `prev`: (input tokens, cached tokens).
pub fn simulated_usage(prev: Option<&[u8]>, body: &[u8]) -> (u64, u64) {
    let input = (body.len() / BYTES_PER_TOKEN) as u64;
    let common = prev.map_or(0, |p| {
        p.iter().zip(body).take_while(|(a, b)| a == b).count()
    });
    let tokens = (common / BYTES_PER_TOKEN) as u64;
    let cached = tokens / CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS;
    (input, if cached < CACHE_MIN_TOKENS { 0 } else { cached })
}

/// Chooses a reply from the request itself (see [`FakeServer::set_responder`]).
pub type Responder = Box<dyn Fn(&Recorded) -> Option<Reply> + Send>;

struct State {
    script: VecDeque<Reply>,
    /// Replies kept for requests whose body contains a needle (see [`FakeServer::route`]).
    routes: Vec<(Vec<u8>, VecDeque<Reply>)>,
    default: Option<Reply>,
    responder: Option<Responder>,
    requests: Vec<Recorded>,
    strict: bool,
    /// A reasoning model's rules (see [`FakeServer::set_thinking`]).
    thinking: Option<Thinking>,
    /// The previous request body of each model (each model has its own cache).
    prev_bodies: Vec<(String, Vec<u8>)>,
}

/// A running fake provider. Stops accepting connections when dropped.
pub struct FakeServer {
    port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl FakeServer {
    /// Starts a server answering requests with `script` in order, then with the default answer
    /// (a final text answer in the request's wire, see [`FakeServer::set_default`]).
    pub fn start(script: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            routes: Vec::new(),
            default: None,
            responder: None,
            requests: Vec::new(),
            strict: false,
            thinking: None,
            prev_bodies: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                thread::spawn(move || {
                    let _ = serve(conn, &st);
                });
            }
        });
        FakeServer { port, state, stop }
    }

    /// Like [`FakeServer::start`], in strict mode (see [`FakeServer::set_strict`]).
    pub fn strict(script: Vec<Reply>) -> FakeServer {
        let s = FakeServer::start(script);
        s.set_strict(true);
        s
    }

    /// Strict mode: a request whose messages are invalid gets a 400 (and does not use up a
    /// scripted reply), worded like llama.cpp's server for `/chat/completions` and like
    /// Anthropic for `/messages`. Invalid: a tool call not answered by a tool result before the
    /// next non-tool message or at the end, a tool result for no pending call, empty or
    /// whitespace-only content or text blocks, tool-call arguments that are not a JSON object,
    /// more than 4 `cache_control` breakpoints.
    pub fn set_strict(&self, on: bool) {
        self.lock().strict = on;
    }

    /// Answers as a reasoning model whose provider enforces `rules`: every scripted answer
    /// streams its reasoning first ([`thought`]), and a request that breaks the provider's
    /// documented rule about sending it back is answered 400 (see [`Thinking`]; the reply is
    /// not used up).
    pub fn set_thinking(&self, rules: Thinking) {
        self.lock().thinking = Some(rules);
    }

    /// Appends replies to the script.
    pub fn push(&self, reply: Reply) {
        self.lock().script.push_back(reply);
    }

    /// Answers each valid request with what `f` makes of it, before the script (None: the
    /// script, then the default). For concurrent clients, whose requests arrive in no fixed
    /// order, so a script cannot say which one gets which reply.
    pub fn set_responder(&self, f: impl Fn(&Recorded) -> Option<Reply> + Send + 'static) {
        self.lock().responder = Some(Box::new(f));
    }

    /// Answers requests whose body contains `needle` with `replies`, in order, before the main
    /// script (the first route with a reply left wins). Concurrent clients (sub-agents running
    /// at once) reach the server in no fixed order; a needle only one of them sends (its task)
    /// gives each its own script. Once a route is used up, its requests take the main script.
    pub fn route(&self, needle: &str, replies: Vec<Reply>) {
        self.lock()
            .routes
            .push((needle.as_bytes().to_vec(), replies.into()));
    }

    /// How many routed replies are left for `needle`.
    pub fn routed_left(&self, needle: &str) -> usize {
        self.lock()
            .routes
            .iter()
            .filter(|(n, _)| n == needle.as_bytes())
            .map(|(_, q)| q.len())
            .sum()
    }

    /// The reply used once the script is exhausted (instead of a final text answer).
    pub fn set_default(&self, reply: Reply) {
        self.lock().default = Some(reply);
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT/v1`, the OpenAI-style base URL.
    pub fn openai_base(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// How many scripted replies are left.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn read_request(conn: &TcpStream) -> std::io::Result<Recorded> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if n == 0 {
                let mut end = String::new();
                r.read_line(&mut end)?;
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let req = read_request(&conn)?;
    let wire = Wire::of_path(&req.path);
    let (reply, usage, thinking, responses) = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let model = req.json()["model"].as_str().unwrap_or_default().to_string();
        let prev = st.prev_bodies.iter().position(|(m, _)| *m == model);
        let usage = simulated_usage(prev.map(|i| st.prev_bodies[i].1.as_slice()), &req.body);
        match prev {
            Some(i) => st.prev_bodies[i].1 = req.body.clone(),
            None => st.prev_bodies.push((model, req.body.clone())),
        }
        let invalid = if st.strict {
            validate(wire, &req.json()).err()
        } else {
            None
        };
        let invalid = invalid.or_else(|| {
            st.thinking
                .and_then(|rules| rules.validate(wire, &req.json()).err())
        });
        let thinking = st.thinking.is_some();
        let responses = req.path.trim_end_matches('/').ends_with("/responses");
        let chosen = match (&invalid, &st.responder) {
            (None, Some(f)) => f(&req),
            _ => None,
        };
        st.requests.push(req);
        let reply = match (invalid, chosen) {
            (Some(msg), _) => strict_error(wire, &msg),
            (None, Some(r)) => r,
            (None, None) => {
                let body = &st.requests[st.requests.len() - 1].body;
                let routed = st
                    .routes
                    .iter()
                    .position(|(needle, q)| !q.is_empty() && contains(body, needle));
                match routed {
                    Some(i) => st.routes[i].1.pop_front().expect("a routed reply"),
                    None => match st.script.pop_front() {
                        Some(r) => r,
                        None => st.default.clone().unwrap_or_else(|| default_answer(wire)),
                    },
                }
            }
        };
        (reply, usage, thinking, responses)
    };
    conn.set_nodelay(true)?;
    thread::sleep(reply.delay_before);
    let mut body = reply.render_for(usage, thinking, responses);
    let cut = reply.close_after.is_some_and(|n| n < body.len());
    if let Some(n) = reply.close_after {
        body.truncate(n);
    }

    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\nconnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if reply.chunked {
        head.push_str("transfer-encoding: chunked\r\n");
    } else if reply.close_after.is_none() && !reply.content_type.starts_with("text/event-stream") {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.flush()?;

    let every = reply
        .split_every
        .map(|n| (1..=body.len() / n).map(|i| i * n).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut offsets: Vec<usize> = reply
        .split_at
        .iter()
        .chain(&every)
        .copied()
        .filter(|&o| o > 0 && o < body.len())
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    let mut start = 0;
    let ends = offsets.into_iter().chain([body.len()]);
    for (i, end) in ends.enumerate() {
        if i > 0 {
            thread::sleep(reply.delay_between);
        }
        let piece = &body[start..end];
        start = end;
        if piece.is_empty() {
            continue;
        }
        if reply.chunked {
            conn.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
            conn.write_all(piece)?;
            conn.write_all(b"\r\n")?;
        } else {
            conn.write_all(piece)?;
        }
        conn.flush()?;
    }
    if reply.chunked && !cut {
        conn.write_all(b"0\r\n\r\n")?;
        conn.flush()?;
    }
    if reply.reset {
        // SO_LINGER with a zero timeout: close(2) sends RST instead of FIN.
        use std::os::fd::AsRawFd;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on our own open socket with a properly sized linger struct.
        unsafe {
            libc::setsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
        drop(conn);
        return Ok(());
    }
    let _ = conn.shutdown(Shutdown::Both);
    Ok(())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn strict_error(wire: Wire, msg: &str) -> Reply {
    let body = match wire {
        Wire::OpenAi => json!({"error":{"code":400,"message":msg,"type":"invalid_request_error"}}),
        Wire::Anthropic => {
            json!({"type":"error","error":{"type":"invalid_request_error","message":msg}})
        }
    };
    Reply::status(400, &body.to_string())
}

/// A reasoning provider's documented rule about the reasoning a request sends back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// DeepSeek (API docs, "Thinking Mode", tool calls): an assistant message that made tool
    /// calls must carry its `reasoning_content`, as the answer gave it, in every later request;
    /// else HTTP 400.
    DeepSeek,
    /// Groq and Cerebras: an assistant message carrying `reasoning_content` (or `reasoning`)
    /// is HTTP 400, "property … is unsupported".
    Groq,
    /// Anthropic (docs, "Extended thinking", "Preserving thinking blocks"): with `thinking`
    /// enabled, an assistant message with `tool_use` must start with its thinking block,
    /// unchanged (its signature must match its text); `budget_tokens` at least 1,024 and
    /// below `max_tokens`; no `temperature`. Else HTTP 400.
    Anthropic,
    /// OpenAI's Responses API with `store: false` (docs, "Reasoning models", "Encrypted
    /// reasoning items"): a reasoning item passed back must carry the `encrypted_content` the
    /// API gave, unaltered ("could not be verified" otherwise); the fake also wants each
    /// function call's reasoning item right before it, as a model that keeps its reasoning
    /// between tool calls gets it.
    Responses,
}

impl Thinking {
    /// Err(message) when a request breaks the rule.
    pub fn validate(self, wire: Wire, body: &Value) -> Result<(), String> {
        let messages = body.get("messages").and_then(Value::as_array);
        let assistants = messages
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, m)| m["role"] == "assistant");
        match (self, wire) {
            (Thinking::DeepSeek, Wire::OpenAi) => {
                for (i, m) in assistants {
                    let Some(calls) = m["tool_calls"].as_array().filter(|c| !c.is_empty()) else {
                        continue;
                    };
                    let want = thought(&[(
                        calls[0]["id"].as_str().unwrap_or("").to_string(),
                        calls[0]["function"]["name"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        String::new(),
                    )]);
                    match m.get("reasoning_content").and_then(Value::as_str) {
                        None => {
                            return Err(format!(
                                "messages[{i}]: the `reasoning_content` of an assistant message with tool calls must be passed back in thinking mode"
                            ));
                        }
                        Some(r) if r != want => {
                            return Err(format!(
                                "messages[{i}]: `reasoning_content` differs from what the model returned"
                            ));
                        }
                        Some(_) => {}
                    }
                }
                Ok(())
            }
            (Thinking::Groq, Wire::OpenAi) => {
                for (i, m) in assistants {
                    for key in ["reasoning_content", "reasoning"] {
                        if m.get(key).is_some() {
                            return Err(format!(
                                "'messages.{i}' : for 'role:assistant' the following must be satisfied[('messages.{i}' : property '{key}' is unsupported)]"
                            ));
                        }
                    }
                }
                Ok(())
            }
            (Thinking::Anthropic, Wire::Anthropic) => {
                let on = body["thinking"]["type"] == "enabled";
                if !on {
                    return Ok(());
                }
                let budget = body["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
                let max = body["max_tokens"].as_u64().unwrap_or(0);
                if budget < 1024 || budget >= max {
                    return Err(format!(
                        "thinking.budget_tokens: {budget} must be at least 1024 and less than max_tokens ({max})"
                    ));
                }
                if body.get("temperature").is_some() {
                    return Err("temperature may only be set to 1 when thinking is enabled".into());
                }
                for (i, m) in assistants {
                    let blocks = m["content"].as_array().cloned().unwrap_or_default();
                    if !blocks.iter().any(|b| b["type"] == "tool_use") {
                        continue;
                    }
                    let first = blocks.first().cloned().unwrap_or(Value::Null);
                    if first["type"] != "thinking" && first["type"] != "redacted_thinking" {
                        return Err(format!(
                            "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, an assistant message with tool_use must start with a thinking block",
                            first["type"].as_str().unwrap_or("")
                        ));
                    }
                    let text = first["thinking"].as_str().unwrap_or("");
                    if first["type"] == "thinking"
                        && first["signature"].as_str() != Some(&signature(text))
                    {
                        return Err(format!(
                            "messages.{i}.content.0: Invalid `signature` in `thinking` block"
                        ));
                    }
                }
                Ok(())
            }
            (Thinking::Responses, Wire::OpenAi) => {
                let input = body["input"].as_array().cloned().unwrap_or_default();
                if body["store"] != false
                    || !body["include"]
                        .to_string()
                        .contains("reasoning.encrypted_content")
                {
                    return Err("store: false without include [\"reasoning.encrypted_content\"] loses the reasoning".into());
                }
                for (j, item) in input.iter().enumerate() {
                    if item["type"] == "reasoning" {
                        let text = item["summary"][0]["text"].as_str().unwrap_or("");
                        if item["encrypted_content"].as_str() != Some(&encrypted(text)) {
                            return Err(format!(
                                "The encrypted content for item {} could not be verified.",
                                item["id"].as_str().unwrap_or("?")
                            ));
                        }
                    }
                    if item["type"] == "function_call" {
                        let before = j.checked_sub(1).map(|k| &input[k]);
                        let first_call = before.is_some_and(|b| b["type"] != "function_call");
                        if first_call && before.is_none_or(|b| b["type"] != "reasoning") {
                            return Err(format!(
                                "input[{j}]: function_call {} was provided without its reasoning item",
                                item["call_id"].as_str().unwrap_or("?")
                            ));
                        }
                    }
                }
                Ok(())
            }
            // A rule of the other wire: nothing to check.
            _ => Ok(()),
        }
    }
}

fn blank(v: &Value) -> bool {
    v.as_str().is_none_or(|s| s.trim().is_empty())
}

/// Checks a request body's messages like a strict server; Err(message) when it would be refused.
pub fn validate(wire: Wire, body: &Value) -> Result<(), String> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err("'messages' is required".into());
    };
    match wire {
        Wire::OpenAi => validate_openai(messages),
        Wire::Anthropic => validate_anthropic(body, messages),
    }
}

fn validate_openai(messages: &[Value]) -> Result<(), String> {
    const PENDING: &str = "Cannot continue an assistant message that contains tool calls";
    let mut pending: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" && !pending.is_empty() {
            return Err(format!(
                "{PENDING} (message {i}: tool calls without results)"
            ));
        }
        match role {
            "system" | "user" => {
                if blank(&m["content"]) {
                    return Err(format!("message {i} ({role}) has empty content"));
                }
            }
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array);
                let content = m.get("content").unwrap_or(&Value::Null);
                if !content.is_null() && blank(content) {
                    return Err(format!("message {i} (assistant) has empty content"));
                }
                if content.is_null() && calls.is_none_or(|c| c.is_empty()) {
                    return Err(
                        "Assistant message must contain either 'content' or 'tool_calls'!".into(),
                    );
                }
                for c in calls.into_iter().flatten() {
                    let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                    let args = c
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
                        return Err(format!(
                            "Failed to parse tool call arguments as JSON (message {i}): {args}"
                        ));
                    }
                    pending.insert(id.to_string());
                }
            }
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                if !pending.remove(id) {
                    return Err(format!(
                        "message {i}: tool result for unknown tool call '{id}'"
                    ));
                }
                if blank(&m["content"]) {
                    return Err(format!("message {i} (tool) has empty content"));
                }
            }
            other => return Err(format!("message {i}: unknown role '{other}'")),
        }
    }
    if !pending.is_empty() {
        return Err(format!(
            "{PENDING} (the request ends with tool calls without results)"
        ));
    }
    Ok(())
}

fn validate_anthropic(body: &Value, messages: &[Value]) -> Result<(), String> {
    let breakpoints = body.to_string().matches("\"cache_control\"").count();
    if breakpoints > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
    for b in body
        .get("system")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if blank(&b["text"]) {
            return Err("system: text content blocks must contain non-whitespace text".into());
        }
    }
    let mut pending: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![json!({"type":"text","text":s})],
            Value::Array(a) => a.clone(),
            _ => Vec::new(),
        };
        if blocks.is_empty() {
            return Err(format!(
                "messages.{i}: all messages must have non-empty content"
            ));
        }
        let mut answered = HashSet::new();
        for b in &blocks {
            match b.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" if blank(&b["text"]) => {
                    return Err(format!(
                        "messages.{i}: text content blocks must contain non-whitespace text"
                    ));
                }
                "tool_use" => {
                    if role != "assistant" {
                        return Err(format!("messages.{i}: tool_use in a {role} message"));
                    }
                    if !b["input"].is_object() {
                        return Err(format!(
                            "messages.{i}: tool_use.input: Input should be a valid dictionary"
                        ));
                    }
                    answered.insert(b["id"].as_str().unwrap_or("").to_string());
                }
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap_or("");
                    if !pending.remove(id) {
                        return Err(format!(
                            "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                _ => {}
            }
        }
        if !pending.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}",
                pending.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        pending = answered;
    }
    if !pending.is_empty() {
        return Err(
            "`tool_use` ids were found without `tool_result` blocks immediately after".into(),
        );
    }
    Ok(())
}
