//! The door of MCP (src/mcp) into the runtime: the session's [`Hub`] with its gate, handed to
//! the commands room, which gives every command the channel to it (MCP calls are commands).
//!
//! The gate runs on the channel's threads while the turn waits for the command that asked, so
//! it holds its own copies of what it needs (the hooks, a handle on the session folder) rather
//! than the runtime: the `PreToolUse` / `PostToolUse` hooks as `mcp__SERVER__TOOL` (a hook that
//! must run in the jail cannot run there, so it blocks the call: the safe answer), one `hook`
//! event per run and one `mcp_call` event per call.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::hooks::{common_input, run_each};
use super::{Runtime, emit_to};
use crate::cancel::CancelToken;
use crate::event::Event;
use crate::hooks::answer::{Permission, Verdict};
use crate::hooks::{HookEvent, Hooks};
use crate::mcp::{Finished, Gate, Hub, Servers, hook_name};
use crate::procs::ProcessGroups;
use crate::store::{Session, files};

/// Characters of a hook's message or a call's error kept in its event.
const EVENT_CHARS: usize = 2000;

/// A session's gate around MCP calls.
struct SessionGate {
    /// Locked: a handle's last `seq` is kept in a `Cell`.
    session: Mutex<Session>,
    id: String,
    transcript: String,
    parent: Option<String>,
    hooks: Arc<Hooks>,
    workspace: PathBuf,
    /// The session's approval policy (the hooks' `permission_mode`; an `ask` from a hook is
    /// taken as yes only where every command runs without asking).
    approval: crate::policy::Approval,
    cancel: CancelToken,
    groups: Arc<ProcessGroups>,
    /// Hooks run one at a time, as in the turn.
    one_at_a_time: Mutex<u64>,
    /// What was written, for the surface once the command ends.
    shown: Arc<Mutex<Vec<crate::event::Envelope>>>,
}

impl SessionGate {
    fn emit(&self, event: Event) {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let env = emit_to(&session, self.parent.as_deref(), &mut super::Quiet, event);
        self.shown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(env);
    }

    /// Runs the hooks of `event` for `name`, each announced as a `hook` event (the turn's one
    /// loop, `hooks::run_each`); a hook that must run in the jail cannot run here, so it blocks.
    fn run(&self, event: HookEvent, name: &str, fields: Map<String, Value>) -> Verdict {
        let mut verdict = Verdict::default();
        let mut handlers = self.hooks.matching(event, Some(name));
        handlers.retain(|h| h.applies(&fields));
        if handlers.is_empty() {
            return verdict;
        }
        let mut n = self.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        *n += 1;
        let mut input = common_input(
            &self.id,
            std::path::Path::new(&self.transcript),
            &self.workspace,
            event,
            self.approval,
        );
        input.insert(
            "tool_use_id".into(),
            Value::from(format!("mcp-{}-{}", self.id, *n)),
        );
        input.extend(fields);
        let input = Value::Object(input).to_string();
        run_each(
            &handlers,
            event,
            &mut verdict,
            &mut super::Quiet,
            &mut |h| {
                // Only an asked jail stops an MCP call's hook: the channel's threads cannot reach
                // the jail, and a default one (the hook names workspace code) runs outside with
                // its trust checked as it starts (README, Hooks: the gap).
                let jail = h.jail_asked == Some(true);
                if h.background && jail {
                    // It decides nothing, so not reaching the jail blocks nothing: said, skipped.
                    self.emit(Event::Hook {
                        event,
                        command: h.command.clone(),
                        exit_code: None,
                        duration_ms: 0,
                        decision: crate::event::HookDecision::Error,
                        message: Some("async hook in the jail: an MCP call cannot reach the jail, so it did not run".into()),
                    });
                    return Ok(None);
                }
                if h.background {
                    let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
                    super::hooks::background(
                        h,
                        event,
                        &input,
                        &self.workspace,
                        self.groups.clone(),
                        &session,
                        self.parent.as_deref(),
                    );
                    return Ok(None);
                }
                if jail {
                    return Err(format!(
                        "the hook `{}` runs in the jail, which an MCP call cannot reach: the call is not run",
                        h.command
                    ));
                }
                Ok(Some(crate::hooks::run::run(
                    &h.command,
                    input.as_bytes(),
                    &self.workspace,
                    h.timeout,
                    &self.cancel,
                    &self.groups,
                )))
            },
            &|_, ev| self.emit(ev),
        );
        verdict
    }
}

