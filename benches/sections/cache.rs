//! Section 4: the prefix cache (tern vs the theoretical maximum vs work state in the system
//! prompt).

use super::*;

/// work_update arguments for a 20-item To-do with `done` items completed and the next one in
/// progress; the first call also sets the goal.
pub(super) fn ledger_args(done: usize, total: usize) -> String {
    let todos: Vec<Value> = (1..=total)
        .map(|i| {
            let status = if i <= done {
                "completed"
            } else if i == done + 1 {
                "in_progress"
            } else {
                "pending"
            };
            json!({
                "id": i.to_string(),
                "content": format!("Step {i}: change module {i} and run its tests"),
                "status": status,
            })
        })
        .collect();
    let mut args = json!({ "todos": todos });
    if done == 0 {
        args["goal"] = json!({"objective": "Refactor the twenty modules and keep the tests green"});
    }
    args.to_string()
}

/// The cache session's answer to request k: a work_update every CACHE_UPDATE_EVERY requests
/// (starting with the first), otherwise a bash call printing about 600 bytes.
pub(super) fn cache_step(k: usize) -> Reply {
    let id = format!("call_{k}");
    if (k - 1).is_multiple_of(CACHE_UPDATE_EVERY) {
        let done = (k - 1) / CACHE_UPDATE_EVERY;
        let args = ledger_args(done, CACHE_TURNS / CACHE_UPDATE_EVERY);
        support::openai_tool_calls(&[(&id, "work_update", &args)]).auto_usage()
    } else {
        bash_call(&id, &format!("echo turn {k}; seq {k} {}", k + 150))
    }
}

pub(super) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The simulated cache's rounding (tests/support): whole 128-token blocks at 4 bytes a token,
/// nothing under 1024 tokens.
pub(super) fn rounded_tokens(common_bytes: usize) -> u64 {
    let tokens = (common_bytes / support::BYTES_PER_TOKEN) as u64;
    let blocks = tokens / support::CACHE_BLOCK_TOKENS * support::CACHE_BLOCK_TOKENS;
    if blocks < support::CACHE_MIN_TOKENS {
        0
    } else {
        blocks
    }
}

/// Totals of one layout over a session's request bodies.
#[derive(Default)]
pub(super) struct CacheTotals {
    input_tokens: u64,
    cached_tokens: u64,
    body_bytes: u64,
    reused_bytes: u64,
}

impl CacheTotals {
    fn add(&mut self, body_len: usize, common: usize) {
        self.input_tokens += (body_len / support::BYTES_PER_TOKEN) as u64;
        self.cached_tokens += rounded_tokens(common);
        self.body_bytes += body_len as u64;
        self.reused_bytes += common as u64;
    }
    fn hit(&self) -> f64 {
        self.cached_tokens as f64 / self.input_tokens.max(1) as f64
    }
    fn reuse(&self) -> f64 {
        self.reused_bytes as f64 / self.body_bytes.max(1) as f64
    }
}

/// The work-state tail of an OpenAI body (`"\n\n" + <tern:work_state>…` at the end of the last
/// message's content), if it has one.
pub(super) fn tail_of(body: &Value) -> R<Option<String>> {
    let msgs = body["messages"]
        .as_array()
        .ok_or("a body without messages")?;
    let last = msgs.last().ok_or("a body with no message")?;
    let content = last["content"].as_str().unwrap_or("");
    let Some(at) = content.rfind("<tern:work_state>") else {
        return Ok(None);
    };
    if !content.ends_with("</tern:work_state>") {
        return Err(format!(
            "the tail is not at the end of the last message: {content}"
        ));
    }
    let start = if content[..at].ends_with("\n\n") {
        at - 2
    } else {
        at
    };
    Ok(Some(content[start..].to_string()))
}

/// The JSON-escaped length of `s` inside a string literal.
pub(super) fn escaped_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(s.len(), |q| q.len() - 2)
}

