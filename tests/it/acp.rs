//! `tern acp`: the real binary driven over pipes, against the fake provider. Every stdout line
//! of every test is checked to be a JSON-RPC 2.0 message; the protocol's edge cases (bad input,
//! cancel ordering, permissions, sessions) are checked here, and the same flows through the
//! official ACP Python SDK at the end of the file (`sdk_*`, SKIPPED without its venv).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::cli::Ws;
use crate::support::files::{jsonl, read_json};
use crate::support::procs::{eventually, procs_with, wait_exit};
use crate::support::{FakeServer, Reply, Wire, openai_text, script};

/// Longest wait for one expected message (a hang check, not a speed claim).
const WAIT: Duration = Duration::from_secs(30);

/// A running `tern acp` with a line-level client around its pipes.
struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    /// Every message read so far, in order.
    log: Vec<Value>,
    /// Messages read while waiting for something else, not yet taken.
    queue: std::collections::VecDeque<Value>,
}

impl Agent {
    /// `tern acp ARGS` in `ws`, talking to `fake`.
    fn spawn(ws: &Ws, fake: &FakeServer, args: &[&str]) -> Agent {
        let mut cmd = ws.tern(fake);
        cmd.arg("acp").args(args);
        Agent::start(cmd)
    }

    fn start(mut cmd: Command) -> Agent {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn tern acp");
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                // The purity check: every stdout line is one JSON-RPC 2.0 object.
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| json!({"NOT_JSON_RPC": line, "error": e.to_string()}));
                let v = if v["jsonrpc"] == "2.0" {
                    v
                } else {
                    json!({"NOT_JSON_RPC": line})
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Agent {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            next_id: 100,
            log: Vec::new(),
            queue: Default::default(),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to tern acp");
        stdin.flush().expect("flush");
    }

    fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Sends a request; returns its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next message from the agent within `limit` (None: nothing came).
    fn recv(&mut self, limit: Duration) -> Option<Value> {
        if let Some(v) = self.queue.pop_front() {
            return Some(v);
        }
        match self.lines.recv_timeout(limit) {
            Ok(v) => {
                assert!(
                    v.get("NOT_JSON_RPC").is_none(),
                    "a stdout line is not JSON-RPC: {v}\nstderr:\n{}",
                    self.stderr()
                );
                self.log.push(v.clone());
                Some(v)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Reads until a message matches `pred`; the others read meanwhile are kept in order and
    /// returned with it.
    fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let start = Instant::now();
        let mut before = Vec::new();
        loop {
            let left = WAIT.saturating_sub(start.elapsed());
            let Some(v) = self.recv(left) else {
                panic!(
                    "no {what} within {WAIT:?}; got {before:#?}\nstderr:\n{}",
                    self.stderr()
                );
            };
            if pred(&v) {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// The response to request `id`, and the messages before it.
    fn response(&mut self, id: u64) -> (Value, Vec<Value>) {
        let (r, before) = self.until(&format!("response {id}"), |v| {
            v["id"] == id && v.get("method").is_none()
        });
        (r, before)
    }

    /// Sends a request and returns its response (the messages before it are dropped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(id).0
    }

    /// `initialize` with version 1.
    fn init(&mut self) -> Value {
        let r = self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
        r
    }

    /// `session/new` in `cwd`; returns the session id (and reads its commands update).
    fn new_session(&mut self, cwd: &Path) -> String {
        let r = self.call(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        );
        let sid = r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId: {r}\n{}", self.stderr()))
            .to_string();
        let (u, _) = self.until("available_commands_update", |v| {
            v["params"]["update"]["sessionUpdate"] == "available_commands_update"
        });
        assert_eq!(u["params"]["sessionId"], sid.as_str());
        sid
    }

    /// Sends a text prompt; returns the request id.
    fn prompt(&mut self, sid: &str, text: &str) -> u64 {
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    /// Answers the agent's request `req` with `result`.
    fn answer(&mut self, req: &Value, result: Value) {
        let id = req["id"].clone();
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Closes stdin and waits for the exit (None: it did not exit within `limit`).
    fn close(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.stdin = None;
        wait_exit(&mut self.child, limit)
    }

    /// Closes stdin, requires exit 0, then checks every remaining stdout line.
    fn finish(mut self) -> Vec<Value> {
        let st = self.close(WAIT);
        assert_eq!(
            st.and_then(|s| s.code()),
            Some(0),
            "tern acp did not exit 0\nstderr:\n{}",
            self.stderr()
        );
        while self.recv(Duration::from_millis(200)).is_some() {}
        self.log.clone()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn update_kind(v: &Value) -> &str {
    v["params"]["update"]["sessionUpdate"]
        .as_str()
        .unwrap_or("")
}

fn updates<'a>(msgs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    msgs.iter()
        .filter(|m| m["method"] == "session/update" && update_kind(m) == kind)
        .map(|m| &m["params"]["update"])
        .collect()
}

fn chunks_text(msgs: &[Value], kind: &str) -> String {
    updates(msgs, kind)
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap_or(""))
        .collect()
}

fn error_code(r: &Value) -> i64 {
    r["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {r}"))
}

fn stop_reason(r: &Value) -> &str {
    r["result"]["stopReason"]
        .as_str()
        .unwrap_or_else(|| panic!("no stopReason: {r}"))
}

fn session_dir(ws: &Ws, sid: &str) -> std::path::PathBuf {
    ws.session_dir(sid)
}

/// No process runs `sleep ARG` (the marker of a test's command).
fn no_sleep_left(arg: &str) -> bool {
    eventually(Duration::from_secs(5), || {
        crate::support::procs::pids_running(&["sleep", arg]).is_empty()
    })
}

#[test]
fn initialize_negotiates_the_version_and_states_capabilities() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    // Before initialize: refused.
    let r = a.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(error_code(&r), -32600, "{r}");
    // A version tern does not speak: it answers with its own latest.
    let r = a.call("initialize", json!({"protocolVersion": 7}));
    assert_eq!(r["result"]["protocolVersion"], 1);
    // No version at all: wrong params.
    let r = a.call("initialize", json!({"clientCapabilities": {}}));
    assert_eq!(error_code(&r), -32602);
    let r = a.init();
    let caps = &r["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(
        caps["promptCapabilities"],
        json!({"image": false, "audio": false, "embeddedContext": true})
    );
    assert_eq!(caps["mcpCapabilities"], json!({"http": true, "sse": false}));
    // Exactly list, resume, close and fork: no delete, no additional directories.
    assert_eq!(
        caps["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}, "fork": {}})
    );
    assert_eq!(caps["_meta"]["tern"]["events"], "_tern/events");
    assert_eq!(caps["_meta"]["tern"]["steer"], "_tern/steer");
    // A client that did not declare `auth.terminal` cannot run a terminal method: none offered.
    assert_eq!(r["result"]["authMethods"], json!([]), "{r}");
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": false}}}),
    );
    assert_eq!(r["result"]["authMethods"], json!([]), "{r}");
    // One that did gets `tern setup` in a terminal (ACP v1, "Terminal Authentication").
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": true}}}),
    );
    let methods = r["result"]["authMethods"].as_array().unwrap();
    assert_eq!(methods.len(), 1, "{r}");
    assert_eq!(methods[0]["type"], "terminal");
    assert_eq!(methods[0]["id"], "tern-setup");
    assert_eq!(methods[0]["args"], json!(["setup"]));
    assert_eq!(r["result"]["agentInfo"]["name"], "tern");
    // The ACP registry's validator declares it as `_meta["terminal-auth"]` (issue 34): offered.
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"terminal-auth": true}},
               "clientInfo": {"name": "registry-validator", "version": "1"}}),
    );
    let methods = r["result"]["authMethods"].as_array().unwrap();
    assert_eq!(methods.len(), 1, "{r}");
    assert_eq!(methods[0]["id"], "tern-setup");
    let r = a.call("authenticate", json!({"methodId": "x"}));
    assert_eq!(error_code(&r), -32602);
    // A provider is configured (the fake's URL): authenticating with the method is a no-op.
    let r = a.call("authenticate", json!({"methodId": "tern-setup"}));
    assert_eq!(r["result"], json!({}), "{r}");
    for m in ["session/delete", "logout", "_other/thing"] {
        let r = a.call(m, json!({}));
        assert_eq!(error_code(&r), -32601, "{m}: {r}");
    }
    a.finish();
    assert!(fake.requests().is_empty());
}

