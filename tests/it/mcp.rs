//! Issue 32: MCP as commands. `tern mcp list | schema | call | trust` against fake servers of
//! both protocol eras (2025-11-25 `initialize`, 2026-07-28 `server/discover`) on both transports
//! (a real process on stdio, a real HTTP server on 127.0.0.1): outside a session straight to the
//! servers, inside one through the session's tern (hooks, events, the jail).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::body::{content, messages};
use crate::support::cli::{LIMIT, WireWs, run_within};
use crate::support::files::jsonl;
use crate::support::script::{bash, text};
use crate::support::*;

const W: Wire = Wire::OpenAi;
/// The fake server of the test kit.
const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/mcp_server.py");

/// A stdio server entry of `era` with more flags.
fn stdio(era: &str, more: &[&str]) -> Value {
    let mut args = vec![SERVER.to_string(), "--era".into(), era.into()];
    args.extend(more.iter().map(|s| s.to_string()));
    json!({"command": "python3", "args": args})
}

/// Writes the person's `mcp.json` of `ws`.
fn user_servers(ws: &WireWs, servers: Value) -> PathBuf {
    let dir = ws.ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("mcp.json");
    std::fs::write(&p, json!({ "mcpServers": servers }).to_string()).unwrap();
    p
}

/// `tern ARGS` in `ws` with `env` added; its output.
fn tern_env(ws: &WireWs, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = ws.cmd(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = run_within(c, None, LIMIT).output();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mcp(ws: &WireWs, args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["mcp"];
    a.extend_from_slice(args);
    tern_env(ws, &a, &[])
}

/// A fake HTTP server; killed when dropped.
struct Http {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Http {
    fn start(dir: &Path, name: &str, era: &str, more: &[&str]) -> Http {
        let port_file = dir.join(format!("{name}.port"));
        let log = dir.join(format!("{name}.log"));
        let child = Command::new("python3")
            .arg(SERVER)
            .args(["--era", era, "--http", "--port-file"])
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().unwrap();
            }
            assert!(Instant::now() < until, "the fake MCP server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Http { child, port, log }
    }

    fn entry(&self) -> Value {
        json!({"type": "http", "url": format!("http://127.0.0.1:{}/mcp", self.port)})
    }

    fn messages(&self) -> Vec<Value> {
        jsonl(&self.log)
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn list_schema_and_call_work_against_both_eras_on_stdio_pages_followed() {
    let ws = WireWs::new(W, vec![]);
    let log = ws.root().join("new.log");
    user_servers(
        &ws,
        json!({
            "new": stdio("2026", &["--tools", "5", "--page", "2", "--log", log.to_str().unwrap()]),
            "old": stdio("2025", &[]),
        }),
    );
    let (code, out, err) = mcp(&ws, &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("new (stdio, MCP 2026-07-28, from "), "{out}");
    assert!(out.contains(": 14 tools"), "every page followed: {out}");
    assert!(out.contains("  tool_4 — Extra tool 4."), "{out}");
    assert!(out.contains("old (stdio, MCP 2025-11-25, from "), "{out}");
    assert!(
        out.contains("  echo — Echo the text back.\n"),
        "one line each: {out}"
    );
    // Every request of the stateless era carried _meta; pages asked with their cursor.
    let msgs = jsonl(&log);
    assert_eq!(msgs[0]["msg"]["method"], "server/discover");
    for m in &msgs {
        assert_eq!(
            m["msg"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{m}"
        );
    }
    assert!(msgs.iter().any(|m| m["msg"]["params"]["cursor"] == "12"));
    for (srv, era) in [("new", "2026"), ("old", "2025")] {
        let (code, out, err) = mcp(&ws, &["call", srv, "add", r#"{"a": 2, "b": 40}"#]);
        assert_eq!((code, out.as_str()), (0, "42\n"), "{era}: {err}");
    }
    let (code, out, _) = mcp(&ws, &["schema", "old", "add"]);
    assert_eq!(code, 0);
    let schema: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(schema["required"], json!(["a", "b"]));
    // A tool's error: exit 1, its text on stderr; --json: the whole result.
    let (code, out, err) = mcp(&ws, &["call", "new", "fail"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("the tool failed on purpose"), "{err}");
    let (code, out, _) = mcp(&ws, &["call", "new", "fail", "--json"]);
    assert_eq!(code, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["isError"],
        true
    );
    // Unknown tool, unknown server, a protocol error, bad arguments: exit 2 with one line.
    for (args, says) in [
        (&["call", "old", "nope"][..], "has no tool nope"),
        (&["call", "zzz", "echo"][..], "no MCP server is named zzz"),
        (&["call", "new", "boom"][..], "the tool exploded"),
        (&["call", "new", "add", "[1]"][..], "must be a JSON object"),
        (&["call", "new", "add", "{"][..], "not JSON"),
        (&["schema", "new", "nope"][..], "has no tool nope"),
    ] {
        let (code, _, err) = mcp(&ws, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // Arguments from stdin.
    let out = ws.tern_in(&["mcp", "call", "old", "echo", "-"], r#"{"text": "piped"}"#);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped\n");
    // A picture is saved, never printed.
    let (code, out, _) = mcp(&ws, &["call", "new", "image"]);
    assert_eq!(code, 0);
    let path = out
        .lines()
        .find_map(|l| l.split(" saved to ").nth(1))
        .map(|p| p.trim_end_matches(']').to_string())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(std::fs::read(&path).unwrap().starts_with(b"\x89PNG"));
    assert!(!out.contains("PNG\r"), "binary on stdout");
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_stateful_server_that_dies_or_says_nothing_before_initialize_still_answers() {
    let ws = WireWs::new(W, vec![]);
    let mut silent = stdio("2025", &["--before-init", "silent"]);
    // Silent for its whole start timeout (its own, as Codex names it): started again and asked
    // `initialize`.
    silent["startup_timeout_sec"] = json!(1.5);
    user_servers(
        &ws,
        json!({
            "dies": stdio("2025", &["--before-init", "die"]),
            "silent": silent,
        }),
    );
    for srv in ["dies", "silent"] {
        let (code, out, err) = mcp(&ws, &["call", srv, "echo", r#"{"text":"ok"}"#]);
        assert_eq!((code, out.as_str()), (0, "ok\n"), "{srv}: {err}");
    }
}

/// Issue 43: a server that takes 5 s to start is waited for (up to the start timeout), never
/// asked `initialize` on the pipe it has not answered yet: one that speaks only 2026-07-28 and
/// one that speaks only 2025-11-25 both open; a start timeout shorter than the start fails
/// with the setting's names.
#[test]
fn a_server_that_starts_in_five_seconds_opens_in_either_era() {
    let ws = WireWs::new(W, vec![]);
    let mut short = stdio("2026", &["--start-delay", "5"]);
    short["startup_timeout_ms"] = json!(1000);
    user_servers(
        &ws,
        json!({
            "new": stdio("2026", &["--start-delay", "5"]),
            "old": stdio("2025", &["--start-delay", "5"]),
            "short": short,
        }),
    );
    for srv in ["new", "old"] {
        let (code, out, err) = mcp(&ws, &["call", srv, "echo", r#"{"text":"slow"}"#]);
        assert_eq!((code, out.as_str()), (0, "slow\n"), "{srv}: {err}");
    }
    let (code, _, err) = mcp(&ws, &["call", "short", "echo", r#"{"text":"x"}"#]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no answer to its start-up") && err.contains("startup_timeout_sec"),
        "{err}"
    );
}

#[test]
fn both_eras_over_http_json_and_sse_answers_session_ids_and_version_headers() {
    let ws = WireWs::new(W, vec![]);
    let dir = tempfile::tempdir().unwrap();
    let new = Http::start(dir.path(), "new", "2026", &["--reject-first"]);
    let old = Http::start(dir.path(), "old", "2025", &[]);
    let sse = Http::start(
        dir.path(),
        "sse",
        "2025",
        &["--sse", "--resume", "--tools", "4"],
    );
    let mut old_entry = old.entry();
    old_entry["headers"] = json!({"Authorization": "Bearer ${TEST_TOKEN}"});
    user_servers(
        &ws,
        json!({"new": new.entry(), "old": old_entry, "sse": sse.entry()}),
    );
    let env = [("TEST_TOKEN", "tok-1")];
    for srv in ["new", "old", "sse"] {
        let (code, out, err) =
            tern_env(&ws, &["mcp", "call", srv, "add", r#"{"a":1,"b":2}"#], &env);
        assert_eq!((code, out.as_str()), (0, "3\n"), "{srv}: {err}");
    }
    let (code, out, err) = tern_env(&ws, &["mcp", "list", "sse"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("MCP 2025-11-25") && out.contains(": 13 tools"),
        "{out}"
    );
    // 2026: refused once with -32022, asked again; the version header matches _meta everywhere.
    let msgs = new.messages();
    assert!(msgs.len() >= 3, "{msgs:?}");
    for m in &msgs {
        assert_eq!(m["headers"]["mcp-protocol-version"], "2026-07-28", "{m}");
        assert_eq!(
            m["headers"]["accept"],
            "application/json, text/event-stream"
        );
    }
    let call = msgs
        .iter()
        .find(|m| m["msg"]["method"] == "tools/call")
        .unwrap();
    assert_eq!(call["headers"]["mcp-method"], "tools/call");
    assert_eq!(call["headers"]["mcp-name"], "add");
    // 2025: the session id after initialize, the negotiated version, the token expanded, the
    // session ended with DELETE.
    let msgs = old.messages();
    let call = msgs
        .iter()
        .find(|m| m["msg"]["method"] == "tools/call")
        .unwrap();
    assert_eq!(call["headers"]["mcp-session-id"], "sess-1");
    assert_eq!(call["headers"]["mcp-protocol-version"], "2025-11-25");
    assert_eq!(call["headers"]["authorization"], "Bearer tok-1");
    assert!(
        msgs.iter()
            .any(|m| m["msg"]["method"] == "notifications/initialized")
    );
    assert!(
        msgs.iter().any(|m| m["delete"] == true),
        "no DELETE: {msgs:?}"
    );
    // The SSE server's ping inside the stream was answered.
    assert!(
        sse.messages()
            .iter()
            .any(|m| m["msg"]["id"] == "srv-1" && m["msg"]["result"] == json!({})),
        "the server's ping was not answered"
    );
    // The SSE server closed the call's stream after a priming event: resumed with GET.
    let gets: Vec<Value> = sse
        .messages()
        .into_iter()
        .filter(|m| m["get"] == true)
        .collect();
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert_eq!(gets[0]["headers"]["last-event-id"], "prime-1");
    assert_eq!(gets[0]["headers"]["mcp-session-id"], "sess-1");
    // An unset variable with no default: that server is not usable, named.
    let (code, _, err) = mcp(&ws, &["call", "old", "add"]);
    assert_eq!(code, 2);
    assert!(err.contains("${TEST_TOKEN} is not set"), "{err}");
}

#[test]
fn a_hung_server_and_one_that_is_not_mcp_fail_with_one_line_in_time() {
    let ws = WireWs::new(W, vec![]);
    user_servers(
        &ws,
        json!({
            "hung": stdio("2026", &["--hang"]),
            "junk": {"command": "sh", "args": ["-c", "echo hello there; sleep 30"]},
            "gone": {"command": "/nonexistent/server"},
            "nokey": {"command": "sh", "args": ["-c", "echo 'missing GITHUB_TOKEN' >&2; exit 1"]},
        }),
    );
    // A server that exits at start is named with what it said (its log, outside a session a
    // temporary one).
    let (code, _, err) = mcp(&ws, &["call", "nokey", "x"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("did not start") && err.contains("missing GITHUB_TOKEN"),
        "{err}"
    );
    let started = Instant::now();
    let (code, _, err) = tern_env(
        &ws,
        &["mcp", "call", "hung", "echo"],
        &[("MCP_TIMEOUT", "1500")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no answer to its start-up in 2 s") && err.contains("MCP_TIMEOUT"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let (code, _, err) = mcp(&ws, &["call", "junk", "echo"]);
    assert_eq!(code, 2);
    assert!(err.contains("not JSON: hello there"), "{err}");
    let (code, _, err) = mcp(&ws, &["list", "gone"]);
    assert_eq!(code, 2);
    assert!(err.contains("could not start /nonexistent/server"), "{err}");
}

#[test]
fn an_untrusted_project_file_starts_nothing_until_trusted_and_again_after_a_change() {
    let ws = WireWs::new(W, vec![]);
    let marker = ws.root().join("started");
    let entry = json!({"command": "sh", "args": ["-c",
        format!("touch {}; exec python3 {SERVER} --era 2026", marker.display())]});
    std::fs::write(
        ws.root().join(".mcp.json"),
        json!({"mcpServers": {"proj": entry}}).to_string(),
    )
    .unwrap();
    let (code, out, _) = mcp(&ws, &["list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("not trusted") && out.contains("tern mcp trust"),
        "{out}"
    );
    let (code, _, err) = mcp(&ws, &["call", "proj", "echo"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("not trusted") && err.contains("tern mcp trust"),
        "{err}"
    );
    assert!(!marker.exists(), "an untrusted server started");
    let (code, out, _) = mcp(&ws, &["trust"]);
    assert_eq!(code, 0);
    assert!(out.contains("proj (stdio)"), "{out}");
    let (code, out, err) = mcp(&ws, &["call", "proj", "echo", r#"{"text":"yes"}"#]);
    assert_eq!((code, out.as_str()), (0, "yes\n"), "{err}");
    assert!(marker.exists());
    // The file changed (as a command could change it): not trusted again.
    std::fs::remove_file(&marker).unwrap();
    let changed = json!({"mcpServers": {"proj": entry, "more": stdio("2026", &[])}});
    std::fs::write(ws.root().join(".mcp.json"), changed.to_string()).unwrap();
    let (code, _, err) = mcp(&ws, &["call", "proj", "echo"]);
    assert_eq!(code, 2);
    assert!(err.contains("changed since it was trusted"), "{err}");
    assert!(!marker.exists());
}

/// The tool results the model read, in order.
fn tool_results(ws: &WireWs) -> Vec<String> {
    let reqs = ws.fake.requests();
    let last = reqs.last().expect("a request");
    messages(last)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(content)
        .collect()
}

#[test]
fn a_model_in_the_default_jail_uses_a_tool_in_a_pipe_and_never_sees_the_servers_secret() {
    let cmd = "tern mcp call srv add '{\"a\": 2, \"b\": 40}' | tr -d '\\n' | sed 's/^/sum=/'; echo; \
               tern mcp call srv env '{\"name\": \"MCP_SECRET\"}'; \
               echo \"jail sees [${MCP_SECRET:-}]\"; \
               grep -l s3cr3t-value /proc/[0-9]*/environ 2>/dev/null | wc -l | sed 's/^/procs=/'; \
               cat \"$HOME/.config/tern/mcp.json\" >/dev/null 2>&1 || echo config-hidden; \
               p=$(tern mcp call srv image | sed -n 's/.* saved to \\(.*\\)\\]$/\\1/p'); \
               head -c 4 \"$p\" | tail -c 3 | sed 's/^/saved=/'; echo; echo x > \"$p\" 2>/dev/null || echo saved-read-only";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    let mut entry = stdio("2026", &[]);
    entry["env"] = json!({"MCP_SECRET": "s3cr3t-value"});
    user_servers(&ws, json!({"srv": entry}));
    let out = ws.ok(&["exec", "--json", "go"]);
    let results = tool_results(&ws);
    let r = &results[0];
    assert!(r.contains("sum=42"), "{r}");
    // The server has its secret; the jail has not, in no process's environment, nor its file.
    assert!(
        r.contains("\ns3cr3t-value\n") || r.starts_with("s3cr3t-value"),
        "{r}"
    );
    assert!(r.contains("jail sees []"), "{r}");
    assert!(r.contains("procs=0"), "{r}");
    assert!(r.contains("config-hidden"), "{r}");
    // A picture was saved in the session's mcp/ folder: the jail reads it, never writes it.
    assert!(r.contains("saved=PNG"), "{r}");
    assert!(r.contains("saved-read-only"), "{r}");
    // Each call is an event.
    let events = ws.events();
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "mcp_call").collect();
    assert_eq!(calls.len(), 3, "{events:?}");
    assert_eq!(calls[0]["server"], "srv");
    assert_eq!(calls[0]["tool"], "add");
    assert_eq!(calls[0]["exit_code"], 0);
    // `--json` shows them too, where they happened: after the call, before its result.
    let shown: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let kinds: Vec<&str> = shown
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| ["tool_call", "mcp_call", "tool_result"].contains(k))
        .collect();
    assert_eq!(
        kinds,
        [
            "tool_call",
            "mcp_call",
            "mcp_call",
            "mcp_call",
            "tool_result"
        ]
    );
    // The server ran outside the jail with its log in the session folder; it is gone now.
    let log = std::fs::read_to_string(ws.path("mcp/srv.log")).unwrap();
    assert!(log.contains("tools/call"), "{log}");
}

#[test]
fn a_server_that_dies_is_started_again_once_with_a_note() {
    let cmd = "for i in 1 2 3 4; do tern mcp call srv die; echo \"die=$?\"; \
               tern mcp call srv echo '{\"text\": \"back\"}'; echo \"echo=$?\"; done";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    user_servers(&ws, json!({"srv": stdio("2025", &[])}));
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    let codes: Vec<&str> = r
        .lines()
        .filter(|l| l.starts_with("die=") || l.starts_with("echo="))
        .collect();
    assert_eq!(
        codes,
        [
            "die=2", "echo=0", "die=2", "echo=2", "die=2", "echo=2", "die=2", "echo=2"
        ],
        "{r}"
    );
    assert!(
        r.contains("tern started it again (once per session)"),
        "{r}"
    );
    assert!(r.contains("does not start it a third time"), "{r}");
    assert_eq!(
        r.matches("\nback\n").count() + usize::from(r.starts_with("back\n")),
        1,
        "{r}"
    );
}

#[test]
fn hooks_see_mcp_server_tool_names_and_a_pre_tool_use_block_keeps_the_call_from_running() {
    let cmd = "tern mcp call srv add '{\"a\": 1, \"b\": 1}'; echo \"add=$?\"; \
               tern mcp call srv echo '{\"text\": \"fine\"}'; echo \"echo=$?\"";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    let log = ws.root().join("srv.log");
    user_servers(
        &ws,
        json!({"srv": stdio("2026", &["--log", log.to_str().unwrap()])}),
    );
    let dir = ws.ws.home().join(".config/tern");
    let hooks = json!({"hooks": {
        "PreToolUse": [{"matcher": "mcp__srv__add", "hooks": [{"type": "command",
            "command": "cat > \"$TERN_PROJECT_DIR/pre.json\"; echo 'no adding today' >&2; exit 2"}]}],
        "PostToolUse": [{"matcher": "mcp__.*", "hooks": [{"type": "command",
            "command": "cat > \"$TERN_PROJECT_DIR/post.json\"; echo '{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"checked by the hook\"}}'"}]}]
    }});
    std::fs::write(dir.join("hooks.json"), hooks.to_string()).unwrap();
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(
        r.contains("blocked by a PreToolUse hook: no adding today"),
        "{r}"
    );
    assert!(r.contains("add=1"), "{r}");
    assert!(r.contains("fine\n") && r.contains("echo=0"), "{r}");
    assert!(r.contains("[PostToolUse hook] checked by the hook"), "{r}");
    let pre: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.root().join("pre.json")).unwrap())
            .unwrap();
    assert_eq!(pre["tool_name"], "mcp__srv__add");
    assert_eq!(pre["tool_input"], json!({"a": 1, "b": 1}));
    assert_eq!(pre["hook_event_name"], "PreToolUse");
    let post: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.root().join("post.json")).unwrap())
            .unwrap();
    assert_eq!(post["tool_name"], "mcp__srv__echo");
    assert_eq!(post["tool_response"]["content"][0]["text"], "fine");
    // The blocked call never reached the server.
    let calls: Vec<Value> = jsonl(&log)
        .into_iter()
        .filter(|m| m["msg"]["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["msg"]["params"]["name"], "echo");
    let events = ws.events();
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "mcp_call").collect();
    assert_eq!(calls[0]["exit_code"], 1);
    assert!(
        calls[0]["error"]
            .as_str()
            .unwrap()
            .contains("no adding today")
    );
}

/// Issue 34: an `"async": true` hook on an MCP call runs in the background as in the turn: it
/// neither blocks the call (exit 2) nor holds it (it sleeps), and it still runs.
#[test]
fn an_async_hook_on_an_mcp_call_neither_blocks_nor_holds_it() {
    let first = "tern mcp call srv echo '{\"text\": \"went through\"}'; \
                 test -e hook-done && echo hook-waited || echo hook-not-waited";
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", first),
            // The hook writes the real workspace from outside the jail; the jail's layer may
            // keep showing the name as absent until the next turn (README, Sandbox), so the
            // file is looked for on the host after the run.
            bash(W, "c2", "sleep 3; echo waited"),
            text(W, "done"),
        ],
    );
    user_servers(&ws, json!({"srv": stdio("2026", &[])}));
    let dir = ws.ws.home().join(".config/tern");
    let hooks = json!({"hooks": {
        "PreToolUse": [{"matcher": "mcp__srv__echo", "hooks": [{"type": "command", "async": true,
            "command": "sleep 2; touch \"$TERN_PROJECT_DIR/hook-done\"; echo 'would block' >&2; exit 2"}]}]
    }});
    std::fs::write(dir.join("hooks.json"), hooks.to_string()).unwrap();
    ws.ok(&["exec", "go"]);
    let results = tool_results(&ws);
    assert!(results[0].contains("went through"), "{}", results[0]);
    assert!(results[0].contains("hook-not-waited"), "{}", results[0]);
    assert!(!results[0].contains("would block"), "{}", results[0]);
    assert!(results[1].contains("waited"), "{}", results[1]);
    assert!(
        ws.root().join("hook-done").exists(),
        "the async hook never ran"
    );
}

#[test]
fn three_servers_add_at_most_200_bytes_to_the_first_request_and_none_per_call() {
    let bare = WireWs::new(W, vec![text(W, "done")]);
    bare.ok(&["exec", "hello"]);
    let with = WireWs::new(
        W,
        vec![
            bash(W, "c1", "tern mcp call github echo '{\"text\":\"x\"}'"),
            text(W, "done"),
        ],
    );
    user_servers(
        &with,
        json!({"github": stdio("2026", &[]), "files": stdio("2025", &[]), "db": stdio("2026", &[])}),
    );
    with.ok(&["exec", "hello"]);
    let a = bare.fake.requests()[0].body.len();
    let reqs = with.fake.requests();
    let b = reqs[0].body.len();
    assert!(b > a && b - a <= 200, "{a} → {b}");
    let body = String::from_utf8_lossy(&reqs[0].body);
    assert!(body.contains("MCP servers: db, files, github."), "{body}");
    assert!(!body.contains("inputSchema") && !body.contains("Echo the text"));
    // The second request repeats the first's prefix byte for byte (nothing per call).
    let first = &reqs[0].body;
    let second = String::from_utf8_lossy(&reqs[1].body);
    let sys_end = String::from_utf8_lossy(first)
        .find("\"role\":\"user\"")
        .unwrap();
    assert!(second.starts_with(&String::from_utf8_lossy(&first[..sys_end]).to_string()));
}

#[test]
fn a_resumed_session_whose_servers_changed_gets_one_declared_boundary() {
    let ws = WireWs::new(W, vec![text(W, "one"), text(W, "two"), text(W, "three")]);
    ws.ok(&["exec", "first"]);
    let before = ws.read("system.txt");
    assert!(!before.contains("MCP servers"));
    user_servers(&ws, json!({"srv": stdio("2026", &[])}));
    ws.ok(&["exec", "--continue", "second"]);
    let after = ws.read("system.txt");
    let line = "MCP servers: srv. Their tools run from bash: `tern mcp list`, then `tern mcp call SERVER TOOL JSON`.\n";
    assert!(after.contains(line), "{after}");
    assert_eq!(after.len(), before.len() + line.len());
    // Unchanged since: no other boundary.
    ws.ok(&["exec", "--continue", "third"]);
    let boundaries: Vec<Value> = ws
        .events()
        .into_iter()
        .filter(|e| e["type"] == "boundary")
        .collect();
    assert_eq!(boundaries.len(), 1, "{boundaries:?}");
    assert_eq!(boundaries[0]["kind"], "mcp_servers");
    assert_eq!(boundaries[0]["from"], "none");
    assert_eq!(boundaries[0]["to"], "srv");
    // The third request repeats the second's system prompt byte for byte.
    let reqs = ws.fake.requests();
    let sys =
        |r: &crate::support::Recorded| messages(r)[0]["content"].as_str().unwrap_or("").to_string();
    assert_eq!(sys(&reqs[1]), sys(&reqs[2]));
}

/// The MCP project's own conformance suite (`@modelcontextprotocol/conformance`, pinned in
/// `.ci/run`): every client scenario it lists for a dated protocol version runs against `tern
/// mcp` (through `tests/support/conformance_client.sh`), four at a time; those in
/// `tests/support/conformance_expected_failures.txt` must fail (with the reason there), every
/// other must pass with no failed check. `TERN_MCP_CONFORMANCE` names the command that runs the
/// suite (it needs Node.js 22); unset (the registries unreachable when `.ci/run` installed it),
/// the test says it is skipped. The results are in the README ("Conformance").
#[test]
fn conformance_suite_client_scenarios_pass() {
    let Some(suite) = std::env::var("TERN_MCP_CONFORMANCE")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped conformance_suite_client_scenarios_pass: set TERN_MCP_CONFORMANCE to the command that runs @modelcontextprotocol/conformance (.ci/run does, when npm's registry answers)"
        );
        return;
    };
    let expected = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/conformance_expected_failures.txt"
    ))
    .unwrap();
    let expected: Vec<(String, String, String)> = expected
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (head, why) = l.split_once(": ")?;
            let (sc, v) = head.split_once(' ')?;
            Some((sc.to_string(), v.to_string(), why.to_string()))
        })
        .collect();
    let listed = Command::new("sh")
        .args(["-c", &format!("{suite} list")])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    // "  - NAME [V1,V2]" lines under "Client scenarios".
    let mut runs: Vec<(String, String)> = Vec::new();
    let mut in_client = false;
    for l in listed.lines() {
        if !l.starts_with("  ") {
            in_client = l.starts_with("Client scenarios");
            continue;
        }
        let Some((name, versions)) = l.trim().trim_start_matches("- ").split_once(" [") else {
            continue;
        };
        if !in_client {
            continue;
        }
        for v in versions.trim_end_matches(']').split(',') {
            if v.starts_with("20") && v >= "2025-11-25" {
                runs.push((name.to_string(), v.to_string()));
            }
        }
    }
    assert!(runs.len() > 10, "the suite listed: {listed}");
    let matches = |pat: &str, s: &str| match pat.strip_suffix('*') {
        Some(head) => s.starts_with(head),
        None => pat == s,
    };
    let client = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/conformance_client.sh"
    );
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some((scenario, version)) = runs.get(k) else {
                        return;
                    };
                    let out_dir = tempfile::tempdir().unwrap();
                    let line = format!(
                        "{suite} client --command '{client}' --scenario {scenario} --spec-version {version} -o '{}'",
                        out_dir.path().display()
                    );
                    let mut cmd = Command::new("sh");
                    cmd.args(["-c", &line]).env("TERN", crate::support::cli::TERN);
                    let out = run_within(cmd, None, Duration::from_secs(180)).output();
                    let (mut passed, mut failed) = (0, Vec::new());
                    let mut stack = vec![out_dir.path().to_path_buf()];
                    while let Some(d) = stack.pop() {
                        for e in std::fs::read_dir(&d).unwrap().flatten() {
                            let p = e.path();
                            if p.is_dir() {
                                stack.push(p);
                            } else if p.file_name().is_some_and(|n| n == "checks.json") {
                                let v: Value =
                                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                                        .unwrap_or(Value::Null);
                                for c in v.as_array().cloned().unwrap_or_default() {
                                    match c["status"].as_str() {
                                        Some("SUCCESS") => passed += 1,
                                        Some("FAILURE") => failed.push(c["name"].to_string()),
                                        _ => {}
                                    }
                                }
                            }
                        }
                    }
                    let ok = out.status.success() && failed.is_empty() && passed > 0;
                    results.lock().unwrap().push((
                        scenario.clone(),
                        version.clone(),
                        ok,
                        passed,
                        failed,
                    ));
                }
            });
        }
    });
    let mut problems = Vec::new();
    let mut results = results.into_inner().unwrap();
    results.sort();
    for (scenario, version, ok, passed, failed) in &results {
        let why = expected
            .iter()
            .find(|(sc, v, _)| matches(sc, scenario) && matches(v, version))
            .map(|e| e.2.clone());
        eprintln!(
            "conformance {scenario} {version}: {} ({passed} checks passed, {} failed){}",
            if *ok { "pass" } else { "FAIL" },
            failed.len(),
            why.as_deref()
                .map(|w| format!(" — expected: {w}"))
                .unwrap_or_default()
        );
        match (ok, &why) {
            (false, None) => problems.push(format!("{scenario} {version} failed: {failed:?}")),
            (true, Some(_)) => problems.push(format!(
                "{scenario} {version} passes now: remove its line from conformance_expected_failures.txt"
            )),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_sessions_command_with_no_server_configured_is_told_so_in_one_line() {
    // No server: no PATH help and no binary shown in the jail either, so the test names the
    // binary and runs without the jail (its build may lie under /tmp, which the jail hides).
    let cmd = format!("'{}' mcp list; echo \"rc=$?\"", crate::support::cli::TERN);
    let ws = WireWs::new(W, vec![bash(W, "c1", &cmd), text(W, "done")]);
    ws.ok(&["exec", "--sandbox", "danger-full-access", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(r.contains("this session has no MCP server"), "{r}");
    assert!(r.contains("rc=2"), "{r}");
    assert!(!r.contains("cannot read"), "no config error leaks: {r}");
}

/// Issue 42: trust is checked when a server starts, not only when the session opens. A server
/// of the person's own `mcp.json` runs a workspace script; a command rewrites it before the
/// server's first call: the server is not started (the call says why), so the model's code
/// never runs as the person.
#[test]
fn a_server_whose_workspace_script_changed_since_the_session_opened_is_not_started() {
    let ws = WireWs::new(
        W,
        vec![
            bash(
                W,
                "c1",
                "printf 'import os\\nopen(\"/tmp/tern-mcp-pwned-%d\" % os.getpid(), \"w\")\\n' >> srv.py; echo rewrote",
            ),
            bash(
                W,
                "c2",
                "tern mcp call srv echo '{\"text\": \"x\"}'; echo exit=$?",
            ),
            text(W, "done"),
        ],
    );
    std::fs::copy(SERVER, ws.root().join("srv.py")).unwrap();
    user_servers(
        &ws,
        json!({"srv": {"command": "python3", "args": ["./srv.py", "--era", "2026"]}}),
    );
    ws.ok(&["exec", "go"]);
    let results = tool_results(&ws);
    assert!(results[0].contains("rewrote"), "{}", results[0]);
    assert!(
        results[1].contains("changed since the session opened") && results[1].contains("srv.py"),
        "{}",
        results[1]
    );
    assert!(!results[1].contains("exit=0"), "{}", results[1]);
}

/// Issue 43: 24 `tern mcp call`s at once from the model's command, against a server not yet
/// started, all answer: the first starts it, the others wait for it and for a place (8 in
/// flight to one server), and their answers come back by id however the server orders them.
#[test]
fn twenty_four_parallel_calls_all_answer() {
    let cmd = "for i in $(seq 24); do (tern mcp call srv slow '{\"seconds\": 0.3}' > out.$i 2>&1; echo $? > code.$i) & done; wait; \
               cat code.* | sort | uniq -c | sed 's/^ */codes=/'; cat out.* | sort | uniq -c | sed 's/^ */outs=/'";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    let log = ws.root().join(".tern/srv-calls.log");
    let mut entry = stdio("2026", &["--concurrent"]);
    entry["args"]
        .as_array_mut()
        .unwrap()
        .extend([json!("--log"), json!(log.display().to_string())]);
    user_servers(&ws, json!({"srv": entry}));
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(r.contains("codes=24 0"), "{r}");
    assert!(r.contains("outs=24 slept"), "{r}");
    // More than one call was in flight at once on the one connection.
    let lines = std::fs::read_to_string(&log).unwrap();
    let calls = lines.lines().filter(|l| l.contains("tools/call")).count();
    assert_eq!(calls, 24, "{lines}");
}

/// Issue 43: a `tern mcp call` killed while its call runs sends `notifications/cancelled` for
/// it, and the next call is answered at once; a call past its time limit is cancelled the same
/// way, and a server that timed out twice answers again (started anew, with a note) instead of
/// being disabled for the session.
#[test]
fn a_killed_or_timed_out_call_is_cancelled_and_never_blocks_the_next() {
    let cmd = "tern mcp call srv slow '{\"seconds\": 20}' > /dev/null 2>&1 & p=$!; sleep 1; \
               kill -9 $p; \
               tern mcp call seq slow '{\"seconds\": 20}' > /dev/null 2>&1 & p=$!; sleep 1; \
               kill -9 $p; sleep 0.3; start=$(date +%s%N); \
               tern mcp call seq echo '{\"text\": \"next\"}'; \
               echo \"ms=$(( ($(date +%s%N) - start) / 1000000 ))\"; \
               for i in 1 2; do tern mcp call t slow '{\"seconds\": 5}'; echo \"slow=$?\"; done; \
               tern mcp call t echo '{\"text\": \"back\"}'; echo \"echo=$?\"";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    let log = ws.root().join(".tern/srv-calls.log");
    let mut entry = stdio("2026", &["--concurrent"]);
    entry["args"]
        .as_array_mut()
        .unwrap()
        .extend([json!("--log"), json!(log.display().to_string())]);
    let mut timed = stdio("2026", &[]);
    timed["tool_timeout_sec"] = json!(1);
    // `seq` answers one request at a time and ignores a cancel: it is started again.
    user_servers(
        &ws,
        json!({"srv": entry, "seq": stdio("2026", &[]), "t": timed}),
    );
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(r.contains("next\n"), "{r}");
    let ms: u64 = r
        .lines()
        .find_map(|l| l.strip_prefix("ms="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{r}"));
    assert!(ms < 5000, "the next call waited {ms} ms: {r}");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines.contains("notifications/cancelled"),
        "the killed call was cancelled at the server: {lines}"
    );
    assert_eq!(r.matches("slow=2").count(), 2, "{r}");
    assert!(r.contains("echo=0") && r.contains("back\n"), "{r}");
    assert!(r.contains("started it again"), "{r}");
}

/// A variable naming a real server's runtime (`.ci/run` installs them, pinned); unset: the test
/// says it is skipped (the registries did not answer).
fn real_server(var: &str, test: &str) -> Option<String> {
    let v = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    if v.is_none() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped {test}: set {var} (.ci/run does, when the package registries answer)"
        );
    }
    v
}

/// Issue 43: servers people run, through a fake-model turn in the jail: one built on the MCP
/// project's Python SDK (2026-07-28) that takes 5 s to start, and the Node reference server
/// `everything` (2025-11-25).
#[test]
fn real_sdk_servers_answer_the_model_in_the_jail() {
    let python = real_server(
        "TERN_MCP_PYTHON",
        "real_sdk_servers_answer_the_model_in_the_jail (Python SDK)",
    );
    let node = real_server(
        "TERN_MCP_NODE",
        "real_sdk_servers_answer_the_model_in_the_jail (Node reference server)",
    );
    let everything = std::env::var("TERN_MCP_EVERYTHING").ok();
    let mut servers = serde_json::Map::new();
    let mut cmd = String::new();
    if let Some(py) = &python {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/python_sdk_server.py"
        );
        servers.insert("py".into(), json!({"command": py, "args": [script, "5"]}));
        cmd.push_str("tern mcp call py add '{\"a\": 2, \"b\": 40}' | sed 's/^/py=/'; ");
    }
    if let (Some(node), Some(ev)) = (&node, &everything) {
        servers.insert("ev".into(), json!({"command": node, "args": [ev, "stdio"]}));
        cmd.push_str("tern mcp call ev echo '{\"message\": \"from the jail\"}' | sed 's/^/ev=/'; ");
    }
    if servers.is_empty() {
        return;
    }
    let ws = WireWs::new(W, vec![bash(W, "c1", &cmd), text(W, "done")]);
    user_servers(&ws, Value::Object(servers));
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    if python.is_some() {
        assert!(r.contains("py=42"), "{r}");
    }
    if node.is_some() && everything.is_some() {
        assert!(r.contains("ev=Echo: from the jail"), "{r}");
    }
}

/// Issue 42: a stdio server that runs workspace code starts in a jail of its own: what it
/// writes in the workspace reaches it through its door after the call, it cannot write outside
/// the workspace, and the model's commands (in another jail) never see its environment. An
/// entry with `"jail": false` runs outside, as the person asked.
#[test]
fn a_server_running_workspace_code_runs_in_a_jail_of_its_own() {
    let home = tempfile::tempdir().unwrap();
    let outside = home.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let jailed_out = outside.join("from-jailed");
    let free_out = outside.join("from-free");
    let cmd = format!(
        "tern mcp call srv write '{{\"path\": \"{j}\", \"text\": \"x\"}}'; echo jailed-out=$?; \
         tern mcp call srv write '{{\"path\": \"made.txt\", \"text\": \"hello\"}}'; echo made=$?; \
         cat made.txt; echo; \
         tern mcp call srv env '{{\"name\": \"SRV_TOKEN\"}}'; \
         echo seen=$(grep -l s3cret-xyz /proc/[0-9]*/environ 2>/dev/null | wc -l); \
         tern mcp call free write '{{\"path\": \"{f}\", \"text\": \"y\"}}'; echo free-out=$?",
        j = jailed_out.display(),
        f = free_out.display()
    );
    let ws = WireWs::new(W, vec![bash(W, "c1", &cmd), text(W, "done")]);
    std::fs::copy(SERVER, ws.root().join("srv.py")).unwrap();
    user_servers(
        &ws,
        json!({
            "srv": {"command": "python3", "args": ["./srv.py", "--era", "2026"],
                    "env": {"SRV_TOKEN": "s3cret-xyz"}},
            "free": {"command": "python3", "args": ["./srv.py", "--era", "2026"], "jail": false},
        }),
    );
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(r.contains("refused:"), "{r}");
    assert!(!jailed_out.exists(), "the jailed server wrote outside: {r}");
    assert!(r.contains("made=0") && r.contains("hello"), "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("made.txt")).unwrap(),
        "hello"
    );
    assert!(r.contains("s3cret-xyz"), "the server has its variable: {r}");
    assert!(
        r.contains("seen=0"),
        "a command saw the server's environment: {r}"
    );
    assert!(r.contains("free-out=0") && free_out.exists(), "{r}");
}

/// Issue 42, the attack of the last list: the model's command puts a `json.py` beside a server
/// that imports `json` (no file trust names changes). The server that runs workspace code
/// starts in its jail, so the planted module's write outside the workspace fails; the same
/// server with `"jail": false` shows the attack is real.
#[test]
fn a_module_put_beside_a_server_runs_with_the_models_authority_only() {
    let outside = tempfile::tempdir().unwrap();
    let (ma, mb) = (outside.path().join("a"), outside.path().join("b"));
    let plant = |dir: &str, marker: &Path| {
        format!(
            "printf 'try:\\n    open(\"{}\", \"w\").write(\"pwned\")\\nexcept OSError:\\n    pass\\nraise SystemExit(0)\\n' > {dir}/json.py",
            marker.display()
        )
    };
    // Planted by one command (its writes reach the workspace through the door when it ends),
    // the servers started by the next.
    let first = format!("{}; {}", plant("a", &ma), plant("b", &mb));
    let second = "tern mcp call a echo '{\"text\": \"x\"}'; echo a=$?; tern mcp call b echo '{\"text\": \"x\"}'; echo b=$?";
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", &first),
            bash(W, "c2", second),
            text(W, "done"),
        ],
    );
    for d in ["a", "b"] {
        std::fs::create_dir_all(ws.root().join(d)).unwrap();
        std::fs::copy(SERVER, ws.root().join(d).join("srv.py")).unwrap();
    }
    user_servers(
        &ws,
        json!({
            "a": {"command": "python3", "args": ["./a/srv.py"]},
            "b": {"command": "python3", "args": ["./b/srv.py"], "jail": false},
        }),
    );
    ws.ok(&["exec", "go"]);
    let r = &tool_results(&ws)[1];
    assert!(!ma.exists(), "the planted module ran as the person: {r}");
    assert!(
        mb.exists(),
        "the attack did not happen where the jail was turned off: {r}"
    );
}

/// Issue 42: an entry that asks for a jail (`"jail": true`) in a session with none (here
/// danger-full-access) is not started, and the reason names the setting; the same server with
/// no `"jail"` runs as tern's child there.
#[test]
fn a_server_that_asks_for_a_jail_is_refused_where_there_is_none() {
    let cmd = "tern mcp call j echo '{\"text\": \"x\"}'; echo j=$?; tern mcp call n echo '{\"text\": \"y\"}'; echo n=$?";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    let mut asked = stdio("2026", &[]);
    asked["jail"] = json!(true);
    user_servers(&ws, json!({"j": asked, "n": stdio("2026", &[])}));
    ws.ok(&["exec", "--sandbox", "danger-full-access", "go"]);
    let r = &tool_results(&ws)[0];
    assert!(
        r.contains("\"jail\": true") && r.contains("not started"),
        "{r}"
    );
    assert!(!r.contains("j=0"), "{r}");
    assert!(r.contains("y\n") && r.contains("n=0"), "{r}");
}
