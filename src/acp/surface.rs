//! The runtime's [`Surface`] for one ACP turn: each event becomes the `session/update`s
//! [`Mapper`] makes of it; an approval question becomes `session/request_permission`.

use std::sync::Mutex;
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::time::Duration;

use serde_json::json;

use super::mode::{Mode, OPTIONS};
use super::protocol::{
    PermissionOutcome, RequestPermissionParams, RequestPermissionResponse, SessionNotification,
    SessionUpdate, TextBlock, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolKind,
};
use super::rpc::Wire;
use super::slot::{Slot, lock, persist_mode};
use super::updates::Mapper;
use crate::cancel::CancelToken;
use crate::domain::ledger::Ledger;
use crate::event::{Envelope, Event};
use crate::runtime::{Answer, Surface};
use crate::store::{Session, files};

/// How often a wait (a permission question) looks at the cancel flag.
const POLL: Duration = Duration::from_millis(50);

/// Sends one update of session `session`.
pub fn notify(wire: &Wire, session: &str, update: SessionUpdate) {
    wire.notify(
        "session/update",
        SessionNotification {
            session_id: session.to_string(),
            update,
        },
    );
}

/// The ledger as stored now (None when absent or unreadable).
pub fn read_ledger(session: &Session) -> Option<Ledger> {
    session.read_json(files::LEDGER).ok().flatten()
}

/// The surface of one turn or op of an ACP session.
pub struct AcpSurface<'a> {
    wire: &'a Wire,
    slot: &'a Mutex<Slot>,
    session: Session,
    cancel: CancelToken,
    map: &'a mut Mapper,
    /// The ACP id of the tool call in flight (between its `tool_call` and `tool_result`).
    current: Option<String>,
    /// Text streamed since the last `assistant` event.
    streamed: bool,
    /// Any agent text was sent in this turn.
    pub said_anything: bool,
}

impl<'a> AcpSurface<'a> {
    /// A surface for `session`, mapping with `map`, stopping waits when `cancel` is set.
    pub fn new(
        wire: &'a Wire,
        slot: &'a Mutex<Slot>,
        session: Session,
        map: &'a mut Mapper,
        cancel: CancelToken,
    ) -> AcpSurface<'a> {
        AcpSurface {
            wire,
            slot,
            session,
            cancel,
            map,
            current: None,
            streamed: false,
            said_anything: false,
        }
    }

    fn send(&self, update: SessionUpdate) {
        notify(self.wire, &self.session.id, update);
    }

    /// Sends `text` as an agent message chunk (receipts, failures).
    pub fn message(&mut self, text: &str) {
        if !text.is_empty() {
            self.said_anything = true;
            self.send(SessionUpdate::AgentMessageChunk {
                content: TextBlock::new(text),
            });
        }
    }

    fn status(&self, status: ToolCallStatus) {
        if let Some(id) = &self.current {
            self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                tool_call_id: id.clone(),
                status: Some(status),
                ..ToolCallUpdate::default()
            }));
        }
    }

    fn set_mode(&self, mode: Mode) {
        lock(self.slot).mode = mode;
        persist_mode(&self.session, mode);
        self.send(SessionUpdate::CurrentModeUpdate {
            current_mode_id: mode.id().into(),
        });
    }

    /// Asks the client about `command`. A cancel withdraws the question: tern stops waiting
    /// (a late answer is dropped), closes the tool call with a `failed` update saying so, and
    /// the model reads that the turn was cancelled.
    fn ask(&mut self, command: &str) -> Answer {
        let acp_id = self.current.clone().unwrap_or_else(|| "call".into());
        let (rid, rx) = self.wire.request(
            "session/request_permission",
            RequestPermissionParams {
                session_id: self.session.id.clone(),
                tool_call: ToolCallUpdate {
                    tool_call_id: acp_id.clone(),
                    status: Some(ToolCallStatus::Pending),
                    // The title is shown, never interpreted; raw_input keeps the exact bytes.
                    title: Some(crate::render::safe_line(command).into_owned()),
                    kind: Some(ToolKind::Execute),
                    raw_input: Some(json!({"command": command})),
                    ..ToolCallUpdate::default()
                },
                options: OPTIONS.to_vec(),
            },
        );
        let answer = loop {
            if self.cancel.is_cancelled() {
                // A hang-up cancels every turn too: its closed channel tells the two apart.
                if let Err(TryRecvError::Disconnected) = rx.try_recv() {
                    return self.disconnected();
                }
                // ACP v1, prompt turn "Cancellation": the client answers pending permission
                // requests with `cancelled` itself; tern does not wait for that (a cancel tern
                // made itself, for a newer prompt, has no such answer coming).
                self.wire.forget(rid);
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    tool_call_id: acp_id,
                    status: Some(ToolCallStatus::Failed),
                    content: Some(vec![ToolCallContent::text(
                        "not run: the turn was cancelled before the question was answered",
                    )]),
                    ..ToolCallUpdate::default()
                }));
                return Answer::Cancelled;
            }
            match rx.recv_timeout(POLL) {
                Ok(a) => break a,
                Err(RecvTimeoutError::Timeout) => {}
                // stdin closed (or stdout broke) before an answer came.
                Err(RecvTimeoutError::Disconnected) => return self.disconnected(),
            }
        };
        let parsed = answer.map_err(|e| e.message).and_then(|v| {
            serde_json::from_value::<RequestPermissionResponse>(v).map_err(|e| e.to_string())
        });
        match parsed {
            Ok(r) => match r.outcome {
                PermissionOutcome::Cancelled => {
                    // The client says the turn was cancelled.
                    self.cancel.cancel();
                    Answer::Cancelled
                }
                PermissionOutcome::Selected { option_id } => match option_id.as_str() {
                    "allow-once" => Answer::Yes,
                    "allow-always" => {
                        self.set_mode(Mode::Auto);
                        Answer::Yes
                    }
                    "reject-once" => Answer::No,
                    "reject-always" => {
                        self.set_mode(Mode::Plan);
                        Answer::No
                    }
                    other => {
                        crate::errln!(
                            "tern acp: unknown permission option {other:?}; not running the command"
                        );
                        Answer::No
                    }
                },
            },
            Err(e) => {
                crate::errln!(
                    "tern acp: the permission request failed ({e}); not running the command"
                );
                Answer::No
            }
        }
    }

    /// The client went away with the question unanswered: the command does not run, the model
    /// reads that no one declined it, and the turn ends as interrupted (as a hang-up mid-command
    /// does).
    fn disconnected(&mut self) -> Answer {
        crate::errln!(
            "tern acp: the client disconnected before answering a permission request; not running the command"
        );
        self.cancel.cancel();
        Answer::Disconnected
    }
}

