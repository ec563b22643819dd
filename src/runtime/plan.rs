//! The plan lifecycle's file work around the pure state machine in `domain::plan`: drafts, the
//! PlanConfirm boundary (compact → move the draft into `plan.md` → pin the new `system.txt` →
//! event), cancel, and PlanClear. Used by the plan tools and by the `tern plan …` verbs alike;
//! draft and cancel never touch the conversation, so they need no runtime.

use super::{Failure, Runtime, Surface, emit_to, system};
use crate::domain::DomainError;
use crate::domain::plan::{Draft, PlanFile, Transition};
use crate::event::{CompactTrigger, Event};
use crate::store::{Session, files};
use crate::tools::ToolError;

/// The session's `plan.json` (default when absent).
pub fn plan_file(session: &Session) -> Result<PlanFile, Failure> {
    Ok(session.read_json(files::PLAN_STATE)?.unwrap_or_default())
}

/// The session's draft as read: at most [`Draft::READ_LIMIT`] bytes of `$PLAN_DRAFT_FILE` and its
/// size (an empty draft when absent), so a huge draft never costs its size in memory.
pub fn read_draft(session: &Session) -> Result<Draft, Failure> {
    let path = session.path(files::DRAFT);
    Ok(crate::store::fsutil::read_prefix(&path, Draft::READ_LIMIT)?
        .map(|(bytes, size)| Draft { bytes, size })
        .unwrap_or_default())
}

/// Archives a pending draft and empties it, the caller holding the lock. A text draft is written
/// to `archive/draft-NNNN.md` (redacted, as every archive); one over the limit or not UTF-8 is
/// moved there whole (never read into memory).
fn archive_draft(
    session: &Session,
    lock: &crate::store::lock::SessionLock,
    draft: &Draft,
) -> Result<(), Failure> {
    match draft.text() {
        Some(text) => {
            session.write_archive_locked(lock, "draft", "md", text)?;
        }
        None => {
            crate::store::fsutil::ensure_dir(&session.path(files::ARCHIVE))?;
            let to = session.next_archive_path("draft", "md")?;
            crate::store::fsutil::rename(&session.path(files::DRAFT), &to)?;
        }
    }
    session.write_text_locked(lock, files::DRAFT, "")?;
    Ok(())
}

/// The `plan_state` event of a transition.
pub fn transition_event(t: &Transition) -> Event {
    Event::PlanState {
        from: t.from,
        to: t.to,
        trigger: t.trigger,
        revision: t.revision,
    }
}

/// A file error as a tool error.
fn failed(e: Failure) -> ToolError {
    match e {
        Failure::Interrupted => ToolError::Interrupted(crate::cancel::who_stopped().into()),
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
    let (transition, plan, unlinked) = {
        let lock = session.lock()?;
        let unlinked = unlink_odd_draft(session)?;
        let mut plan = plan_file(session)?;
        let t = plan.observe(&read_draft(session)?);
        if t.is_some() {
            session.write_json_locked(&lock, files::PLAN_STATE, &plan)?;
        }
        (t, plan, unlinked)
    };
    if let Some(what) = unlinked {
        emit_to(
            session,
            parent,
            ui,
            Event::warning(format!(
                "the plan draft ($PLAN_DRAFT_FILE) was {what}, not a file: tern never reads or writes through one in its state folder, so it took it away (the draft is now empty). Write the draft as a plain file."
            )),
        );
    }
    if let Some(t) = transition {
        emit_to(session, parent, ui, transition_event(&t));
    }
    Ok(plan)
}

/// Takes away a draft that is not a plain file (a command may replace `$PLAN_DRAFT_FILE` with
/// a symbolic link, a folder or a FIFO; every later read would refuse it and fail the turn): a
/// link or special file is removed (never its target), a folder moved to `archive/`. Returns
/// what it was; None for a plain file or none. The caller holds the session lock.
fn unlink_odd_draft(session: &Session) -> Result<Option<&'static str>, Failure> {
    let path = session.path(files::DRAFT);
    let Ok(m) = std::fs::symlink_metadata(&path) else {
        return Ok(None);
    };
    let ft = m.file_type();
    if ft.is_file() {
        return Ok(None);
    }
    if ft.is_dir() {
        crate::store::fsutil::ensure_dir(&session.path(files::ARCHIVE))?;
        let to = session.next_archive_path("draft-folder", "d")?;
        crate::store::fsutil::rename(&path, &to)?;
        return Ok(Some("a folder (moved to the session's archive/)"));
    }
    crate::store::fsutil::remove_file(&path)?;
    Ok(Some(if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }))
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
    check_draft(content)?;
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