pub(super) fn bench_cache() -> R<(String, String)> {
    let s = run_session(
        script(CACHE_TURNS, cache_step),
        CACHE_TURNS,
        "Refactor the modules one by one and keep the To-do current.",
    )?;
    let bodies: Vec<&[u8]> = s.requests.iter().map(|r| r.body.as_slice()).collect();
    let parsed: Vec<Value> = bodies
        .iter()
        .map(|b| serde_json::from_slice(b).map_err(|e| e.to_string()))
        .collect::<R<_>>()?;
    // The rewrite below re-serializes parsed bodies; it is only fair if that gives tern's bytes.
    let roundtrip_exact = parsed
        .iter()
        .zip(&bodies)
        .all(|(v, b)| serde_json::to_vec(v).is_ok_and(|x| x.as_slice() == *b));
    if !roundtrip_exact {
        return Err("re-serializing a recorded body does not give the same bytes".into());
    }
    let tails: Vec<Option<String>> = parsed.iter().map(tail_of).collect::<R<_>>()?;
    let distinct_tails = {
        let mut t: Vec<&String> = tails.iter().flatten().collect();
        t.dedup();
        t.len()
    };

    // tern as it is: what the simulated cache gave each request.
    let mut tern = CacheTotals::default();
    // Theoretical maximum: everything of the previous request but its tail (and the closing
    // `]}` where the new messages go) is cached.
    let mut max = CacheTotals::default();
    for i in 0..bodies.len() {
        let common = if i == 0 {
            0
        } else {
            common_prefix(bodies[i - 1], bodies[i])
        };
        tern.add(bodies[i].len(), common);
        let ideal = if i == 0 {
            0
        } else {
            let prev = bodies[i - 1];
            if !prev.ends_with(b"\"}]}") && !prev.ends_with(b"]}") {
                return Err("a body that does not end with its messages array".into());
            }
            let tail = tails[i - 1].as_deref().map_or(0, escaped_len);
            (prev.len() - tail - 2).min(bodies[i].len())
        };
        max.add(bodies[i].len(), ideal);
    }
    // The same session with the work state in the system prompt instead of the tail.
    let mut moved: Vec<Vec<u8>> = Vec::new();
    for (v, tail) in parsed.iter().zip(&tails) {
        let mut v = v.clone();
        if let Some(tail) = tail {
            let msgs = v["messages"].as_array_mut().ok_or("no messages")?;
            let n = msgs.len();
            let content = msgs[n - 1]["content"].as_str().unwrap_or("").to_string();
            let kept = content[..content.len() - tail.len()].to_string();
            // An assistant message that only carried the tail goes back to null content.
            msgs[n - 1]["content"] = if kept.is_empty() && msgs[n - 1]["role"] == "assistant" {
                Value::Null
            } else {
                Value::from(kept)
            };
            if msgs[0]["role"] != "system" {
                return Err("the first message is not the system prompt".into());
            }
            let system = msgs[0]["content"].as_str().unwrap_or("").to_string();
            msgs[0]["content"] = Value::from(format!("{system}\n\n{}", tail.trim_start()));
        }
        moved.push(serde_json::to_vec(&v).map_err(|e| e.to_string())?);
    }
    let mut sys = CacheTotals::default();
    for i in 0..moved.len() {
        let common = if i == 0 {
            0
        } else {
            common_prefix(&moved[i - 1], &moved[i])
        };
        sys.add(moved[i].len(), common);
    }
    // Cross-checks against the fake server's own usage figures and tern's result event.
    let server_cached: u64 = {
        let mut prev: Option<&[u8]> = None;
        let mut sum = 0;
        for b in &bodies {
            sum += support::simulated_usage(prev, b).1;
            prev = Some(b);
        }
        sum
    };
    if server_cached != tern.cached_tokens {
        return Err(format!(
            "recomputed cached tokens {} differ from the simulated cache's {server_cached}",
            tern.cached_tokens
        ));
    }
    let tern_reported = s.result["cache_hit_ratio"].as_f64().unwrap_or(0.0);
    let tern_reuse = s.result["prefix_reuse_ratio"].as_f64().unwrap_or(0.0);

    let pct = |x: f64| format!("{:.2} %", x * 100.0);
    let mut md = String::new();
    md.push_str("## 4. Prefix cache: tern vs the theoretical maximum vs work state in the system prompt\n\n");
    let _ = writeln!(
        md,
        "One `tern exec` session of {CACHE_TURNS} model requests against the fake provider's \
         simulated prefix cache (cached tokens = common byte prefix with the previous request, \
         4 bytes a token, whole 128-token blocks, nothing under 1024 tokens). The scripted model \
         calls `work_update` on requests 1, {}, {}, … ({} updates of a 20-item To-do, so the \
         `<tern:work_state>` tail changes {} times) and otherwise `bash` printing about 600 \
         bytes; the last request is answered with text. Total {:.0} KB of request bodies, last \
         body {:.1} KB.\n",
        1 + CACHE_UPDATE_EVERY,
        1 + 2 * CACHE_UPDATE_EVERY,
        CACHE_TURNS / CACHE_UPDATE_EVERY,
        distinct_tails.saturating_sub(1),
        tern.body_bytes as f64 / 1e3,
        bodies.last().map_or(0, |b| b.len()) as f64 / 1e3,
    );
    md.push_str("| layout | cache hit ratio (cached / input tokens, block-rounded) | byte reuse (common prefix / body bytes, unrounded) | cached tokens | input tokens |\n");
    md.push_str("|---|---|---|---|---|\n");
    for (name, t) in [
        ("**tern** (work state as the transient tail)", &tern),
        ("theoretical maximum (all but new messages and tail)", &max),
        ("work state in the system prompt (rewritten bodies)", &sys),
    ] {
        let _ = writeln!(
            md,
            "| {name} | **{}** | {} | {} | {} |",
            pct(t.hit()),
            pct(t.reuse()),
            t.cached_tokens,
            t.input_tokens
        );
    }
    let pct3 = |x: f64| format!("{:.3} %", x * 100.0);
    let ratio_hit = tern.hit() / max.hit().max(f64::MIN_POSITIVE);
    let ratio_bytes = tern.reuse() / max.reuse().max(f64::MIN_POSITIVE);
    let _ = writeln!(
        md,
        "\ntern / theoretical maximum: **{}** of the cache hit ratio (block-rounded), {} of the \
         reused bytes (unrounded). Work state in the system prompt reaches {} of the maximum's \
         hit ratio.\n",
        pct3(ratio_hit),
        pct3(ratio_bytes),
        pct(sys.hit() / max.hit().max(f64::MIN_POSITIVE)),
    );
    let _ = writeln!(
        md,
        "**Goal: tern at ≥ 99 % of the theoretical maximum — {}.**\n",
        if ratio_hit >= 0.99 { "met" } else { "not met" }
    );
    let goal = goal_row(
        "prefix-cache hit ratio ≥ 99 % of the theoretical maximum (§4)",
        &format!(
            "{} of it ({} vs {}; work state in the system prompt: {})",
            pct3(ratio_hit),
            pct(tern.hit()),
            pct(max.hit()),
            pct(sys.hit())
        ),
        ratio_hit >= 0.99,
    );
    let _ = writeln!(
        md,
        "How measured: the fake provider records every request body; all three rows are computed \
         from those {} bodies with the same rounding. *tern*: per request, the common byte prefix \
         with the previous body, rounded as the simulated cache rounds (this equals the usage the \
         fake server reported to tern; tern's own `result` event says cache_hit_ratio {tern_reported} \
         and prefix_reuse_ratio {tern_reuse}). *Theoretical maximum*: per request, cached = the \
         previous body minus its tail (the JSON-escaped `\\n\\n<tern:work_state>…` text) minus \
         the closing `]}}` where new messages are appended — everything but the new messages and \
         the tail — then the same block rounding; the unrounded column uses the bytes as they \
         are. *Work state in the system prompt*: each recorded body is parsed, the tail is cut \
         from its last message and appended (after a blank line) to the system message, the \
         body is re-serialized (re-serializing the unmodified bodies gives back the recorded \
         bytes exactly, checked) and the simulated cache is re-run over the rewritten sequence. \
         The first request has nothing cached in every layout. Input tokens are body bytes / 4, \
         as the fake server counts them.\n",
        bodies.len()
    );
    Ok((md, goal))
}
