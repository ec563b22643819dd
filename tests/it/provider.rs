//! Provider clients through the real HTTP stack against the fake server (tests/support).

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};
use tern::cancel::CancelToken;
use tern::event::Purpose;
use tern::message::{Message, ToolCall};
use tern::provider::anthropic::Anthropic;
use tern::provider::http::HttpConfig;
use tern::provider::openai::OpenAi;
use tern::provider::retry::{self, RetryPolicy};
use tern::provider::{Completion, ErrorKind, Provider, ProviderError, Request};
use tern::tools::ToolSpec;

const KEY: &str = "sk-test-0123456789abcdef";

fn openai(s: &FakeServer) -> OpenAi {
    OpenAi::new(HttpConfig::default(), &s.openai_base(), Some(KEY.into()))
}

fn anthropic(s: &FakeServer) -> Anthropic {
    Anthropic::new(HttpConfig::default(), &s.base_url(), Some(KEY.into()))
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        max_total: Duration::from_secs(20),
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_millis(300),
        max_unreachable_retries: 2,
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "bash",
        description: "Run a command in bash.".into(),
        parameters: json!({"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}),
    }]
}

fn request<'a>(tools: &'a [ToolSpec], messages: &'a [Message]) -> Request<'a> {
    Request {
        model: "fake-model",
        system: "You are tern.",
        tools,
        messages,
        tail: Some("<tern:work_state>\n(no items)\n</tern:work_state>"),
        cache_key: None,
        max_output_tokens: 1024,
        temperature: None,
        official_openai: false,
        tools_allowed: true,
        long_cache: false,
        reasoning: Default::default(),
    }
}

fn hello_body(p: &dyn Provider) -> Vec<u8> {
    let t = tools();
    let m = vec![Message::user("say hi")];
    p.body(&request(&t, &m))
}

/// One attempt.
fn once(p: &mut dyn Provider, body: &[u8]) -> Result<Completion, ProviderError> {
    p.complete(body, Purpose::Turn, &mut |_| {}, &CancelToken::new())
}

type Retries = Vec<(u32, Duration, ErrorKind)>;

/// With retries, the way the runtime calls it.
fn with_retry(
    p: &mut dyn Provider,
    body: &[u8],
    policy: &RetryPolicy,
) -> (Result<Completion, ProviderError>, Retries) {
    let cancel = CancelToken::new();
    let mut retries = Vec::new();
    let r = retry::run(
        policy,
        || p.complete(body, Purpose::Turn, &mut |_| {}, &cancel),
        |n, d, e| retries.push((n, d, e.kind.clone())),
        &cancel,
    );
    (r, retries)
}

fn openai_chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    )
}

