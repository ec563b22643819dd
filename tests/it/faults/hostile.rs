//! A hostile provider, through the real binary: connection resets mid-stream, invalid JSON in
//! data lines, a huge event, a one-byte-a-second drip, endless `: keep-alive` comments, 429 and
//! 500 storms, duplicate tool-call ids, non-JSON tool arguments, a refused connection, an unknown
//! host. Each run must end within a bound (a short `--idle-timeout` and `--max-retry-time` where
//! the case is about them; tern's defaults where the issue says the defaults must be fast) in a
//! clear error (exit 1 or 75, a `result` naming the error) or a valid turn, never a panic; the
//! session it leaves must parse, and a `tern exec --continue` against a strict provider must then
//! complete (no torn session).

use std::time::Duration;

use serde_json::{Value, json};

use super::check::{self, Acked};
use super::run::{Run, Site, run};
use crate::support::script::bash_args;
use crate::support::{FakeServer, Reply, openai_text, openai_tool_calls};

/// The short timeouts of the cases about them.
const SHORT: [&str; 4] = ["--idle-timeout", "2", "--max-retry-time", "3"];

/// How long a case may take: far above what the short timeouts allow (2 s of silence, 3 s of
/// retries, backoff), far below the 300 s defaults a hang would sit out.
const BOUND: Duration = Duration::from_secs(25);

/// How a case must end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// A completed turn (exit 0).
    Turn,
    /// A clear error: exit 1 or 75 and a `result` with the error.
    Error,
}