impl Gate for SessionGate {
    fn before(&self, server: &str, tool: &str, arguments: &Value) -> Result<Option<Value>, String> {
        let name = hook_name(server, tool);
        let mut f = Map::new();
        f.insert("tool_name".into(), Value::from(name.as_str()));
        f.insert("tool_input".into(), arguments.clone());
        let v = self.run(HookEvent::PreToolUse, &name, f);
        let mut reasons = v.block;
        reasons.extend(v.deny);
        if !reasons.is_empty() {
            return Err(format!(
                "blocked by a PreToolUse hook: {}",
                crate::store::redact::for_model(reasons.join("\n").trim())
            ));
        }
        if let Some(reason) = v.stop {
            return Err(format!("not run: a PreToolUse hook said stop: {reason}"));
        }
        if v.permission == Some(Permission::Ask) && self.approval != crate::policy::Approval::Auto {
            return Err(format!(
                "a PreToolUse hook asks the person to approve {name}, and a command's MCP call cannot ask: not run"
            ));
        }
        Ok(v.updated_input.filter(Value::is_object))
    }

    fn after(&self, call: &Finished<'_>) -> Vec<String> {
        self.emit(Event::McpCall {
            server: call.server.to_string(),
            tool: call.tool.to_string(),
            exit_code: call.exit,
            duration_ms: call.duration.as_millis() as u64,
            error: call
                .error
                .map(|e| crate::text::cut(e.trim_start_matches("tern: "), EVENT_CHARS).to_string()),
        });
        let name = hook_name(call.server, call.tool);
        if self
            .hooks
            .matching(HookEvent::PostToolUse, Some(&name))
            .is_empty()
        {
            return Vec::new();
        }
        let response = match call.result {
            Some(r) => r.clone(),
            None => json!({"isError": true, "error": call.error.unwrap_or("")}),
        };
        let mut f = Map::new();
        f.insert("tool_name".into(), Value::from(name.as_str()));
        f.insert("tool_input".into(), call.arguments.clone());
        f.insert("tool_response".into(), response);
        let v = self.run(HookEvent::PostToolUse, &name, f);
        let mut added = v.block;
        added.extend(v.context);
        added
            .into_iter()
            .map(|a| crate::store::redact::for_model(a.trim()).into_owned())
            .collect()
    }
}

impl Runtime {
    /// The session's MCP hub (None: no server is usable).
    pub fn mcp_hub(&self) -> Option<Arc<Hub>> {
        self.mcp.hub()
    }

    /// The names of the MCP servers this runtime's commands reach.
    pub(crate) fn mcp_names(&self) -> Vec<String> {
        self.mcp.names()
    }

    /// Uses `servers` for this session's commands (the launcher, after the hooks): a hub with
    /// the session's gate, started at the first command; the files the servers run are
    /// read-only to commands. Nothing happens when no server is usable.
    pub(crate) fn set_mcp(&mut self, servers: Servers, opts: crate::mcp::Options) {
        self.commands.protect(servers.covered.clone());
        if servers.is_empty() {
            return;
        }
        let shown = Arc::new(Mutex::new(Vec::new()));
        let gate = SessionGate {
            session: Mutex::new(Session::at(&self.session.id, self.session.dir.clone())),
            id: self.session.id.clone(),
            transcript: self.session.path(files::CONVERSATION).display().to_string(),
            parent: self.lineage.parent.clone(),
            hooks: self.hook_state_hooks(),
            workspace: self.commands.workspace().to_path_buf(),
            approval: self.cfg.approval,
            cancel: self.cancel.clone(),
            groups: self.commands.groups_arc(),
            one_at_a_time: Mutex::new(0),
            shown: shown.clone(),
        };
        let mut opts = opts;
        opts.groups = Some(self.commands.groups_arc());
        // Servers that run workspace code start in jails of their own (issue 42).
        opts.jails = self.commands.server_jails(&self.session).map(Arc::new);
        let hub = Hub::new(servers, opts, Some(self.session.path("mcp"))).with_gate(Box::new(gate));
        self.mcp = crate::mcp::link::Link::new(Arc::new(hub), shown, self.commands.tern_exe());
        // The jail shows this tern's binary (read-only) wherever it lies, so a command's `tern
        // mcp` finds it even where the jail hides its folder (a build under `/tmp`).
        if let Some(exe) = self.commands.tern_exe() {
            self.commands.protect_binary(exe);
        }
    }
}