/// Refuses an empty draft, and one over the plan limit (refused at once, not at the confirm: a
/// draft that can never be locked is wasted work).
fn check_draft(content: &str) -> Result<(), ToolError> {
    if content.trim().is_empty() {
        return Err(ToolError::Arguments(
            "the draft content is empty. To discard a draft use plan_cancel.".into(),
        ));
    }
    if content.len() > crate::domain::plan::MAX_PLAN_BYTES {
        return Err(ToolError::Arguments(format!(
            "the draft is {} bytes; a plan may be at most {} bytes (it goes into every request once confirmed). Nothing was saved: write a shorter draft.",
            content.len(),
            crate::domain::plan::MAX_PLAN_BYTES
        )));
    }
    Ok(())
}

/// `tern plan draft` / `plan cancel` while another process holds the session (a turn running
/// in another pane, or the verb run by that turn's own command): only the draft is written
/// (`content`; `None` archives the draft and empties it). `plan.json` is the holder's, which
/// notices the draft before its next request and records the plan state itself; written here,
/// its sandbox guard would take the change for a command's and undo it.
///
/// Errors: an empty or oversized draft; nothing to cancel; the files.
pub fn draft_for_holder(session: &Session, content: Option<&str>) -> Result<String, ToolError> {
    if let Some(c) = content {
        check_draft(c)?;
    }
    (|| -> Result<Result<String, DomainError>, Failure> {
        let lock = session.lock()?;
        let Some(c) = content else {
            let draft = read_draft(session)?;
            if draft.is_blank() {
                return Ok(Err(DomainError::Refused("no plan draft to cancel.".into())));
            }
            archive_draft(session, &lock, &draft)?;
            return Ok(Ok("Draft discarded (archived); the tern running this session records it before its next request.".into()));
        };
        session.write_text_locked(&lock, files::DRAFT, c)?;
        Ok(Ok(
            "Draft saved; the tern running this session records it before its next request."
                .into(),
        ))
    })()
    .map_err(failed)?
    .map_err(|e| ToolError::Refused(e.into()))
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
    let t = (|| -> Result<Result<Transition, DomainError>, Failure> {
        let lock = session.lock()?;
        let mut plan = plan_file(session)?;
        let draft = read_draft(session)?;
        plan.observe(&draft);
        let t = match plan.cancel(&draft) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        archive_draft(session, &lock, &draft)?;
        session.write_json_locked(&lock, files::PLAN_STATE, &plan)?;
        Ok(Ok(t))
    })()
    .map_err(failed)?
    .map_err(|e| ToolError::Refused(e.into()))?;
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
        let stamps = |s: &Session| {
            names
                .iter()
                .map(|n| crate::store::fsutil::stamp(&s.path(n)))
                .collect()
        };
        let before: Vec<_> = stamps(&self.session);
        if before == self.seen.plan {
            return Ok(());
        }
        let plan = observe_draft(&self.session, self.lineage.parent.as_deref(), ui)?;
        // It may have written plan.json.
        self.guard_accept(&self.session.path(files::PLAN_STATE));
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
        let draft = read_draft(&self.session).map_err(failed)?;
        let draft = plan_file(&self.session)
            .map_err(failed)?
            .check_confirm(&draft)
            .map_err(|e| ToolError::Refused(e.into()))?
            .to_string();
        self.compact(CompactTrigger::PlanConfirm, keep_from, ui)
            .map_err(|e| compaction_failed("confirmed", e))?;
        let t = self.lock_draft(&draft, ui).map_err(failed)?;
        Ok(format!(
            "Plan confirmed and locked into the system prompt (revision {}).",
            t.revision
        ))
    }

    /// Moves `draft` (the text that was confirmed) into `plan.md` and the system prompt
    /// (PlanConfirm after the compaction). One commit point: `plan.json` (the record of the
    /// lifecycle) is written first; `plan.md`, the emptied draft and `system.txt` are derived from
    /// it, and [`reconcile`] rebuilds them at the next start if a crash came in between. A draft
    /// rewritten meanwhile, in another pane while the summary was being written, is not what was
    /// confirmed: it stays as the next pending draft.
    fn lock_draft(&mut self, draft: &str, ui: &mut dyn Surface) -> Result<Transition, Failure> {
        let t = {
            let lock = self.session.lock()?;
            let mut plan = plan_file(&self.session)?;
            let now_draft = read_draft(&self.session)?;
            if let Some(old) = &plan.locked {
                self.session
                    .write_archive_locked(&lock, "plan", "md", old)?;
            }
            let new_system = system::with_plan(
                &self.fresh_skills(system::strip_plan(&self.prefix.system)),
                Some(draft),
            );
            let t = plan.confirm(draft, &crate::clock::now_rfc3339());
            self.session
                .write_json_locked(&lock, files::PLAN_STATE, &plan)?;
            // Derived from the record above.
            self.session.write_text_locked(&lock, files::PLAN, draft)?;
            if now_draft.text() == Some(draft) {
                self.session.write_text_locked(&lock, files::DRAFT, "")?;
            }
            self.session
                .write_text_locked(&lock, files::SYSTEM, &new_system)?;
            self.prefix.system = new_system;
            self.note_disk();
            t
        };
        self.seen.warned_plan_md = false;
        self.emit(ui, transition_event(&t));
        Ok(t)
    }

    /// `base` with the skills catalog read now (a deliberate boundary: PlanConfirm, PlanClear;
    /// the only moment a skill added, changed or removed mid-session reaches the prompt, so no
    /// request between boundaries changes its prefix). Unchanged without skill folders.
    fn fresh_skills(&self, base: &str) -> String {
        match &self.cfg.skills {
            Some(roots) => {
                let found = crate::skills::discover(roots);
                let budget = crate::skills::budget_for(self.cfg.context_window);
                system::with_skills(base, &crate::skills::catalog(&found.skills, budget).text)
            }
            None => base.to_string(),
        }
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
            .map_err(|e| ToolError::Refused(e.into()))?;
        self.compact(CompactTrigger::PlanClear, keep_from, ui)
            .map_err(|e| compaction_failed("cleared", e))?;
        let t = (|| -> Result<Result<Transition, DomainError>, Failure> {
            let lock = self.session.lock()?;
            let mut plan = plan_file(&self.session)?;
            if let Err(e) = plan.check_clear() {
                return Ok(Err(e));
            }
            let locked = plan.locked.clone().unwrap_or_default();
            self.session
                .write_archive_locked(&lock, "plan", "md", &locked)?;
            let new_system = self.fresh_skills(system::strip_plan(&self.prefix.system));
            // The commit point is plan.json; plan.md and system.txt are derived from it (see
            // `reconcile`).
            let t = plan.clear();
            self.session
                .write_json_locked(&lock, files::PLAN_STATE, &plan)?;
            self.session.write_text_locked(&lock, files::PLAN, "")?;
            self.session
                .write_text_locked(&lock, files::SYSTEM, &new_system)?;
            self.prefix.system = new_system;
            self.note_disk();
            Ok(Ok(t))
        })()
        .map_err(failed)?
        .map_err(|e| ToolError::Refused(e.into()))?;
        self.seen.warned_plan_md = false;
        self.emit(ui, transition_event(&t));
        Ok("Plan cleared: removed from the system prompt and archived.".into())
    }
}

