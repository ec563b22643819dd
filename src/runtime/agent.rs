//! Sub-agents: the runtime side of the `agent` tool (DESIGN.md §9).
//!
//! A child is a session under its parent's folder (`agents/<id>/`), opened through the same
//! launcher and run by the same turn loop on a thread of its own; several `agent` calls of one
//! answer run at once (at most [`super::AgentLimits::parallel`]), and their results are stored in
//! call order. A fork starts from the parent's exact prefix (tools, pinned system bytes, the
//! history before the calling message) plus one fork-state message, and sends the parent's cache
//! key, so its first request reads the parent's cache. A fresh child starts from the parent's
//! base system bytes and one message.
//!
//! Authority only narrows: a child's sandbox and approval are the narrowest of the parent's live
//! settings and its member's ceiling. Its approval questions go to the parent's surface, naming
//! the child. Budgets (turns, wall time, tokens) end it with a terminal result that keeps its
//! partial output; the parent gets a bounded summary and `agent_start` / `agent_end` events,
//! never the child's own events.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::answer::Call;
use super::dispatch::ToolResult;
use super::{Answer, Approval, ChildSpec, Failure, Runtime, Surface, TurnOutcome, system};
use crate::event::{Ending, Envelope, Event};
use crate::message::Message;
use crate::store::files;
use crate::tools::ToolError;
use crate::tools::agent::{AgentArgs, parse_args};

/// Results longer than this many characters are cut to their head and tail.
pub const RESULT_LIMIT_CHARS: usize = 12_000;
/// Characters kept from the start of a cut result.
pub const KEEP_HEAD_CHARS: usize = 4_000;
/// Characters kept from the end of a cut result.
pub const KEEP_TAIL_CHARS: usize = 4_000;
/// The child's full final text, in its folder.
pub const REPORT: &str = "report.md";

/// What a child's thread tells the parent's.
enum ToParent {
    /// An approval question for the person, on the parent's surface.
    Approve {
        index: usize,
        command: String,
        reply: mpsc::Sender<Answer>,
    },
    /// The child's turn ended.
    Done {
        index: usize,
        rt: Box<Runtime>,
        outcome: TurnOutcome,
    },
    /// The child's thread panicked: its runtime is gone. Without this message the parent
    /// would wait for a `Done` that never comes, and not even Ctrl-C would end the wait.
    Lost { index: usize },
}

/// A child's surface: its events are already in its own `events.jsonl` (the parent gets only
/// `agent_start` / `agent_end`); approval questions go to the parent's thread.
struct ChildSurface {
    index: usize,
    tx: mpsc::Sender<ToParent>,
    cancel: crate::cancel::CancelToken,
}

impl Surface for ChildSurface {
    fn event(&mut self, _ev: &Envelope) {}

    fn approve(&mut self, command: &str) -> Answer {
        let (reply, rx) = mpsc::channel();
        if self
            .tx
            .send(ToParent::Approve {
                index: self.index,
                command: command.to_string(),
                reply,
            })
            .is_err()
        {
            return Answer::Unavailable;
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(a) => return a,
                Err(RecvTimeoutError::Timeout) if self.cancel.is_cancelled() => {
                    return Answer::Cancelled;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Answer::Unavailable,
            }
        }
    }
}

/// One call of the group: its child (opened) or why it cannot run.
struct Slot {
    call_id: String,
    child: Result<Child, ToolError>,
}

struct Child {
    id: String,
    dir: std::path::PathBuf,
    wall_time: Duration,
    /// The child's cancel token (a child of the parent's), kept to enforce its wall time.
    token: crate::cancel::CancelToken,
    /// Messages it started with (its own turn comes after).
    seeded: usize,
    rt: Option<Runtime>,
    started: Option<Instant>,
    /// Its own run time, taken when its thread reported: its results are emitted only after
    /// every sibling has ended, so the time then would count theirs.
    took: Option<Duration>,
    timed_out: bool,
    result: Option<(Box<Runtime>, TurnOutcome)>,
}

