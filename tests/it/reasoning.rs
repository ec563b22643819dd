//! Reasoning models (issue 40, DESIGN §19): the real `tern` against a fake provider that thinks
//! and enforces its provider's documented rule about the reasoning sent back (support's
//! [`Thinking`]): DeepSeek wants a tool-call turn's `reasoning_content` in every later request,
//! Groq refuses it, Anthropic wants a tool-use loop's thinking blocks back unchanged. A
//! ten-call session completes under each rule, the prefix byte-stable between requests; the
//! failure a session met before (a 400 at its second request) is shown where the rule is
//! chosen wrong on purpose.

use serde_json::Value;

use crate::support::cli::{WireWs, run};
use crate::support::script::{bash, text};
use crate::support::{Reply, Thinking, Wire, encrypted, signature, thought};

/// Ten `bash` calls (`call_1` … `call_10`), then a final answer.
fn ten_calls(wire: Wire) -> Vec<Reply> {
    let mut v: Vec<Reply> = (1..=10)
        .map(|i| bash(wire, &format!("call_{i}"), &format!("echo step {i}")))
        .collect();
    v.push(text(wire, "all ten done"));
    v
}

/// A workspace whose provider thinks by `rules`, speaking `wire`, answering [`ten_calls`].
fn thinking_ws(wire: Wire, rules: Thinking) -> WireWs {
    let ws = WireWs::new(wire, ten_calls(wire));
    ws.fake.set_thinking(rules);
    ws
}

/// The request bodies the provider received, parsed.
fn bodies(ws: &WireWs) -> Vec<Value> {
    ws.fake.requests().iter().map(|r| r.json()).collect()
}

/// The conversation of a body: `messages` (Chat Completions, Anthropic) or `input` (Responses).
fn messages(body: &Value) -> Vec<Value> {
    body.get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Every request repeats the one before it: its messages but the last (which carries the
/// work-state tail) come back identical, reasoning included, and the bodies share at least the
/// bytes up to that message.
fn assert_prefix_stable(bodies: &[Value], raw: &[Vec<u8>]) {
    for i in 1..bodies.len() {
        let (a, b) = (messages(&bodies[i - 1]), messages(&bodies[i]));
        let kept = a.len() - 1;
        assert!(b.len() > kept, "request {i} dropped messages");
        assert_eq!(a[..kept], b[..kept], "request {i} rewrote earlier messages");
        let common = raw[i - 1]
            .iter()
            .zip(&raw[i])
            .take_while(|(x, y)| x == y)
            .count();
        // The previous body without its last message, as bytes.
        let mut head = bodies[i - 1].clone();
        let key = if head.get("input").is_some() {
            "input"
        } else {
            "messages"
        };
        head[key] = Value::Array(a[..kept].to_vec());
        let head_len = serde_json::to_vec(&head).unwrap().len() - 2;
        assert!(
            common >= head_len.min(raw[i - 1].len()) - 1,
            "request {i} shares {common} bytes with the one before; its prefix is {head_len}"
        );
    }
}

fn raw(ws: &WireWs) -> Vec<Vec<u8>> {
    ws.fake.requests().into_iter().map(|r| r.body).collect()
}

/// DeepSeek's rule: the assistant messages with tool calls carry their reasoning, exactly as
/// streamed, in every later request; the session completes with no 400.
#[test]
fn a_deepseek_session_sends_each_tool_turns_reasoning_back() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let bodies = bodies(&ws);
    assert_eq!(bodies.len(), 11, "ten calls and the answer, no 400");
    let last = messages(&bodies[10]);
    let with_calls: Vec<&Value> = last
        .iter()
        .filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
        .collect();
    assert_eq!(with_calls.len(), 10);
    for (i, m) in with_calls.iter().enumerate() {
        let id = format!("call_{}", i + 1);
        let want = thought(&[(id, "bash".into(), String::new())]);
        assert_eq!(m["reasoning_content"], want.as_str(), "{m}");
    }
    assert_prefix_stable(&bodies, &raw(&ws));
    // Kept in the conversation record, in the provider's form.
    let conv = ws.read("conversation.jsonl");
    assert!(conv.contains("\"form\":\"chat\"") && conv.contains("reasoning_content"));
}

/// A server whose rule tern does not know by its host (here 127.0.0.1) gets no reasoning; when
/// it answers 400 naming the field, the session takes the other choice once, says so, and
/// completes. The same session with the rule set to `unknown` by the person stops at that 400:
/// the failure every session met before.
#[test]
fn an_unknown_host_that_wants_reasoning_is_followed_after_its_400() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let out = ws.ok(&["exec", "--json", "do the ten steps"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sends reasoning back by the rule `required`"),
        "the switch is said: {stdout}"
    );
    let statuses = ws.fake.requests().len();
    assert_eq!(
        statuses, 12,
        "one refused request, then ten calls and the answer"
    );

    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env("TERN_REASONING_REPLAY", "unknown");
    let out = run(cmd, "");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("reasoning_content"), "{}", out.stderr);
    assert_eq!(
        ws.fake.requests().len(),
        2,
        "it stops at the second request"
    );
}