/// Issue 34: the ACP registry's validation of an agent, as its public script does it (the logic
/// re-stated, not its code): the agent's command started on a machine with nothing configured
/// (an empty home, no key, no provider, only `PATH`), one `initialize` with the validator's
/// client capabilities (fs, terminal, `_meta["terminal-auth"]`), the answer within the
/// validator's time limit, every stdout line JSON-RPC, and an answer that lists
/// `authMethods` (the failure the issue met: "No authMethods in response"), each with an id
/// and a name, a terminal one with its arguments; then stdin closes and the agent exits 0.
#[test]
fn the_acp_registry_validation_passes_on_a_machine_with_nothing_configured() {
    let root = tempfile::tempdir().unwrap();
    let (home, work) = (root.path().join("home"), root.path().join("ws"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = Command::new(crate::support::cli::TERN);
    cmd.arg("acp")
        .current_dir(&work)
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let started = Instant::now();
    let mut a = Agent::start(cmd);
    a.send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": true, "writeTextFile": true},
                "terminal": true,
                "_meta": {"terminal-auth": true}
            },
            "clientInfo": {"name": "acp-registry-validator", "version": "1.0.0"}
        }}),
    );
    let r = a.recv(WAIT).expect("an answer to initialize");
    assert!(started.elapsed() < WAIT);
    assert_eq!(r["id"], 0, "{r}");
    let result = &r["result"];
    assert!(result["protocolVersion"].is_u64(), "{r}");
    assert!(result["agentCapabilities"].is_object(), "{r}");
    let methods = result["authMethods"].as_array().expect("authMethods");
    assert!(!methods.is_empty(), "No authMethods in response: {r}");
    for m in methods {
        assert!(m["id"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
        assert!(m["name"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
        if m["type"] == "terminal" {
            assert!(
                m["args"]
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string)),
                "{m}"
            );
        }
    }
    assert_eq!(result["agentInfo"]["name"], "tern");
    assert!(result["agentInfo"]["version"].is_string(), "{r}");
    // Nothing was written in the empty home by answering.
    assert!(
        std::fs::read_dir(&home).unwrap().next().is_none(),
        "initialize wrote to the home folder"
    );
    a.finish();
}

#[test]
fn bad_input_gets_standard_errors_and_the_connection_lives_on() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let expect = |a: &mut Agent, bytes: &[u8], code: i64, id: Value| {
        a.send_raw(bytes);
        let (r, _) = a.until("an error", |v| v.get("error").is_some());
        assert_eq!(
            error_code(&r),
            code,
            "{}: {r}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(r["id"], id, "{r}");
    };
    expect(
        &mut a,
        b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"meth\n",
        -32700,
        Value::Null,
    );
    expect(&mut a, b"\xff\xfe\n", -32700, Value::Null);
    // Invalid UTF-8 inside a string of a request: its id is still readable, so the request
    // is answered under it (JSON-RPC 2.0 §5: null only when the id cannot be detected).
    expect(
        &mut a,
        b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"session/prompt\",\"params\":{\"sessionId\":\"x\",\"prompt\":[{\"type\":\"text\",\"text\":\"a\xff\"}]}}\n",
        -32700,
        json!(8),
    );
    expect(
        &mut a,
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]\n",
        -32600,
        Value::Null,
    );
    expect(
        &mut a,
        b"{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"initialize\"}\n",
        -32600,
        json!(5),
    );
    expect(
        &mut a,
        b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"session/new\",\"params\":3}\n",
        -32600,
        json!(6),
    );
    expect(
        &mut a,
        b"{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"no/such\"}\n",
        -32601,
        json!("s"),
    );
    // Wrong params.
    let r = a.call("session/new", json!({"mcpServers": []}));
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/new",
        json!({"cwd": "relative/dir", "mcpServers": []}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/new",
        json!({"cwd": "/no/such/folder", "mcpServers": []}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": [], "additionalDirectories": ["/tmp"]}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/prompt",
        json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(error_code(&r), -32002, "{r}");
    let r = a.call(
        "session/prompt",
        json!({"sessionId": "nope", "prompt": "hi"}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/load",
        json!({"sessionId": "20990101-000000-beef", "cwd": ws.path(), "mcpServers": []}),
    );
    assert_eq!(error_code(&r), -32002, "{r}");
    let sid = a.new_session(ws.path());
    let r = a.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "yolo"}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    // Notifications are never answered, known or not; an answer to nothing is dropped.
    a.notify("no/such/notification", json!({}));
    a.notify("session/cancel", json!({"sessionId": sid}));
    a.send(json!({"jsonrpc": "2.0", "id": 424242, "result": {}}));
    // A line over the 8 MiB cap: refused and skipped, the next line is read normally.
    let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"x\",\"params\":{\"p\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 9 << 20));
    big.extend_from_slice(b"\"}}\n");
    a.send_raw(&big);
    let (r, before) = a.until("the over-long line's error", |v| v.get("error").is_some());
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(error_code(&r), -32600, "{r}");
    assert_eq!(r["id"], Value::Null);
    let r = a.call("session/list", json!({"cwd": ws.path()}));
    assert_eq!(r["result"]["sessions"][0]["sessionId"], sid.as_str(), "{r}");
    // Nothing else was ever answered: one response per request above, no stray output.
    let log = a.finish();
    assert!(
        !log.iter().any(|m| m["id"] == 424242),
        "the answer to nothing was echoed"
    );
    assert!(fake.requests().is_empty());
}

#[test]
fn a_prompt_turn_streams_text_tool_calls_plan_and_usage_then_end_turn() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::calls(
            w,
            &[
                (
                    "c1",
                    "work_update",
                    json!({"todos": [script::todo("1", "Say hi", "in_progress"), script::todo("2", "Report", "pending")]}),
                ),
                ("c2", "bash", json!({"command": "echo hi-from-bash"})),
            ],
        ),
        script::text(w, "All done: said hi."),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "say hi with bash");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    // Every update is for this session.
    assert!(
        msgs.iter()
            .all(|m| m["params"]["sessionId"] == sid.as_str())
    );
    let kinds: Vec<String> = msgs
        .iter()
        .map(|m| {
            let u = &m["params"]["update"];
            match update_kind(m) {
                "tool_call" => format!(
                    "tool_call {} {}",
                    u["toolCallId"].as_str().unwrap(),
                    u["status"].as_str().unwrap()
                ),
                "tool_call_update" => format!(
                    "update {} {}",
                    u["toolCallId"].as_str().unwrap(),
                    u["status"].as_str().unwrap()
                ),
                k => k.to_string(),
            }
        })
        .filter(|k| k != "agent_message_chunk")
        .collect();
    assert_eq!(
        kinds,
        [
            "usage_update",
            "tool_call c1 in_progress",
            "plan",
            "update c1 completed",
            "tool_call c2 pending",
            "update c2 in_progress",
            "update c2 completed",
            "usage_update",
        ],
        "{msgs:#?}"
    );
    let calls = updates(&msgs, "tool_call");
    assert_eq!(calls[1]["kind"], "execute");
    assert_eq!(calls[1]["title"], "echo hi-from-bash");
    assert_eq!(calls[1]["rawInput"]["command"], "echo hi-from-bash");
    let done = updates(&msgs, "tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "c2" && u["status"] == "completed")
        .unwrap();
    let out = done["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        out.contains("hi-from-bash") && out.contains("[exit 0]"),
        "{out}"
    );
    assert_eq!(done["rawOutput"]["exitCode"], 0);
    // The work_update call's completion carries its result too (issue 34).
    let work = updates(&msgs, "tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "c1" && u["status"] == "completed")
        .unwrap();
    assert_eq!(work["rawOutput"]["isError"], false, "{work}");
    assert!(work["rawOutput"]["content"].is_string(), "{work}");
    let plan = updates(&msgs, "plan");
    assert_eq!(
        plan[0]["entries"],
        json!([
            {"content": "Say hi", "priority": "medium", "status": "in_progress"},
            {"content": "Report", "priority": "medium", "status": "pending"}
        ])
    );
    let usage = updates(&msgs, "usage_update");
    assert_eq!(usage[0]["size"], 128_000);
    assert!(usage[0]["used"].as_u64().unwrap() > 0, "{usage:?}");
    // The text chunks add up to the answer, after the tool calls.
    assert_eq!(
        chunks_text(&msgs, "agent_message_chunk"),
        "All done: said hi."
    );
    let last_chunk = msgs
        .iter()
        .rposition(|m| update_kind(m) == "agent_message_chunk")
        .unwrap();
    let last_tool = msgs
        .iter()
        .rposition(|m| update_kind(m) == "tool_call_update")
        .unwrap();
    assert!(last_chunk > last_tool);
    // The turn is stored as every other surface stores it.
    let conv = jsonl(&session_dir(&ws, &sid).join("conversation.jsonl"));
    assert_eq!(conv.len(), 5, "{conv:#?}");
    assert_eq!(conv[0]["content"], "say hi with bash");
    let meta = read_json(&session_dir(&ws, &sid).join("meta.json"));
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["title"], "say hi with bash");
    a.finish();
}

#[test]
fn approvals_become_permission_requests() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "b1", "touch allowed-once.txt"),
        script::text(w, "ran it"),
        script::bash(w, "b2", "touch rejected.txt"),
        script::text(w, "did not run it"),
        script::bash(w, "b3", "touch always-1.txt"),
        script::bash(w, "b4", "touch always-2.txt"),
        script::text(w, "ran both"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let r = a.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(r["result"]["modes"]["currentModeId"], "ask", "{r}");
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let is_permission = |v: &Value| v["method"] == "session/request_permission";

    // Allow once: the command runs.
    let id = a.prompt(&sid, "touch a file");
    let (req, before) = a.until("a permission request", is_permission);
    let p = &req["params"];
    assert_eq!(p["sessionId"], sid.as_str());
    assert_eq!(p["toolCall"]["toolCallId"], "b1");
    assert_eq!(p["toolCall"]["title"], "touch allowed-once.txt");
    let kinds: Vec<&str> = p["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert!(
        updates(&before, "tool_call")
            .iter()
            .any(|u| u["toolCallId"] == "b1" && u["status"] == "pending")
    );
    assert!(!ws.path().join("allowed-once.txt").exists());
    a.answer(
        &req,
        json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}}),
    );
    let (r, after) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert!(ws.path().join("allowed-once.txt").exists());
    assert!(
        updates(&after, "tool_call_update")
            .iter()
            .any(|u| u["status"] == "in_progress")
    );

    // Reject once: it does not run, the call fails, the model is told.
    let id = a.prompt(&sid, "touch another");
    let (req, _) = a.until("a permission request", is_permission);
    a.answer(
        &req,
        json!({"outcome": {"outcome": "selected", "optionId": "reject-once"}}),
    );
    let (r, after) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert!(!ws.path().join("rejected.txt").exists());
    let failed = updates(&after, "tool_call_update");
    assert_eq!(failed.len(), 1, "{after:#?}");
    assert_eq!(failed[0]["status"], "failed");
    assert!(
        failed[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("declined")
    );

    // Allow always: the mode becomes auto (and says so); the next command is not asked about.
    let id = a.prompt(&sid, "touch two");
    let (req, _) = a.until("a permission request", is_permission);
    a.answer(
        &req,
        json!({"outcome": {"outcome": "selected", "optionId": "allow-always"}}),
    );
    let (r, after) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert!(ws.path().join("always-1.txt").exists() && ws.path().join("always-2.txt").exists());
    assert!(!after.iter().any(is_permission), "asked again: {after:#?}");
    let modes = updates(&after, "current_mode_update");
    assert_eq!(modes.len(), 1);
    assert_eq!(modes[0]["currentModeId"], "auto");
    a.finish();
}

