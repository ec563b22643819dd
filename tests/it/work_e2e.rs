//! The Work surface end to end, through the real `tern` binary against the fake provider: the
//! `<tern:work_state>` tail of each request, C16 across a compaction, `tern status` (the seed's
//! capture, windowing, JSON, NO_COLOR), `tern relay` / `relay --start`, and `tern watch` in a pipe.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::body::{content, messages, tool_result};
use crate::support::cli::{Ws, ok};
use crate::support::files::{jsonl, read, read_json};
use crate::support::procs::{Seen, wait_exit};
use crate::support::script::openai_call;
use crate::support::seed::SEED_CAPTURE;
use crate::support::{FakeServer, openai_text};
use serde_json::{Value, json};

const OPEN: &str = "<tern:work_state>";
const CLOSE: &str = "</tern:work_state>";

// ---------------------------------------------------------------- helpers

/// The work-state body a request's tail carries: checks the tail sits on the latest message only
/// (`"\n\n" + block` at its end) and nowhere else but the system prompt's mention of the tag.
/// Returns None when the request has no block at all.
fn tail_body(req: &crate::support::Recorded) -> Option<String> {
    let msgs = messages(req);
    let (last, earlier) = msgs.split_last().expect("a message");
    for (i, m) in earlier.iter().enumerate() {
        if m["role"] == "system" {
            assert!(
                !content(m).contains(&format!("{OPEN}\n")),
                "a work-state block in the system prompt"
            );
            continue;
        }
        assert!(
            !content(m).contains(OPEN),
            "message {i} (not the latest) carries a work-state block: {m}"
        );
    }
    let text = content(last);
    let at = text.find(OPEN)?;
    assert!(
        text[..at].ends_with("\n\n"),
        "the block is not appended as \\n\\n + block: {text:?}"
    );
    assert!(
        text.ends_with(CLOSE),
        "the block does not end the message: {text:?}"
    );
    assert_eq!(text.matches(OPEN).count(), 1, "{text:?}");
    let inner = &text[at + OPEN.len()..text.len() - CLOSE.len()];
    let body = inner
        .strip_prefix('\n')
        .and_then(|b| b.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("block framing: {inner:?}"));
    Some(body.to_string())
}

/// The latest message of a request with its tail removed.
fn without_tail(req: &crate::support::Recorded) -> Value {
    let msgs = messages(req);
    let mut last = msgs.last().cloned().expect("a message");
    let text = content(&last);
    if let Some(at) = text.find(OPEN) {
        let head = text[..at].strip_suffix("\n\n").unwrap_or(&text[..at]);
        last["content"] = if head.is_empty() && last["role"] == "assistant" {
            Value::Null
        } else {
            Value::from(head)
        };
    }
    last
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Writes a file the way tern does (tempfile + rename), so a watcher never sees it half-written.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("test-tmp");
    std::fs::write(&tmp, text).expect("write tmp");
    std::fs::rename(&tmp, path).expect("rename");
}

// ---------------------------------------------------------------- the request tail

