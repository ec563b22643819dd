//! The plan lifecycle's file work around the pure state machine in `domain::plan`: drafts, the
//! PlanConfirm boundary (compact → move the draft into `plan.md` → pin the new `system.txt` →
//! event), cancel, and PlanClear. Used by the plan tools and by the `tern plan …` verbs alike;
//! draft and cancel never touch the conversation, so they need no runtime.

use super::{Failure, Runtime, Surface, emit_to, system};
use crate::domain::plan::{PlanFile, Transition};
use crate::event::{CompactTrigger, Event};
use crate::store::{Session, files};
use crate::tools::ToolError;

/// The session's `plan.json` (default when absent).
pub fn plan_file(session: &Session) -> Result<PlanFile, Failure> {
    Ok(session.read_json(files::PLAN_STATE)?.unwrap_or_default())
}

fn draft_text(session: &Session) -> Result<String, Failure> {
    Ok(session.read_text(files::DRAFT)?.unwrap_or_default())
}

/// The `plan_state` event of a transition.
pub fn transition_event(t: &Transition) -> Event {
    Event::PlanState {
        from: t.from,
        to: t.to,
        trigger: t.trigger.to_string(),
        revision: t.revision,
    }
}

/// A file error as a tool error.
fn failed(e: Failure) -> ToolError {
    match e {
        Failure::Interrupted => ToolError::Interrupted("interrupted by the user".into()),
        other => ToolError::Failed(other.to_string()),
    }
}

/// Notices a draft written outside the plan tools (bash, a person, another pane): updates
/// `plan.json` and emits `plan_state` when it changed. Returns the plan state after.
pub fn observe_draft(
    session: &Session,
    parent: Option<&str>,
    ui: &mut dyn Surface,
) -> Result<PlanFile, Failure> {
    let (transition, plan) = {
        let lock = session.lock()?;
        let mut plan = plan_file(session)?;
        let t = plan.observe_draft(&draft_text(session)?);
        if t.is_some() {
            session.write_json_locked(&lock, files::PLAN_STATE, &plan)?;
        }
        (t, plan)
    };
    if let Some(t) = transition {
        emit_to(session, parent, ui, transition_event(&t));
    }
    Ok(plan)
}

/// Replaces the draft with `content` (the `plan_draft` tool, `tern plan draft`).
///
/// Errors: empty content (use cancel to discard a draft); a file that cannot be written.
pub fn draft(
    session: &Session,
    parent: Option<&str>,
    content: &str,
    ui: &mut dyn Surface,
) -> Result<String, ToolError> {
    if content.trim().is_empty() {
        return Err(ToolError::Arguments(
            "the draft content is empty. To discard a draft use plan_cancel.".into(),
        ));
    }
    let (t, plan) = (|| -> Result<(Option<Transition>, PlanFile), Failure> {
        let lock = session.lock()?;
        session.write_text_locked(&lock, files::DRAFT, content)?;
        let mut plan = plan_file(session)?;
        let t = plan.observe_draft(content);
        session.write_json_locked(&lock, files::PLAN_STATE, &plan)?;
        Ok((t, plan))
    })()
    .map_err(failed)?;
    if let Some(t) = &t {
        emit_to(session, parent, ui, transition_event(t));
    }
    Ok(format!(
        "Draft saved (revision {}, {}). It is not in the prompt; confirm it when it is ready.",
        plan.revision,
        plan.state.as_str()
    ))
}

/// Cancels the pending draft: archives it (`archive/draft-NNNN.md`) and empties it; the state
/// returns to idle (or to the locked plan's state).
///
/// Errors (nothing changed): no draft.
pub fn cancel(
    session: &Session,
    parent: Option<&str>,
    ui: &mut dyn Surface,
) -> Result<String, ToolError> {
    let t = (|| -> Result<Result<Transition, String>, Failure> {
        let lock = session.lock()?;
        let mut plan = plan_file(session)?;
        let draft = draft_text(session)?;
        plan.observe_draft(&draft);
        let t = match plan.cancel(&draft) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        session.write_archive_locked(&lock, "draft", "md", &draft)?;
        session.write_text_locked(&lock, files::DRAFT, "")?;
        session.write_json_locked(&lock, files::PLAN_STATE, &plan)?;
        Ok(Ok(t))
    })()
    .map_err(failed)?
    .map_err(ToolError::Refused)?;
    emit_to(session, parent, ui, transition_event(&t));
    Ok(format!(
        "Draft discarded (archived); plan state is {}.",
        t.to.as_str()
    ))
}

/// A failed compaction inside PlanConfirm / PlanClear: an interrupt stays an interrupt.
fn compaction_failed(what: &str, e: Failure) -> ToolError {
    match e {
        Failure::Interrupted => ToolError::Interrupted(format!("plan not {what}: interrupted")),
        other => ToolError::Failed(format!("plan not {what}: {other}")),
    }
}