#[test]
fn plan_mode_refuses_commands_without_asking() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "b1", "touch planned.txt"),
        script::text(w, "I can only plan."),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "plan"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let id = a.prompt(&sid, "make a file");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert!(
        !msgs
            .iter()
            .any(|v| v["method"] == "session/request_permission")
    );
    let u = updates(&msgs, "tool_call_update");
    assert_eq!(u.len(), 1);
    assert_eq!(u[0]["status"], "failed");
    assert!(
        u[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("--approval never")
    );
    assert!(!ws.path().join("planned.txt").exists());
    // `--approval never` starts in plan mode.
    drop(a);
    let mut b = Agent::spawn(&ws, &fake, &["--approval", "never"]);
    b.init();
    let r = b.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(r["result"]["modes"]["currentModeId"], "plan");
    b.finish();
}

#[test]
fn cancel_during_a_command_kills_it_and_answers_cancelled_last() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "s1", "sleep 30.0417"),
        script::text(w, "after the cancel"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "sleep a while");
    a.until("the command running", |v| {
        update_kind(v) == "tool_call_update" && v["params"]["update"]["status"] == "in_progress"
    });
    assert!(eventually(Duration::from_secs(10), || {
        !crate::support::procs::pids_running(&["sleep", "30.0417"]).is_empty()
    }));
    let t = Instant::now();
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (r, before) = a.response(id);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(no_sleep_left("30.0417"), "{:?}", procs_with("30.0417"));
    // The command's final update came before the response.
    let last = updates(&before, "tool_call_update");
    assert_eq!(last.last().unwrap()["status"], "failed", "{before:#?}");
    assert!(
        last.last().unwrap()["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );
    // Nothing of the cancelled turn follows its response.
    assert!(a.recv(Duration::from_millis(700)).is_none());
    // The history is valid and the next prompt runs.
    let conv = jsonl(&session_dir(&ws, &sid).join("conversation.jsonl"));
    assert_eq!(conv.last().unwrap()["role"], "tool", "{conv:#?}");
    let id = a.prompt(&sid, "go on");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert_eq!(
        chunks_text(&msgs, "agent_message_chunk"),
        "after the cancel"
    );
    a.finish();
}

#[test]
fn cancel_while_the_model_streams_answers_cancelled() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![
        openai_text("a slow answer that never arrives in time")
            .delay_before(Duration::from_secs(20)),
        script::text(Wire::OpenAi, "next"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "think slowly");
    assert!(eventually(Duration::from_secs(10), || !fake
        .requests()
        .is_empty()));
    let t = Instant::now();
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    let id = a.prompt(&sid, "again");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    a.finish();
}

#[test]
fn cancel_during_a_permission_question_does_not_wedge_the_session() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "q1", "touch never.txt"),
        script::text(w, "unused"),
        script::text(w, "fine"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "touch it");
    let (req, _) = a.until("a permission request", |v| {
        v["method"] == "session/request_permission"
    });
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (r, before) = a.response(id);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    // The question is withdrawn: the tool call it was about is closed before the response.
    let call_id = req["params"]["toolCall"]["toolCallId"].clone();
    let closing: Vec<&Value> = updates(&before, "tool_call_update")
        .into_iter()
        .filter(|u| u["toolCallId"] == call_id)
        .collect();
    assert!(
        closing.last().is_some_and(|u| u["status"] == "failed"),
        "{before:#?}"
    );
    // The client's late answer (as the spec tells it to send) is dropped.
    a.answer(&req, json!({"outcome": {"outcome": "cancelled"}}));
    assert!(a.recv(Duration::from_millis(500)).is_none());
    assert!(!ws.path().join("never.txt").exists());
    // The model reads that the turn was cancelled, not that anyone declined.
    let conv = jsonl(&session_dir(&ws, &sid).join("conversation.jsonl"));
    let result = conv
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool result");
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("cancelled") && !text.contains("declined to run"),
        "{text}"
    );
    let id = a.prompt(&sid, "something else");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert!(!chunks_text(&msgs, "agent_message_chunk").is_empty());
    a.finish();
}

