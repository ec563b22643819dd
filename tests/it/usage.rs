//! Usage figures from the provider are checked before they are counted: a negative, absurd
//! (above 100 M tokens in one request) or inconsistent (more cached than prompt tokens) report
//! is recorded as estimated, with a warning, and never summed into the totals.

use crate::support::cli::WireWs;
use crate::support::{Reply, Wire};

/// An OpenAI stream answering "Done." with `usage` as given (raw JSON text).
fn openai_with_usage(usage: &str) -> Reply {
    Reply::sse(format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"Done.\"}}}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
         data: {{\"choices\":[],\"usage\":{usage}}}\n\n\
         data: [DONE]\n\n"
    ))
}

/// An Anthropic stream answering "Done." with these start and delta `usage` objects.
fn anthropic_with_usage(start: &str, delta: &str) -> Reply {
    let ev = |name: &str, data: &str| format!("event: {name}\ndata: {data}\n\n");
    Reply::sse(
        [
            ev(
                "message_start",
                &format!(r#"{{"type":"message_start","message":{{"id":"msg_1","usage":{start}}}}}"#),
            ),
            ev(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}"#,
            ),
            ev(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            ev(
                "message_delta",
                &format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}},"usage":{delta}}}"#
                ),
            ),
            ev("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .concat(),
    )
}

/// Runs one `exec` answered by `reply` and checks the record: the warning, no absurd figure in
/// `meta.json`, `tern sessions` or `tern stats`, and the request marked estimated.
fn refused(wire: Wire, reply: Reply, absurd: &str) {
    let ws = WireWs::new(wire, vec![reply]);
    let out = ws.ok(&["exec", "hello"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("usage report was not believed"), "{stderr}");
    let meta = ws.json("meta.json");
    for k in ["input_tokens", "cached_tokens", "output_tokens"] {
        let n = meta["usage"][k].as_u64().expect("a count");
        assert!(n < 100_000_000, "{k} = {n} in {meta}");
    }
    assert!(
        meta["usage"]["cached_tokens"].as_u64() <= meta["usage"]["input_tokens"].as_u64(),
        "{meta}"
    );
    for args in [&["sessions"][..], &["stats"], &["stats", "--json"]] {
        let out = ws.ok(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains(absurd), "{args:?}: {text}");
    }
    let stats = String::from_utf8_lossy(&ws.ok(&["stats"]).stdout).into_owned();
    assert!(stats.contains("estimated"), "{stats}");
    let usage: Vec<_> = ws
        .events()
        .into_iter()
        .filter(|e| e["type"] == "usage")
        .collect();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["estimated"], true, "{usage:?}");
}

#[test]
fn an_openai_report_of_u64_max_and_negative_tokens_is_not_counted() {
    refused(
        Wire::OpenAi,
        openai_with_usage(r#"{"prompt_tokens":-100,"completion_tokens":18446744073709551615}"#),
        "18446744073709551615",
    );
}

#[test]
fn an_openai_report_of_more_cached_than_prompt_tokens_is_not_counted() {
    refused(
        Wire::OpenAi,
        openai_with_usage(
            r#"{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":900000}}"#,
        ),
        "900000",
    );
}

#[test]
fn an_anthropic_report_above_100m_tokens_is_not_counted() {
    refused(
        Wire::Anthropic,
        anthropic_with_usage(
            r#"{"input_tokens":-5,"output_tokens":1}"#,
            r#"{"output_tokens":250000000}"#,
        ),
        "250000000",
    );
}

/// A sane report is believed as it is (no warning, not estimated).
#[test]
fn a_sane_report_is_counted_as_sent() {
    let ws = WireWs::new(
        Wire::OpenAi,
        vec![openai_with_usage(
            r#"{"prompt_tokens":1234,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1000}}"#,
        )],
    );
    let out = ws.ok(&["exec", "hello"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("not believed"),
        "{out:?}"
    );
    let meta = ws.json("meta.json");
    assert_eq!(meta["usage"]["input_tokens"], 1234, "{meta}");
    assert_eq!(meta["usage"]["cached_tokens"], 1000, "{meta}");
    assert_eq!(meta["usage"]["output_tokens"], 5, "{meta}");
}