/// Runs `tern exec --json FLAGS "Say hello."` against `fake` (or `base` when given: a server
/// that is not there), then checks the run, the files, and a resume against a strict provider.
/// Returns the run for the case's own checks.
fn case(name: &str, fake: &FakeServer, base: Option<&str>, flags: &[&str], want: Want) -> Run {
    let site = Site::new();
    let url = base
        .map(str::to_string)
        .unwrap_or_else(|| fake.openai_base());
    let mut args = vec!["exec", "--json"];
    args.extend_from_slice(flags);
    args.push("Say hello.");
    let r = run(site.tern(&url, &args), None, BOUND);
    let mut problems = Vec::new();
    if r.hung {
        problems.push(format!("still running after {BOUND:?} (killed)"));
    }
    if r.stderr.contains("panicked") || r.code == Some(101) {
        problems.push(format!("panicked: {}", r.stderr));
    }
    let result: Value = r
        .stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    if !r.hung {
        if result["type"] != "result" {
            problems.push(format!(
                "the last stdout line is no `result`: {:?}",
                r.stdout.lines().last()
            ));
        }
        match want {
            Want::Turn if r.code != Some(0) => {
                problems.push(format!("no completed turn: {}", r.summary()))
            }
            Want::Error
                if !matches!(r.code, Some(1) | Some(75))
                    || result["error"].as_str().is_none_or(|e| e.trim().is_empty()) =>
            {
                problems.push(format!("no clear error: {} / {result}", r.summary()))
            }
            _ => {}
        }
    }
    // Whatever happened, the session must be whole: every file parses, and it continues
    // against a strict provider.
    let state = site.state();
    let mut acked = Acked::default();
    acked.observe(&state, &[&r.stdout]);
    for v in check::files(&state, &acked, site.current().as_deref()) {
        problems.push(format!("{}: {}", v.invariant, v.detail));
    }
    if site.current().is_some() {
        // Its answer also serves as a compaction summary, should the resume need one (a large
        // answer fills the context window).
        let good = FakeServer::strict(vec![]);
        good.set_default(openai_text(
            "Summary so far: the person asked for a greeting and the provider misbehaved. Next: answer again.",
        ));
        let after = run(
            site.tern(
                &good.openai_base(),
                &["exec", "--json", "--continue", "go on"],
            ),
            None,
            BOUND,
        );
        if after.code != Some(0) {
            problems.push(format!("the resume after it: {}", after.summary()));
        }
        acked.observe(&state, &[&after.stdout]);
        for v in check::after_recovery(&state, &acked, &good.requests(), site.current().as_deref())
        {
            problems.push(format!("after the resume, {}: {}", v.invariant, v.detail));
        }
    }
    assert!(
        problems.is_empty(),
        "{name}: {}\n--- stdout (last 2000 bytes)\n{}\n--- stderr\n{}",
        problems.join("\n"),
        tail(&r.stdout, 2000),
        tail(&r.stderr, 2000)
    );
    r
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The events of a `--json` run.
fn events(r: &Run) -> Vec<Value> {
    r.stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn count(r: &Run, kind: &str) -> usize {
    events(r).iter().filter(|e| e["type"] == kind).count()
}

/// One OpenAI stream chunk carrying `content`.
fn chunk(content: &str) -> String {
    json!({"id":"x","object":"chat.completion.chunk","model":"m",
           "choices":[{"index":0,"delta":{"content":content},"finish_reason":null}]})
    .to_string()
}

#[test]
fn reset_mid_stream_is_retried_then_completes() {
    let fake = FakeServer::start(vec![
        openai_text("A long answer that is cut off by a reset.").reset_after(120),
        openai_text("Recovered after the reset."),
    ]);
    let r = case("reset then ok", &fake, None, &SHORT, Want::Turn);
    assert!(
        r.stdout.contains("Recovered after the reset."),
        "{}",
        r.stdout
    );
    assert!(
        count(&r, "retry") >= 1,
        "the reset was retried: {}",
        r.stdout
    );
}

#[test]
fn endless_resets_end_in_a_clear_error() {
    let fake = FakeServer::start(vec![]);
    fake.set_default(openai_text("Cut off again and again by resets.").reset_after(100));
    case("reset storm", &fake, None, &SHORT, Want::Error);
}

#[test]
fn invalid_json_in_data_lines_is_a_clear_error() {
    let fake = FakeServer::start(vec![]);
    fake.set_default(Reply::sse(
        "data: {\"choices\": [{\"delta\": {nope\n\ndata: not json at all\n\ndata: [DONE]\n\n",
    ));
    case("invalid JSON", &fake, None, &SHORT, Want::Error);
}

#[test]
fn a_huge_event_is_refused_with_bounded_memory() {
    // One data line of 20 MiB: over the SSE decoder's 16 MiB cap.
    let huge = format!("data: {}\n\ndata: [DONE]\n\n", chunk(&"x".repeat(20 << 20)));
    let fake = FakeServer::start(vec![]);
    fake.set_default(Reply::sse(huge));
    case("huge event", &fake, None, &SHORT, Want::Error);
}

#[test]
fn a_large_valid_event_is_a_turn() {
    // 3 MiB of text in one event: large, within every cap, a normal answer.
    let text = "y".repeat(3 << 20);
    let body = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(&text),
        json!({"id":"x","object":"chat.completion.chunk","model":"m",
               "choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})
    );
    let fake = FakeServer::start(vec![Reply::sse(body)]);
    case("large event", &fake, None, &SHORT, Want::Turn);
}

#[test]
fn a_drip_that_never_completes_an_event_times_out() {
    // One byte a second of a data line that never ends: no event ever completes, so it is no
    // progress, and a 2 s idle timeout must end it (not the 2 minutes the drip lasts).
    let line = format!("data: {}", chunk(&"z".repeat(100)));
    let fake = FakeServer::start(vec![]);
    fake.set_default(
        Reply::sse(line)
            .split_every(1)
            .delay_between(Duration::from_secs(1)),
    );
    case("drip", &fake, None, &SHORT, Want::Error);
}

#[test]
fn endless_keep_alive_comments_time_out() {
    // SSE comments are no model output: a server that only sends `: keep-alive` forever must hit
    // the 2 s idle timeout.
    let fake = FakeServer::start(vec![]);
    fake.set_default(
        Reply::sse(": keep-alive\n\n".repeat(400))
            .split_every(14)
            .delay_between(Duration::from_millis(250)),
    );
    case("keep-alive", &fake, None, &SHORT, Want::Error);
}

#[test]
fn a_429_storm_ends_after_the_retry_time() {
    let fake = FakeServer::start(vec![]);
    fake.set_default(
        Reply::status(
            429,
            r#"{"error":{"message":"rate limited","type":"rate_limit"}}"#,
        )
        .header("retry-after", "1"),
    );
    let r = case("429 storm", &fake, None, &SHORT, Want::Error);
    assert_eq!(r.code, Some(75), "provider unavailable: {}", r.summary());
    assert!(count(&r, "retry") >= 1, "{}", r.stdout);
}

#[test]
fn a_500_storm_ends_after_the_retry_time() {
    let fake = FakeServer::start(vec![]);
    fake.set_default(Reply::status(500, r#"{"error":{"message":"boom"}}"#));
    let r = case("500 storm", &fake, None, &SHORT, Want::Error);
    assert_eq!(r.code, Some(75), "provider unavailable: {}", r.summary());
}

#[test]
fn a_storm_that_passes_is_a_turn() {
    let fake = FakeServer::start(vec![
        Reply::status(429, r#"{"error":{"message":"rate limited"}}"#).header("retry-after", "0"),
        Reply::status(500, r#"{"error":{"message":"boom"}}"#),
        Reply::status(503, r#"{"error":{"message":"overloaded"}}"#),
        openai_text("Through the storm."),
    ]);
    let r = case(
        "storm then ok",
        &fake,
        None,
        &["--idle-timeout", "2", "--max-retry-time", "20"],
        Want::Turn,
    );
    assert_eq!(count(&r, "retry"), 3, "{}", r.stdout);
}

#[test]
fn duplicate_tool_call_ids_leave_a_valid_history() {
    // Two calls with one id in one answer, against a strict provider: whatever tern does with
    // them, the next request must be valid (each call answered exactly once).
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[
            ("dup", "bash", &bash_args("echo first")),
            ("dup", "bash", &bash_args("echo second")),
        ]),
        openai_text("Both ran."),
    ]);
    case("duplicate ids", &fake, None, &SHORT, Want::Turn);
}

#[test]
fn non_json_tool_arguments_are_an_error_result() {
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[("bad", "bash", "{\"command\": \"echo hi\"")]),
        openai_tool_calls(&[("bad2", "bash", "ls -la")]),
        openai_text("Gave up on those."),
    ]);
    let r = case("non-JSON arguments", &fake, None, &SHORT, Want::Turn);
    let results: Vec<Value> = events(&r)
        .into_iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{}", r.stdout);
    assert!(results.iter().all(|e| e["is_error"] == true), "{results:?}");
}

/// A local port nothing listens on.
/// A port on 127.0.0.1 that refuses connections for as long as the returned socket lives: the
/// socket is bound there but never listens, so a connect gets RST and no other server (a
/// parallel test's) can take the port meanwhile. A port released at once (the old way) was
/// taken by another test's server during the retries once (issue 46).
fn closed_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2), bind(2) and getsockname(2) on a descriptor we own, with a zeroed
    // sockaddr_in of the right size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let r = libc::bind(fd, (&raw const addr).cast(), len);
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut got_len = len;
        let r = libc::getsockname(fd, (&raw mut got).cast(), &mut got_len);
        assert_eq!(r, 0, "getsockname: {}", std::io::Error::last_os_error());
        (owned, u16::from_be(got.sin_port))
    }
}

