//! One open ACP session: a thread of its own that creates the [`Runtime`], keeps it, and runs
//! its jobs (turns, ops, replays) one at a time in the order they came (a session's turns never
//! overlap, and the reader thread stays free to take `session/cancel`).
//!
//! Prompts in a row (ACP v1, prompt turn; as Gemini CLI and Qwen Code do): a prompt that
//! arrives while a turn runs cancels that turn (or finds it cancelled already) and waits behind
//! it; the cancelled prompt is answered `cancelled` after its last update, then the new one
//! runs. A prompt waiting behind another is cancelled too when a newer one comes (the newest
//! wins). Never an error.
//!
//! Cancel ordering (ACP v1, prompt turn: "Cancellation"): every notification of a turn is
//! written by its session thread, synchronously, before that same thread writes the turn's one
//! response; `session/cancel` only sets the turn's flag (the model stream stops within about
//! 100 ms, the bash tool kills the process group, an open permission question is withdrawn).
//! The response is written while the slot is locked and the job leaves the slot in the same
//! critical section, so nothing of the turn can follow its response. Each prompt gets a new
//! flag, so a late cancel never reaches a later prompt.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::mode::Mode;
use super::protocol::{PromptResult, SessionUpdate, StopReason, TurnUsage};
use super::rpc::{Responder, RpcError, Wire};
pub use super::slot::{Pending, Slot, lock, persist_mode};
use super::surface::{AcpSurface, notify, read_ledger};
use super::updates::{Mapper, markdown};
use crate::cancel::CancelToken;
use crate::event::{Ending, Event};
use crate::launcher::{Launcher, SessionRef};
use crate::ops;
use crate::runtime::{Approval, Failure, Quiet, Runtime, Totals};
use crate::store::Session;

/// Work for a session thread.
pub enum Job {
    /// A prompt turn, answered through `reply`.
    Turn {
        /// Its slot entry.
        seq: u64,
        /// The answer owed.
        reply: Responder,
        /// The prompt.
        text: String,
        /// Its cancel flag.
        cancel: CancelToken,
    },
    /// A slash command, answered with the receipt.
    Op {
        /// Its slot entry.
        seq: u64,
        /// The answer owed.
        reply: Responder,
        /// The op.
        op: &'static ops::Op,
        /// Its argument.
        arg: Option<String>,
        /// Its cancel flag.
        cancel: CancelToken,
    },
    /// `session/set_model`: `done` gets the receipt or the error.
    SetModel {
        /// The model name.
        model: String,
        /// Where the outcome goes.
        done: Sender<Result<String, RpcError>>,
    },
    /// `session/set_config_option` for the reasoning effort: `done` gets the value's id now in
    /// force, or the error.
    SetEffort {
        /// The value's id (`default`, `none`, … `max`).
        value: String,
        /// Where the outcome goes.
        done: Sender<Result<String, RpcError>>,
    },
    /// Replay the conversation (a `session/load` of a session open already); `done` when sent.
    Replay {
        /// Signalled when sent.
        done: Sender<()>,
    },
    /// Leave the thread (the runtime is dropped).
    Close,
}

/// How a session is opened.
pub enum Open {
    /// A new session.
    New,
    /// A stored one; with `replay` its conversation is sent first.
    Existing {
        /// The session.
        session: Session,
        /// Replay (`session/load`) or not (`session/resume`).
        replay: bool,
    },
}

/// What a session thread is started with.
pub struct Ctx {
    /// The protocol writer.
    pub wire: Arc<Wire>,
    /// Shared with the dispatcher.
    pub slot: Arc<Mutex<Slot>>,
    /// Opens the runtime.
    pub launcher: Launcher,
    /// The mode of a session that stored none.
    pub default_mode: Mode,
}

/// What an opened session reports: id, folder, mode, model.
pub type Opened = (String, PathBuf, Mode, String);