/// Groq's rule: reasoning is never sent back (the host's rule where known; here the fake's
/// host is unknown, which sends none either), and the session completes; a person who sets
/// `required` against such a server is told by its 400 and tern does not overrule them.
#[test]
fn a_groq_style_server_never_gets_reasoning_back() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::Groq);
    ws.ok(&["exec", "do the ten steps"]);
    let bodies = bodies(&ws);
    assert_eq!(bodies.len(), 11);
    for b in &bodies {
        for m in messages(b) {
            assert!(m.get("reasoning_content").is_none(), "{m}");
        }
    }
    assert_prefix_stable(&bodies, &raw(&ws));

    let ws = thinking_ws(Wire::OpenAi, Thinking::Groq);
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    let out = run(cmd, "");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("is unsupported"), "{}", out.stderr);
}

/// Anthropic's rule with `--reasoning-effort`: thinking is enabled with a budget under
/// `max_tokens` and no temperature, and every assistant message of the tool-use loop starts
/// with its thinking block, signature unchanged; ten calls complete.
#[test]
fn anthropic_thinking_blocks_go_back_unchanged_with_their_signatures() {
    let ws = thinking_ws(Wire::Anthropic, Thinking::Anthropic);
    ws.ok(&[
        "exec",
        "--reasoning-effort",
        "high",
        "--temperature",
        "0.5",
        "do the ten steps",
    ]);
    let bodies = bodies(&ws);
    assert_eq!(bodies.len(), 11, "no 400");
    let first = &bodies[0];
    assert_eq!(first["thinking"]["type"], "enabled");
    let budget = first["thinking"]["budget_tokens"].as_u64().unwrap();
    assert!(first["max_tokens"].as_u64().unwrap() > budget);
    assert!(
        first.get("temperature").is_none(),
        "no temperature with thinking"
    );
    for m in messages(&bodies[10])
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter(|m| m["content"].to_string().contains("tool_use"))
    {
        let block = &m["content"][0];
        assert_eq!(block["type"], "thinking", "{m}");
        let t = block["thinking"].as_str().unwrap();
        assert_eq!(block["signature"], signature(t).as_str());
    }
    assert_prefix_stable(&bodies, &raw(&ws));

    // Thinking off (no effort): nothing about thinking is sent, and no block goes back.
    let ws = thinking_ws(Wire::Anthropic, Thinking::Anthropic);
    ws.ok(&["exec", "do the ten steps"]);
    for b in self::bodies(&ws) {
        assert!(b.get("thinking").is_none());
        assert!(!b.to_string().contains("\"type\":\"thinking\""));
    }
}

/// `--reasoning-effort` reaches the Chat Completions wire as `reasoning_effort` (`max` as
/// OpenAI's `xhigh`); unset sends nothing new; `tern status` names the setting and its source.
#[test]
fn the_effort_flag_reaches_the_chat_wire_and_unset_sends_nothing() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "ok")]);
    ws.ok(&["exec", "--reasoning-effort", "max", "hi"]);
    ws.ok(&["exec", "hi again"]);
    let b = bodies(&ws);
    assert_eq!(b[0]["reasoning_effort"], "xhigh");
    assert!(b[1].get("reasoning_effort").is_none());
    let mut cmd = ws.cmd(&["exec", "from the environment"]);
    cmd.env("TERN_REASONING_EFFORT", "low");
    assert_eq!(run(cmd, "").code, Some(0));
    assert_eq!(bodies(&ws)[2]["reasoning_effort"], "low");
    let mut cmd = ws.cmd(&["exec", "bad"]);
    cmd.env("TERN_REASONING_EFFORT", "extreme");
    let out = run(cmd, "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("TERN_REASONING_EFFORT"),
        "{}",
        out.stderr
    );
    let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
    assert!(status.contains("reasoning_effort"), "{status}");
}