#[test]
fn requests_go_to_the_right_place_with_the_right_headers() {
    let s = FakeServer::start(vec![]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    assert_eq!(once(&mut p, &body).unwrap().text, "Done.");
    let mut local = OpenAi::new(
        HttpConfig::default(),
        &format!("{}/", s.openai_base()),
        None,
    );
    once(&mut local, &body).unwrap();
    let mut a = anthropic(&s);
    let abody = hello_body(&a);
    assert_eq!(once(&mut a, &abody).unwrap().text, "Done.");

    let r = s.requests();
    assert_eq!(r.len(), 3);
    assert_eq!(
        (r[0].method.as_str(), r[0].path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r[0].header("content-type"), Some("application/json"));
    assert_eq!(r[0].body, body);
    assert_eq!(r[1].path, "/v1/chat/completions");
    assert_eq!(r[1].header("authorization"), None);
    assert_eq!(r[2].path, "/v1/messages");
    assert_eq!(r[2].header("x-api-key"), Some(KEY));
    assert_eq!(r[2].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r[2].header("authorization"), None);
    assert_eq!(r[2].body, abody);
}

#[test]
fn c09_comments_pings_and_spacing_over_http() {
    let body = ":\n\n: PROCESSING\n\nevent: ping\ndata: {}\n\ndata:{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
    let s = FakeServer::start(vec![Reply::sse(body)]);
    let mut p = openai(&s);
    let mut shown = String::new();
    let c = p
        .complete(
            &hello_body(&p),
            Purpose::Turn,
            &mut |t| {
                if let tern::provider::Streamed::Text(t) = t {
                    shown.push_str(t)
                }
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(c.text, "hi");
    assert_eq!(shown, "hi");
}

fn openai_cut_stream() -> String {
    openai_chunk(json!({"content":"Hello, "}), Value::Null)
        + &openai_chunk(json!({"content":"wor"}), Value::Null)
}

#[test]
fn c10_openai_early_end_is_an_error_and_retried() {
    // Clean EOF (close-delimited body) and a broken chunked body both count as an early end.
    let s = FakeServer::start(vec![
        Reply::sse(openai_cut_stream()).close_delimited(),
        Reply::sse(openai_cut_stream()),
        openai_text("Hello, world").close_after(150),
        openai_text("Hello, world"),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    let mut shown = String::new();
    let e = p
        .complete(
            &body,
            Purpose::Turn,
            &mut |t| {
                if let tern::provider::Streamed::Text(t) = t {
                    shown.push_str(t)
                }
            },
            &CancelToken::new(),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::EarlyEnd, "{e}");
    assert_eq!(shown, "Hello, wor");
    let (r, retries) = with_retry(&mut p, &body, &fast());
    assert_eq!(r.unwrap().text, "Hello, world");
    assert_eq!(retries.len(), 2);
    assert!(
        retries.iter().all(|r| r.2 == ErrorKind::EarlyEnd),
        "{retries:?}"
    );
    assert_eq!(s.requests().len(), 4);
}

#[test]
fn c10_anthropic_early_end_is_an_error_and_retried() {
    let cut = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
    );
    let s = FakeServer::start(vec![
        Reply::sse(cut).close_delimited(),
        anthropic_text("Hello there").close_after(400),
        anthropic_text("Hello there"),
    ]);
    let mut p = anthropic(&s);
    let body = hello_body(&p);
    assert_eq!(once(&mut p, &body).unwrap_err().kind, ErrorKind::EarlyEnd);
    let (r, retries) = with_retry(&mut p, &body, &fast());
    assert_eq!(r.unwrap().text, "Hello there");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].2, ErrorKind::EarlyEnd);
}

#[test]
fn c11_fragments_joined_and_truncated_arguments_returned_raw() {
    let truncated = openai_chunk(
        json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\": "}}]}),
        Value::Null,
    ) + &openai_chunk(
        json!({"tool_calls":[{"index":0,"function":{"arguments":"\"ls"}}]}),
        Value::Null,
    ) + &openai_chunk(json!({}), json!("length"))
        + "data: [DONE]\n\n";
    let s = FakeServer::start(vec![
        Reply::sse(truncated),
        openai_tool_calls(&[("call_2", "bash", r#"{"command":"echo "hi""}"#)]),
        anthropic_tool_calls(&[("toolu_1", "bash", r#"{"command": "ls"#)]),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    let c = once(&mut p, &body).unwrap();
    assert_eq!(c.finish_reason, Some(tern::provider::Finish::Length));
    assert_eq!(c.tool_calls[0].arguments, r#"{"command": "ls"#);
    let c = once(&mut p, &body).unwrap();
    assert_eq!(c.tool_calls[0].arguments, r#"{"command":"echo "hi""}"#);
    assert_eq!(c.tool_calls[0].id, "call_2");
    let mut a = anthropic(&s);
    let c = {
        let b = hello_body(&a);
        once(&mut a, &b)
    }
    .unwrap();
    assert_eq!(c.tool_calls[0].arguments, r#"{"command": "ls"#);
    assert_eq!(c.tool_calls[0].name, "bash");
}

/// Histories with empty and whitespace-only assistant text: a strict server accepts every body
/// (it refuses empty or blank content and text blocks).
#[test]
fn c12_bodies_never_carry_empty_text_blocks() {
    let s = FakeServer::strict(vec![]);
    let t = tools();
    let call = ToolCall {
        id: "call_1".into(),
        name: "bash".into(),
        arguments: json!({"command":"true"}),
    };
    let histories = vec![
        vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: String::new(),
                tool_calls: vec![],
            },
            Message::user("hello?"),
        ],
        vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: " \n\t".into(),
                tool_calls: vec![],
            },
            Message::user("hello?"),
        ],
        vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: "  ".into(),
                tool_calls: vec![call.clone()],
            },
            Message::tool(&call, "ok", false),
        ],
    ];
    for h in &histories {
        for tail in [None, Some(" "), Some("<ws/>")] {
            let mut req = request(&t, h);
            req.tail = tail;
            let mut o = openai(&s);
            {
                let b = o.body(&req);
                once(&mut o, &b)
            }
            .unwrap();
            let mut a = anthropic(&s);
            {
                let b = a.body(&req);
                once(&mut a, &b)
            }
            .unwrap();
        }
    }
    // The strict server can say no: the check above is not vacuous.
    let bad = br#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":" "},{"role":"user","content":"x"}]}"#;
    let mut o = openai(&s);
    let e = once(&mut o, bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Status(400));
    assert!(e.message.contains("empty content"), "{e}");
}

const OVERLOADED: &str =
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;

#[test]
fn c13_overloaded_three_times_then_success() {
    let s = FakeServer::start(vec![
        Reply::status(529, OVERLOADED),
        Reply::status(529, OVERLOADED),
        Reply::status(529, OVERLOADED),
        anthropic_text("finally"),
    ]);
    let mut p = anthropic(&s);
    let body = hello_body(&p);
    let (r, retries) = with_retry(&mut p, &body, &fast());
    assert_eq!(r.unwrap().text, "finally");
    assert_eq!(
        retries.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(retries.iter().all(|r| r.2 == ErrorKind::Status(529)));
    assert!(
        retries.iter().all(|r| r.1 <= Duration::from_millis(5)),
        "{retries:?}"
    );
    assert_eq!(s.requests().len(), 4);
}

#[test]
fn c13_retry_after_honoured_up_to_the_cap() {
    let s = FakeServer::start(vec![
        Reply::status(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#,
        )
        .header("Retry-After", "7"),
        Reply::status(503, "busy").header("Retry-After", "0"),
        openai_text("ok"),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    let policy = fast();
    let (r, retries) = with_retry(&mut p, &body, &policy);
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(retries.len(), 2);
    // 7 s asked, capped at 300 ms (the jittered backoff alone is at most 5 ms).
    assert_eq!(retries[0].1, policy.max_retry_after);
    assert_eq!(retries[0].2, ErrorKind::Status(429));
    assert_eq!(retries[1].1, Duration::ZERO);
    // An HTTP date works too: one 2 s ahead is honoured as about 1–2 s when the cap allows it.
    let at = std::time::SystemTime::now() + Duration::from_secs(2);
    let s = FakeServer::start(vec![
        Reply::status(429, "{}").header("Retry-After", &httpdate::fmt_http_date(at)),
        openai_text("ok"),
    ]);
    let mut p = openai(&s);
    let policy = RetryPolicy {
        max_retry_after: Duration::from_secs(10),
        ..fast()
    };
    let (r, retries) = with_retry(&mut p, &body, &policy);
    assert_eq!(r.unwrap().text, "ok");
    assert!(
        retries[0].1 > Duration::from_millis(500) && retries[0].1 <= Duration::from_secs(2),
        "{retries:?}"
    );
}

#[test]
fn c13_total_retry_time_is_bounded() {
    let s = FakeServer::start(vec![]);
    s.set_default(Reply::status(529, OVERLOADED).header("Retry-After", "1"));
    let mut p = anthropic(&s);
    let body = hello_body(&p);
    let policy = RetryPolicy {
        max_total: Duration::from_millis(700),
        ..fast()
    };
    let t = Instant::now();
    let (r, retries) = with_retry(&mut p, &body, &policy);
    assert_eq!(r.unwrap_err().kind, ErrorKind::Status(529));
    // Waits of 300 ms (the capped Retry-After) fit at most twice into 700 ms.
    assert!((1..=2).contains(&retries.len()), "{retries:?}");
    assert!(retries.iter().all(|r| r.1 == Duration::from_millis(300)));
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn c13_overload_error_frame_in_a_200_stream_is_retried() {
    let anthropic_frame = format!("event: error\ndata: {OVERLOADED}\n\n");
    let openai_frame = "data: {\"error\":{\"message\":\"The server is overloaded, try again\",\"type\":\"server_error\",\"code\":\"overloaded\"}}\n\n";
    let s = FakeServer::start(vec![
        Reply::sse(anthropic_frame),
        anthropic_text("after overload"),
        Reply::sse(openai_frame),
        openai_text("after overload"),
    ]);
    let mut a = anthropic(&s);
    let (r, retries) = {
        let b = hello_body(&a);
        with_retry(&mut a, &b, &fast())
    };
    assert_eq!(r.unwrap().text, "after overload");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].2, ErrorKind::Overloaded);
    let mut o = openai(&s);
    let (r, retries) = {
        let b = hello_body(&o);
        with_retry(&mut o, &b, &fast())
    };
    assert_eq!(r.unwrap().text, "after overload");
    assert_eq!(retries[0].2, ErrorKind::Overloaded);
}

#[test]
fn c13_client_errors_are_never_retried_and_never_show_the_key() {
    for status in [400, 401, 403, 404, 413, 422] {
        let echo = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error"}}}}"#
        );
        let s = FakeServer::start(vec![Reply::status(status, &echo), openai_text("never")]);
        let mut p = openai(&s);
        let (r, retries) = {
            let b = hello_body(&p);
            with_retry(&mut p, &b, &fast())
        };
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Status(status));
        assert!(retries.is_empty());
        assert_eq!(s.requests().len(), 1);
        assert!(e.message.contains(&status.to_string()), "{e}");
        assert!(e.message.contains("Incorrect API key"), "{e}");
        assert!(
            !e.message.contains(KEY) && !e.message.contains("0123456789abcdef"),
            "{e}"
        );
    }
}

#[test]
fn context_overflow_is_recognised_for_each_provider() {
    let cases: Vec<(u16, &str, bool)> = vec![
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            false,
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            false,
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            true,
        ),
        (
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
            false,
        ),
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}"#,
            false,
        ),
    ];
    for (status, body, is_anthropic) in cases {
        let s = FakeServer::start(vec![Reply::status(status, body)]);
        let mut p: Box<dyn Provider> = if is_anthropic {
            Box::new(anthropic(&s))
        } else {
            Box::new(openai(&s))
        };
        let b = hello_body(p.as_ref());
        let (r, retries) = with_retry(p.as_mut(), &b, &fast());
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ContextOverflow, "{body}");
        assert!(retries.is_empty());
        assert!(e.message.contains("context"), "{e}");
    }
}

