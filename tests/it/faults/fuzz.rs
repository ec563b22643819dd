//! Fuzzing (proptest) of the parsers that read bytes tern does not control: the SSE decoder (a
//! server's stream), the JSONL loader and the history repair (a file a crash or a person left),
//! the bash tool's argument parser (whatever the model sends) and the output shaper (whatever a
//! command prints). Case counts are modest (`FUZZ_CASES`, or `PROPTEST_CASES` to override) so CI
//! stays fast; each property is one that a real fault would break.

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use tern::message::{Message, ToolCall};
use tern::provider::sse::SseParser;
use tern::provider::{Request, anthropic, openai};
use tern::runtime::repair::repair;
use tern::store::fsutil::read_jsonl;
use tern::tools::bash::{DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, parse_args};
use tern::tools::output::{Limits, Shaper};

use crate::support::{Wire, validate};

/// Cases per property: a few hundred runs in a few seconds.
const FUZZ_CASES: u32 = 96;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FUZZ_CASES);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- SSE

/// Streams that look like SSE (fields, comments, blank lines, three line endings, a BOM,
/// multi-byte and invalid UTF-8) mixed with raw noise.
fn sse_stream() -> impl Strategy<Value = Vec<u8>> {
    let end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    let value = "[a-z0-9 é✓:{}\\[\\]\",]{0,24}";
    let line = prop_oneof![
        (value, end.clone()).prop_map(|(v, e)| format!("data: {v}{e}").into_bytes()),
        (value, end.clone()).prop_map(|(v, e)| format!("data:{v}{e}").into_bytes()),
        ("[a-z_]{0,8}", end.clone()).prop_map(|(v, e)| format!("event: {v}{e}").into_bytes()),
        (value, end.clone()).prop_map(|(v, e)| format!(": {v}{e}").into_bytes()),
        ("[0-9]{0,4}", end.clone()).prop_map(|(v, e)| format!("retry: {v}{e}").into_bytes()),
        end.clone().prop_map(|e| e.as_bytes().to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"data: \xff\xfe\xc3\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..24),
    ];
    proptest::collection::vec(line, 0..48).prop_map(|ls| ls.concat())
}

/// Splits `bytes` at the given fractions.
fn split<'a>(bytes: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for a in at {
        out.push(&bytes[start..a]);
        start = a;
    }
    out.push(&bytes[start..]);
    out
}

/// Feeds `chunks` to a parser with `limit`: the events, or the error's text.
fn parse(chunks: &[&[u8]], limit: usize) -> Result<Vec<(Option<String>, String)>, String> {
    let mut p = SseParser::with_limit(limit);
    let mut out = Vec::new();
    for c in chunks {
        p.push(c, &mut out).map_err(|e| e.to_string())?;
    }
    p.finish(&mut out);
    Ok(out.into_iter().map(|e| (e.event, e.data)).collect())
}

proptest! {
    #![proptest_config(config())]

    /// The decoder never panics, gives the same events however the bytes are split (a read may
    /// end anywhere, inside a CRLF or a character), and never holds more than its limit.
    #[test]
    fn sse_decoder_is_split_invariant_and_bounded(
        stream in sse_stream(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        limit in prop_oneof![Just(16usize), Just(64), Just(1 << 20)],
    ) {
        let whole = parse(&[&stream], limit);
        prop_assert_eq!(&parse(&split(&stream, &cuts), limit), &whole);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        prop_assert_eq!(&parse(&bytes, limit), &whole);
        if let Ok(events) = &whole {
            for (_, data) in events {
                prop_assert!(data.len() <= limit, "an event of {} bytes over a {limit} limit", data.len());
            }
        }
    }
}

// ---------------------------------------------------------------- JSONL and repair

/// A few call ids, so results meet calls, repeat, and miss.
fn id() -> impl Strategy<Value = String> {
    (0..5u8).prop_map(|i| format!("c{i}"))
}

fn words() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z é✓]{1,20}",
        1 => Just(String::new()),
        1 => Just("  \n\t ".to_string()),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(json!({"command": "echo hi"})),
        2 => Just(json!({})),
        1 => Just(json!({"todos": [{"id": "1", "content": "x", "status": "pending"}]})),
        // Not an object: tern never stores it (README: arguments are always an object), a
        // damaged or hand-edited file may hold it.
        1 => Just(json!("ls -la")),
    ]
}

/// Messages as tern stores them, and damaged ones: blank texts, results for no call, calls
/// without results, duplicate results.
fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        words().prop_map(Message::user),
        (
            words(),
            proptest::collection::btree_set(id(), 0..3),
            arguments()
        )
            .prop_map(|(text, ids, arguments)| Message::Assistant {
                reasoning: None,
                text,
                tool_calls: ids
                    .into_iter()
                    .map(|id| ToolCall {
                        id,
                        name: "bash".into(),
                        arguments: arguments.clone(),
                    })
                    .collect(),
            }),
        (id(), words(), any::<bool>()).prop_map(|(tool_call_id, content, is_error)| {
            Message::Tool {
                tool_call_id,
                name: "bash".into(),
                content,
                is_error,
            }
        }),
    ]
}