/// A `work_update` at step k is in request k+1's tail, on the latest message only; the tail is
/// never stored (conversation.jsonl, system.txt) and is byte-identical in `handoff.md`.
#[test]
fn work_state_tail_follows_each_update_and_is_never_stored() {
    let fake = FakeServer::strict(vec![
        openai_call(
            "c1",
            "work_update",
            json!({"goal": {"objective": "Ship it"}, "todos": [
                {"content": "write code", "status": "in_progress"},
                {"content": "test code", "status": "pending"}]}),
        ),
        openai_call("c2", "bash", json!({"command": "echo step-two"})),
        openai_call(
            "c3",
            "work_update",
            json!({"todos": [
                {"id": "1", "content": "write code", "status": "completed"},
                {"id": "2", "content": "test code", "status": "in_progress"}]}),
        ),
        openai_text("All done for now."),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "ship it"]);
    let out = ok(cmd, "");
    assert!(out.stdout.contains("All done for now."), "{out:?}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4, "one request per step");
    let rev1 = "To-do: 0% settled (0/2)\nGoal: Ship it\n[~] #1 write code\n[ ] #2 test code";
    let rev2 = "To-do: 50% settled (1/2)\nGoal: Ship it\n[✓] #1 write code\n[~] #2 test code";
    // An empty ledger sends no block at all.
    assert_eq!(tail_body(&reqs[0]), None, "{}", reqs[0].body_str());
    assert!(!reqs[0].body_str().contains(&format!("{OPEN}\\n")));
    // Step 1's update in request 2 (on its tool result), still there in request 3 (now on the
    // bash result), step 3's update in request 4.
    assert_eq!(tail_body(&reqs[1]).as_deref(), Some(rev1));
    assert_eq!(tail_body(&reqs[2]).as_deref(), Some(rev1));
    assert_eq!(tail_body(&reqs[3]).as_deref(), Some(rev2));
    assert_eq!(messages(&reqs[1]).last().unwrap()["role"], "tool");

    // The tail is transient: the message that carried it is sent without it in the next request,
    // and every earlier message is sent again byte for byte.
    for k in 0..reqs.len() - 1 {
        let (a, b) = (messages(&reqs[k]), messages(&reqs[k + 1]));
        let n = a.len();
        assert!(b.len() > n);
        assert_eq!(a[..n - 1], b[..n - 1], "request {} rewrote history", k + 2);
        assert_eq!(without_tail(&reqs[k]), b[n - 1], "request {}", k + 2);
    }

    // Never stored.
    let dir = ws.current_dir();
    let conversation = read(&dir.join("conversation.jsonl"));
    let system = read(&dir.join("system.txt"));
    for (name, text) in [
        ("conversation.jsonl", &conversation),
        ("system.txt", &system),
    ] {
        assert!(!text.contains("To-do: "), "{name} holds a work-state body");
        assert!(!text.contains(&format!("{OPEN}\n")), "{name} holds a block");
    }
    assert!(!conversation.contains(OPEN));
    for r in &reqs {
        assert_eq!(
            content(&messages(r)[0]),
            system,
            "system prompt = system.txt"
        );
    }
    let ledger = read_json(&dir.join("ledger.json"));
    assert_eq!(ledger["revision"], 2);
    assert_eq!(ledger["items"][1]["status"], "in_progress");

    // `tern relay`: the same body, byte for byte, in handoff.md.
    let mut cmd = ws.tern(&fake);
    cmd.arg("relay");
    let out = ok(cmd, "");
    let handoff = read(&dir.join("handoff.md"));
    assert!(
        handoff.contains(&format!("\n## To-do\n{rev2}\n\n## Strategy\n")),
        "{handoff}"
    );
    assert!(out.stdout.starts_with(&handoff), "{out:?}");
    assert!(handoff.contains("Continue with #2: test code"), "{handoff}");
    assert_eq!(fake.requests().len(), 4, "relay calls no model");
}

/// C16 end to end: 10 items (3 completed, 1 in progress, 6 pending), `tern compact`, then the
/// model sends 2 items: rejected naming the unfinished items it would drop; ledger.json is
/// byte-identical before and after the compaction and after the rejected update.
#[test]
fn c16_dropped_items_rejected_after_compaction_ledger_untouched() {
    let ten: Vec<Value> = (1..=10)
        .map(|n| {
            let status = match n {
                1..=3 => "completed",
                4 => "in_progress",
                _ => "pending",
            };
            json!({"id": n.to_string(), "content": format!("step {n} of the job"), "status": status})
        })
        .collect();
    let fake = FakeServer::strict(vec![
        openai_call("c1", "work_update", json!({"todos": ten})),
        openai_text("The ledger is set up."),
        openai_text(
            "Summary: the person asked for a ten-step job; steps 1-3 are done, step 4 is in progress.",
        ),
        openai_call(
            "c2",
            "work_update",
            json!({"todos": [
                {"id": "4", "content": "step 4 of the job", "status": "completed"},
                {"id": "11", "content": "a new short list", "status": "in_progress"}]}),
        ),
        openai_text("Understood, keeping the ledger."),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "set up the job"]);
    ok(cmd, "");
    let dir = ws.current_dir();
    let ledger_path = dir.join("ledger.json");
    let before = std::fs::read(&ledger_path).expect("ledger.json");
    let l: Value = serde_json::from_slice(&before).unwrap();
    assert_eq!(l["items"].as_array().map(Vec::len), Some(10));

    let mut cmd = ws.tern(&fake);
    cmd.arg("compact");
    let out = ok(cmd, "");
    assert!(out.stdout.contains("messages summarised"), "{out:?}");
    assert!(dir.join("archive/conversation-0001.jsonl").is_file());
    let conv = jsonl(&dir.join("conversation.jsonl"));
    // The history is now the summary and the person's words it replaced, recalled (issue 41).
    assert_eq!(
        conv.len(),
        2,
        "the summary and the recalled prompt: {conv:?}"
    );
    assert_eq!(conv[1]["by"], "recalled", "{conv:?}");
    assert!(content(&conv[0]).contains("steps 1-3 are done"));
    let compaction = &fake.requests()[2];
    let last = messages(compaction).last().cloned().unwrap();
    assert!(content(&last).contains("about to be replaced by your summary"));
    assert_eq!(
        std::fs::read(&ledger_path).unwrap(),
        before,
        "the compaction changed ledger.json"
    );

    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "go on"]);
    ok(cmd, "");
    assert_eq!(
        std::fs::read(&ledger_path).unwrap(),
        before,
        "the rejected update changed ledger.json"
    );
    let conv = jsonl(&dir.join("conversation.jsonl"));
    let result = tool_result(&conv, "c2");
    assert_eq!(result["is_error"], true, "{result}");
    let text = content(&result);
    assert!(text.contains("rejected; the To-do is unchanged"), "{text}");
    assert!(text.contains("6 unfinished item(s)"), "{text}");
    for n in 5..=10 {
        assert!(
            text.contains(&format!("#{n} \"step {n} of the job\"")),
            "item {n} not named: {text}"
        );
    }
    assert!(
        !text.contains("#4 \""),
        "item 4 was kept, not dropped: {text}"
    );
    assert!(text.contains("cancelled"), "{text}");

    // The model keeps seeing the whole ledger, before and after the rejected call.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 5);
    let body = "To-do: 30% settled (3/10)\n";
    assert!(tail_body(&reqs[3]).unwrap().starts_with(body));
    assert!(tail_body(&reqs[4]).unwrap().starts_with(body));
    let events = jsonl(&dir.join("events.jsonl"));
    assert_eq!(
        events.iter().filter(|e| e["type"] == "work_update").count(),
        1,
        "only the first update changed the ledger"
    );
}