/// A child's settings: the parent's, narrowed by the member's ceiling and by the call's request
/// (`read_only`); its own budgets.
fn child_config(
    parent: &Runtime,
    member: Option<&crate::fleet::Member>,
    read_only: bool,
) -> super::Config {
    let mut cfg = parent.cfg.clone();
    let limits = parent.cfg.agents;
    // The parent's live approval ("always" from the person made it auto).
    let parent_approval = parent.cfg.approval;
    let m_approval = member.and_then(|m| m.approval).unwrap_or(Approval::Auto);
    cfg.approval = parent_approval.min(m_approval);
    let m_sandbox = member
        .and_then(|m| m.sandbox)
        .unwrap_or(crate::policy::Mode::DangerFullAccess);
    // The call's request: `read_only` narrows the sandbox further; it never widens it.
    let requested = if read_only {
        crate::policy::Mode::ReadOnly
    } else {
        crate::policy::Mode::DangerFullAccess
    };
    cfg.sandbox = parent.cfg.sandbox.min(m_sandbox).min(requested);
    cfg.max_turns = member
        .and_then(|m| m.max_turns)
        .map_or(limits.max_turns, |t| t.min(limits.max_turns))
        .max(1);
    cfg.token_budget = Some(
        member
            .and_then(|m| m.token_budget)
            .map_or(limits.token_budget, |t| t.min(limits.token_budget)),
    );
    cfg
}

/// Starts the opened child of `slot` (number `i`) on a thread of its own that reports to `tx`.
/// Returns whether it runs (a slot without a child, or a thread that cannot start, does not;
/// the latter is recorded in the slot).
fn start_child(slot: &mut Slot, i: usize, tx: &mpsc::Sender<ToParent>) -> bool {
    let Ok(child) = &mut slot.child else {
        return false;
    };
    let Some(mut rt) = child.rt.take() else {
        return false;
    };
    let tx = tx.clone();
    let mut surface = ChildSurface {
        index: i,
        tx: tx.clone(),
        cancel: rt.cancel.clone(),
    };
    child.started = Some(Instant::now());
    let spawned = std::thread::Builder::new()
        .name(format!("agent-{}", child.id))
        .spawn(move || {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let outcome = rt.run_turn("", &mut surface);
                (rt, outcome)
            }));
            let _ = tx.send(match ran {
                Ok((rt, outcome)) => ToParent::Done {
                    index: i,
                    rt: Box::new(rt),
                    outcome,
                },
                Err(_) => ToParent::Lost { index: i },
            });
        });
    match spawned {
        Ok(_) => true,
        Err(e) => {
            slot.child = Err(ToolError::Failed(format!(
                "could not start the sub-agent's thread: {e}"
            )));
            false
        }
    }
}

/// Wall time: a child past it is cancelled (its command killed, its request dropped); its
/// siblings go on.
fn enforce_wall_time(slots: &mut [Slot]) {
    for s in slots.iter_mut() {
        if let Ok(c) = &mut s.child
            && c.result.is_none()
            && !c.timed_out
            && c.started.is_some_and(|t| t.elapsed() >= c.wall_time)
        {
            c.timed_out = true;
            c.token.cancel_for_budget(format!(
                "its wall time of {} s ran out",
                c.wall_time.as_secs()
            ));
        }
    }
}

/// The Fleet member a call names and its own route (None: the parent's), from the spawner.
fn member_route(
    spawner: &dyn super::Spawner,
    name: Option<&str>,
) -> Result<
    (
        Option<crate::fleet::Member>,
        Option<crate::config::ProviderChoice>,
    ),
    ToolError,
> {
    let Some(name) = name else {
        return Ok((None, None));
    };
    let fleet = spawner.fleet().map_err(|e| ToolError::Failed(e.into()))?;
    let m = fleet
        .select(name)
        .map_err(|e| ToolError::Arguments(e.into()))?
        .clone();
    let route = m
        .route(spawner.env())
        .map_err(|e| ToolError::Refused(format!("{e}; the members are: {}", fleet.listing())))?;
    Ok((Some(m), route))
}