/// The REPL's `/effort` (an op of the table, so an editor's command too) changes what the next
/// request asks for; `default` sends nothing again.
#[test]
fn effort_set_in_the_repl_reaches_the_next_request() {
    let ws = WireWs::new(Wire::OpenAi, Vec::new());
    ws.ok_in(&["chat"], "/effort low\nfirst\n/effort default\nsecond\n");
    let b = bodies(&ws);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0]["reasoning_effort"], "low");
    assert!(b[1].get("reasoning_effort").is_none());
}

/// OpenAI's Responses API (`--provider openai-responses`): `store: false` with the encrypted
/// reasoning asked for, every reasoning item passed back unaltered before the calls it led to,
/// the effort as `reasoning.effort`, `prompt_cache_key` on every request; ten calls complete
/// against a server that refuses an altered or missing item, the prefix stable and the cache
/// reported.
#[test]
fn the_responses_wire_keeps_encrypted_reasoning_items_between_calls() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::Responses);
    let out = ws.ok(&[
        "exec",
        "--json",
        "--provider",
        "openai-responses",
        "--reasoning-effort",
        "medium",
        "do the ten steps",
    ]);
    let bodies = bodies(&ws);
    assert_eq!(bodies.len(), 11, "no 400");
    assert!(
        ws.fake
            .requests()
            .iter()
            .all(|r| r.path.ends_with("/responses"))
    );
    let first = &bodies[0];
    assert_eq!(first["store"], false);
    assert_eq!(first["reasoning"]["effort"], "medium");
    let key = first["prompt_cache_key"].as_str().expect("a cache key");
    assert!(bodies.iter().all(|b| b["prompt_cache_key"] == key));
    let input = messages(&bodies[10]);
    let items: Vec<&Value> = input.iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(items.len(), 10, "every turn's reasoning goes back");
    for (i, item) in items.iter().enumerate() {
        let t = thought(&[(format!("call_{}", i + 1), "bash".into(), String::new())]);
        assert_eq!(item["encrypted_content"], encrypted(&t).as_str());
    }
    assert_prefix_stable(&bodies, &raw(&ws));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cached: u64 = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "usage")
        .filter_map(|e| {
            e["usage"]["cached_tokens"]
                .as_u64()
                .or(e["cached_tokens"].as_u64())
        })
        .sum();
    assert!(cached > 0, "the cache is reported: {stdout}");
}