/// llama.cpp streams pretty-printed arguments over several deltas. They arrive intact, parse once,
/// and the next request (with the tool result) is accepted by a strict server; a request ending
/// in unanswered tool calls is refused as llama.cpp does.
#[test]
fn c21_pretty_printed_arguments_from_llama_cpp() {
    let mut stream = openai_chunk(
        json!({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"ZPtq3fXi","type":"function","function":{"name":"bash","arguments":""}}]}),
        Value::Null,
    );
    for frag in [
        "{\n",
        "  \"command\"",
        ": \"echo hi > ",
        "hello.txt\"\n",
        "}",
    ] {
        stream += &openai_chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":frag}}]}),
            Value::Null,
        );
    }
    stream += &openai_chunk(json!({}), json!("tool_calls"));
    stream += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":20},\"timings\":{\"cache_n\":256,\"prompt_n\":44}}\n\ndata: [DONE]\n\n";
    let s = FakeServer::strict(vec![Reply::sse(stream)]);
    let mut p = openai(&s);
    let t = tools();
    let mut history = vec![Message::user("make hello.txt")];
    let c = {
        let b = p.body(&request(&t, &history));
        once(&mut p, &b)
    }
    .unwrap();
    assert_eq!(c.tool_calls.len(), 1);
    let raw = &c.tool_calls[0];
    assert_eq!(
        raw.arguments,
        "{\n  \"command\": \"echo hi > hello.txt\"\n}"
    );
    assert_eq!(c.usage.cached_tokens, 256);
    assert_eq!(c.usage.input_tokens, 300);
    let args: Value = serde_json::from_str(&raw.arguments).unwrap();
    let call = ToolCall {
        id: raw.id.clone(),
        name: raw.name.clone(),
        arguments: args,
    };
    history.push(Message::Assistant {
        reasoning: None,
        text: c.text.clone(),
        tool_calls: vec![call.clone()],
    });
    // The stored line stays one line.
    assert!(!serde_json::to_string(&history[1]).unwrap().contains('\n'));

    // Unanswered tool calls: refused like llama.cpp.
    let e = {
        let b = p.body(&request(&t, &history));
        once(&mut p, &b)
    }
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Status(400));
    assert!(
        e.message
            .contains("Cannot continue an assistant message that contains tool calls"),
        "{e}"
    );

    history.push(Message::tool(&call, "(no output)", false));
    let body = p.body(&request(&t, &history));
    assert_eq!(once(&mut p, &body).unwrap().text, "Done.");
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        sent["messages"][2]["tool_calls"][0]["function"]["arguments"],
        r#"{"command":"echo hi > hello.txt"}"#
    );
}