/// The first message of a fork: the fork state (the ledger body exactly as the work-state tail
/// renders it, and a line on the locked plan), then the task.
fn fork_message(parent: &Runtime, task: &str) -> String {
    let ledger: Option<crate::domain::ledger::Ledger> =
        parent.session.read_json(files::LEDGER).ok().flatten();
    let work = ledger
        .as_ref()
        .and_then(crate::render::work_state::body)
        .unwrap_or_else(|| "(empty)".into());
    let plan = match super::plan::plan_file(&parent.session).map(|p| p.locked.is_some()) {
        Ok(true) => "The locked plan in the system prompt applies.",
        _ => "No plan is locked.",
    };
    format!(
        "<tern:fork_state>\nYou are a sub-agent forked from the conversation above to do one task; the parent resumes when you answer.\n{plan}\nThe parent's To-do:\n{work}\n</tern:fork_state>\n\nTask: {task}"
    )
}

/// `text` cut to its first and last characters when over [`RESULT_LIMIT_CHARS`], on character
/// boundaries, with a marker naming the full report.
pub fn bound(text: &str, report: &std::path::Path) -> String {
    let n = text.chars().count();
    if n <= RESULT_LIMIT_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(KEEP_HEAD_CHARS).collect();
    let tail: String = text.chars().skip(n - KEEP_TAIL_CHARS).collect();
    format!(
        "{head}\n[… {} characters cut; the whole report is in {}]\n{tail}",
        n - KEEP_HEAD_CHARS - KEEP_TAIL_CHARS,
        report.display()
    )
}