/// The fake's rules can fail: each refuses the request its provider documents as a 400 (a
/// dropped or altered reasoning, a forbidden field), taken from a real session's last body.
#[test]
fn each_rule_refuses_what_its_provider_refuses() {
    // DeepSeek: the reasoning dropped, or changed.
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "go"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    assert_eq!(run(cmd, "").code, Some(0));
    let good = bodies(&ws).pop().unwrap();
    assert!(Thinking::DeepSeek.validate(Wire::OpenAi, &good).is_ok());
    let at = messages(&good)
        .iter()
        .position(|m| m.get("reasoning_content").is_some())
        .unwrap();
    let mut dropped = good.clone();
    dropped["messages"][at]
        .as_object_mut()
        .unwrap()
        .remove("reasoning_content");
    assert!(Thinking::DeepSeek.validate(Wire::OpenAi, &dropped).is_err());
    let mut changed = good.clone();
    changed["messages"][at]["reasoning_content"] = Value::from("something else");
    assert!(Thinking::DeepSeek.validate(Wire::OpenAi, &changed).is_err());
    // Groq refuses that same body.
    assert!(Thinking::Groq.validate(Wire::OpenAi, &good).is_err());

    // Anthropic: a block's text changed under its signature, or the block left out.
    let ws = thinking_ws(Wire::Anthropic, Thinking::Anthropic);
    ws.ok(&["exec", "--reasoning-effort", "low", "go"]);
    let good = bodies(&ws).pop().unwrap();
    assert!(Thinking::Anthropic.validate(Wire::Anthropic, &good).is_ok());
    let at = messages(&good)
        .iter()
        .position(|m| m["content"][0]["type"] == "thinking")
        .unwrap();
    let mut changed = good.clone();
    changed["messages"][at]["content"][0]["thinking"] = Value::from("edited");
    assert!(
        Thinking::Anthropic
            .validate(Wire::Anthropic, &changed)
            .is_err()
    );
    let mut dropped = good.clone();
    dropped["messages"][at]["content"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    assert!(
        Thinking::Anthropic
            .validate(Wire::Anthropic, &dropped)
            .is_err()
    );

    // Responses: an item's encrypted content altered, or the item left out.
    let ws = thinking_ws(Wire::OpenAi, Thinking::Responses);
    ws.ok(&["exec", "--provider", "openai-responses", "go"]);
    let good = bodies(&ws).pop().unwrap();
    assert!(Thinking::Responses.validate(Wire::OpenAi, &good).is_ok());
    let at = messages(&good)
        .iter()
        .position(|i| i["type"] == "reasoning")
        .unwrap();
    let mut changed = good.clone();
    changed["input"][at]["encrypted_content"] = Value::from("enc:forged");
    assert!(
        Thinking::Responses
            .validate(Wire::OpenAi, &changed)
            .is_err()
    );
    let mut dropped = good.clone();
    dropped["input"].as_array_mut().unwrap().remove(at);
    assert!(
        Thinking::Responses
            .validate(Wire::OpenAi, &dropped)
            .is_err()
    );
}

/// With Anthropic's thinking on, the answer may bill its thinking budget above its cap, so a
/// request's worst case under `--max-cost` counts it: a limit the plain cap fits is refused
/// before anything is sent once the effort asks for a large budget.
#[test]
fn the_thinking_budget_counts_in_the_spend_limits_worst_case() {
    let w = Wire::Anthropic;
    let ws = WireWs::new(w, vec![text(w, "ok"), text(w, "ok")]);
    let dir = ws.ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"price": {"input": 0.0, "output": 10.0}}"#,
    )
    .unwrap();
    // 1,000 output tokens at $10 per million: $0.01 at most; the limit is $0.05.
    let args = ["exec", "--max-output-tokens", "1000", "--max-cost", "0.05"];
    ws.ok(&[&args[..], &["hi"]].concat());
    assert_eq!(ws.fake.requests().len(), 1);
    // With `max` the budget is 48,000 tokens more: up to $0.49, over the limit.
    let out = ws.tern(&[&args[..], &["--reasoning-effort", "max", "hi again"]].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(ws.fake.requests().len(), 1, "nothing more was sent");
    assert!(String::from_utf8_lossy(&out.stderr).contains("could cost up to"));
}

/// The REPL and a sub-agent run by the same rule: a REPL prompt of ten calls, and a child whose
/// tool calls' reasoning goes back in its own requests (the fake refuses any request that
/// leaves one out), both against DeepSeek's rule.
#[test]
fn the_repl_and_a_sub_agent_follow_the_same_rule() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["chat", "--approval", "auto"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    let out = run(cmd, "do the ten steps\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(ws.fake.requests().len(), 11, "no 400 in the REPL");

    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            crate::support::script::agent(w, "a1", serde_json::json!({"task": "count files"})),
            bash(w, "c1", "ls | wc -l"),
            bash(w, "c2", "echo counted"),
            text(w, "three files"),
            text(w, "the child says three"),
        ],
    );
    ws.fake.set_thinking(Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "ask a helper"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let bodies = bodies(&ws);
    assert_eq!(bodies.len(), 5, "no 400 for the parent or the child");
    // The child's last request carries both of its calls' reasoning.
    let child_last = &bodies[3];
    let kept = messages(child_last)
        .iter()
        .filter(|m| m["reasoning_content"].as_str().is_some())
        .count();
    assert_eq!(kept, 2, "{child_last}");
}

/// A session continued on another provider's wire keeps the earlier reasoning on record, sends
/// none of it (the other wire takes no such form), and says so once.
#[test]
fn a_provider_switch_drops_foreign_reasoning_and_says_so() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    assert_eq!(run(cmd, "").code, Some(0));
    ws.push(vec![text(Wire::Anthropic, "continued")]);
    let mut cmd = ws.cmd(&[
        "exec",
        "--json",
        "--continue",
        "--provider",
        "anthropic",
        "go on",
    ]);
    cmd.env("ANTHROPIC_BASE_URL", ws.fake.base_url());
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("carry reasoning from another provider"),
        "{}",
        out.stdout
    );
    let last = bodies(&ws).pop().unwrap();
    assert!(!last.to_string().contains("Thinking before"), "{last}");
}