// ---------------------------------------------------------------- tern status

fn seed_ledger(started_at: u64) -> Value {
    json!({
        "goal": {
            "objective": "Land the v0.9.2 website docs cluster",
            "token_budget": 200000,
            "started_at": started_at
        },
        "items": [
            {"id": "1", "content": "Read docs-map.ts and the Modes page pattern", "status": "completed"},
            {"id": "2", "content": "Draft the Fleet and Sandbox pages", "status": "completed"},
            {"id": "3", "content": "Write the Work surface page", "status": "in_progress"},
            {"id": "4", "content": "Run check:docs, tests, and the build", "status": "pending"}
        ],
        "revision": 4
    })
}

/// A real session (one `tern exec` turn), then the seed's ledger written into it: started 18 m
/// 20 s ago, 90 000 of 200 000 tokens used since (45 %). Returns the session folder.
fn seed_session(ws: &Ws, fake: &FakeServer) -> PathBuf {
    let mut cmd = ws.tern(fake);
    cmd.args(["exec", "hello"]);
    ok(cmd, "");
    let dir = ws.current_dir();
    let started = now_unix() - 18 * 60 - 20;
    let text = serde_json::to_string_pretty(&seed_ledger(started)).unwrap() + "\n";
    write_atomic(&dir.join("ledger.json"), &text);
    let ev = json!({
        "type": "usage", "seq": 1000,
        "ts": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        "session": ws.current_id(), "purpose": "turn",
        "input_tokens": 80000, "cached_tokens": 0, "cache_write_tokens": 0,
        "output_tokens": 10000, "cache_hit_ratio": 0.0,
        "request_bytes": 320000, "prefix_reuse_bytes": 0
    });
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("events.jsonl"))
        .unwrap();
    writeln!(f, "{ev}").unwrap();
    dir
}