/// The assistant texts of a child's own turn (after its seed), joined: its partial output when a
/// budget or an interrupt ended it.
fn partial_output(rt: &Runtime, seeded: usize) -> String {
    rt.history()
        .iter()
        .skip(seeded)
        .filter_map(|m| match m {
            Message::Assistant { text, .. } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

impl Runtime {
    /// Runs a group of `agent` calls of the stored assistant message at `at` (they run at once)
    /// and returns their results in call order. Each call's `tool_call` event is emitted here.
    pub(super) fn run_agents(
        &mut self,
        calls: &[&Call],
        at: usize,
        ui: &mut dyn Surface,
    ) -> Vec<ToolResult> {
        let started = Instant::now();
        let mut slots: Vec<Slot> = calls
            .iter()
            .map(|c| {
                self.emit(
                    ui,
                    Event::ToolCall {
                        id: c.call.id.clone(),
                        name: c.call.name.clone(),
                        arguments: c.call.arguments.clone(),
                    },
                );
                let child = match &c.bad_arguments {
                    Some(why) => Err(ToolError::Arguments(why.clone())),
                    None => parse_args(&c.call.arguments)
                        .and_then(|a| self.open_child(&c.call.id, &a, at, ui)),
                };
                Slot {
                    call_id: c.call.id.clone(),
                    child,
                }
            })
            .collect();
        self.drive(&mut slots, ui);
        let results = slots
            .into_iter()
            .map(|s| self.child_result(s, ui))
            .collect::<Vec<_>>();
        let ms = started.elapsed().as_millis() as u64;
        results
            .into_iter()
            .map(|mut r| {
                r.duration_ms = ms;
                r
            })
            .collect()
    }

    /// Checks a call against the limits and the Fleet, then opens its child session (durable
    /// before it runs: its folder and `meta.json`, naming this call, exist; `agent_start` is in
    /// the parent's events).
    fn open_child(
        &mut self,
        call_id: &str,
        a: &AgentArgs,
        at: usize,
        ui: &mut dyn Surface,
    ) -> Result<Child, ToolError> {
        if self.lineage.depth >= self.cfg.agents.depth {
            return Err(ToolError::Refused(format!(
                "depth limit reached: do it yourself (sub-agents nest at most {} deep)",
                self.cfg.agents.depth
            )));
        }
        let spawner = self
            .lineage
            .spawner
            .clone()
            .ok_or_else(|| ToolError::Refused("sub-agents are not available here".into()))?;
        let (member, route) = member_route(spawner.as_ref(), a.member.as_deref())?;
        // A fork reads the parent's cached prefix: only the same wire format, server and model
        // can.
        if a.fork
            && let Some(r) = &route
        {
            self.same_route(r, member.as_ref())?;
        }
        let mut cfg = child_config(self, member.as_ref(), a.read_only);
        let instructions = member
            .as_ref()
            .and_then(|m| m.instructions.clone())
            .filter(|i| !i.trim().is_empty());
        let (system, history) = self.child_start(a, at, &cfg, instructions.as_deref());
        // A fork keeps the parent's sandbox line (its system bytes are the parent's); a narrower
        // sandbox is still enforced on every command.
        let wall_time = member
            .as_ref()
            .and_then(|m| m.wall_time_s)
            .map(Duration::from_secs)
            .map_or(self.cfg.agents.wall_time, |w| {
                w.min(self.cfg.agents.wall_time)
            });
        // A child's retries fit its wall time: a stalled server never holds the parent (and a
        // finished sibling) for the default five minutes of retries.
        cfg.retry.max_total = cfg.retry.max_total.min(wall_time);
        let spec = ChildSpec {
            title: crate::text::title(&a.task),
            system,
            history,
            cfg,
            route,
            parent_call: call_id.to_string(),
            member: member.as_ref().map(|m| m.id.clone()),
            fork: a.fork,
        };
        let rt = spawner
            .child(self, spec, &mut super::Quiet)
            .map_err(|e| ToolError::Failed(format!("could not start the sub-agent: {e}")))?;
        self.emit(
            ui,
            Event::AgentStart {
                call_id: call_id.to_string(),
                child: rt.session.id.clone(),
                member: member.as_ref().map(|m| m.id.clone()),
                fork: a.fork,
                model: rt.cfg.model.clone(),
                sandbox: rt.cfg.sandbox,
                approval: rt.cfg.approval,
            },
        );
        Ok(Child {
            id: rt.session.id.clone(),
            dir: rt.session.dir.clone(),
            wall_time,
            token: rt.cancel.clone(),
            seeded: rt.history().len(),
            rt: Some(rt),
            started: None,
            took: None,
            timed_out: false,
            result: None,
        })
    }

    /// A fork's route must be this runtime's (the same wire format, server and model): each
    /// difference is named.
    fn same_route(
        &self,
        r: &crate::config::ProviderChoice,
        member: Option<&crate::fleet::Member>,
    ) -> Result<(), ToolError> {
        let provider = crate::provider::Wire::from(r.kind);
        let display_url = crate::provider::http::display_url;
        let mut differs = Vec::new();
        if provider != self.provider_name() {
            differs.push(format!(
                "provider {provider} (the parent's: {})",
                self.provider_name()
            ));
        }
        if r.base_url != self.cfg.base_url {
            differs.push(format!(
                "base URL {} (the parent's: {})",
                display_url(&r.base_url),
                display_url(&self.cfg.base_url)
            ));
        }
        if r.model != self.cfg.model {
            differs.push(format!(
                "model {} (the parent's: {})",
                r.model, self.cfg.model
            ));
        }
        if differs.is_empty() {
            return Ok(());
        }
        Err(ToolError::Refused(format!(
            "a fork runs on the parent's route and reads its cache; member {} differs in {}. Call it without fork",
            member.map_or("", |m| m.id.as_str()),
            differs.join(", ")
        )))
    }

    /// The child's first prefix: a fork's is this runtime's exact system bytes and history
    /// before the calling message, then the fork state; a fresh child's is the base system
    /// prompt with its own sandbox line and one message (the member's instructions, the task).
    fn child_start(
        &self,
        a: &AgentArgs,
        at: usize,
        cfg: &super::Config,
        instructions: Option<&str>,
    ) -> (String, Vec<Message>) {
        if a.fork {
            let mut h = self.prefix.history[..at.min(self.prefix.history.len())].to_vec();
            h.push(Message::user(fork_message(self, &a.task)));
            return (self.prefix.system.clone(), h);
        }
        let base = system::strip_plan(&self.prefix.system);
        let base = system::with_sandbox(
            base,
            &system::sandbox_lines(cfg.sandbox, cfg.no_network, &self.mcp_names()),
        );
        let text = match instructions {
            Some(i) => format!("{}\n\nTask: {}", i.trim(), a.task),
            None => format!("Task: {}", a.task),
        };
        (base, vec![Message::user(text)])
    }

    /// Runs the opened children, at most `parallel` at once, answering their approval questions
    /// on this surface and cancelling any past its wall time, until every one has ended.
    fn drive(&mut self, slots: &mut [Slot], ui: &mut dyn Surface) {
        let (tx, rx) = mpsc::channel::<ToParent>();
        let parallel = self.cfg.agents.parallel.max(1);
        let mut running = 0usize;
        let mut next = 0usize;
        loop {
            // Start children while there is room.
            while running < parallel && next < slots.len() {
                next += 1;
                if start_child(&mut slots[next - 1], next - 1, &tx) {
                    running += 1;
                }
            }
            if running == 0 && next >= slots.len() {
                break;
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(ToParent::Approve {
                    index,
                    command,
                    reply,
                }) => {
                    let who = match &slots[index].child {
                        Ok(c) => c.id.clone(),
                        Err(_) => String::new(),
                    };
                    let answer = ui.approve(&format!("[sub-agent {who}] {command}"));
                    let _ = reply.send(answer);
                }
                Ok(ToParent::Done { index, rt, outcome }) => {
                    running = running.saturating_sub(1);
                    if let Ok(c) = &mut slots[index].child {
                        c.took = c.started.map(|t| t.elapsed());
                        c.result = Some((rt, outcome));
                    }
                }
                Ok(ToParent::Lost { index }) => {
                    running = running.saturating_sub(1);
                    if let Ok(c) = &slots[index].child {
                        // Its turn never reached its end: the record says how it ended.
                        let s = crate::store::Session::at(&c.id, c.dir.clone());
                        let _ = s.update_meta(|m| {
                            m.status = crate::store::Status::Ended(Ending::Failed);
                            m.pid = None;
                        });
                        slots[index].child = Err(ToolError::Failed(format!(
                            "the sub-agent {} stopped on an internal error (a panic); what it did so far is in {}",
                            c.id,
                            c.dir.display()
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            enforce_wall_time(slots);
        }
    }

    /// The tool result of one call: the child's final text (or partial output), its status,
    /// session id and usage, bounded; `agent_end` is emitted.
    fn child_result(&mut self, slot: Slot, ui: &mut dyn Surface) -> ToolResult {
        let child = match slot.child {
            Ok(c) => c,
            Err(e) => return Err(e).into(),
        };
        let Some((rt, outcome)) = child.result else {
            return Err(ToolError::Failed(format!(
                "the sub-agent {} ended without a result",
                child.id
            )))
            .into();
        };
        let seeded = child.seeded;
        let status = match &outcome {
            Ok(_) => Ending::Completed,
            // Cut by its wall time before its turn could say so itself.
            Err(Failure::Interrupted) if child.timed_out => Ending::BudgetExhausted,
            Err(f) => f.kind(),
        };
        let partial = || partial_output(&rt, seeded);
        let text = match &outcome {
            Ok(t) => t.clone(),
            Err(Failure::Interrupted) if child.timed_out => format!(
                "{}\n[stopped: its wall time of {} s ran out]",
                partial(),
                child.wall_time.as_secs()
            ),
            Err(Failure::Interrupted) => format!("{}\n[interrupted]", partial()),
            // A child's turn budget is `--agent-max-turns` or its member's `max_turns`, not the
            // parent's `--max-turns` that the failure's own text names.
            Err(Failure::MaxTurns(n)) => format!(
                "{}\n[stopped: its turn budget of {n} model request{} ran out]",
                partial(),
                if *n == 1 { "" } else { "s" }
            ),
            Err(f @ Failure::Budget(_)) => format!("{}\n[stopped: {f}]", partial()),
            // Its retries fit its wall time: a wait that would pass it was not started.
            Err(f @ Failure::ProviderUnavailable(_)) => format!(
                "{}\n[failed: {f}; a sub-agent's retries stop within its wall time of {} s]",
                partial(),
                child.wall_time.as_secs()
            ),
            Err(f) => format!("{}\n[failed: {f}]", partial()),
        };
        let text = text.trim().to_string();
        let report = child.dir.join(REPORT);
        if let Ok(lock) = rt.session.lock() {
            let _ = rt
                .session
                .write_text_locked(&lock, REPORT, &format!("{text}\n"));
        }
        let t = rt.totals();
        let u = t.usage;
        // The parent's result gives its children's total: theirs and their own children's.
        let mine = &mut self.meter.totals;
        mine.child_requests = mine
            .child_requests
            .saturating_add(t.requests)
            .saturating_add(t.child_requests);
        mine.child_usage.add(&u);
        mine.child_usage.add(&t.child_usage);
        mine.child_cost_usd += t.cost_usd + t.child_cost_usd;
        mine.child_unpriced += t.unpriced + t.child_unpriced;
        self.meter.unsaved.children_cost_usd += t.cost_usd + t.child_cost_usd;
        self.emit(
            ui,
            Event::AgentEnd {
                call_id: slot.call_id.clone(),
                child: child.id.clone(),
                status,
                requests: t.requests,
                usage: u,
                duration_ms: child.took.map_or(0, |d| d.as_millis() as u64),
                cost_usd: t.bill_usd().map(crate::cost::usd_json),
            },
        );
        let head = format!(
            "[sub-agent {}: {}; {}; tokens in {} (cached {}), out {}]",
            child.id,
            status.as_str(),
            requests_text(t.requests),
            u.input_tokens,
            u.cached_tokens,
            u.output_tokens
        );
        let body = bound(&text, &report);
        let content = if body.is_empty() {
            head
        } else {
            format!("{head}\n{body}")
        };
        ToolResult {
            content,
            is_error: status != Ending::Completed,
            interrupted: false,
            bash: None,
            streams: None,
            duration_ms: 0,
        }
    }
}

/// The result of the parent's `agent` call `call_id` that tern stopped before recording, read
/// from the child's own record under `agents_dir` (its `meta.json`, `report.md`,
/// `conversation.jsonl`), and whether it is an error:
/// - completed: its final answer, bounded as a live result is, with a note that tern restarted
///   (not an error: the work is done, so the model need not redo it);
/// - running when tern stopped (marked interrupted at start-up), interrupted or failed: that
///   status, naming the child and where its partial work is;
/// - no child folder, or one that never ran a turn: it never started, so nothing ran.
///
/// Every path it names exists.
pub fn repaired_result(agents_dir: &std::path::Path, call_id: &str) -> (String, bool) {
    use crate::store::Status;
    let Some((child, dir)) = child_of_call(agents_dir, call_id) else {
        return (
            "Error: no result was recorded: tern stopped before the sub-agent for this call started (no session was made for it), so nothing of its task ran. Call agent again if it still needs doing.".to_string(),
            true,
        );
    };
    let session = crate::store::Session::at(&child, dir.clone());
    let Ok(meta) = session.read_meta() else {
        return (super::repair::LOST_RESULT.to_string(), true);
    };
    let (u, requests) = (meta.usage, meta.turns);
    let head = |status: &str| {
        format!(
            "[sub-agent {child}: {status}; {}; tokens in {} (cached {}), out {}]",
            requests_text(requests),
            u.input_tokens,
            u.cached_tokens,
            u.output_tokens
        )
    };
    let conversation = dir.join(files::CONVERSATION);
    match meta.status {
        Status::Ended(Ending::Completed) => {
            let report = dir.join(REPORT);
            let answer = match session.read_text(REPORT) {
                Ok(Some(t)) if !t.trim().is_empty() => t.trim().to_string(),
                _ => session
                    .read_conversation()
                    .ok()
                    .and_then(|r| {
                        r.items.into_iter().rev().find_map(|m| match m {
                            Message::Assistant { text, .. } if !text.trim().is_empty() => {
                                Some(text.trim().to_string())
                            }
                            _ => None,
                        })
                    })
                    .unwrap_or_default(),
            };
            let whole = if report.is_file() {
                report
            } else {
                conversation
            };
            (
                format!(
                    "{}
[tern restarted before this result was recorded; this is the sub-agent's final answer, read from its session record]
{}",
                    head(Ending::Completed.as_str()),
                    bound(&answer, &whole)
                ),
                false,
            )
        }
        Status::Idle if meta.turns == 0 => (
            format!(
                "Error: no result was recorded: tern stopped before the sub-agent session {child} ran its first request, so nothing of its task ran. Call agent again if it still needs doing."
            ),
            true,
        ),
        status => {
            let how = match status {
                Status::Running | Status::Ended(Ending::Interrupted) => format!(
                    "tern stopped while the sub-agent session {child} was running; it was marked interrupted"
                ),
                Status::Ended(
                    Ending::Failed
                    | Ending::MaxTurns
                    | Ending::BudgetExhausted
                    | Ending::ProviderUnavailable,
                ) => format!(
                    "the sub-agent session {child} ended ({}), and tern stopped before its result was recorded",
                    status.as_str()
                ),
                Status::Idle | Status::Ended(Ending::Completed) => format!(
                    "tern stopped before the result of the sub-agent session {child} was recorded"
                ),
            };
            let report = dir.join(REPORT);
            let where_ = if report.is_file() {
                format!("{} and {}", conversation.display(), report.display())
            } else {
                conversation.display().to_string()
            };
            (
                format!(
                    "{}
Error: no result was recorded: {how}. What it did so far is in {where_}; check the state before retrying.",
                    head(status.as_str())
                ),
                true,
            )
        }
    }
}

/// The child session that the parent's call `call_id` started, under `agents_dir` (its id and
/// folder), read from each child's `meta.json`.
pub fn child_of_call(
    agents_dir: &std::path::Path,
    call_id: &str,
) -> Option<(String, std::path::PathBuf)> {
    for (id, dir) in crate::store::session::child_dirs(agents_dir) {
        let s = crate::store::Session::at(&id, dir);
        if let Ok(m) = s.read_meta()
            && m.parent.as_ref().is_some_and(|p| p.call_id == call_id)
        {
            return Some((s.id, s.dir));
        }
    }
    None
}

/// Marks every child of the session folder `dir` whose turn was running when its process died
/// as interrupted (its lease is free), recursively. Returns the ids marked.
pub fn mark_dead_children(dir: &std::path::Path) -> Vec<String> {
    let mut marked = Vec::new();
    for (id, child) in crate::store::session::child_dirs(&dir.join(files::AGENTS)) {
        let s = crate::store::Session::at(&id, child);
        marked.extend(mark_dead_children(&s.dir));
        if crate::store::held_elsewhere(&s).is_some() {
            continue;
        }
        let Ok(lock) = s.lock() else { continue };
        if let Ok(mut m) = s.read_meta()
            && m.status == crate::store::Status::Running
        {
            m.status = crate::store::Status::Ended(Ending::Interrupted);
            m.pid = None;
            m.updated_at = crate::clock::now_rfc3339();
            if s.write_meta_locked(&lock, &m).is_ok() {
                marked.push(s.id.clone());
            }
        }
    }
    marked
}

/// `1 request`, `N requests`: the count in a sub-agent result's head line.
fn requests_text(n: u64) -> String {
    if n == 1 {
        "1 request".to_string()
    } else {
        format!("{n} requests")
    }
}