/// With tern's default retry time (300 s), a server that is not there must still fail fast
/// with one clear line naming it: there is nothing to wait for.
fn unreachable(name: &str, base: &str, names: &str) {
    let fake = FakeServer::start(vec![]);
    let r = case(name, &fake, Some(base), &[], Want::Error);
    // Far less than the 300 s retry time: a server that is not there is not coming back in a
    // moment (one retry or two are fine).
    assert!(
        r.elapsed < Duration::from_secs(15),
        "{name}: took {:?}",
        r.elapsed
    );
    let error = events(&r)
        .last()
        .and_then(|e| e["error"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        error.contains(names) && !error.contains('\n'),
        "{name}: the error names {names} in one line: {error:?}"
    );
}

#[test]
fn a_refused_connection_fails_fast() {
    // Held (bound, not listening) until the test ends.
    let (_held, port) = closed_port();
    unreachable(
        "refused connection",
        &format!("http://127.0.0.1:{port}/v1"),
        &format!("127.0.0.1:{port}"),
    );
}

#[test]
fn an_unknown_host_fails_fast() {
    // `.invalid` never resolves (RFC 2606).
    unreachable(
        "unknown host",
        "http://tern-fault-suite.invalid/v1",
        "tern-fault-suite.invalid",
    );
}