impl Surface for AcpSurface<'_> {
    fn event(&mut self, env: &Envelope) {
        let ev = &env.event;
        match ev {
            // The client shows its own prompt.
            Event::TurnStart { .. } => return,
            // Text that streamed was sent already; text a provider sent whole is sent now.
            Event::Assistant { .. } if std::mem::take(&mut self.streamed) => return,
            Event::SessionStart {
                untrusted_hooks: Some(path),
                ..
            } => {
                // Logs go to stderr; the client sees the event through `_tern/events`.
                crate::errln!("tern acp: {}", crate::hooks::untrusted_line(path));
            }
            Event::Hook { .. } | Event::McpCall { .. } => {
                if let Some(line) = crate::output::describe(env) {
                    self.send(SessionUpdate::AgentThoughtChunk {
                        content: TextBlock::new(format!("{line}\n")),
                    });
                }
                return;
            }
            // Mapped to session updates below.
            Event::SessionStart { .. }
            | Event::Assistant { .. }
            | Event::Steer { .. }
            | Event::ToolCall { .. }
            | Event::ToolResult { .. }
            | Event::Usage { .. }
            | Event::PlanState { .. }
            | Event::WorkUpdate { .. }
            | Event::Compaction { .. }
            | Event::Retry { .. }
            | Event::Warning { .. }
            | Event::Door { .. }
            | Event::Boundary { .. }
            | Event::Nudge { .. }
            | Event::Repair { .. }
            | Event::Receipt { .. }
            | Event::TurnInterrupted { .. }
            | Event::AgentStart { .. }
            | Event::AgentEnd { .. }
            | Event::Error { .. }
            | Event::TurnEnd { .. }
            | Event::Result(_) => {}
        }
        let ledger = if matches!(ev, Event::WorkUpdate { .. }) {
            read_ledger(&self.session)
        } else {
            None
        };
        for u in self.map.event(ev, ledger.as_ref()) {
            match &u {
                SessionUpdate::ToolCall(c) => self.current = Some(c.tool_call_id.clone()),
                SessionUpdate::ToolCallUpdate(_) => self.current = None,
                SessionUpdate::AgentMessageChunk { .. } => self.said_anything = true,
                _ => {}
            }
            self.send(u);
        }
    }

    fn text_delta(&mut self, text: &str) {
        if !text.is_empty() {
            self.streamed = true;
            self.said_anything = true;
            self.send(SessionUpdate::AgentMessageChunk {
                content: TextBlock::new(text),
            });
        }
    }

    /// The model's reasoning, where the provider streams it: ACP's `agent_thought_chunk`.
    fn thought_delta(&mut self, text: &str) {
        if !text.is_empty() {
            self.send(SessionUpdate::AgentThoughtChunk {
                content: TextBlock::new(text),
            });
        }
    }

    fn approve(&mut self, command: &str) -> Answer {
        let mode = lock(self.slot).mode;
        let answer = match mode {
            Mode::Auto => Answer::Yes,
            Mode::Plan => Answer::No,
            Mode::Ask => self.ask(command),
        };
        if answer == Answer::Yes {
            self.status(ToolCallStatus::InProgress);
        }
        answer
    }
}