#[test]
fn status_prints_the_seed_capture_then_json_and_no_color() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    seed_session(&ws, &fake);

    let mut cmd = ws.tern(&fake);
    cmd.arg("status");
    let plain = ok(cmd, "").stdout;
    assert!(
        plain.starts_with(SEED_CAPTURE),
        "tern status does not open with the seed's capture:\n{plain}"
    );
    // Then the footer: a blank line, the plan state, the cache line, the session.
    let rest: Vec<&str> = plain[SEED_CAPTURE.len()..].lines().collect();
    assert_eq!(rest.first(), Some(&""), "{plain}");
    assert_eq!(rest.get(1), Some(&"Plan: idle"), "{plain}");
    assert!(
        rest.iter()
            .any(|l| *l == format!("Session {}: completed", ws.current_id())),
        "{plain}"
    );
    assert!(!plain.contains('\x1b'), "escapes in a pipe: {plain:?}");

    // NO_COLOR changes nothing and adds no escape sequence.
    let mut cmd = ws.tern(&fake);
    cmd.arg("status").env("NO_COLOR", "1");
    let no_color = ok(cmd, "").stdout;
    assert!(!no_color.contains('\x1b'), "{no_color:?}");
    assert_eq!(no_color, plain);

    // --json parses and carries the same ledger.
    let mut cmd = ws.tern(&fake);
    cmd.args(["status", "--json"]);
    let out = ok(cmd, "");
    assert_eq!(out.stdout.lines().count(), 1, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).expect("status --json parses");
    assert_eq!(v["session"], ws.current_id());
    assert_eq!(v["status"], "completed");
    assert_eq!(v["settled"], 2);
    assert_eq!(v["total"], 4);
    assert_eq!(v["tokens_since_goal"], 90000);
    assert_eq!(v["plan"]["state"], "idle");
    assert_eq!(
        v["ledger"]["goal"]["objective"],
        "Land the v0.9.2 website docs cluster"
    );
    assert_eq!(v["ledger"]["items"][2]["status"], "in_progress");
    assert_eq!(v["problems"], json!([]));
}

/// `--height` windows 50 items around #37 (in progress): at most that many lines, contiguous
/// items with #37 among them, markers counting exactly what was left out. Without `--height`
/// and no terminal, every item is shown.
#[test]
fn status_height_windows_fifty_items_around_37() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello"]);
    ok(cmd, "");
    let items: Vec<Value> = (1..=50)
        .map(|n| {
            let status = match n {
                1..=36 => "completed",
                37 => "in_progress",
                _ => "pending",
            };
            json!({"id": n.to_string(), "content": format!("task number {n}"), "status": status})
        })
        .collect();
    let ledger = json!({"goal": null, "items": items, "revision": 9});
    write_atomic(
        &ws.current_dir().join("ledger.json"),
        &serde_json::to_string_pretty(&ledger).unwrap(),
    );

    for height in [4usize, 8, 12, 20, 30] {
        let mut cmd = ws.tern(&fake);
        cmd.args(["status", "--height", &height.to_string()]);
        let out = ok(cmd, "").stdout;
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() <= height, "height {height}:\n{out}");
        let shown: Vec<usize> = lines
            .iter()
            .filter_map(|l| {
                let rest = ["[✓] #", "[~] #", "[ ] #"]
                    .iter()
                    .find_map(|p| l.strip_prefix(p))?;
                rest.split(' ').next()?.parse().ok()
            })
            .collect();
        assert!(
            lines.contains(&"[~] #37 task number 37"),
            "height {height}: #37 not shown:\n{out}"
        );
        let (first, last) = (shown[0], shown[shown.len() - 1]);
        assert_eq!(last - first + 1, shown.len(), "not contiguous:\n{out}");
        let marker = |prefix: &str, suffix: &str| {
            lines.iter().find_map(|l| {
                l.strip_prefix(prefix)?
                    .strip_suffix(suffix)?
                    .parse::<usize>()
                    .ok()
            })
        };
        let earlier = marker("+", " earlier To-do items").unwrap_or(0);
        let more = marker("+", " more To-do items").unwrap_or(0);
        assert_eq!(earlier, first - 1, "height {height}:\n{out}");
        assert_eq!(more, 50 - last, "height {height}:\n{out}");
        assert!(shown.len() < 50, "height {height} showed everything");
        if height >= 12 {
            assert!(
                lines[0] == "To-do" && lines[1] == "72% settled (36/50)",
                "{out}"
            );
        }
    }

    let mut cmd = ws.tern(&fake);
    cmd.arg("status");
    let out = ok(cmd, "").stdout;
    for n in 1..=50 {
        assert!(
            out.contains(&format!("#{n} task number {n}\n")),
            "#{n} missing:\n{out}"
        );
    }
    assert!(
        !out.contains("To-do items\n"),
        "markers without a height:\n{out}"
    );
}