/// Brings the files derived from `plan.json` (the record of the plan lifecycle) back in line
/// after a crash between a commit and its derived writes: `system.txt` carries exactly the locked
/// plan of the record (one `<locked_plan>` section, or none), `plan.md` holds it (when it is
/// empty or still the plan archived last, i.e. not a person's edit), and a draft identical to a
/// just-confirmed plan is emptied. A damaged or missing `plan.json` is rebuilt from what the folder
/// still holds (`system.txt`'s section, `plan.md`, the draft). A damaged `system.txt` (empty, not
/// UTF-8) is rebuilt from the bundled prompt, the project's `AGENTS.md` and the record.
///
/// Call only while no other process holds the session (at open). Returns one line per file it
/// rebuilt (for a warning event); nothing is written when everything agrees.
pub fn reconcile(
    session: &Session,
    workspace: &std::path::Path,
    sandbox_lines: &str,
) -> Result<Vec<String>, Failure> {
    let lock = session.lock()?;
    let mut fixed = Vec::new();
    let system_text = match session.read_text(files::SYSTEM) {
        Ok(Some(s)) if !s.trim().is_empty() && !s.contains('\0') => Some(s),
        Ok(None) => None,
        Ok(Some(_)) | Err(_) => {
            fixed.push("system.txt was damaged (empty or not text): rebuilt".to_string());
            None
        }
    };
    let plan_md = session
        .read_text(files::PLAN)
        .ok()
        .flatten()
        .unwrap_or_default();
    let plan: PlanFile = match session.read_json::<PlanFile>(files::PLAN_STATE) {
        Ok(p) => p.unwrap_or_default(),
        Err(_) => {
            let p = rebuild_plan_file(session, &lock, system_text.as_deref(), &plan_md)?;
            fixed.push(PLAN_REBUILT.into());
            p
        }
    };
    let base = match &system_text {
        Some(s) => system::strip_plan(s).to_string(),
        None => system::base(workspace, sandbox_lines),
    };
    let want_system = system::with_plan(&base, plan.locked.as_deref());
    if system_text.as_deref() != Some(want_system.as_str()) {
        session.write_text_locked(&lock, files::SYSTEM, &want_system)?;
        if system_text.is_some() {
            fixed.push("system.txt did not carry the locked plan of plan.json: rebuilt".into());
        }
    }
    let want_md = plan.locked.clone().unwrap_or_default();
    if plan_md != want_md {
        let last_archived = last_archived_plan(session);
        if plan_md.trim().is_empty() || last_archived.as_deref() == Some(plan_md.as_str()) {
            session.write_text_locked(&lock, files::PLAN, &want_md)?;
            fixed.push("plan.md did not hold the locked plan of plan.json: rebuilt".into());
        }
    }
    if let Some(l) = &plan.locked
        && plan.state == crate::domain::plan::PlanState::Confirmed
        && read_draft(session)?.text() == Some(l.as_str())
    {
        session.write_text_locked(&lock, files::DRAFT, "")?;
        fixed.push("the confirmed draft was still pending: emptied".into());
    }
    Ok(fixed)
}