/// A session thread: opens the runtime, reports it (or the error) on `ready`, then runs jobs
/// until [`Job::Close`] or the dispatcher goes away.
pub fn run(
    ctx: Ctx,
    how: Open,
    mcp_refused: Vec<String>,
    jobs: Receiver<Job>,
    ready: Sender<Result<Opened, RpcError>>,
) {
    let (opened, replay) = match how {
        Open::New => (
            ctx.launcher.open(
                &SessionRef::New {
                    title: String::new(),
                },
                &mut Quiet,
            ),
            false,
        ),
        Open::Existing { session, replay } => (ctx.launcher.resume(session, &mut Quiet), replay),
    };
    let mut rt = match opened {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(RpcError::internal(e.to_string())));
            return;
        }
    };
    for why in mcp_refused {
        let message = format!("an MCP server of the client is not used: {why}");
        crate::errln!("tern acp: {message}");
        rt.emit(&mut Quiet, Event::warning(message));
    }
    // The mode stored with the session, else this connection's default (then stored).
    let stored = rt.session().read_meta().ok().and_then(|m| m.approval);
    let mode = stored.map_or(ctx.default_mode, Mode::of);
    if stored.is_none() {
        persist_mode(rt.session(), mode);
    }
    {
        let mut s = lock(&ctx.slot);
        s.mode = mode;
        s.model = rt.cfg().model.clone();
    }
    let mut map = Mapper::new(rt.cfg().context_window);
    // The session's cost before this process: `usage_update.cost` is cumulative.
    map.spent = rt
        .session()
        .read_meta()
        .ok()
        .map(|m| m.cost_usd + m.children_cost_usd)
        .filter(|c| *c > 0.0);
    if replay {
        replay_history(&rt, &ctx.wire, &mut map);
    } else {
        map.learn(rt.history());
    }
    let opened = (
        rt.session().id.clone(),
        rt.session().dir.clone(),
        mode,
        rt.cfg().model.clone(),
    );
    if ready.send(Ok(opened)).is_err() {
        return;
    }
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Turn {
                seq,
                reply,
                text,
                cancel,
            } => run_turn(&ctx, &mut rt, &mut map, seq, reply, &text, cancel),
            Job::Op {
                seq,
                reply,
                op,
                arg,
                cancel,
            } => run_op(&ctx, &mut rt, &mut map, seq, reply, op, arg, cancel),
            Job::SetModel { model, done } => {
                let _ = done.send(set_model(&ctx, &mut rt, &mut map, &model));
            }
            Job::SetEffort { value, done } => {
                let r = rt
                    .set_effort(Some(&value))
                    .map(|_| {
                        rt.cfg()
                            .reasoning
                            .effort
                            .map_or("default", |e| e.as_str())
                            .to_string()
                    })
                    .map_err(|e| RpcError::params(e.to_string()));
                let _ = done.send(r);
            }
            Job::Replay { done } => {
                let mut fresh = Mapper::new(rt.cfg().context_window);
                replay_history(&rt, &ctx.wire, &mut fresh);
                map = fresh;
                let _ = done.send(());
            }
            Job::Close => break,
        }
    }
}

/// `session/set_model`: the next request goes to `model` (a declared boundary). Returns the
/// receipt line.
fn set_model(
    ctx: &Ctx,
    rt: &mut Runtime,
    map: &mut Mapper,
    model: &str,
) -> Result<String, RpcError> {
    let mut ui = AcpSurface::new(
        &ctx.wire,
        &ctx.slot,
        session_of(rt),
        map,
        CancelToken::default(),
    );
    let r = rt.set_model(Some(model), &mut ui).map_err(|e| match e {
        Failure::Usage(m) => RpcError::params(m),
        other => RpcError::internal(other.to_string()),
    });
    drop(ui);
    if r.is_ok() {
        lock(&ctx.slot).model = rt.cfg().model.clone();
    }
    r
}

fn session_of(rt: &Runtime) -> Session {
    Session::at(&rt.session().id, rt.session().dir.clone())
}

