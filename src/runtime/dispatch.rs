//! Tool dispatch: one tool call in, one tool result out. Errors are results the model reads,
//! never crashes.

use std::time::Instant;

use serde_json::json;

use super::answer::Call;
use super::{Answer, Approval, Runtime, Surface};
use crate::message::Message;
use crate::store::files;
use crate::tools::{bash, work};

/// One tool result before it is stored.
pub(super) struct ToolResult {
    /// What the model reads.
    pub content: String,
    /// Stored as an error result.
    pub is_error: bool,
    /// The person interrupted this tool: the turn ends after storing it.
    pub interrupted: bool,
}

impl ToolResult {
    fn ok(content: impl Into<String>) -> Self {
        ToolResult {
            content: content.into(),
            is_error: false,
            interrupted: false,
        }
    }
    fn err(content: impl Into<String>) -> Self {
        ToolResult {
            content: content.into(),
            is_error: true,
            interrupted: false,
        }
    }
}

impl From<Result<String, String>> for ToolResult {
    fn from(r: Result<String, String>) -> Self {
        match r {
            Ok(s) => ToolResult::ok(s),
            Err(e) => ToolResult::err(e),
        }
    }
}

impl Runtime {
    /// Runs one tool call and emits `tool_call` / `tool_result` events around it.
    pub(super) fn run_tool(&mut self, c: &Call, ui: &mut dyn Surface) -> ToolResult {
        let call = &c.call;
        self.emit(
            ui,
            "tool_call",
            json!({"id": call.id, "name": call.name, "arguments": call.arguments}),
        );
        let started = Instant::now();
        let mut extra = json!({});
        let result = match (&c.bad_arguments, call.name.as_str()) {
            (Some(why), _) => ToolResult::err(why.clone()),
            (None, "bash") => self.tool_bash(&call.arguments, &mut extra, ui),
            (None, "plan_draft") => match call.arguments.get("content").and_then(|v| v.as_str()) {
                Some(content) => super::plan::draft(&self.session, content, ui).into(),
                None => ToolResult::err("Error: plan_draft needs {\"content\": \"…\"} (a string)."),
            },
            (None, "plan_confirm") => {
                let keep = self.inflight_index();
                self.plan_confirm(keep, ui)
                    .map(|m| format!("{m} Track the work with work_update."))
                    .into()
            }
            (None, "plan_cancel") => super::plan::cancel(&self.session, ui).into(),
            (None, "plan_clear") => {
                let keep = self.inflight_index();
                self.plan_clear(keep, ui).into()
            }
            (None, "update_plan") => self.tool_strategy(&call.arguments).into(),
            (None, name) if work::is_work_tool(name) => {
                self.tool_work(name, &call.arguments, ui).into()
            }
            (None, name) => ToolResult::err(format!(
                "Error: there is no tool named {name:?}. The tools are: {}.",
                self.tools
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        let mut fields = json!({
            "id": call.id,
            "name": call.name,
            "is_error": result.is_error,
            "duration_ms": started.elapsed().as_millis() as u64,
            "content": result.content,
        });
        if let (Some(f), Some(e)) = (fields.as_object_mut(), extra.as_object()) {
            f.extend(e.clone());
        }
        self.emit(ui, "tool_result", fields);
        if call.name == "bash"
            && let Err(e) = self.observe_plan_files(ui)
        {
            // The command may have written the draft through $PLAN_DRAFT_FILE; a file that
            // cannot be read now is reported again before the next request.
            crate::errln!("tern: {e}");
        }
        result
    }

    /// Index of the assistant message whose tool calls are running (the last one stored).
    fn inflight_index(&self) -> Option<usize> {
        self.history
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
    }

    fn tool_bash(
        &mut self,
        args: &serde_json::Value,
        extra: &mut serde_json::Value,
        ui: &mut dyn Surface,
    ) -> ToolResult {
        let args = match bash::parse_args(args) {
            Ok(a) => a,
            Err(e) => return ToolResult::err(format!("Error: {e}")),
        };
        match self.cfg.approval {
            Approval::Never => {
                return ToolResult::err(
                    "Error: bash is disabled in this session (--approval never). You can only plan: write the plan with plan_draft.",
                );
            }
            Approval::Ask if !self.approved_always => match ui.approve(&args.command) {
                Answer::Yes => {}
                Answer::Always => self.approved_always = true,
                Answer::No => {
                    return ToolResult::err("Error: the person declined to run this command.");
                }
                Answer::Unavailable => {
                    return ToolResult::err(
                        "Error: not run: commands need the person's approval (--approval ask) and there is no terminal to ask on.",
                    );
                }
            },
            _ => {}
        }
        let env = vec![
            (
                "PLAN_DRAFT_FILE".to_string(),
                self.session.path(files::DRAFT).display().to_string(),
            ),
            (
                "PLAN_FILE".to_string(),
                self.session.path(files::PLAN).display().to_string(),
            ),
            (
                "TERN_SESSION_DIR".to_string(),
                self.session.dir.display().to_string(),
            ),
        ];
        let spill = self.session.path(files::SPILL);
        // Full outputs go to spill/: never through a link planted in its place.
        if let Err(e) = crate::store::fsutil::ensure_dir(&spill) {
            return ToolResult::err(format!("Error: not run: {e}"));
        }
        let req = bash::BashRequest {
            command: &args.command,
            timeout: args.timeout,
            cwd: &self.workspace,
            env: &env,
            env_remove: &self.cfg.secret_env,
            spill_dir: &spill,
            sandbox: None,
        };
        ui.progress("running… (Ctrl-C stops it)");
        match bash::run(&req, &self.cancel) {
            Ok(out) => {
                *extra = json!({
                    "exit_code": out.exit_code,
                    "timed_out": out.timed_out,
                    "interrupted": out.interrupted,
                    "output_bytes": out.output_bytes,
                    "spill": out.spill_path.as_ref().map(|p| p.display().to_string()),
                });
                ToolResult {
                    content: out.content,
                    is_error: out.timed_out || out.interrupted,
                    interrupted: out.interrupted,
                }
            }
            Err(e) => ToolResult::err(format!("Error: could not run bash: {e}")),
        }
    }

    fn tool_work(
        &mut self,
        name: &str,
        args: &serde_json::Value,
        ui: &mut dyn Surface,
    ) -> Result<String, String> {
        let lock = self.session.lock().map_err(|e| format!("Error: {e}"))?;
        let ledger: work::Ledger = self
            .session
            .read_json(files::LEDGER)
            .map_err(|e| {
                format!("Error: the ledger cannot be read ({e}); fix or delete ledger.json")
            })?
            .unwrap_or_default();
        let mut plan = super::plan::plan_file(&self.session).map_err(|e| format!("Error: {e}"))?;
        let applied = work::apply(
            &ledger,
            name,
            args,
            plan.draft_pending(),
            crate::clock::now_unix(),
        )?;
        // Any accepted write counts (the reply names the new revision); `todo_list` changes nothing.
        let changed = applied.ledger != ledger;
        if changed {
            self.session
                .write_json_locked(&lock, files::LEDGER, &applied.ledger)
                .map_err(|e| format!("Error: could not save the ledger: {e}"))?;
        }
        let transition = if applied.started_or_finished {
            let t = plan.work_started();
            if t.is_some() {
                self.session
                    .write_json_locked(&lock, files::PLAN_STATE, &plan)
                    .map_err(|e| format!("Error: {e}"))?;
            }
            t
        } else {
            None
        };
        drop(lock);
        if changed {
            let l = &applied.ledger;
            let active = l
                .in_progress()
                .map(|(_, i)| json!({"id": i.id, "content": i.content}));
            self.emit(
                ui,
                "work_update",
                json!({"settled": l.settled(), "total": l.items.len(), "in_progress": active, "revision": l.revision}),
            );
        }
        if let Some(t) = transition {
            super::plan::emit_transition(&self.session, &t, ui);
        }
        Ok(applied.reply)
    }

    fn tool_strategy(&mut self, args: &serde_json::Value) -> Result<String, String> {
        let (strategy, ack) = work::apply_strategy(args)?;
        let lock = self.session.lock().map_err(|e| format!("Error: {e}"))?;
        self.session
            .write_json_locked(&lock, files::STRATEGY, &strategy)
            .map_err(|e| format!("Error: could not save the strategy: {e}"))?;
        Ok(ack)
    }
}