// ---------------------------------------------------------------- tern relay

/// `tern relay` writes handoff.md; `tern relay --start` opens a new current session seeded with
/// it, whose first request carries the handoff (and the same work-state body as its tail).
#[test]
fn relay_writes_handoff_and_start_seeds_the_next_session() {
    let fake = FakeServer::strict(vec![]);
    let ws = Ws::new();
    let dir = seed_session(&ws, &fake);
    let old = ws.current_id();

    let mut cmd = ws.tern(&fake);
    cmd.arg("relay");
    let out = ok(cmd, "");
    let handoff = read(&dir.join("handoff.md"));
    assert!(handoff.starts_with(&format!("# Handoff from tern session {old}\n")));
    assert!(handoff.contains("## Goal\nLand the v0.9.2 website docs cluster\n"));
    let body = "To-do: 50% settled (2/4)\nGoal: Land the v0.9.2 website docs cluster\n\
                [✓] #1 Read docs-map.ts and the Modes page pattern\n\
                [✓] #2 Draft the Fleet and Sandbox pages\n\
                [~] #3 Write the Work surface page\n\
                [ ] #4 Run check:docs, tests, and the build";
    assert!(
        handoff.contains(&format!("## To-do\n{body}\n\n")),
        "{handoff}"
    );
    assert!(handoff.contains("## Next action\nContinue with #3: Write the Work surface page\n"));
    assert!(
        out.stdout.contains(&format!(
            "(written to {})",
            dir.join("handoff.md").display()
        )),
        "{out:?}"
    );

    let mut cmd = ws.tern(&fake);
    cmd.args(["relay", "--start"]);
    let out = ok(cmd, "");
    let new = ws.current_id();
    assert_ne!(new, old, "relay --start did not open a new current session");
    assert!(
        out.stdout.contains(&format!("New session {new}")),
        "{out:?}"
    );
    let handoff = read(&dir.join("handoff.md"));
    let new_dir = ws.session_dir(&new);
    assert_eq!(
        read(&new_dir.join("ledger.json")),
        read(&dir.join("ledger.json")),
        "the ledger is carried over"
    );

    let before = fake.requests().len();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue"]);
    let out = ok(cmd, "");
    assert!(out.stdout.contains("Done."), "{out:?}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), before + 1);
    let msgs = messages(&reqs[before]);
    assert_eq!(msgs.len(), 2, "system + the seeded handoff: {msgs:?}");
    let first = content(&msgs[1]);
    let expected =
        format!("[This thread continues the work of tern session {old}. Handoff:]\n\n{handoff}");
    assert!(
        first.starts_with(&expected),
        "the first request does not carry the handoff:\n{first}"
    );
    assert_eq!(tail_body(&reqs[before]).as_deref(), Some(body));
    let meta = read_json(&new_dir.join("meta.json"));
    assert_eq!(meta["status"], "completed");
}

// ---------------------------------------------------------------- tern watch

/// `tern watch` in a pipe: one frame at start, a new frame when ledger.json changes (none while
/// nothing changes), exit 0 on SIGINT.
#[test]
fn watch_in_a_pipe_redraws_on_ledger_change_and_exits_0_on_sigint() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello"]);
    ok(cmd, "");
    let ledger_path = ws.current_dir().join("ledger.json");
    let ledger = |status: &str| {
        json!({"goal": null, "items": [
            {"id": "1", "content": "watch me", "status": status}
        ], "revision": 1})
        .to_string()
    };
    write_atomic(&ledger_path, &ledger("pending"));

    let mut cmd = ws.tern(&fake);
    cmd.arg("watch")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tern watch");
    let seen = Seen::start(child.stdout.take().unwrap());
    let frames = |s: &str| s.matches("To-do\n").count();

    seen.wait_for("[ ] #1 watch me");
    // Nothing changes: no new frame (a watch tick is 250 ms; wait several).
    std::thread::sleep(Duration::from_millis(1200));
    let text = seen.text();
    assert_eq!(frames(&text), 1, "{text}");
    assert!(!text.contains('\x1b'), "escapes in a pipe");

    write_atomic(&ledger_path, &ledger("in_progress"));
    seen.wait_for("[~] #1 watch me");
    let text = seen.text();
    assert_eq!(frames(&text), 2, "{text}");

    // Without --session it follows .tern/current: a relayed session gets its own frame.
    let mut cmd = ws.tern(&fake);
    cmd.args(["relay", "--start"]);
    ok(cmd, "");
    seen.wait_for(&format!("Session {}: idle", ws.current_id()));

    // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0);
    let status = wait_exit(&mut child, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("tern watch did not leave on SIGINT"));
    seen.finish();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(err.is_empty(), "stderr: {err}");
}