/// Index in `log` of the response to request `id`.
fn response_at(log: &[Value], id: u64) -> usize {
    log.iter()
        .position(|m| m["id"] == id && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no response {id} in {log:#?}"))
}

#[test]
fn a_prompt_during_a_turn_cancels_it_and_runs_next_never_an_error() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "s1", "sleep 30.0418"),
        script::text(w, "second"),
        script::bash(w, "s2", "sleep 30.0419"),
        script::text(w, "third"),
        script::bash(w, "s3", "sleep 30.0420"),
        script::text(w, "fourth"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let running = |v: &Value| v["params"]["update"]["status"] == "in_progress";

    // 1. The cancel and the next prompt in one write (as Toad sends them): the first prompt is
    // answered `cancelled`, then the second runs to its end.
    let first = a.prompt(&sid, "sleep");
    a.until("the command running", running);
    let second = 500;
    let mut bytes = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}),
    )
    .unwrap();
    bytes.push(b'\n');
    bytes.extend(
        serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": second, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "and another"}]}}),
        )
        .unwrap(),
    );
    bytes.push(b'\n');
    a.send_raw(&bytes);
    let (r, _) = a.response(first);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    let (r, msgs) = a.response(second);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(chunks_text(&msgs, "agent_message_chunk"), "second");

    // 2. A prompt without a cancel: tern cancels the running turn itself.
    let third = a.prompt(&sid, "sleep again");
    a.until("the command running", running);
    let fourth = a.prompt(&sid, "never mind");
    let (r, before) = a.response(third);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    // The cancelled turn closed its command before its response.
    let last = updates(&before, "tool_call_update");
    assert_eq!(last.last().unwrap()["status"], "failed", "{before:#?}");
    let (r, msgs) = a.response(fourth);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(chunks_text(&msgs, "agent_message_chunk"), "third");

    // 3. `$/cancel_request` for the running prompt cancels it like session/cancel.
    let fifth = a.prompt(&sid, "sleep once more");
    a.until("the command running", running);
    a.notify("$/cancel_request", json!({"requestId": fifth}));
    let (r, _) = a.response(fifth);
    assert_eq!(stop_reason(&r), "cancelled");
    let sixth = a.prompt(&sid, "go on");
    let (r, _) = a.response(sixth);
    assert_eq!(stop_reason(&r), "end_turn");

    let log = a.finish();
    // Exactly one response each, no error, and each cancelled response before the next
    // prompt's first update.
    for id in [first, second, third, fourth, fifth, sixth] {
        let n = log
            .iter()
            .filter(|m| m["id"] == id && m.get("method").is_none())
            .count();
        assert_eq!(n, 1, "request {id} answered {n} times");
    }
    assert!(log.iter().all(|m| m.get("error").is_none()), "{log:#?}");
    for (cancelled, next_text) in [(first, "second"), (third, "third")] {
        let at = response_at(&log, cancelled);
        let next_first = log
            .iter()
            .position(|m| m["params"]["update"]["content"]["text"] == next_text)
            .unwrap();
        assert!(at < next_first, "{log:#?}");
    }
    assert!(no_sleep_left("30.0418") && no_sleep_left("30.0419") && no_sleep_left("30.0420"));
    // The model's next request after the cancelled turn holds the interrupted result.
    let bodies: Vec<String> = fake.requests().iter().map(|r| r.body_str()).collect();
    assert!(bodies[1].contains("and another"), "{}", bodies[1]);
}

#[test]
fn max_turns_and_provider_failures_have_their_stop_reasons() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "m1", "true"),
        Reply::status(
            400,
            r#"{"error": {"message": "bad request: model not found"}}"#,
        ),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto", "--max-turns", "1"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "loop");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "max_turn_requests", "{r}");
    // tern could not finish the turn: an error response with tern's reason, never `refusal`
    // (a client shows that as "the agent refused").
    let id = a.prompt(&sid, "fail");
    let (r, msgs) = a.response(id);
    assert_eq!(error_code(&r), -32603, "{r}");
    // The reason is in the thread too, before the error ends the turn (issue 46).
    let said = chunks_text(&msgs, "agent_message_chunk");
    assert!(
        said.contains("tern: ") && said.contains("model not found"),
        "{said}"
    );
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("tern: ") && message.contains("model not found"),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["tern"]["status"], "failed");
    a.finish();
}

#[test]
fn slash_commands_run_the_op_table_with_its_receipts() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    // The commands offered: the draft is dropped with /discard, not /cancel (an editor person
    // reads that as "stop the turn").
    let id = a.prompt(&sid, "/plan");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    // A receipt of several lines is a fenced block, so a Markdown view keeps its lines.
    let text = chunks_text(&msgs, "agent_message_chunk");
    assert!(text.starts_with("```text\nplan state: idle"), "{text}");
    assert!(text.ends_with("\n```"), "{text}");
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["op"], "plan.show");
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["ok"], true);
    // A refused op: `tern: …` as in the REPL, receipt not ok; /cancel still names /discard.
    let id = a.prompt(&sid, "/cancel");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["ok"], false);
    assert!(chunks_text(&msgs, "agent_message_chunk").starts_with("tern: "));
    let id = a.prompt(&sid, "/discard");
    let (r, _) = a.response(id);
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["op"], "plan.cancel");
    let id = a.prompt(&sid, "/status");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    let text = chunks_text(&msgs, "agent_message_chunk");
    assert!(text.contains("To-do") && text.starts_with("```"), "{text}");
    let id = a.prompt(&sid, "/relay");
    let (r, _) = a.response(id);
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["ok"], true, "{r}");
    assert!(session_dir(&ws, &sid).join("handoff.md").exists());
    // The receipts are events, as for every surface.
    let events = jsonl(&session_dir(&ws, &sid).join("events.jsonl"));
    let ops: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "receipt")
        .map(|e| e["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["plan.show", "plan.cancel", "plan.cancel", "relay"]);
    a.finish();
    assert!(fake.requests().is_empty(), "an op called the model");
}

#[test]
fn prompts_carry_resource_links_and_embedded_text() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "read them")]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "text", "text": "Review these."},
            {"type": "resource_link", "uri": "file:///work/src/main.rs", "name": "main.rs"},
            {"type": "resource", "resource": {"uri": "file:///work/notes.md", "text": "remember the milk", "mimeType": "text/markdown"}}
        ]}),
    );
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    let body = fake.requests()[0].body_str();
    assert!(body.contains("Review these."), "{body}");
    assert!(
        body.contains("[resource: main.rs] /work/src/main.rs"),
        "{body}"
    );
    assert!(
        body.contains("<resource uri=\\\"/work/notes.md\\\">\\nremember the milk\\n</resource>"),
        "{body}"
    );
    a.finish();
}

#[test]
fn the_clients_mcp_servers_reach_the_sessions_commands_and_sse_is_refused_by_name() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "m1", "tern mcp call ed add '{\"a\": 20, \"b\": 22}'"),
        script::text(w, "done"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/mcp_server.py");
    let r = a.call(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": [
            {"name": "ed", "command": "python3", "args": [server, "--era", "2025"],
             "env": [{"name": "X", "value": "1"}]},
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []}
        ]}),
    );
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("accepted")
        .to_string();
    let refused = &r["result"]["_meta"]["tern"]["mcpServers"]["refused"];
    assert_eq!(refused.as_array().map(Vec::len), Some(1), "{r}");
    assert!(refused[0].as_str().unwrap().contains("sse"), "{r}");
    let id = a.prompt(&sid, "add with the editor's server");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = fake.requests();
    let body = String::from_utf8_lossy(&reqs[0].body).to_string();
    assert!(
        body.contains("MCP servers: ed."),
        "the prompt names the editor's server"
    );
    let last = String::from_utf8_lossy(&reqs[1].body).to_string();
    assert!(last.contains("42"), "{last}");
    let events = jsonl(&session_dir(&ws, &sid).join("events.jsonl"));
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "mcp_call" && e["server"] == "ed")
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "warning" && e["message"].as_str().unwrap().contains("sse"))
    );
    a.finish();
}