/// A conversation.jsonl: message lines and garbage lines, maybe cut anywhere (a torn write).
fn conversation() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        6 => message().prop_map(|m| serde_json::to_string(&m).expect("message")),
        1 => prop_oneof![
            Just("{".to_string()),
            Just("not json".to_string()),
            Just("{}".to_string()),
            Just("[1, 2]".to_string()),
            Just("{\"role\":\"robot\",\"content\":\"x\"}".to_string()),
            Just("{\"role\":\"user\",\"content\":\"a\u{2028}b\"}".to_string()),
        ],
    ];
    (
        proptest::collection::vec(line, 0..24),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(lines, cut, torn)| {
            let mut bytes = lines.join("\n").into_bytes();
            if !bytes.is_empty() {
                bytes.push(b'\n');
            }
            if torn {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        })
}

/// Every assistant tool call answered exactly once, right after its message; no result for
/// no call; no empty message.
fn history_problems(h: &[Message]) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: HashSet<String> = HashSet::new();
    for (i, m) in h.iter().enumerate() {
        match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                if !open.remove(tool_call_id) {
                    out.push(format!(
                        "message {i}: a result for no open call {tool_call_id:?}"
                    ));
                }
                if content.trim().is_empty() {
                    out.push(format!("message {i}: an empty tool result"));
                }
            }
            other => {
                if !open.is_empty() {
                    out.push(format!("message {i}: calls {open:?} have no result"));
                    open.clear();
                }
                match other {
                    Message::User { content, .. } if content.trim().is_empty() => {
                        out.push(format!("message {i}: an empty user message"))
                    }
                    Message::Assistant {
                        text, tool_calls, ..
                    } => {
                        if text.trim().is_empty() && tool_calls.is_empty() {
                            out.push(format!("message {i}: an empty assistant message"));
                        }
                        open = tool_calls.iter().map(|c| c.id.clone()).collect();
                    }
                    _ => {}
                }
            }
        }
    }
    if !open.is_empty() {
        out.push(format!("the end: calls {open:?} have no result"));
    }
    out
}

/// The request tern would send for `history` plus a new prompt, in `wire`'s format.
fn request(history: &[Message], wire: Wire) -> Value {
    let mut messages = history.to_vec();
    messages.push(Message::user("go on"));
    let tools = tern::tools::specs();
    let req = Request {
        model: "m",
        system: "You are tern.",
        tools: &tools,
        messages: &messages,
        tail: Some("<tern:work_state>\nnothing yet\n</tern:work_state>"),
        cache_key: None,
        max_output_tokens: 1024,
        temperature: None,
        official_openai: false,
        tools_allowed: true,
        long_cache: false,
        reasoning: Default::default(),
    };
    let body = match wire {
        Wire::OpenAi => openai::body(&req),
        Wire::Anthropic => anthropic::body(&req),
    };
    serde_json::from_slice(&body).expect("a body is JSON")
}

proptest! {
    #![proptest_config(config())]

    /// Whatever a crash or a person left in conversation.jsonl: the loader never fails on it
    /// and accounts for every line; after repair the history is valid (each call answered
    /// exactly once, no empty message) and the next request is one a strict provider accepts
    /// on both wires; repairing again changes nothing.
    #[test]
    fn jsonl_loader_and_repair_make_any_history_valid(bytes in conversation()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("conversation.jsonl");
        std::fs::write(&path, &bytes).expect("write");
        let read = read_jsonl::<Message>(&path).expect("the loader never fails on content");
        let lines = String::from_utf8_lossy(&bytes)
            .split('\n')
            .filter(|l| !l.trim().is_empty())
            .count();
        prop_assert_eq!(read.items.len() + read.skipped.len(), lines);
        if read.torn_tail {
            prop_assert!(!bytes.ends_with(b"\n"));
        }
        let (history, _) = repair(read.items, &read.skipped);
        let problems = history_problems(&history);
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(problems.is_empty(), "{:?}\nafter repairing\n{}", problems, text);
        for wire in [Wire::OpenAi, Wire::Anthropic] {
            let body = request(&history, wire);
            prop_assert!(
                validate(wire, &body).is_ok(),
                "{:?} refuses the request: {:?}\nafter repairing\n{}",
                wire,
                validate(wire, &body),
                text
            );
        }
        let (again, report) = repair(history.clone(), &[]);
        prop_assert!(!report.changed(), "a second repair changed {:?}", report);
        prop_assert_eq!(again, history);
    }
}