// ---------------------------------------------------------------- closed stdout

/// A stdout whose reader is gone (`tern status | head -1` after head left): every write fails
/// with EPIPE at once. Built by hand so the outcome does not depend on who is faster.
fn closed_pipe() -> Stdio {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe(2) fills two fds we own; the read end is closed right away.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: fds[0] is the read end we just created and nothing else uses it.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is an open fd we own; the OwnedFd takes it over.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    Stdio::from(fd)
}

/// Writing to a closed stdout is outside input, not a reason to panic: `tern status`, `tern ops`,
/// `tern relay` and `tern exec` end without a panic message (exit 101 would be a panic).
#[test]
fn closed_stdout_is_not_a_panic() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    seed_session(&ws, &fake);
    let cases: &[&[&str]] = &[
        &["status"],
        &["status", "--json"],
        &["ops"],
        &["relay"],
        &["exec", "--continue", "say something"],
    ];
    for args in cases {
        let mut cmd = ws.tern(&fake);
        cmd.args(*args)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .stderr(Stdio::piped());
        let child = cmd.spawn().expect("spawn");
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "tern {args:?} panicked on a closed stdout:\n{stderr}"
        );
        assert_ne!(out.status.code(), Some(101), "tern {args:?}: {stderr}");
    }
}

// ---------------------------------------------------------------- a damaged ledger

/// A ledger.json that does not parse is shown as a problem by `tern status` (exit 0), sends no
/// block, does not stop a turn, and is kept in the archive by the next `work_update`, which
/// starts the ledger anew and says so (issue 46: the model cannot fix the file, the session
/// folder is read-only to its commands).
#[test]
fn damaged_ledger_is_reported_not_fatal() {
    let fake = FakeServer::strict(vec![
        openai_text("Hello."),
        openai_call(
            "c1",
            "work_update",
            json!({"todos": [{"content": "x", "status": "pending"}]}),
        ),
        openai_text("Noted."),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello"]);
    ok(cmd, "");
    let path = ws.current_dir().join("ledger.json");
    std::fs::write(&path, "{\"items\": [").unwrap();

    let mut cmd = ws.tern(&fake);
    cmd.arg("status");
    let out = ok(cmd, "").stdout;
    assert!(out.starts_with("To-do\nno To-do items\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("! ") && l.contains("ledger.json")),
        "the damage is not shown:\n{out}"
    );
    let mut cmd = ws.tern(&fake);
    cmd.args(["status", "--json"]);
    let v: Value = serde_json::from_str(&ok(cmd, "").stdout).unwrap();
    assert!(
        v["problems"][0].as_str().unwrap().contains("ledger.json"),
        "{v}"
    );

    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "track it"]);
    ok(cmd, "");
    assert_eq!(
        read(&ws.current_dir().join("archive/ledger-0001.json")),
        "{\"items\": [",
        "the damaged ledger is kept as it was"
    );
    assert!(
        read(&path).contains("\"content\": \"x\""),
        "{}",
        read(&path)
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(tail_body(&reqs[1]), None);
    let conv = jsonl(&ws.current_dir().join("conversation.jsonl"));
    let result = tool_result(&conv, "c1");
    assert_ne!(result["is_error"], true, "{result}");
    assert!(
        content(&result).contains("ledger.json could not be read")
            && content(&result).contains("starts anew"),
        "no earlier ledger call to rebuild from: {result}"
    );
}
