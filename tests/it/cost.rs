//! The bill (issue 31): every request priced from the configured price, a spending limit that
//! stops a run before the request that could pass it (exec, the REPL, a sub-agent spending from
//! its parent's limit; ACP's are in `acp.rs`), and why each cache miss happened, named in
//! `tern stats --json` — the first request, a compaction, a model switch, an idle pause past the
//! cache lifetime (an injected clock) and a provider that read less than it could.
//!
//! The fake provider simulates the caches: each model's prompt is cached by its common prefix
//! with that model's previous request, and [`crate::support::Reply::uncached`] reports nothing
//! read (an expired entry, a proxy that drops cache markers).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::cli::{WireWs, tern_clean};
use crate::support::harness::{Collect, InProc, fast_config};
use crate::support::script::{agent, bash, text};
use crate::support::{Reply, Wire};
use tern::cost::{Price, PriceBook, Priced};
use tern::event::CompactTrigger;

/// The test price, USD per million tokens: input, cached input, cache write, output.
const PRICE: (f64, f64, f64, f64) = (2.0, 0.5, 2.5, 8.0);

/// Writes the person's config (`~/.config/tern/config.json`) under `home`.
fn config(home: &Path, v: Value) {
    let dir = home.join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
}

fn price_json() -> Value {
    json!({"input": PRICE.0, "cached_input": PRICE.1, "cache_write": PRICE.2, "output": PRICE.3})
}

/// What a `usage` event (or `tern stats` request) should cost at [`PRICE`].
fn expected_cost(u: &Value) -> f64 {
    let n = |k: &str| u[k].as_u64().unwrap_or_else(|| panic!("{k} in {u}")) as f64;
    let (input, cached, write, out) = (
        n("input_tokens"),
        n("cached_tokens"),
        n("cache_write_tokens"),
        n("output_tokens"),
    );
    ((input - cached - write) * PRICE.0 + cached * PRICE.1 + write * PRICE.2 + out * PRICE.3) / 1e6
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 2e-6
}

/// exec's JSONL lines.
fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// Each request's cost comes from the configured price, on both wires: the usage events, the
/// result line, `meta.json`, `tern stats --json`, `tern sessions` and `tern status` agree, and
/// `tern status` says where the price came from.
#[test]
fn each_request_is_priced_from_the_configured_price() {
    for w in [Wire::OpenAi, Wire::Anthropic] {
        let ws = WireWs::new(
            w,
            vec![
                bash(w, "c1", "echo one"),
                bash(w, "c2", "echo two"),
                text(w, "Done."),
            ],
        );
        config(&ws.ws.home(), json!({"price": price_json()}));
        let out = ws.ok(&["exec", "--json", "--approval", "auto", "go"]);
        let events = lines(&out);
        let usage = of_type(&events, "usage");
        assert_eq!(usage.len(), 3, "{w:?}");
        let mut sum = 0.0;
        for u in &usage {
            let c = u["cost_usd"].as_f64().unwrap_or_else(|| panic!("{u}"));
            assert!(close(c, expected_cost(u)), "{w:?}: {c} for {u}");
            assert!(c > 0.0);
            sum += c;
        }
        // The second and third requests read the fixed prefix from the cache: cheaper per token.
        assert!(
            usage[1]["cached_tokens"].as_u64().unwrap() > 0,
            "{}",
            usage[1]
        );
        let result = of_type(&events, "result")[0];
        assert!(close(result["cost_usd"].as_f64().unwrap(), sum), "{result}");
        assert!(result.get("unpriced_requests").is_none(), "{result}");
        let meta = ws.json("meta.json");
        assert!(close(meta["cost_usd"].as_f64().unwrap(), sum), "{meta}");
        let stats: Value = serde_json::from_slice(&ws.ok(&["stats", "--json"]).stdout).unwrap();
        let reqs = stats["requests"].as_array().unwrap();
        assert_eq!(reqs.len(), 3);
        for (r, u) in reqs.iter().zip(&usage) {
            assert_eq!(r["cost_usd"], u["cost_usd"], "{r}");
        }
        let shown = format!("${sum:.4}");
        let sessions = String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned();
        assert!(sessions.contains(&shown), "{shown} in {sessions}");
        let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
        assert!(status.contains(&format!("Cost: {shown}")), "{status}");
        let status: Value = serde_json::from_slice(&ws.ok(&["status", "--json"]).stdout).unwrap();
        assert!(
            close(status["cost"]["usd"].as_f64().unwrap(), sum),
            "{status}"
        );
    }
}