fn replay_history(rt: &Runtime, wire: &Wire, map: &mut Mapper) {
    let ledger = read_ledger(rt.session());
    for u in map.replay(rt.history(), ledger.as_ref()) {
        notify(wire, &rt.session().id, u);
    }
}

/// Answers job `seq` and takes it out of the slot in one critical section (see the module
/// docs: nothing of the turn can follow this line).
fn answer(ctx: &Ctx, seq: u64, reply: Responder, result: Result<PromptResult, RpcError>) {
    let mut s = lock(&ctx.slot);
    match result {
        Ok(r) => reply.respond(r),
        Err(e) => reply.fail(&e),
    }
    s.pending.retain(|p| p.seq != seq);
}

fn cancelled(meta: Value) -> Result<PromptResult, RpcError> {
    Ok(PromptResult {
        stop_reason: StopReason::Cancelled,
        usage: None,
        meta: Some(meta),
    })
}

/// What a turn used and cost (its sub-agents' included): the totals after it less those
/// before it. The cost is None when nothing in it had a known price.
fn turn_spend(before: &Totals, after: &Totals) -> (TurnUsage, Option<f64>) {
    let sum = |t: &Totals| {
        let mut u = t.usage;
        u.add(&t.child_usage);
        u
    };
    let (a, b) = (sum(after), sum(before));
    let used = crate::message::Usage {
        reasoning_tokens: 0,
        input_tokens: a.input_tokens.saturating_sub(b.input_tokens),
        cached_tokens: a.cached_tokens.saturating_sub(b.cached_tokens),
        cache_write_tokens: a.cache_write_tokens.saturating_sub(b.cache_write_tokens),
        output_tokens: a.output_tokens.saturating_sub(b.output_tokens),
    };
    let cost = match (after.bill_usd(), before.bill_usd()) {
        (Some(a), b) => Some(crate::cost::usd_json(a - b.unwrap_or(0.0))),
        (None, _) => None,
    };
    (TurnUsage::of(&used), cost)
}

fn run_turn(
    ctx: &Ctx,
    rt: &mut Runtime,
    map: &mut Mapper,
    seq: u64,
    reply: Responder,
    text: &str,
    cancel: CancelToken,
) {
    if cancel.is_cancelled() {
        // A newer prompt (or a cancel) came while this one waited: it never ran.
        let meta = json!({"tern": {"status": Ending::Interrupted, "ran": false}});
        return answer(ctx, seq, reply, cancelled(meta));
    }
    rt.set_cancel(cancel.clone());
    let mode = lock(&ctx.slot).mode;
    // Plan mode is tern's `never` policy for the whole turn; in the other modes the surface
    // decides per command (so a mode change mid-turn applies to the next command).
    rt.set_approval(if mode == Mode::Plan {
        Approval::Never
    } else {
        Approval::Ask
    });
    let before = rt.totals().clone();
    let mut ui = AcpSurface::new(&ctx.wire, &ctx.slot, session_of(rt), map, cancel.clone());
    // ACP v1, prompt turn: exactly one response per prompt, after the turn and any turn a
    // steer that arrived as it ended needed (the runtime's one rule).
    let outcome = rt.run_prompt(text, &mut ui, &mut |_| {});
    drop(ui);
    let (usage, cost) = turn_spend(&before, rt.totals());
    let ended = |stop_reason: StopReason, status: Ending| {
        Ok(PromptResult {
            stop_reason,
            usage: Some(usage.clone()),
            meta: Some(json!({"tern": {"status": status, "costUsd": cost}})),
        })
    };
    let result = match &outcome {
        _ if cancel.is_cancelled() => ended(StopReason::Cancelled, Ending::Interrupted),
        // ACP v1, prompt turn "Stop Reasons": `max_tokens` when the answer hit the token limit.
        Ok(_) if rt.answer_cut() => ended(StopReason::MaxTokens, Ending::Completed),
        Ok(_) => ended(StopReason::EndTurn, Ending::Completed),
        Err(Failure::Interrupted) => ended(StopReason::Cancelled, Ending::Interrupted),
        Err(f @ Failure::MaxTurns(_)) => ended(StopReason::MaxTurnRequests, f.kind()),
        // The spending limit stopped the turn before a request: the client is told why in the
        // thread (what was spent, what the next request could cost) and the turn ends as one
        // that ran out of requests (the closest ACP v1 stop reason; not an error: nothing
        // failed, and the session goes on with a higher limit).
        Err(f @ Failure::Budget(_)) => {
            let mut ui = AcpSurface::new(&ctx.wire, &ctx.slot, session_of(rt), map, cancel);
            ui.message(&format!("tern: {f}"));
            drop(ui);
            ended(StopReason::MaxTurnRequests, f.kind())
        }
        // tern could not finish the turn (the provider is down, the session is held
        // elsewhere): not a refusal by the model but an error carrying tern's reason (ACP v1,
        // prompt turn: an error response ends the turn). The reason goes into the thread first,
        // as an agent message: some clients show an error response only as "the agent failed"
        // (issue 46).
        Err(f) => {
            let mut ui = AcpSurface::new(&ctx.wire, &ctx.slot, session_of(rt), map, cancel);
            ui.message(&format!("tern: {f}"));
            drop(ui);
            Err(RpcError {
                code: super::rpc::INTERNAL_ERROR,
                message: format!("tern: {f}"),
                data: Some(json!({"tern": {"status": f.kind(), "error": f.to_string()}})),
            })
        }
    };
    answer(ctx, seq, reply, result);
}