/// What a start and `tern plan show` say when they rebuilt a damaged `plan.json`.
pub const PLAN_REBUILT: &str =
    "plan.json was damaged: rebuilt from system.txt, plan.md and the draft";

/// Rebuilds `plan.json` from what the folder holds (the plan the prompt carries, else plan.md;
/// the draft's state from the draft) and writes it; the caller holds `lock`.
fn rebuild_plan_file(
    session: &Session,
    lock: &crate::store::lock::SessionLock,
    system_text: Option<&str>,
    plan_md: &str,
) -> Result<PlanFile, Failure> {
    let locked = system_text
        .and_then(locked_section)
        .or_else(|| (!plan_md.trim().is_empty()).then(|| plan_md.to_string()));
    let mut p = PlanFile::default();
    if let Some(l) = &locked {
        p.confirm(l, &crate::clock::now_rfc3339());
    }
    p.observe(&read_draft(session)?);
    session.write_json_locked(lock, files::PLAN_STATE, &p)?;
    Ok(p)
}

/// The session's `plan.json`, rebuilt (as a start rebuilds it, with the same words) when it is
/// damaged: the plan and whether it was rebuilt. Takes the session lock: the caller must not
/// hold it.
pub fn plan_file_repaired(session: &Session) -> Result<(PlanFile, bool), Failure> {
    if let Ok(p) = plan_file(session) {
        return Ok((p, false));
    }
    let lock = session.lock()?;
    // Another process may have rebuilt it meanwhile.
    if let Ok(p) = plan_file(session) {
        return Ok((p, false));
    }
    let system_text = session.read_text(files::SYSTEM).ok().flatten();
    let plan_md = session
        .read_text(files::PLAN)
        .ok()
        .flatten()
        .unwrap_or_default();
    Ok((
        rebuild_plan_file(session, &lock, system_text.as_deref(), &plan_md)?,
        true,
    ))
}

/// The text of the last `<locked_plan>` section of a system prompt.
fn locked_section(system: &str) -> Option<String> {
    let base = system::strip_plan(system);
    let rest = system.get(base.len()..)?;
    let body = rest.strip_prefix("\n\n<locked_plan>\n")?;
    let end = body.find("\n</locked_plan>\n")?;
    Some(format!("{}\n", &body[..end]))
}

/// The newest `archive/plan-NNNN.md`.
fn last_archived_plan(session: &Session) -> Option<String> {
    let n = session.next_archive_number("plan").ok()?.checked_sub(1)?;
    if n == 0 {
        return None;
    }
    session
        .read_text(&format!("{}/plan-{n:04}.md", files::ARCHIVE))
        .ok()
        .flatten()
}