/// A stream with a multi-byte character and CRLF line endings, cut into two reads at every byte
/// offset (and into one-byte reads), always gives the same completion.
#[test]
fn rechunking_at_every_byte_offset_gives_the_same_completion() {
    let openai_stream = (openai_chunk(json!({"content":"Grüße → "}), Value::Null)
        + &openai_chunk(json!({"content":"✓ done"}), Value::Null)
        + &openai_chunk(json!({"tool_calls":[{"index":0,"id":"c1","function":{"name":"bash","arguments":"{\"command\":"}}]}), Value::Null)
        + &openai_chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":"\"echo é\"}"}}]}), Value::Null)
        + &openai_chunk(json!({}), json!("tool_calls"))
        + ": keep-alive\n\n"
        // A named event is ignored only if its name stays attached across a CR|LF split.
        + "event: ping\ndata: {\"choices\":[{\"delta\":{\"content\":\"PING\"}}]}\n\n"
        // Two data lines make one JSON document only if they are joined.
        + "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"!\"}}]}\n\n"
        + "data: [DONE]\n\n")
        .replace('\n', "\r\n");
    let anthropic_stream = concat!(
        "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":2048,\"output_tokens\":1}}}\r\n\r\n",
        "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n",
        "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Grüße → ✓\"}}\r\n\r\n",
        "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
        "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\r\n\r\n",
        "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n",
    );
    let s = FakeServer::start(vec![]);
    for (stream, is_anthropic) in [(openai_stream.as_str(), false), (anthropic_stream, true)] {
        let mut p: Box<dyn Provider> = if is_anthropic {
            Box::new(anthropic(&s))
        } else {
            Box::new(openai(&s))
        };
        let body = hello_body(p.as_ref());
        s.push(Reply::sse(stream));
        let whole = once(p.as_mut(), &body).unwrap();
        if is_anthropic {
            assert_eq!(whole.text, "Grüße → ✓");
            assert_eq!(whole.usage.cached_tokens, 2048);
        } else {
            assert_eq!(whole.text, "Grüße → ✓ done!");
            assert_eq!(whole.tool_calls[0].arguments, "{\"command\":\"echo é\"}");
        }
        for i in 1..stream.len() {
            s.push(
                Reply::sse(stream)
                    .split_at(&[i])
                    .delay_between(Duration::from_millis(1)),
            );
            let c = once(p.as_mut(), &body).unwrap_or_else(|e| panic!("split at {i}: {e}"));
            assert_eq!(c, whole, "split at {i}");
        }
        s.push(Reply::sse(stream).split_every(1));
        assert_eq!(once(p.as_mut(), &body).unwrap(), whole);
    }
}