#[test]
fn sessions_list_resume_close_load_and_events() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "t1", "echo first-turn"),
        script::text(w, "First answer."),
        script::bash(w, "t2", "exit 3"),
        script::text(w, "Second answer."),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "first prompt");
    assert_eq!(stop_reason(&a.response(id).0), "end_turn");
    let id = a.prompt(&sid, "second prompt");
    let (r, live) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    // A non-zero exit shows as failed.
    assert!(
        updates(&live, "tool_call_update")
            .iter()
            .any(|u| u["toolCallId"] == "t2" && u["status"] == "failed")
    );
    let other = a.new_session(ws.path());
    let r = a.call("session/list", json!({}));
    let r2 = a.call("session/list", json!({"cwd": ws.path()}));
    assert_eq!(
        r["result"], r2["result"],
        "the process cwd is the workspace here"
    );
    let sessions = r["result"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    let mine = sessions
        .iter()
        .find(|s| s["sessionId"] == sid.as_str())
        .expect("listed");
    assert!(sessions.iter().any(|s| s["sessionId"] == other.as_str()));
    assert_eq!(mine["title"], "first prompt");
    assert_eq!(mine["cwd"], ws.path().display().to_string());
    assert_eq!(mine["_meta"]["tern"]["status"], "completed");
    assert!(r["result"].get("nextCursor").is_none());
    let r = a.call("session/list", json!({"cwd": "/nowhere/else"}));
    assert_eq!(r["result"]["sessions"], json!([]));
    let r = a.call("session/list", json!({"cursor": "bogus"}));
    assert_eq!(error_code(&r), -32602);
    // The events extension: everything after a seq.
    let r = a.call("_tern/events", json!({"sessionId": sid, "since": 0}));
    let events = r["result"]["events"].as_array().unwrap().clone();
    assert_eq!(events[0]["type"], "session_start");
    let last = r["result"]["next"].as_u64().unwrap();
    assert_eq!(last, events.last().unwrap()["seq"].as_u64().unwrap());
    let r = a.call(
        "_tern/events",
        json!({"sessionId": sid, "since": last - 2, "limit": 1}),
    );
    assert_eq!(r["result"]["events"].as_array().unwrap().len(), 1);
    assert_eq!(r["result"]["more"], true);
    assert_eq!(r["result"]["next"], last - 1);
    // Close: the session is no longer open here.
    let r = a.call("session/close", json!({"sessionId": other}));
    assert_eq!(r["result"], json!({}));
    let r = a.call("session/close", json!({"sessionId": other}));
    assert_eq!(error_code(&r), -32002);
    a.finish();

    // A new process: resume sends nothing before its answer.
    let mut b = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    b.init();
    let id = b.request(
        "session/resume",
        json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
    );
    let (r, before) = b.response(id);
    assert_eq!(r["result"]["modes"]["currentModeId"], "auto", "{r}");
    assert!(before.is_empty(), "resume replayed: {before:#?}");
    let r = b.call("_tern/events", json!({"sessionId": sid, "since": last}));
    assert!(
        r["result"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["seq"].as_u64().unwrap() > last)
    );
    b.finish();

    // Another: load replays both turns, in order, before its answer.
    let mut c = Agent::spawn(&ws, &fake, &[]);
    c.init();
    let id = c.request(
        "session/load",
        json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
    );
    let (r, replay) = c.response(id);
    assert!(r.get("result").is_some(), "{r}");
    let seq: Vec<String> = replay
        .iter()
        .map(|m| {
            let u = &m["params"]["update"];
            match update_kind(m) {
                "user_message_chunk" | "agent_message_chunk" => format!(
                    "{} {}",
                    update_kind(m),
                    u["content"]["text"].as_str().unwrap()
                ),
                "tool_call" => format!(
                    "tool_call {} {}",
                    u["toolCallId"].as_str().unwrap(),
                    u["title"].as_str().unwrap()
                ),
                "tool_call_update" => format!(
                    "update {} {}",
                    u["toolCallId"].as_str().unwrap(),
                    u["status"].as_str().unwrap()
                ),
                k => k.to_string(),
            }
        })
        .collect();
    assert_eq!(
        seq,
        [
            "user_message_chunk first prompt",
            "tool_call t1 echo first-turn",
            "update t1 completed",
            "agent_message_chunk First answer.",
            "user_message_chunk second prompt",
            "tool_call t2 exit 3",
            "update t2 failed",
            "agent_message_chunk Second answer.",
        ],
        "{replay:#?}"
    );
    let upd = updates(&replay, "tool_call_update");
    assert!(
        upd[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("first-turn")
    );
    c.finish();
}

#[test]
fn closing_stdin_mid_turn_ends_cleanly_with_a_valid_session() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![script::bash(w, "s1", "sleep 30.0419")]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let _ = a.prompt(&sid, "sleep");
    a.until("the command running", |v| {
        v["params"]["update"]["status"] == "in_progress"
    });
    let st = a.close(Duration::from_secs(15));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{}", a.stderr());
    assert!(no_sleep_left("30.0419"));
    let dir = session_dir(&ws, &sid);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "interrupted", "{meta}");
    assert!(meta.get("pid").is_none());
    let conv = jsonl(&dir.join("conversation.jsonl"));
    assert_eq!(conv.last().unwrap()["role"], "tool");
    assert!(
        conv.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );
    // Another surface continues it as is.
    let out = crate::support::cli::ok_no_stdin({
        let mut c = ws.tern(&fake);
        c.args(["exec", "--resume", &sid, "continue"]);
        c
    });
    assert_eq!(out.code, Some(0));
}

/// A client that hangs up while a permission question is pending declined nothing: the command
/// does not run, its result says the client disconnected, and the turn ends interrupted.
#[test]
fn closing_stdin_during_a_permission_question_is_a_disconnect_not_a_decline() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "p1", "touch hung-up.txt"),
        script::text(w, "unused"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let _ = a.prompt(&sid, "touch it");
    a.until("a permission request", |v| {
        v["method"] == "session/request_permission"
    });
    let st = a.close(Duration::from_secs(15));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{}", a.stderr());
    assert!(!ws.path().join("hung-up.txt").exists());
    let dir = session_dir(&ws, &sid);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "interrupted", "{meta}");
    let conv = jsonl(&dir.join("conversation.jsonl"));
    let last = conv.last().unwrap();
    assert_eq!(last["role"], "tool", "{conv:#?}");
    assert_eq!(last["tool_call_id"], "p1");
    let content = last["content"].as_str().unwrap();
    assert!(content.contains("disconnected"), "{content}");
    assert!(!content.contains("the person declined"), "{content}");
    let events = jsonl(&dir.join("events.jsonl"));
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["id"] == "p1")
        .unwrap_or_else(|| panic!("no tool_result: {events:#?}"));
    assert!(result["content"].as_str().unwrap().contains("disconnected"));
    assert!(
        !events
            .iter()
            .any(|e| e.to_string().contains("the person declined")),
        "{events:#?}"
    );
    let end = events
        .iter()
        .rfind(|e| e["type"] == "turn_end")
        .unwrap_or_else(|| panic!("no turn_end: {events:#?}"));
    assert_eq!(end["status"], "interrupted", "{end}");
    // The model was asked only once: nothing ran after the hang-up.
    assert_eq!(fake.requests().len(), 1);
}

/// A `.tern` that is a symbolic link is refused by every method that opens or lists sessions,
/// as `tern exec` and the verbs refuse it: nothing is read or written through the link.
#[test]
fn a_linked_state_folder_is_refused_by_every_session_method() {
    let w = Wire::OpenAi;
    let real = Ws::new();
    let fake = FakeServer::start(vec![script::text(w, "Hi."), script::text(w, "unused")]);
    let mut cmd = real.tern(&fake);
    cmd.args(["exec", "hi"]);
    crate::support::cli::ok_no_stdin(cmd);
    let sid = real.current_id();
    let ws = Ws::new();
    std::fs::remove_dir(ws.path().join(".tern")).unwrap();
    std::os::unix::fs::symlink(real.path().join(".tern"), ws.path().join(".tern")).unwrap();
    let before = std::fs::read(real.session_dir(&sid).join("events.jsonl")).unwrap();
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let refusal = "it is a symbolic link (tern never writes through links in its state folder)";
    for (method, params) in [
        ("session/new", json!({"cwd": ws.path(), "mcpServers": []})),
        ("session/list", json!({"cwd": ws.path()})),
        (
            "session/load",
            json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
        ),
        (
            "session/resume",
            json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
        ),
    ] {
        let r = a.call(method, params);
        assert_eq!(error_code(&r), -32603, "{method}: {r}");
        assert!(r.to_string().contains(refusal), "{method}: {r}");
    }
    a.finish();
    assert_eq!(
        std::fs::read(real.session_dir(&sid).join("events.jsonl")).unwrap(),
        before,
        "written through the link"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn sigterm_mid_turn_cancels_and_exits() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![script::bash(Wire::OpenAi, "s1", "sleep 30.0420")]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "sleep");
    a.until("the command running", |v| {
        v["params"]["update"]["status"] == "in_progress"
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "cancelled");
    assert!(wait_exit(&mut a.child, Duration::from_secs(15)).is_some());
    assert!(no_sleep_left("30.0420"));
    assert_eq!(
        read_json(&session_dir(&ws, &sid).join("meta.json"))["status"],
        "interrupted"
    );
}

#[test]
fn close_during_a_turn_cancels_it_first() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![script::bash(Wire::OpenAi, "s1", "sleep 30.0422")]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let turn = a.prompt(&sid, "sleep");
    a.until("the command running", |v| {
        v["params"]["update"]["status"] == "in_progress"
    });
    let close = a.request("session/close", json!({"sessionId": sid}));
    let (r, _) = a.response(turn);
    assert_eq!(stop_reason(&r), "cancelled");
    let (r, between) = a.response(close);
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(between.is_empty(), "{between:#?}");
    assert!(no_sleep_left("30.0422"));
    let r = a.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(error_code(&r), -32002, "closed: {r}");
    a.finish();
}

#[test]
fn the_state_dir_flag_moves_the_sessions() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &["--state-dir", "elsewhere"]);
    a.init();
    let sid = a.new_session(ws.path());
    assert!(
        ws.path()
            .join("elsewhere/sessions")
            .join(&sid)
            .join("meta.json")
            .is_file()
    );
    assert!(!ws.session_dir(&sid).exists());
    a.finish();
}

#[test]
fn without_a_provider_sessions_fail_with_the_reason() {
    let ws = Ws::new();
    let mut cmd = crate::support::cli::tern_clean(&ws.home());
    cmd.current_dir(ws.path()).arg("acp");
    let mut a = Agent::start(cmd);
    a.init();
    let r = a.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(error_code(&r), -32603, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("OPENAI_API_KEY"),
        "{r}"
    );
    a.finish();
}