/// A model tern knows no price of shows its tokens and "cost unknown", never a guess; a
/// spending limit without a price is refused at start with the reason (exit 2), before any
/// session or request.
#[test]
fn no_price_means_cost_unknown_and_a_limit_is_refused() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(w, vec![text(w, "Hi.")]);
    let refused = ws.tern(&["exec", "--json", "--max-cost", "1", "go"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stdout);
    assert!(
        err.contains("--max-cost") && err.contains("\\\"price\\\""),
        "{refused:?}"
    );
    assert!(ws.fake.requests().is_empty(), "a request was sent");
    for bad in ["0", "-1", "abc", "nan"] {
        let out = ws.tern(&["exec", "--json", "--max-cost", bad, "go"]);
        assert_eq!(out.status.code(), Some(2), "--max-cost {bad}: {out:?}");
    }
    let out = ws.ok(&["exec", "--json", "go"]);
    let events = lines(&out);
    let u = of_type(&events, "usage")[0];
    assert!(u.get("cost_usd").is_none(), "{u}");
    let result = of_type(&events, "result")[0];
    assert!(result["cost_usd"].is_null(), "{result}");
    assert_eq!(result["unpriced_requests"], 1);
    let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
    assert!(status.contains("Cost: unknown"), "{status}");
    let sessions = String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned();
    assert!(sessions.contains(" unknown "), "{sessions}");
}

/// The per-request costs of a scripted run with no limit: the reference a limit is set from.
fn reference_costs(w: Wire, script: &[Reply]) -> Vec<f64> {
    let ws = WireWs::new(w, script.to_vec());
    config(
        &ws.ws.home(),
        json!({"price": {"input": 1000.0, "output": 0.0}}),
    );
    let out = ws.ok(&["exec", "--json", "--approval", "auto", "go"]);
    of_type(&lines(&out), "usage")
        .iter()
        .map(|u| u["cost_usd"].as_f64().unwrap())
        .collect()
}

fn five_steps(w: Wire) -> Vec<Reply> {
    (1..=5)
        .map(|i| bash(w, &format!("c{i}"), &format!("echo step {i}")))
        .chain([text(w, "Done.")])
        .collect()
}

