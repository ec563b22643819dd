//! Opening a runtime: the events and repairs every new or resumed session starts with (the
//! launcher's last step, after it wrote or found the session folder).

use super::{Failure, Runtime, Surface};
use crate::event::Event;
use crate::store::{Meta, files};

impl Runtime {
    /// The events and repairs of opening: `session_start`, then for a resumed session
    /// `turn_interrupted` (a dead turn), the history repair, and a `model_switch` boundary.
    pub(crate) fn begin(
        &mut self,
        ui: &mut dyn Surface,
        resumed: bool,
        before: Option<(&Meta, bool)>,
    ) -> Result<(), Failure> {
        let untrusted = self.hooks().untrusted.clone();
        let worktree = self.worktree();
        self.emit(
            ui,
            Event::SessionStart {
                provider: self.provider_name(),
                model: self.cfg.model.clone(),
                resumed,
                sandbox: self.sandbox(),
                untrusted_hooks: untrusted.as_ref().map(|u| u.path.display().to_string()),
                worktree: worktree.as_ref().map(|w| w.name.clone()),
                branch: worktree.map(|w| w.branch),
            },
        );
        // Hooks that do not run are never skipped silently: the untrusted file is named in
        // `session_start` (surfaces show it), the rest as warnings.
        if self.depth() == 0 {
            for n in self.hooks().notes.clone() {
                self.emit(ui, Event::warning(format!("hooks: {n}")));
            }
        }
        self.checkpoint(crate::checkpoint::Moment::Open, ui);
        let Some((meta, was_interrupted)) = before else {
            self.note_disk();
            return Ok(());
        };
        if was_interrupted {
            self.emit(
                ui,
                Event::TurnInterrupted {
                    pid: meta.pid,
                    reason: "the process running this turn is gone".into(),
                },
            );
        }
        // A removed conversation reads as an empty one; with turns on record, say so rather
        // than go on as if the session had just begun.
        if meta.turns > 0
            && std::fs::symlink_metadata(self.session.path(files::CONVERSATION)).is_err()
        {
            self.emit(
                ui,
                Event::warning(format!(
                    "conversation.jsonl is missing from {} though {} model request(s) are on record: the history is lost; going on from an empty one (copies made by compactions are in archive/)",
                    self.session.dir.display(),
                    meta.turns
                )),
            );
        }
        self.load_history(ui)?;
        self.after_load();
        self.note_foreign_reasoning(ui);
        self.switch_model(ui, meta)?;
        self.switch_sandbox(ui, meta)
    }

    /// A session continued on another wire than the one that answered (`--provider` changed):
    /// the earlier answers' reasoning is in that provider's form, which no other wire takes, so
    /// it stays on record and is not sent (DESIGN §19). Said once, when there is any.
    fn note_foreign_reasoning(&mut self, ui: &mut dyn Surface) {
        use crate::message::{Message, Reasoning};
        use crate::provider::Wire;
        let wire = self.provider.name();
        let foreign = self
            .prefix
            .history
            .iter()
            .filter(|m| match m {
                Message::Assistant {
                    reasoning: Some(r), ..
                } => !matches!(
                    (r, wire),
                    (Reasoning::Chat { .. }, Wire::Openai)
                        | (Reasoning::Anthropic { .. }, Wire::Anthropic)
                        | (Reasoning::Responses { .. }, Wire::Responses)
                        | (_, Wire::Replay)
                ),
                _ => false,
            })
            .count();
        if foreign > 0 {
            self.emit(
                ui,
                Event::warning(format!(
                    "{foreign} earlier answer(s) carry reasoning from another provider's wire; this one ({wire}) does not take it, so it is kept on record and not sent"
                )),
            );
        }
    }
}