#[allow(clippy::too_many_arguments)]
fn run_op(
    ctx: &Ctx,
    rt: &mut Runtime,
    map: &mut Mapper,
    seq: u64,
    reply: Responder,
    op: &'static ops::Op,
    arg: Option<String>,
    cancel: CancelToken,
) {
    if cancel.is_cancelled() {
        let meta = json!({"tern": {"status": Ending::Interrupted, "ran": false}});
        return answer(ctx, seq, reply, cancelled(meta));
    }
    rt.set_cancel(cancel.clone());
    let mut ui = AcpSurface::new(&ctx.wire, &ctx.slot, session_of(rt), map, cancel.clone());
    let receipt = {
        let mut target = ops::Target {
            launcher: &ctx.launcher,
            runtime: Some(rt),
            session: None,
            wait: false,
        };
        ops::run(op, arg.as_deref(), &mut target, &mut ui)
    };
    // The REPL's receipt as Markdown: the detail when it worked, `tern: …` when not.
    let text = if receipt.ok {
        markdown(&receipt.detail)
    } else {
        markdown(&format!("tern: {}", receipt.detail))
    };
    ui.message(&text);
    drop(ui);
    if receipt.ok && op.id == ops::OpId::Model {
        lock(&ctx.slot).model = rt.cfg().model.clone();
    }
    let stop = if cancel.is_cancelled() {
        StopReason::Cancelled
    } else {
        StopReason::EndTurn
    };
    answer(
        ctx,
        seq,
        reply,
        Ok(PromptResult {
            stop_reason: stop,
            usage: None,
            meta: Some(json!({"tern": {"receipt": receipt}})),
        }),
    );
}

/// Sends the commands a client may offer for session `id`: tern's, then each of `skills` whose
/// name is not one of them (a prompt `/name …` puts the skill's instructions in the message).
pub fn send_commands(wire: &Wire, id: &str, skills: &[crate::skills::Skill]) {
    let mut available = super::mode::available_commands();
    for s in skills {
        if !available.iter().any(|c| c.name == s.name) {
            available.push(super::protocol::AvailableCommand {
                name: s.name.clone(),
                description: format!("skill: {}", crate::text::cut(&s.description, 200)),
            });
        }
    }
    notify(
        wire,
        id,
        SessionUpdate::AvailableCommandsUpdate {
            available_commands: available,
        },
    );
}