/// `--max-cost` in exec: with the limit set between what two requests cost and what a third
/// could, exactly two are sent; the run ends `budget_exhausted`, exit 1, saying what was spent
/// and what the next request could have cost, and the session goes on with a higher limit.
#[test]
fn a_limit_stops_exec_before_the_request_that_could_pass_it() {
    let w = Wire::OpenAi;
    let costs = reference_costs(w, &five_steps(w));
    assert_eq!(costs.len(), 6);
    // The worst case of a request is at least its cost: two fit, the third cannot.
    let limit = costs[0] + costs[1] + costs[2] / 2.0;
    let ws = WireWs::new(w, five_steps(w));
    config(
        &ws.ws.home(),
        json!({"price": {"input": 1000.0, "output": 0.0}}),
    );
    let limit_arg = format!("{limit:.6}");
    let out = ws.tern(&[
        "exec",
        "--json",
        "--approval",
        "auto",
        "--max-cost",
        &limit_arg,
        "go",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(ws.fake.requests().len(), 2, "the third request was sent");
    let events = lines(&out);
    let result = of_type(&events, "result")[0];
    assert_eq!(result["status"], "budget_exhausted", "{result}");
    let spent = result["cost_usd"].as_f64().unwrap();
    assert!(spent <= limit, "{spent} > {limit}");
    let err = result["error"].as_str().unwrap();
    assert!(
        err.contains("spent so far")
            && err.contains("could cost up to")
            && err.contains("--max-cost"),
        "{err}"
    );
    // The next request's worst case, as said, would have passed the limit.
    let next: f64 = err
        .split("could cost up to $")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit() && c != '.').next())
        .map(|s| s.trim_end_matches('.'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no amount in {err}"));
    assert!(spent + next > limit, "{spent} + {next} <= {limit}");
    let ended = ws
        .events()
        .into_iter()
        .rfind(|e| e["type"] == "turn_end")
        .unwrap();
    assert_eq!(ended["status"], "budget_exhausted");
    // Going on with a higher limit finishes the work.
    let out = ws.ok(&[
        "exec",
        "--json",
        "--continue",
        "--approval",
        "auto",
        "--max-cost",
        "100",
        "go on",
    ]);
    let result = lines(&out).pop().unwrap();
    assert_eq!(result["status"], "completed", "{result}");
}

/// `max_cost` in the config is the same limit (a flag overrides it).
#[test]
fn max_cost_in_the_config_is_the_limit() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(w, five_steps(w));
    config(
        &ws.ws.home(),
        json!({"price": {"input": 1000.0, "output": 0.0}, "max_cost": 0.000001}),
    );
    let out = ws.tern(&["exec", "--json", "--approval", "auto", "go"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(ws.fake.requests().is_empty());
    assert_eq!(lines(&out).pop().unwrap()["status"], "budget_exhausted");
    let out = ws.ok(&[
        "exec",
        "--json",
        "--continue",
        "--approval",
        "auto",
        "--max-cost",
        "1000",
        "go",
    ]);
    assert_eq!(lines(&out).pop().unwrap()["status"], "completed");
}

/// The REPL stops the turn before the request, says what was spent and how to go on, and keeps
/// reading: the next prompt meets the same limit; EOF ends with exit 0.
#[test]
fn a_limit_stops_a_repl_turn_and_says_how_to_go_on() {
    let w = Wire::OpenAi;
    let costs = reference_costs(w, &five_steps(w));
    let limit = format!("{:.6}", costs[0] + costs[1] + costs[2] / 2.0);
    let ws = WireWs::new(w, five_steps(w));
    config(
        &ws.ws.home(),
        json!({"price": {"input": 1000.0, "output": 0.0}}),
    );
    let out = ws.tern_in(
        &["chat", "--approval", "auto", "--max-cost", &limit],
        "go\nand more\n",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spending limit"), "{err}");
    assert!(err.contains("--continue --max-cost"), "{err}");
    // The status line shows the cost and the limit.
    assert!(err.contains("· limit $"), "{err}");
    assert_eq!(ws.fake.requests().len(), 2);
    let ends: Vec<Value> = ws
        .events()
        .into_iter()
        .filter(|e| e["type"] == "turn_end")
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.iter().all(|e| e["status"] == "budget_exhausted"),
        "{ends:?}"
    );
}

/// A sub-agent spends from its parent's limit: the parent's first request fits, the child's
/// first fits, the child's second could pass what is left and is not sent; the child ends
/// `budget_exhausted`, and its cost counts into the parent's totals.
#[test]
fn a_sub_agent_spends_from_the_parents_limit() {
    let w = Wire::OpenAi;
    let mut cfg = fast_config();
    cfg.approval = tern::policy::Approval::Auto;
    cfg.prices = PriceBook {
        models: Vec::new(),
        default: Some((
            None,
            Priced {
                price: Price {
                    input: 1000.0,
                    cached_input: 1000.0,
                    cache_write: 1000.0,
                    cache_write_1h: 1000.0,
                    output: 0.0,
                },
                source: "test".into(),
            },
        )),
    };
    let script = || {
        vec![
            agent(w, "a1", json!({"task": "count files"})),
            bash(w, "k1", "ls"),
            bash(w, "k2", "ls -a"),
            text(w, "child done"),
            text(w, "parent done"),
        ]
    };
    // The reference: what each request of the same script costs without a limit, the
    // parent's from its events and the child's from its own.
    let (parent, child) = {
        let h = InProc::new(w, script(), cfg.clone());
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        rt.run_turn("go", &mut ui).expect("the reference turn");
        assert!(
            rt.totals().child_cost_usd > 0.0,
            "the child's cost counts into the parent's"
        );
        let costs = |dir: &Path| -> Vec<f64> {
            std::fs::read_to_string(dir.join("events.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|e| e["type"] == "usage")
                .map(|e| e["cost_usd"].as_f64().unwrap())
                .collect()
        };
        let agents = rt.session().path("agents");
        let child_dir = std::fs::read_dir(&agents)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        (costs(&rt.session().dir), costs(&child_dir))
    };
    assert_eq!((parent.len(), child.len()), (2, 3), "{parent:?} {child:?}");
    cfg.max_cost = Some(parent[0] + child[0] + child[1] / 2.0);
    let h = InProc::new(w, script(), cfg);
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    let outcome = rt.run_turn("go", &mut ui);
    let ends: Vec<_> = ui
        .of("agent_end")
        .into_iter()
        .map(|e| match e {
            tern::event::Event::AgentEnd { status, .. } => *status,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(ends, [tern::event::Ending::BudgetExhausted], "{outcome:?}");
    // Parent 1 + child 1 sent; the child's second was not, nor (over the limit) the parent's
    // next.
    assert_eq!(h.fake.requests().len(), 2, "{outcome:?}");
    assert!(
        matches!(outcome, Err(tern::runtime::Failure::Budget(_))),
        "{outcome:?}"
    );
    let (spent, limit) = rt.budget_state().unwrap();
    assert!(spent <= limit, "{spent} > {limit}");
    assert!(rt.totals().child_cost_usd > 0.0);
}

/// `tern stats --json` says why each request missed the cache: the first request, a compaction
/// (prefix_changed, cause compaction, at the first changed byte), a model switch (another
/// model's cache: model_changed), an idle pause past the provider's cache lifetime (the
/// runtime's clock moved on: cache_expired), and a provider that read less than the unchanged
/// prefix allows (provider_missed, named once on the status line after three in a row).
#[test]
fn stats_name_why_each_request_missed_the_cache() {
    let w = Wire::OpenAi;
    let mut cfg = fast_config();
    cfg.prices = PriceBook {
        models: Vec::new(),
        default: Some((
            None,
            Priced {
                price: Price {
                    input: 2.0,
                    cached_input: 0.5,
                    cache_write: 2.0,
                    cache_write_1h: 2.0,
                    output: 8.0,
                },
                source: "test".into(),
            },
        )),
    };
    let summary = "Summary: the person asked for turns one and two; they were answered.";
    // A long answer (distinct words: a repeated one would be cut as a runaway).
    let long_answer = (0..400)
        .map(|i| format!("item {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let h = InProc::new(
        w,
        vec![
            text(w, "one"),
            text(w, &long_answer),
            text(w, summary),
            text(w, "three"),
            text(w, "four"),
            text(w, "five").uncached(),
            text(w, "six").uncached(),
            text(w, "seven").uncached(),
            text(w, "eight").uncached(),
        ],
        cfg,
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    for p in ["turn one", "turn two"] {
        rt.run_turn(p, &mut ui).expect("turn");
    }
    // The summary replaces turn one; turn two (a long answer) is kept after it, so its bytes
    // move and are billed in full again.
    rt.compact(CompactTrigger::Manual, Some(2), &mut ui)
        .expect("compaction");
    rt.run_turn("turn three", &mut ui).expect("turn");
    rt.set_model(Some("m2"), &mut ui).expect("switch");
    rt.run_turn("turn four", &mut ui).expect("turn");
    rt.skip_time(Duration::from_secs(301));
    assert!(rt.idle_past_cache().is_some());
    rt.run_turn("turn five", &mut ui).expect("turn");
    for p in ["turn six", "turn seven", "turn eight"] {
        rt.run_turn(p, &mut ui).expect("turn");
    }
    let warned = ui
        .of("warning")
        .iter()
        .filter(|e| format!("{e:?}").contains("prompt cache"))
        .count();
    assert_eq!(warned, 1, "named once: {:?}", ui.of("warning"));
    rt.release();
    drop(rt);

    let mut c = tern_clean(&h.dir.path().join(".home"));
    c.current_dir(h.dir.path()).args(["stats", "--json"]);
    let out = crate::support::cli::ok_no_stdin(c);
    let stats: Value = serde_json::from_str(&out.stdout).unwrap();
    let reqs = stats["requests"].as_array().unwrap();
    let why: Vec<(String, Value, Value)> = reqs
        .iter()
        .map(|r| {
            let m = &r["miss"];
            (
                format!(
                    "{}:{}",
                    r["purpose"].as_str().unwrap(),
                    m["reason"].as_str().unwrap_or("-")
                ),
                m["cause"].clone(),
                m["at_byte"].clone(),
            )
        })
        .collect();
    let names: Vec<&str> = why.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "turn:first_request",
            "turn:-",
            "compaction:-",
            "turn:prefix_changed",
            "turn:model_changed",
            "turn:cache_expired",
            "turn:provider_missed",
            "turn:provider_missed",
            "turn:provider_missed",
        ],
        "{stats:#}"
    );
    assert_eq!(why[3].1, "compaction", "{}", reqs[3]);
    assert_eq!(why[4].1, "model_switch", "{}", reqs[4]);
    // The compaction changed the history after the fixed prefix: the first changed byte is
    // past the tools and the system prompt, and before the end of the request.
    let at = why[3].2.as_u64().unwrap();
    assert!(
        at > 4000 && at < reqs[3]["request_bytes"].as_u64().unwrap(),
        "{}",
        reqs[3]
    );
    for r in &reqs[3..] {
        assert!(r["miss"]["tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(r["miss"]["cost_usd"].as_f64().unwrap() > 0.0, "{r}");
    }
    // `--why` sums them by reason.
    let why_rows = stats["why"].as_array().unwrap();
    let missed = why_rows
        .iter()
        .find(|r| r["reason"] == "provider_missed")
        .unwrap();
    assert_eq!(missed["requests"], 3, "{why_rows:?}");
    let mut c = tern_clean(&h.dir.path().join(".home"));
    c.current_dir(h.dir.path()).args(["stats", "--why"]);
    let text = crate::support::cli::ok_no_stdin(c).stdout;
    for reason in [
        "first_request",
        "prefix_changed",
        "model_changed",
        "cache_expired",
        "provider_missed",
    ] {
        assert!(text.contains(reason), "{reason} in {text}");
    }
}

/// `cache_ttl: "1h"` asks Anthropic for the one-hour cache at every breakpoint (Anthropic,
/// prompt caching: `cache_control: {"type": "ephemeral", "ttl": "1h"}`); without it no `ttl`
/// is sent (the five-minute default). `cache_ttl` accepts `5m` and `1h` only.
#[test]
fn cache_ttl_asks_anthropic_for_the_one_hour_cache() {
    let w = Wire::Anthropic;
    for (ttl, want) in [(None, None), (Some("1h"), Some("1h")), (Some("5m"), None)] {
        let ws = WireWs::new(w, vec![bash(w, "c1", "true"), text(w, "Done.")]);
        let mut cfg = json!({});
        if let Some(t) = ttl {
            cfg["cache_ttl"] = json!(t);
        }
        config(&ws.ws.home(), cfg);
        ws.ok(&["exec", "--approval", "auto", "go"]);
        let bodies = ws.raw_bodies();
        assert_eq!(bodies.len(), 2);
        for b in &bodies {
            let marks = b.matches("\"cache_control\"").count();
            assert!(marks >= 2, "{b}");
            match want {
                Some(t) => assert_eq!(b.matches(&format!("\"ttl\":\"{t}\"")).count(), marks, "{b}"),
                None => assert!(!b.contains("\"ttl\""), "{b}"),
            }
        }
    }
    let ws = WireWs::new(w, vec![]);
    config(&ws.ws.home(), json!({"cache_ttl": "2h"}));
    let out = ws.tern(&["exec", "go"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cache_ttl"),
        "{out:?}"
    );
}

/// Bad money settings are refused at start (exit 2) with a line that names the file and the
/// setting and says what is meant; nothing is sent.
#[test]
fn bad_money_settings_name_the_setting() {
    let w = Wire::OpenAi;
    for (cfg, says) in [
        (json!({"max_cost": -1}), "\"max_cost\" is -1"),
        (
            json!({"price": {"input": -1, "output": 1}}),
            "price.input is -1",
        ),
        (
            json!({"price": {"input": 1e300, "output": 1}}),
            "price.input",
        ),
        (
            json!({"models": [{"name": "x"}]}),
            "a \"models\" entry is a name",
        ),
        (json!({"models": [3]}), "a \"models\" entry is a name"),
        (json!({"cache_ttl": "2h"}), "\"cache_ttl\" is \"2h\""),
    ] {
        let ws = WireWs::new(w, vec![]);
        config(&ws.ws.home(), cfg.clone());
        let out = ws.tern(&["exec", "go"]);
        assert_eq!(out.status.code(), Some(2), "{cfg}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(says) && err.contains("config.json"),
            "{cfg}: {err}"
        );
        assert!(!err.contains("config: config"), "{err}");
        assert!(ws.fake.requests().is_empty());
    }
}

/// Issue 44: the first request of a new process is measured against the session's last request
/// on record, whatever process sent it: after `tern compact` (another process) the next
/// `--continue` names the compaction, a `--continue -m other` names the model change, and a
/// `--continue` after nothing changed reads the cache (no miss).
#[test]
fn miss_reasons_hold_across_processes() {
    let w = Wire::OpenAi;
    let long_answer = (0..400)
        .map(|i| format!("item {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let ws = WireWs::new(
        w,
        vec![
            text(w, "one"),
            text(w, &long_answer),
            text(w, "Summary: turns one and two were asked and answered."),
            text(w, "three"),
            text(w, "four"),
            text(w, "five"),
        ],
    );
    // The person's long first message is recalled verbatim after the summary: its bytes move.
    let long_prompt = format!(
        "turn one, my rules: {}",
        (0..400)
            .map(|i| format!("rule {i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    ws.ok(&["exec", &long_prompt]);
    ws.ok(&["exec", "--continue", "turn two"]);
    ws.ok(&["compact"]);
    ws.ok(&["exec", "--continue", "turn three"]);
    ws.ok(&["exec", "--continue", "-m", "m2", "turn four"]);
    ws.ok(&["exec", "--continue", "-m", "m2", "turn five"]);
    let out = ws.ok(&["stats", "--json"]);
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reqs = stats["requests"].as_array().unwrap();
    let why: Vec<String> = reqs
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}",
                r["purpose"].as_str().unwrap_or("?"),
                r["miss"]["reason"].as_str().unwrap_or("-"),
                r["miss"]["cause"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        why,
        [
            "turn:first_request:-",
            "turn:-:-",
            "compaction:-:-",
            "turn:prefix_changed:compaction",
            "turn:model_changed:model_switch",
            "turn:-:-",
        ],
        "{stats:#}"
    );
}

/// Issue 44: parallel sub-agents share their parent's limit, and a request reserves its worst
/// case before it is sent, so two children sending at once never both fit where one does: with
/// two and with four children spending together (their requests slowed so they overlap), 30
/// runs each, the session tree never passes `--max-cost`.
#[test]
fn parallel_children_never_pass_the_limit() {
    let w = Wire::OpenAi;
    let mut cfg = fast_config();
    cfg.approval = tern::policy::Approval::Auto;
    cfg.prices = PriceBook {
        models: Vec::new(),
        default: Some((
            None,
            Priced {
                price: Price {
                    input: 1000.0,
                    cached_input: 1000.0,
                    cache_write: 1000.0,
                    cache_write_1h: 1000.0,
                    output: 0.0,
                },
                source: "test".into(),
            },
        )),
    };
    // About seven requests fit: the parent's first, then the children's.
    cfg.max_cost = Some(9.0);
    for children in [2usize, 4] {
        for run in 0..30 {
            let list: Vec<(String, &str, Value)> = (0..children)
                .map(|i| {
                    (
                        format!("a{i}"),
                        "agent",
                        json!({"task": format!("count {i}")}),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str, Value)> = list
                .iter()
                .map(|(id, n, v)| (id.as_str(), *n, v.clone()))
                .collect();
            let h = InProc::new(
                w,
                vec![crate::support::script::calls(w, &refs)],
                cfg.clone(),
            );
            // Every later request (the children's) runs a command, slowly: they overlap.
            h.fake
                .set_default(bash(w, "k", "true").delay_before(Duration::from_millis(40)));
            let mut ui = Collect::default();
            let mut rt = h.open(&mut ui);
            let _ = rt.run_turn("go", &mut ui);
            let (spent, limit) = rt.budget_state().unwrap();
            assert!(
                spent <= limit + 1e-9,
                "{children} children, run {run}: spent {spent} of {limit}"
            );
            assert!(h.fake.requests().len() > 2, "the children spent");
        }
    }
}

/// Issue 44: a person thinking between turns outlives a 5-minute cache, so the REPL (and an
/// editor) ask Anthropic for the one-hour cache by default; `exec` keeps five minutes; a
/// config's `cache_ttl` wins for every surface.
#[test]
fn the_repl_asks_for_the_one_hour_cache_and_exec_for_five_minutes() {
    let w = Wire::Anthropic;
    for (cfg, surface, want) in [
        (json!({}), "chat", true),
        (json!({}), "exec", false),
        (json!({"cache_ttl": "5m"}), "chat", false),
        (json!({"cache_ttl": "1h"}), "exec", true),
    ] {
        let ws = WireWs::new(w, vec![text(w, "Done.")]);
        config(&ws.ws.home(), cfg.clone());
        let out = if surface == "chat" {
            ws.tern_in(&["chat"], "go\n")
        } else {
            ws.tern(&["exec", "go"])
        };
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let b = &ws.raw_bodies()[0];
        assert!(b.contains("\"cache_control\""), "{b}");
        assert_eq!(
            b.contains("\"ttl\":\"1h\""),
            want,
            "{surface} with {cfg}: {b}"
        );
        // The usage event says which lifetime was asked for (`tern stats --why` counts it).
        let usage = ws
            .events()
            .into_iter()
            .find(|e| e["type"] == "usage")
            .unwrap();
        assert_eq!(
            usage["cache_ttl_s"],
            json!(if want { 3600 } else { 300 }),
            "{usage}"
        );
    }
}