impl Runtime {
    /// Notices a changed draft, and a `plan.md` edited outside PlanConfirm (refused: the locked
    /// copy in `plan.json` stays in use; reported once per process).
    pub(super) fn observe_plan_files(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        let names = [files::DRAFT, files::PLAN_STATE, files::PLAN];
        let stamps = |s: &Session| names.iter().map(|n| super::stamp(&s.path(n))).collect();
        let before: Vec<_> = stamps(&self.session);
        if before == self.seen.plan {
            return Ok(());
        }
        let plan = observe_draft(&self.session, self.parent.as_deref(), ui)?;
        if !self.seen.warned_plan_md {
            let on_disk = self.session.read_text(files::PLAN)?.unwrap_or_default();
            if on_disk != plan.locked.clone().unwrap_or_default() {
                self.seen.warned_plan_md = true;
                self.emit(
                    ui,
                    Event::warning(
                        "plan.md was edited outside PlanConfirm: tern does not use it; the locked plan in the system prompt is the copy in plan.json. Put changes in the draft and confirm it.",
                    ),
                );
            }
        }
        // The stamps from before reading: a change made meanwhile is seen next time.
        self.seen.plan = before;
        Ok(())
    }

    /// PlanConfirm, exactly in this order: compact (keeping `history[keep_from..]`, the assistant
    /// message that called `plan_confirm`) → move the draft into `plan.md` and empty the draft →
    /// rebuild and pin `system.txt` with `<locked_plan>` → `plan_state` event.
    ///
    /// Errors (nothing changed): no draft; the compaction failed or was interrupted.
    pub fn plan_confirm(
        &mut self,
        keep_from: Option<usize>,
        ui: &mut dyn Surface,
    ) -> Result<String, ToolError> {
        self.observe_plan_files(ui).map_err(failed)?;
        let draft = draft_text(&self.session).map_err(failed)?;
        plan_file(&self.session)
            .map_err(failed)?
            .check_confirm(&draft)
            .map_err(ToolError::Refused)?;
        self.compact(CompactTrigger::PlanConfirm, keep_from, ui)
            .map_err(|e| compaction_failed("confirmed", e))?;
        let t = self.lock_draft(&draft, ui).map_err(failed)?;
        Ok(format!(
            "Plan confirmed and locked into the system prompt (revision {}).",
            t.revision
        ))
    }

    /// Moves `draft` (the text that was confirmed) into `plan.md` and the system prompt
    /// (PlanConfirm after the compaction). A draft rewritten meanwhile, in another pane while the
    /// summary was being written, is not what was confirmed: it stays as the next pending draft.
    fn lock_draft(&mut self, draft: &str, ui: &mut dyn Surface) -> Result<Transition, Failure> {
        let t = {
            let lock = self.session.lock()?;
            let mut plan = plan_file(&self.session)?;
            let now_draft = draft_text(&self.session)?;
            if let Some(old) = &plan.locked {
                self.session
                    .write_archive_locked(&lock, "plan", "md", old)?;
            }
            let base =
                system::without_plan(&self.prefix.system, plan.locked.as_deref()).to_string();
            let new_system = system::with_plan(&base, Some(draft));
            self.session.write_text_locked(&lock, files::PLAN, draft)?;
            if now_draft == draft {
                self.session.write_text_locked(&lock, files::DRAFT, "")?;
            }
            self.session
                .write_text_locked(&lock, files::SYSTEM, &new_system)?;
            let t = plan.confirm(draft, &crate::clock::now_rfc3339());
            self.session
                .write_json_locked(&lock, files::PLAN_STATE, &plan)?;
            self.prefix.system = new_system;
            self.note_disk();
            t
        };
        self.seen.warned_plan_md = false;
        self.emit(ui, transition_event(&t));
        Ok(t)
    }

    /// PlanClear: compact (keeping `history[keep_from..]`) → archive `plan.md` → remove the plan
    /// from the pinned system prompt → `plan_state` event.
    ///
    /// Errors (nothing changed): no locked plan; the compaction failed or was interrupted.
    pub fn plan_clear(
        &mut self,
        keep_from: Option<usize>,
        ui: &mut dyn Surface,
    ) -> Result<String, ToolError> {
        plan_file(&self.session)
            .map_err(failed)?
            .check_clear()
            .map_err(ToolError::Refused)?;
        self.compact(CompactTrigger::PlanClear, keep_from, ui)
            .map_err(|e| compaction_failed("cleared", e))?;
        let t = (|| -> Result<Result<Transition, String>, Failure> {
            let lock = self.session.lock()?;
            let mut plan = plan_file(&self.session)?;
            if let Err(e) = plan.check_clear() {
                return Ok(Err(e));
            }
            let locked = plan.locked.clone().unwrap_or_default();
            self.session
                .write_archive_locked(&lock, "plan", "md", &locked)?;
            let new_system = system::without_plan(&self.prefix.system, Some(&locked)).to_string();
            self.session.write_text_locked(&lock, files::PLAN, "")?;
            self.session
                .write_text_locked(&lock, files::SYSTEM, &new_system)?;
            let t = plan.clear();
            self.session
                .write_json_locked(&lock, files::PLAN_STATE, &plan)?;
            self.prefix.system = new_system;
            self.note_disk();
            Ok(Ok(t))
        })()
        .map_err(failed)?
        .map_err(ToolError::Refused)?;
        self.seen.warned_plan_md = false;
        self.emit(ui, transition_event(&t));
        Ok("Plan cleared: removed from the system prompt and archived.".into())
    }
}