/// Reasoning tokens, where the provider reports them, are kept apart in the `usage` event and
/// in `tern stats` (they stay part of the output tokens, priced as output).
#[test]
fn reasoning_tokens_are_shown_apart() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n\
                data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":40,\"completion_tokens_details\":{\"reasoning_tokens\":30}}}\n\n\
                data: [DONE]\n\n";
    let ws = WireWs::new(Wire::OpenAi, vec![Reply::sse(body)]);
    let out = ws.ok(&["exec", "--json", "hi"]);
    let usage: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "usage")
        .unwrap();
    assert_eq!(usage["reasoning_tokens"], 30);
    assert_eq!(usage["output_tokens"], 40);
    let stats = String::from_utf8_lossy(&ws.ok(&["stats"]).stdout).into_owned();
    assert!(
        stats.contains("reasoning: 30 of the 40 output tokens"),
        "{stats}"
    );
    let json: Value = serde_json::from_slice(&ws.ok(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(json["requests"][0]["reasoning_tokens"], 30);
}

/// A fork repeats its parent's history with the reasoning as stored (the provider's rule still
/// met, the bytes the same: the fork's first request extends the parent's), and a compaction
/// drops the reasoning of what it summarised (nothing left to send back), the rule still met.
#[test]
fn a_fork_keeps_the_reasoning_and_a_compaction_drops_it_consistently() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let env = ("TERN_REASONING_REPLAY", "required");
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env(env.0, env.1);
    assert_eq!(run(cmd, "").code, Some(0));
    let parent_last = bodies(&ws).pop().unwrap();
    ws.ok(&["fork"]);
    ws.push(vec![text(Wire::OpenAi, "forked and going on")]);
    let mut cmd = ws.cmd(&["exec", "--continue", "go on in the fork"]);
    cmd.env(env.0, env.1);
    assert_eq!(run(cmd, "").code, Some(0));
    let all = bodies(&ws);
    assert_eq!(all.len(), 12, "no 400 in the fork");
    let (a, b) = (messages(&parent_last), messages(&all[11]));
    let kept = a.len() - 1;
    assert_eq!(
        a[..kept],
        b[..kept],
        "the fork repeats its parent's messages"
    );
    assert!(
        b[..kept]
            .iter()
            .filter(|m| m["reasoning_content"].is_string())
            .count()
            == 10
    );
    // A compaction summarises the history away, reasoning and all; the next request is
    // accepted and sends back only what is still there.
    ws.push(vec![
        text(Wire::OpenAi, "Summary: ten steps were run with bash."),
        text(Wire::OpenAi, "after the summary"),
    ]);
    let mut cmd = ws.cmd(&["compact"]);
    cmd.env(env.0, env.1);
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut cmd = ws.cmd(&["exec", "--continue", "and now"]);
    cmd.env(env.0, env.1);
    assert_eq!(run(cmd, "").code, Some(0));
    let last = bodies(&ws).pop().unwrap();
    assert!(
        messages(&last)
            .iter()
            .all(|m| m.get("reasoning_content").is_none()),
        "{last}"
    );
}

/// A verb's model call (`tern compact`) follows the same rule as a turn: a server whose host's
/// rule is unknown and that wants the reasoning back answers the compaction 400 once, the
/// session takes the other choice, and the compaction completes.
#[test]
fn a_compaction_follows_the_rule_and_its_flip_too() {
    let ws = thinking_ws(Wire::OpenAi, Thinking::DeepSeek);
    let mut cmd = ws.cmd(&["exec", "do the ten steps"]);
    cmd.env("TERN_REASONING_REPLAY", "required");
    assert_eq!(run(cmd, "").code, Some(0));
    ws.push(vec![text(Wire::OpenAi, "Summary: ten bash steps ran.")]);
    let out = ws.ok(&["compact"]);
    let all = ws.fake.requests();
    assert_eq!(
        all.len(),
        13,
        "one refused compaction request, then the one that passed"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("reasoning")
            || ws
                .read("events.jsonl")
                .contains("sends reasoning back by the rule"),
        "the switch is said"
    );
}