#[test]
fn the_mode_is_kept_with_the_session_across_a_reconnect() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "k1", "echo kept > kept.txt"),
        script::text(w, "done"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "auto"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    a.finish();
    let meta = read_json(&session_dir(&ws, &sid).join("meta.json"));
    assert_eq!(meta["approval"], "auto", "{meta}");
    // A new process (default mode ask) finds the mode the session was left in, on load and
    // on resume, and runs the command without asking.
    for method in ["session/load", "session/resume"] {
        let mut b = Agent::spawn(&ws, &fake, &[]);
        b.init();
        let r = b.call(
            method,
            json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
        );
        assert_eq!(
            r["result"]["modes"]["currentModeId"], "auto",
            "{method}: {r}"
        );
        if method == "session/resume" {
            let id = b.prompt(&sid, "write it");
            let (r, msgs) = b.response(id);
            assert_eq!(stop_reason(&r), "end_turn", "{r}");
            assert!(
                msgs.iter()
                    .all(|m| m["method"] != "session/request_permission"),
                "{msgs:#?}"
            );
            assert!(ws.path().join("kept.txt").exists());
        }
        b.finish();
    }
}

/// Issue 39: one policy for a person's prompt in every surface: a message steered in as the
/// turn ended (here by a Stop hook, as a person in another pane could) is answered before the
/// prompt's one response, as in `tern exec` and the REPL, never left in the inbox.
#[test]
fn a_steer_as_the_turn_ends_is_answered_before_the_prompts_response() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![openai_text("all done"), openai_text("tests too")]);
    let dir = ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    // The hook reads its session's id from its input and steers that session, once.
    let script = dir.join("steer.sh");
    std::fs::write(
        &script,
        format!(
            "sid=$(sed -n 's/.*\"session_id\":\"\\([^\"]*\\)\".*/\\1/p')\n\
             [ -e \"$TERN_PROJECT_DIR/steered\" ] && exit 0\n\
             touch \"$TERN_PROJECT_DIR/steered\"\n\
             exec '{}' steer --session \"$sid\" 'run the tests too'\n",
            crate::support::cli::TERN
        ),
    )
    .unwrap();
    let steer = format!("sh '{}'", script.display());
    std::fs::write(
        dir.join("hooks.json"),
        json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": steer}]}]}})
            .to_string(),
    )
    .unwrap();
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "finish up");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let bodies = fake.requests();
    assert_eq!(bodies.len(), 2, "one more request for the steered words");
    assert!(
        String::from_utf8_lossy(&bodies[1].body).contains("run the tests too"),
        "the second request carries the steer"
    );
    assert!(
        chunks_text(&msgs, "agent_message_chunk").contains("tests too"),
        "the answer to the steer streams before the response"
    );
    a.finish();
}

/// Issue 40 over ACP: a reasoning model whose provider wants a tool-call turn's reasoning back
/// in every later request (DeepSeek's documented rule, the fake's strict mode) runs ten calls
/// in one prompt, each later request carrying each earlier turn's reasoning, and the editor sees
/// the reasoning as thought chunks.
#[test]
fn a_reasoning_models_ten_call_prompt_completes_by_its_providers_rule() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let mut replies: Vec<Reply> = (1..=10)
        .map(|i| script::bash(w, &format!("call_{i}"), &format!("echo {i}")))
        .collect();
    replies.push(script::text(w, "ten done"));
    let fake = FakeServer::start(replies);
    fake.set_thinking(crate::support::Thinking::DeepSeek);
    let mut cmd = ws.tern(&fake);
    cmd.env("TERN_REASONING_REPLAY", "required")
        .args(["acp", "--approval", "auto"]);
    let mut a = Agent::start(cmd);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "ten steps");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let bodies: Vec<Value> = fake.requests().iter().map(|r| r.json()).collect();
    assert_eq!(bodies.len(), 11, "no 400");
    let last = bodies[10]["messages"].as_array().unwrap();
    let kept = last
        .iter()
        .filter(|m| {
            m["reasoning_content"]
                .as_str()
                .is_some_and(|t| t.starts_with("Thinking before bash call"))
        })
        .count();
    assert_eq!(kept, 10, "every tool turn's reasoning goes back");
    assert!(
        chunks_text(&msgs, "agent_thought_chunk").contains("Thinking before bash call call_1"),
        "the reasoning streams as thought"
    );
    a.finish();
}

/// Issue 40 over ACP, the other rules: Anthropic's thinking blocks (with `--reasoning-effort`)
/// and the Responses API's encrypted reasoning items go back unaltered through a ten-call
/// prompt, against a fake that refuses a request leaving one out or changed; a Groq-style
/// server that refuses any reasoning sent back gets none.
#[test]
fn anthropic_thinking_and_responses_items_survive_a_ten_call_prompt() {
    for (wire, rules, args) in [
        (
            Wire::Anthropic,
            crate::support::Thinking::Anthropic,
            &["acp", "--approval", "auto", "--reasoning-effort", "low"][..],
        ),
        (
            Wire::OpenAi,
            crate::support::Thinking::Responses,
            &[
                "acp",
                "--approval",
                "auto",
                "--provider",
                "openai-responses",
            ][..],
        ),
        (
            Wire::OpenAi,
            crate::support::Thinking::Groq,
            &["acp", "--approval", "auto"][..],
        ),
    ] {
        let ws = Ws::new();
        let mut replies: Vec<Reply> = (1..=10)
            .map(|i| script::bash(wire, &format!("call_{i}"), &format!("echo {i}")))
            .collect();
        replies.push(script::text(wire, "ten done"));
        let fake = FakeServer::start(replies);
        fake.set_thinking(rules);
        let mut cmd = ws.tern_wire(&fake, wire);
        cmd.args(args);
        let mut a = Agent::start(cmd);
        a.init();
        let sid = a.new_session(ws.path());
        let id = a.prompt(&sid, "ten steps");
        let (r, _) = a.response(id);
        assert_eq!(stop_reason(&r), "end_turn", "{rules:?}: {r}");
        assert_eq!(fake.requests().len(), 11, "{rules:?}: no 400");
        a.finish();
    }
}

#[test]
fn a_warning_reaches_the_editor_as_a_visible_message() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![openai_text("")]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "say nothing");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let text = chunks_text(&msgs, "agent_message_chunk");
    assert!(
        text.contains("> **tern (warning):** the model answered with no text"),
        "{text:?}"
    );
    a.finish();
}