#[test]
fn idle_timeout_before_and_between_chunks() {
    let cfg = HttpConfig {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_millis(300),
    };
    let s = FakeServer::start(vec![
        openai_text("late").delay_before(Duration::from_secs(20)),
        openai_text("stalls midway")
            .split_at(&[60])
            .delay_between(Duration::from_secs(20)),
    ]);
    let mut p = OpenAi::new(cfg, &s.openai_base(), None);
    let body = hello_body(&p);
    for what in ["before the head", "between chunks"] {
        let t = Instant::now();
        let e = once(&mut p, &body).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{what}: {e}");
        assert!(e.retryable());
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: not the 20 s the server sleeps"
        );
    }
}

#[test]
fn cancel_stops_a_silent_request_and_a_retry_wait() {
    let s = FakeServer::start(vec![
        openai_text("late").delay_before(Duration::from_secs(30)),
        openai_text("stalls midway")
            .split_at(&[60])
            .delay_between(Duration::from_secs(30)),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    for what in ["waiting for the head", "mid-stream"] {
        let cancel = CancelToken::new();
        let asked = s.requests().len();
        let t = Instant::now();
        let e = std::thread::scope(|sc| {
            // Once the server holds the request (it sends the head 30 s later, or the first
            // bytes at once and the rest 30 s later): a cancel at any moment after that is one
            // of this case's, so no fixed time decides what is tested.
            sc.spawn(|| {
                crate::support::procs::eventually(Duration::from_secs(20), || {
                    s.requests().len() > asked
                });
                if what == "mid-stream" {
                    std::thread::sleep(Duration::from_millis(200));
                }
                cancel.cancel();
            });
            p.complete(&body, Purpose::Turn, &mut |_| {}, &cancel)
                .unwrap_err()
        });
        assert_eq!(e.kind, ErrorKind::Cancelled, "{what}: {e}");
        assert!(!e.retryable());
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: not the 30 s the server sleeps"
        );
    }
    // Cancel during a long Retry-After wait.
    let s = FakeServer::start(vec![Reply::status(429, "{}").header("Retry-After", "60")]);
    let mut p = openai(&s);
    let cancel = CancelToken::new();
    let policy = RetryPolicy {
        max_retry_after: Duration::from_secs(60),
        max_total: Duration::from_secs(600),
        ..fast()
    };
    let t = Instant::now();
    let r = retry::run(
        &policy,
        || p.complete(&body, Purpose::Turn, &mut |_| {}, &cancel),
        |_, _, _| cancel.cancel(),
        &cancel,
    );
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn connection_refused_is_unreachable_and_fails_after_a_short_bounded_retry() {
    // Refused for the whole test: bound, never listening (see `refusing_port`).
    let (_refusing, port) = crate::support::procs::refusing_port();
    let mut p = OpenAi::new(
        HttpConfig::default(),
        &format!("http://127.0.0.1:{port}/v1"),
        Some(KEY.into()),
    );
    let e = once(&mut p, b"{}").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(e.retryable());
    assert!(!e.message.contains(KEY));
    assert!(
        e.message.contains(&format!("127.0.0.1:{port}")),
        "names the server: {e}"
    );
    // With the default 300 s budget it still gives up after three attempts, within seconds.
    let t = Instant::now();
    let (r, retries) = with_retry(&mut p, b"{}", &RetryPolicy::default());
    let e = r.unwrap_err();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(e.message.contains("tried 3 times"), "{e}");
}

/// An unknown host name is unreachable too: a short bounded retry, one clear line.
#[test]
fn an_unknown_host_fails_fast() {
    let mut p = OpenAi::new(
        HttpConfig::default(),
        "http://no-such-host.invalid/v1",
        None,
    );
    let t = Instant::now();
    let (r, _) = with_retry(&mut p, b"{}", &RetryPolicy::default());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!e.message.contains('\n'), "one line: {e}");
}

/// A server that keeps the connection alive with comments (or drips bytes of an event that
/// never completes) times out like a silent one: progress is a complete event, not a byte.
#[test]
fn keep_alive_comments_and_drips_do_not_count_as_progress() {
    let mut comments = String::new();
    for _ in 0..200 {
        comments.push_str(": keep-alive\n\n");
    }
    let drip = "data: {\"choices\":[{\"delta\":{\"content\":\"never ends";
    let s = FakeServer::start(vec![
        Reply::sse(comments)
            .split_every(14)
            .delay_between(Duration::from_millis(40)),
        Reply::sse(drip)
            .split_every(1)
            .delay_between(Duration::from_millis(40)),
    ]);
    let http = HttpConfig {
        idle_timeout: Duration::from_millis(800),
        ..HttpConfig::default()
    };
    for what in ["comments", "drip"] {
        let mut p = OpenAi::new(http, &s.openai_base(), None);
        let t = Instant::now();
        let e = once(&mut p, b"{}").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{what}: {e}");
        assert!(e.message.contains("keep-alive"), "{what}: {e}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn huge_error_bodies_are_cut() {
    let big = format!("{{\"error\":{{\"message\":\"{}\"}}}}", "x".repeat(1 << 20));
    let s = FakeServer::start(vec![Reply::status(500, &big)]);
    let mut p = openai(&s);
    let e = {
        let b = hello_body(&p);
        once(&mut p, &b)
    }
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Status(500));
    assert!(e.message.len() < 1000, "{} bytes", e.message.len());
}

/// Consecutive requests of a growing session share their prefix; the simulated cache reports it
/// and both wires normalise the usage the same way.
#[test]
fn prefix_cache_usage_is_reported_for_consecutive_requests() {
    let big_system = "Rules. ".repeat(1500);
    let t = tools();
    for is_anthropic in [false, true] {
        let s = FakeServer::start(vec![]);
        let reply = || {
            if is_anthropic {
                anthropic_text("ok").auto_usage()
            } else {
                openai_text("ok").auto_usage()
            }
        };
        let mut p: Box<dyn Provider> = if is_anthropic {
            Box::new(anthropic(&s))
        } else {
            Box::new(openai(&s))
        };
        let mut history = vec![Message::user("first")];
        let mut prev: Option<Vec<u8>> = None;
        for turn in 0..3 {
            let mut req = request(&t, &history);
            req.system = &big_system;
            let body = p.body(&req);
            s.push(reply());
            let c = once(p.as_mut(), &body).unwrap();
            let (input, cached) = simulated_usage(prev.as_deref(), &body);
            assert_eq!(c.usage.input_tokens, input, "turn {turn}");
            assert_eq!(c.usage.cached_tokens, cached, "turn {turn}");
            if turn > 0 {
                assert!(cached >= 2048, "turn {turn}: cached {cached}");
            }
            prev = Some(body);
            history.push(Message::Assistant {
                reasoning: None,
                text: format!("answer {turn}"),
                tool_calls: vec![],
            });
            history.push(Message::user(format!("next {turn}")));
        }
    }
}

/// A server that ignores `stream: true` answers plain JSON: a clear error, not an early end
/// retried for minutes; a JSON error object with status 200 is still classified.
#[test]
fn json_instead_of_a_stream() {
    let plain = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"the service is overloaded with joy"},"finish_reason":"stop"}]}"#;
    let s = FakeServer::start(vec![
        Reply::status(200, plain),
        Reply::status(
            200,
            r#"{"error":{"message":"Rate limit exceeded","code":429}}"#,
        ),
        openai_text("streamed"),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    let (r, retries) = with_retry(&mut p, &body, &fast());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadResponse, "{e}");
    assert!(e.message.contains("stream"), "{e}");
    assert!(retries.is_empty());
    let (r, retries) = with_retry(&mut p, &body, &fast());
    assert_eq!(r.unwrap().text, "streamed");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].2, ErrorKind::Overloaded);
}

/// EOF or a broken connection after a non-null finish_reason is a complete answer (only the
/// `[DONE]` line was lost); Anthropic needs `message_stop`.
#[test]
fn c10_a_break_after_finish_reason_is_complete() {
    let full = openai_text("Hello").render((0, 0));
    let s = FakeServer::start(vec![
        openai_text("Hello").close_after(full.len() - 5),
        openai_text("Hello")
            .close_after(full.len() - 5)
            .close_delimited(),
    ]);
    let mut p = openai(&s);
    let body = hello_body(&p);
    for _ in 0..2 {
        let c = once(&mut p, &body).unwrap();
        assert_eq!(c.text, "Hello");
        assert_eq!(c.finish_reason, Some(tern::provider::Finish::Stop));
    }
    let full = anthropic_text("Hello").render((0, 0));
    let s = FakeServer::start(vec![anthropic_text("Hello").close_after(full.len() - 5)]);
    let mut a = anthropic(&s);
    let body = hello_body(&a);
    assert_eq!(once(&mut a, &body).unwrap_err().kind, ErrorKind::EarlyEnd);
}
