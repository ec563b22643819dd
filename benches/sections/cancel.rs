//! Section 11: ACP: how soon a cancel is answered.

use super::*;

/// Cancels measured.
pub(super) const CANCEL_RUNS: usize = 15;

/// `session/cancel` during a running command → the prompt's `cancelled` response, over raw
/// JSON-RPC on `tern acp`'s pipes. The command (`sleep …; echo`) makes bash fork a child, so the
/// kill leaves an orphan: the case where a zombie used to hold the answer for the 2 s kill grace
/// (issue 21).
pub(super) fn bench_cancel() -> R<(String, String)> {
    use std::io::{BufRead, BufReader, Write};
    let mut replies = Vec::new();
    for i in 0..CANCEL_RUNS {
        // One request per prompt: each is cancelled while its command runs.
        replies.push(bash_call(
            &format!("c{i}"),
            &format!("sleep 30.{i:04}7; echo after"),
        ));
    }
    let server = FakeServer::start(replies);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tern_command(
        &server,
        dir.path(),
        TERN,
        &["acp".into(), "--approval".into(), "auto".into()],
    )?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let out = child.stdout.take().ok_or("no stdout")?;
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut send = |v: Value| -> R<()> {
        let mut line = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        line.push(b'\n');
        stdin.write_all(&line).map_err(|e| e.to_string())
    };
    let wait_for = |pred: &dyn Fn(&Value) -> bool| -> R<Value> {
        loop {
            let v = rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| "tern acp went quiet".to_string())?;
            if pred(&v) {
                return Ok(v);
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
    )?;
    wait_for(&|v| v["id"] == 1)?;
    let ws = dir.path().join("ws");
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": ws, "mcpServers": []}}),
    )?;
    let sid = wait_for(&|v| v["id"] == 2)?["result"]["sessionId"]
        .as_str()
        .ok_or("no session")?
        .to_string();
    let mut ms = Vec::new();
    for i in 0..CANCEL_RUNS {
        let id = 10 + i;
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "sleep"}]}}),
        )?;
        wait_for(&|v| v["params"]["update"]["status"] == "in_progress")?;
        // Until the shell has forked its sleep (the orphan-to-be).
        let marker = format!("30.{i:04}7");
        let started = Instant::now();
        while !sleeping(&marker) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}))?;
        let r = wait_for(&|v| v["id"] == id && v.get("method").is_none())?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if r["result"]["stopReason"] != "cancelled" {
            return Err(format!("cancel {i}: {r}"));
        }
    }
    drop(stdin);
    let _ = child.wait();
    let (med, p90, max) = (
        median(&ms),
        percentile(&ms, 90.0),
        ms.iter().cloned().fold(0.0, f64::max),
    );
    let mut md = String::new();
    md.push_str("## 11. ACP: cancel latency\n\n");
    let _ = writeln!(
        md,
        "`session/cancel` sent while a command runs (`sleep …; echo after`: bash forks the sleep, so \
         the kill leaves an orphan) → the prompt's `cancelled` response, over raw JSON-RPC on the \
         pipes of one `tern acp --approval auto`; {CANCEL_RUNS} cancels. tern is the child \
         subreaper of its commands and reaps the orphan; its liveness check does not count \
         zombies (before issue 21, a zombie PID 1 never reaped held every answer for the 2 s \
         kill grace).\n"
    );
    md.push_str("| median | p90 | max |\n|---|---|---|\n");
    let _ = writeln!(md, "| {med:.0} ms | {p90:.0} ms | {max:.0} ms |\n");
    let goal = goal_row(
        "a cancel is answered within 200 ms of the kill (ACP)",
        &format!("median {med:.0} ms, max {max:.0} ms"),
        max < 200.0,
    );
    Ok((md, goal))
}

/// True while a `sleep MARKER` process runs.
pub(super) fn sleeping(marker: &str) -> bool {
    let want = format!("sleep\0{marker}\0");
    fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .any(|e| fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        })
        .unwrap_or(false)
}