#[test]
fn set_model_switches_the_next_request_as_a_boundary() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::text(w, "one"),
        script::text(w, "two"),
        script::text(w, "three"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let r = a.call(
        "session/new",
        json!({"cwd": ws.path().display().to_string(), "mcpServers": []}),
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    assert_eq!(r["result"]["models"]["currentModelId"], "m", "{r}");
    let id = a.prompt(&sid, "first");
    a.response(id);
    let r = a.call(
        "session/set_model",
        json!({"sessionId": sid, "modelId": "bigger-model"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let r = a.call(
        "session/set_model",
        json!({"sessionId": sid, "modelId": " "}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let id = a.prompt(&sid, "second");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    // The request says which model it went to.
    let usage = updates(&msgs, "usage_update");
    assert_eq!(
        usage.last().unwrap()["_meta"]["tern"]["model"],
        "bigger-model"
    );
    let reqs = fake.requests();
    assert_eq!(reqs[0].json()["model"], "m");
    assert_eq!(reqs[1].json()["model"], "bigger-model");
    // The same switch from the editor's command line: /model NAME.
    let id = a.prompt(&sid, "/model m");
    let (r, msgs) = a.response(id);
    assert_eq!(r["result"]["_meta"]["tern"]["receipt"]["ok"], true, "{r}");
    assert!(
        chunks_text(&msgs, "agent_message_chunk").contains("the next request goes to m"),
        "{msgs:#?}"
    );
    let id = a.prompt(&sid, "third");
    a.response(id);
    assert_eq!(fake.requests()[2].json()["model"], "m");
    a.finish();
    let events = jsonl(&session_dir(&ws, &sid).join("events.jsonl"));
    let switches: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "boundary" && e["kind"] == "model_switch")
        .map(|e| (e["from"].as_str().unwrap(), e["to"].as_str().unwrap()))
        .collect();
    assert_eq!(
        switches,
        [
            ("openai/m", "openai/bigger-model"),
            ("openai/bigger-model", "openai/m")
        ]
    );
    let meta = read_json(&session_dir(&ws, &sid).join("meta.json"));
    assert_eq!(meta["model"], "m");
}

#[test]
fn a_damaged_session_is_listed_with_its_state() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let other = a.new_session(ws.path());
    std::fs::write(session_dir(&ws, &sid).join("meta.json"), "{ torn").unwrap();
    let r = a.call("session/list", json!({"cwd": ws.path()}));
    let list = r["result"]["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{r}");
    let damaged = list
        .iter()
        .find(|s| s["sessionId"] == sid.as_str())
        .unwrap();
    assert_eq!(damaged["_meta"]["tern"]["status"], "damaged", "{r}");
    assert!(damaged["_meta"]["tern"]["error"].as_str().is_some());
    assert!(list.iter().any(|s| s["sessionId"] == other.as_str()));
    a.finish();
}

#[test]
fn a_provider_that_is_down_ends_the_turn_with_an_error_not_a_refusal() {
    let ws = Ws::new();
    // Refused for the whole test: bound, never listening (see `refusing_port`).
    let (_refusing, port) = crate::support::procs::refusing_port();
    let mut cmd = crate::support::cli::tern_clean(&ws.home());
    cmd.current_dir(ws.path())
        .env("TERN_MODEL", "m")
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .arg("acp");
    let mut a = Agent::start(cmd);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "hello?");
    let (r, _) = a.response(id);
    assert_eq!(error_code(&r), -32603, "{r}");
    assert_eq!(
        r["error"]["data"]["tern"]["status"], "provider_unavailable",
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("tern: ")
    );
    a.finish();
}

// ---------------------------------------------------------------------------------------------
// The official ACP Python SDK as the client (tests/acp/*.py).

/// The Python of a venv holding the pinned SDK (`TERN_ACP_PYTHON`, set by `.ci/run`); None
/// (the test says SKIPPED) when it is not set.
fn sdk_python(test: &str) -> Option<String> {
    let p = std::env::var("TERN_ACP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty());
    if p.is_none() {
        crate::support::skipped(
            test,
            "TERN_ACP_PYTHON is not set (.ci/run installs the ACP Python SDK)",
            true,
        );
    }
    p
}

/// Runs `tests/acp/SCRIPT` with the SDK's Python against `tern acp` in `ws` (the fake provider
/// at `fake`); returns its stdout (the script's JSON summary), failing on a non-zero exit.
fn run_sdk(python: &str, script_name: &str, ws: &Ws, fake: &FakeServer, args: &[&str]) -> Value {
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/acp")
        .join(script_name);
    let mut c = Command::new(python);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.home())
        .env("TERN_BIN", crate::support::cli::TERN)
        .env("TERN_WS", ws.path())
        .env("TERN_ARGS", args.join(" "))
        .env("OPENAI_BASE_URL", fake.openai_base())
        .env("TERN_MODEL", "m")
        // No __pycache__ in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(ws.path())
        .arg(&script_path);
    let out = crate::support::cli::run_within(c, None, Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{script_name} failed: {out:?}");
    // The SDK logs (and otherwise ignores) a notification it cannot validate or handle: any
    // logged error is a message tern got wrong.
    for bad in [
        "Traceback",
        "Unhandled error",
        "Error parsing",
        "ValidationError",
        "Warning",
    ] {
        assert!(
            !out.stderr.contains(bad),
            "{script_name}: the SDK logged {bad:?}: {out:?}"
        );
    }
    let last = out.stdout.lines().last().unwrap_or("");
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script_name}: no summary ({e}): {out:?}"))
}

/// Issue 40: the reasoning effort is a session config option (category `thought_level`), set
/// by the official SDK's `set_config_option`; the next request asks for it.
#[test]
fn sdk_the_reasoning_effort_is_a_session_config_option() {
    let Some(py) = sdk_python("sdk_the_reasoning_effort_is_a_session_config_option") else {
        return;
    };
    let ws = Ws::new();
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "thought hard")]);
    let s = run_sdk(&py, "effort.py", &ws, &fake, &["--approval", "auto"]);
    assert_eq!(s["stop_reason"], "end_turn", "{s}");
    let body = fake.requests()[0].json();
    assert_eq!(body["reasoning_effort"], "high", "{body}");
}

#[test]
fn sdk_prompt_turn_with_a_bash_call() {
    let Some(py) = sdk_python("sdk_prompt_turn_with_a_bash_call") else {
        return;
    };
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "call_1", "echo sdk-hello"),
        script::text(w, "Said hello."),
    ]);
    person_config(&ws, json!({"price": {"input": 2.0, "output": 8.0}}));
    let s = run_sdk(&py, "prompt_turn.py", &ws, &fake, &["--approval", "auto"]);
    assert_eq!(s["stop_reason"], "end_turn", "{s}");
    assert_eq!(fake.requests().len(), 2);
    // The SDK read the session's cost and the turn's usage.
    assert_eq!(s["cost"]["currency"], "USD", "{s}");
    assert!(s["cost"]["amount"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["usage"]["inputTokens"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn sdk_cancel_during_sleep() {
    let Some(py) = sdk_python("sdk_cancel_during_sleep") else {
        return;
    };
    let ws = Ws::new();
    let fake = FakeServer::start(vec![
        script::bash(Wire::OpenAi, "call_1", "sleep 30.0421"),
        script::text(Wire::OpenAi, "after"),
    ]);
    let s = run_sdk(&py, "cancel.py", &ws, &fake, &["--approval", "auto"]);
    assert_eq!(s["stop_reason"], "cancelled", "{s}");
    assert!(s["seconds"].as_f64().unwrap() < 1.0, "{s}");
    assert!(no_sleep_left("30.0421"));
}

#[test]
fn sdk_load_replays_both_turns_in_a_new_process() {
    let Some(py) = sdk_python("sdk_load_replays_both_turns_in_a_new_process") else {
        return;
    };
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "call_1", "echo turn-one"),
        script::text(w, "One done."),
        script::bash(w, "call_2", "echo turn-two"),
        script::text(w, "Two done."),
    ]);
    let s = run_sdk(&py, "load.py", &ws, &fake, &["--approval", "auto"]);
    assert_eq!(s["replayed"], true, "{s}");
}

#[test]
fn sdk_permission_rejected_means_not_run() {
    let Some(py) = sdk_python("sdk_permission_rejected_means_not_run") else {
        return;
    };
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "call_1", "touch sdk-rejected.txt"),
        script::text(w, "Not run."),
    ]);
    let s = run_sdk(&py, "permission.py", &ws, &fake, &[]);
    assert_eq!(s["stop_reason"], "end_turn", "{s}");
    assert!(!ws.path().join("sdk-rejected.txt").exists());
}

#[test]
fn sdk_fork_goes_on_from_the_original_byte_for_byte() {
    let Some(py) = sdk_python("sdk_fork_goes_on_from_the_original_byte_for_byte") else {
        return;
    };
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "call_1", "echo turn-one > one.txt"),
        script::text(w, "One done."),
        script::text(w, "Two done."),
        script::text(w, "Three in the fork."),
        script::text(w, "Three in the original."),
    ]);
    let s = run_sdk(&py, "fork.py", &ws, &fake, &["--approval", "auto"]);
    let (orig, fork) = (
        s["original"].as_str().unwrap().to_string(),
        s["fork"].as_str().unwrap().to_string(),
    );
    let meta = read_json(&session_dir(&ws, &fork).join("meta.json"));
    assert_eq!(meta["forked_from"]["session"], orig.as_str(), "{meta}");
    let bodies: Vec<Vec<u8>> = fake.requests().iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies.len(), 5);
    // The fork's first request and the original's next one: the same history, the same prompt,
    // the same bytes.
    assert_eq!(
        String::from_utf8_lossy(&bodies[3]),
        String::from_utf8_lossy(&bodies[4]),
        "the fork repeats the original's bytes"
    );
}

#[test]
fn sdk_editors_cancel_and_prompt_warning_mode_and_auth_method() {
    let Some(py) = sdk_python("sdk_editors_cancel_and_prompt_warning_mode_and_auth_method") else {
        return;
    };
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "call_1", "sleep 30.0422"),
        script::text(w, "next answer"),
        openai_text(""),
    ]);
    let s = run_sdk(&py, "editors.py", &ws, &fake, &[]);
    assert_eq!(s["mode"], "auto", "{s}");
    assert!(no_sleep_left("30.0422"));
}