// ---------------------------------------------------------------- bash arguments

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z0-9 \\x00é]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{0,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn timeout_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-5i64..700).prop_map(|n| json!(n)),
        (-5i64..700).prop_map(|n| json!(n.to_string())),
        (-5i64..700).prop_map(|n| json!(n as f64 + 0.5)),
        (-5i64..700).prop_map(|n| json!(n as f64)),
        Just(json!(u64::MAX)),
        Just(json!(1e300)),
        json_value(),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Any JSON at all: no panic, and what is accepted is runnable (a non-blank command
    /// without NUL, a timeout from 1 to 600 s).
    #[test]
    fn bash_arguments_any_json(v in json_value()) {
        if let Ok(a) = parse_args(&v) {
            prop_assert!(!a.command.trim().is_empty() && !a.command.contains('\0'));
            prop_assert!((1..=MAX_TIMEOUT_S).contains(&a.timeout.as_secs()));
        }
    }

    /// The shapes the model sends: accepted exactly when the command is runnable and the
    /// timeout a whole number of seconds in range (absent or null: the default).
    #[test]
    fn bash_arguments_command_and_timeout(
        command in "[a-z \\x00]{0,8}",
        timeout in proptest::option::of(timeout_value()),
    ) {
        let mut args = json!({"command": command});
        if let Some(t) = &timeout {
            args["timeout_s"] = t.clone();
        }
        let want_timeout: Option<u64> = match &timeout {
            None | Some(Value::Null) => Some(DEFAULT_TIMEOUT_S),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i128))
                .filter(|n| (1..=i128::from(MAX_TIMEOUT_S)).contains(n))
                .map(|n| n as u64),
            Some(Value::String(s)) => s
                .trim()
                .parse::<i128>()
                .ok()
                .filter(|n| (1..=i128::from(MAX_TIMEOUT_S)).contains(n))
                .map(|n| n as u64),
            Some(_) => None,
        };
        let runnable = !command.trim().is_empty() && !command.contains('\0');
        match parse_args(&args) {
            Ok(a) => {
                prop_assert!(runnable, "accepted {args}");
                prop_assert_eq!(Some(a.timeout.as_secs()), want_timeout, "{}", args);
                prop_assert_eq!(a.command, command);
            }
            Err(e) => {
                prop_assert!(!runnable || want_timeout.is_none(), "refused {args}: {e}");
                prop_assert!(matches!(e, tern::tools::ToolError::Arguments(_)), "{e:?}");
                prop_assert!(!e.message().trim().is_empty());
            }
        }
    }
}

// ---------------------------------------------------------------- output shaper

/// What commands print: text with multi-byte characters, escape sequences (some cut short),
/// carriage-return redraws, NULs, invalid UTF-8, long lines, binary noise.
fn output() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => "[a-z0-9 éü✓日本\n]{0,40}".prop_map(String::into_bytes),
        1 => Just(b"\x1b[31mred\x1b[0m".to_vec()),
        1 => Just(b"\x1b]0;title\x07".to_vec()),
        1 => Just(b"\x1b[".to_vec()),
        1 => Just(b"50%\r75%\r100%\n".to_vec()),
        1 => Just(b"\0".to_vec()),
        1 => Just(b"\xff\xc3".to_vec()),
        1 => (1usize..3000).prop_map(|n| "é".repeat(n).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ];
    proptest::collection::vec(piece, 0..32).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config())]

    /// Never panics; the text is within the caps (plus the one marker line), has no NUL or
    /// ESC, cuts only on character boundaries (valid input never gains U+FFFD), and a cut
    /// output keeps the full raw bytes in its spill file.
    #[test]
    fn output_shaper_is_bounded_and_cuts_on_char_boundaries(
        raw in output(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
        head in 0usize..300,
        tail in 0usize..300,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Limits { head_bytes: head, tail_bytes: tail, memory_bytes: 256, spill_bytes: 1 << 20 };
        let mut s = Shaper::new(&dir.path().join("spill"), limits);
        let mut peak = 0;
        for c in split(&raw, &cuts) {
            s.push(c);
            peak = peak.max(s.buffered_bytes());
        }
        let out = s.finish();
        let marker = 400 + dir.path().as_os_str().len();
        prop_assert!(out.text.len() <= head + tail + marker, "{} bytes over {}+{}", out.text.len(), head, tail);
        prop_assert!(!out.text.contains('\0') && !out.text.contains('\x1b'));
        if std::str::from_utf8(&raw).is_ok() {
            prop_assert!(!out.text.contains(char::REPLACEMENT_CHARACTER), "{:?}", out.text);
        }
        prop_assert!(peak <= head + 3 * tail + 256 + (64 << 10) + 2 * raw.len().max(1), "peak {peak}");
        match (&out.spill_path, out.cut) {
            (Some(p), true) => prop_assert_eq!(std::fs::read(p).expect("spill"), raw),
            (Some(p), false) => prop_assert!(false, "a spill file {} for an uncut output", p.display()),
            (None, _) => {}
        }
    }
}
