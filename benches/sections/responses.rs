//! Section 13: OpenAI's Responses wire next to Chat Completions (issue 40): the 40-step session
//! of section 5 on each wire, interleaved run by run, with the cache the fake reports.

use super::*;

/// One 40-step session on `wire` (`openai` or `openai-responses`): tern's CPU per step (ms) and
/// the cached prompt tokens the provider reported over the session.
fn session(wire: &str) -> R<(f64, u64, usize)> {
    let requests = PEER_STEPS + 1;
    let server = FakeServer::start(script(requests, |k| {
        bash_call(&format!("call_{k}"), &format!("echo x{k}"))
    }));
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut args = vec!["--provider".to_string(), wire.to_string()];
    args.splice(0..0, ["exec".to_string()]);
    args.extend(
        exec_args(requests, "Say x, forty times.")
            .into_iter()
            .skip(1),
    );
    let mut cmd = tern_command(&server, tmp.path(), TERN, &args)?;
    let m = measure(&mut cmd, Some(&server))?;
    let s = finish_session(tmp, m, server.requests(), requests)?;
    let cached = s
        .events
        .iter()
        .filter(|e| e["type"] == "usage")
        .filter_map(|e| e["cached_tokens"].as_u64())
        .sum();
    let bytes = s.requests.iter().map(|r| r.body.len()).sum();
    Ok((s.m.own_ms() / PEER_STEPS as f64, cached, bytes))
}

pub(super) fn bench_responses() -> R<String> {
    let (mut chat, mut resp) = (Vec::new(), Vec::new());
    let (mut chat_cached, mut resp_cached) = (0, 0);
    let (mut chat_bytes, mut resp_bytes) = (0, 0);
    for _ in 0..PEER_RUNS {
        let (c, k, b) = session("openai")?;
        chat.push(c);
        (chat_cached, chat_bytes) = (k, b);
        let (c, k, b) = session("openai-responses")?;
        resp.push(c);
        (resp_cached, resp_bytes) = (k, b);
    }
    let (c, r) = (median(&chat), median(&resp));
    let mut md = String::from("## 13. The Responses wire next to Chat Completions\n\n");
    md.push_str(
        "The 40-step session of section 5 (each step one `bash` call, the fake provider's \
         simulated prefix cache reporting usage), run on each wire in turn, interleaved, \
         `PEER_RUNS` times; tern's own CPU per step, median (wait4, bash children excluded).\n\n",
    );
    md.push_str("| wire | tern CPU per step | cached prompt tokens reported | request bytes |\n|---|---|---|---|\n");
    md.push_str(&format!(
        "| Chat Completions (`openai`) | {c:.3} ms | {chat_cached} | {chat_bytes} |\n"
    ));
    md.push_str(&format!(
        "| Responses (`openai-responses`) | {r:.3} ms | {resp_cached} | {resp_bytes} |\n\n"
    ));
    md.push_str(&format!(
        "Responses / Chat Completions CPU per step: {:.2}× (goal: within 1.1×).\n\n",
        r / c
    ));
    Ok(md)
}