/// Issue 22: `_tern/steer` while the turn runs is read by the model at its next request, after
/// the tool result, and shown to the client as a user chunk; with no turn running it is refused
/// unless `queue`.
#[test]
fn tern_steer_extension_steers_the_running_turn() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        // The go-ahead file is in the state folder, which the jail sees directly (read-only):
        // a name the person makes in the workspace while a command runs may stay unseen by
        // the jail's layer (overlayfs keeps what it looked up; README, Sandbox).
        script::bash(w, "s1", "while [ ! -e .tern/go ]; do sleep 0.05; done"),
        script::text(w, "done as you said"),
        script::text(w, "ok"),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let idle = a.call(
        "_tern/steer",
        json!({"sessionId": sid, "text": "too early"}),
    );
    assert_eq!(error_code(&idle), -32603, "{idle}");
    assert!(
        idle["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no turn is running")
    );
    let first = a.prompt(&sid, "wait for go");
    a.until("the command running", |v| {
        v["params"]["update"]["status"] == "in_progress"
    });
    let r = a.call("_tern/steer", json!({"sessionId": sid, "text": "use tabs"}));
    assert_eq!(r["result"]["delivered"], "next_request", "{r}");
    std::fs::write(ws.path().join(".tern/go"), "").unwrap();
    let (r, before) = a.response(first);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert!(chunks_text(&before, "user_message_chunk").contains("use tabs"));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = crate::support::body::messages(&reqs[1]);
    assert_eq!(msgs.last().unwrap()["role"], "user");
    assert_eq!(msgs.last().unwrap()["content"], "use tabs");
    assert_eq!(msgs[msgs.len() - 2]["role"], "tool");
    // Queued with no turn running: delivered with the next prompt.
    let r = a.call(
        "_tern/steer",
        json!({"sessionId": sid, "text": "later words", "queue": true}),
    );
    assert_eq!(r["result"]["delivered"], "next_turn", "{r}");
    let next = a.prompt(&sid, "next");
    a.response(next);
    let msgs = crate::support::body::messages(&fake.requests()[2]);
    assert_eq!(msgs.last().unwrap()["content"], "later words");
    a.finish();
}

/// A final answer cut by the model's length limit (`finish_reason: length`) ends the prompt
/// turn with ACP's `max_tokens` stop reason, not `end_turn`; a whole answer still ends
/// `end_turn`.
#[test]
fn an_answer_cut_at_the_output_cap_stops_with_max_tokens() {
    let ws = Ws::new();
    let cut = Reply::sse(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"the answer is cut he\"},\"finish_reason\":null}]}\n\n\
         data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
         data: [DONE]\n\n",
    );
    let fake = FakeServer::start(vec![cut, openai_text("whole")]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "long");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "max_tokens", "{r}");
    assert!(
        chunks_text(&msgs, "agent_message_chunk").contains("cut he"),
        "{msgs:?}"
    );
    let id = a.prompt(&sid, "short");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    a.finish();
}

/// Writes the person's config (`~/.config/tern/config.json`) of `ws`.
fn person_config(ws: &Ws, v: Value) {
    let dir = ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
}

/// With a price known, each `usage_update` carries the session's cost so far (ACP v1, session
/// usage: `cost`, cumulative) and the request's own in `_meta`; the prompt response carries
/// the turn's tokens (`usage`) and cost. A second turn's cost goes on from the first's.
#[test]
fn usage_updates_carry_the_sessions_cost_and_the_response_the_turns() {
    let ws = Ws::new();
    person_config(
        &ws,
        json!({"price": {"input": 2.0, "cached_input": 0.5, "output": 8.0}}),
    );
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::bash(w, "c1", "echo hi"),
        script::text(w, "Said hi."),
        script::text(w, "Again."),
    ]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let mut seen = Vec::new();
    let mut turns = Vec::new();
    for p in ["say hi", "again"] {
        let id = a.prompt(&sid, p);
        let (r, msgs) = a.response(id);
        assert_eq!(stop_reason(&r), "end_turn", "{r}");
        let mut turn_cost = 0.0;
        for u in updates(&msgs, "usage_update") {
            assert_eq!(u["cost"]["currency"], "USD", "{u}");
            let own = u["_meta"]["tern"]["costUsd"].as_f64().unwrap();
            turn_cost += own;
            seen.push((u["cost"]["amount"].as_f64().unwrap(), own));
        }
        let usage = &r["result"]["usage"];
        assert!(usage["inputTokens"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(
            usage["totalTokens"].as_u64(),
            Some(usage["inputTokens"].as_u64().unwrap() + usage["outputTokens"].as_u64().unwrap())
        );
        let said = r["result"]["_meta"]["tern"]["costUsd"].as_f64().unwrap();
        assert!(
            (said - turn_cost).abs() < 2e-6,
            "{said} vs {turn_cost}: {r}"
        );
        turns.push(said);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    // Cumulative: each amount is the one before plus this request's cost.
    let mut sum = 0.0;
    for (amount, own) in &seen {
        sum += own;
        assert!((amount - sum).abs() < 2e-6, "{seen:?}");
    }
    let meta = read_json(&session_dir(&ws, &sid).join("meta.json"));
    assert!(
        (meta["cost_usd"].as_f64().unwrap() - sum).abs() < 2e-6,
        "{meta}"
    );
    a.finish();
}

/// `max_cost` in the config is the limit over ACP: a turn whose next request could pass it
/// sends nothing, says why in the thread, and stops with `max_turn_requests` (the closest ACP
/// v1 stop reason) and status `budget_exhausted` — not an error; the connection lives on.
#[test]
fn a_spending_limit_stops_an_acp_turn_before_the_request() {
    let ws = Ws::new();
    person_config(
        &ws,
        json!({"price": {"input": 1000.0, "output": 0.0}, "max_cost": 0.0001}),
    );
    let fake = FakeServer::start(vec![]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "spend");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "max_turn_requests", "{r}");
    assert_eq!(
        r["result"]["_meta"]["tern"]["status"], "budget_exhausted",
        "{r}"
    );
    let said = chunks_text(&msgs, "agent_message_chunk");
    assert!(
        said.contains("spending limit") && said.contains("could cost up to"),
        "{said}"
    );
    assert!(fake.requests().is_empty(), "a request was sent");
    // The connection lives on: the next prompt meets the same limit.
    let id = a.prompt(&sid, "again");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "max_turn_requests", "{r}");
    a.finish();
}

/// Issue 34: a provider's reasoning stream (OpenAI-compatible `reasoning_content`) reaches the
/// editor as `agent_thought_chunk` updates, never as the answer.
#[test]
fn a_reasoning_stream_reaches_the_editor_as_thought_chunks() {
    let ws = Ws::new();
    let body = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"thinking hard\"}}]}\n\n\
                data: {\"choices\":[{\"delta\":{\"content\":\"the answer\"},\"finish_reason\":\"stop\"}]}\n\n\
                data: [DONE]\n\n";
    let fake = FakeServer::start(vec![Reply::sse(body)]);
    let mut a = Agent::spawn(&ws, &fake, &["--approval", "auto"]);
    a.init();
    let sid = a.new_session(ws.path());
    let id = a.prompt(&sid, "think first");
    let (r, msgs) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let thoughts: Vec<String> = updates(&msgs, "agent_thought_chunk")
        .into_iter()
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(thoughts.iter().any(|t| t == "thinking hard"), "{msgs:#?}");
    let said: String = updates(&msgs, "agent_message_chunk")
        .into_iter()
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        said.contains("the answer") && !said.contains("thinking hard"),
        "{said}"
    );
    a.finish();
}

/// Issue 45: the workspace's skills are offered as commands, and `/name` puts the skill's
/// instructions into the prompt the model gets.
#[test]
fn skills_are_offered_as_commands_and_a_slash_prompt_carries_one() {
    let ws = Ws::new();
    let d = ws.path().join(".claude/skills/review");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        "---\nname: review\ndescription: Review a change.\n---\nSay REVIEW-BODY.\n",
    )
    .unwrap();
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "reviewed")]);
    let mut a = Agent::spawn(&ws, &fake, &[]);
    a.init();
    let r = a.call(
        "session/new",
        json!({"cwd": ws.path().display().to_string(), "mcpServers": []}),
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let (u, _) = a.until("available_commands_update", |v| {
        v["params"]["update"]["sessionUpdate"] == "available_commands_update"
    });
    let names: Vec<&str> = u["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"review") && names.contains(&"plan"), "{u}");
    let id = a.prompt(&sid, "/review the parser");
    let (r, _) = a.response(id);
    assert_eq!(stop_reason(&r), "end_turn");
    let body = fake.requests()[0].body_str();
    assert!(
        body.contains("Say REVIEW-BODY.") && body.contains("the parser"),
        "{body}"
    );
    a.finish();
}
