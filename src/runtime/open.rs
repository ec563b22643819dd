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
        self.emit(
            ui,
            Event::SessionStart {
                provider: self.provider_name(),
                model: self.cfg.model.clone(),
                resumed,
                sandbox: self.sandbox(),
                untrusted_hooks: untrusted.as_ref().map(|u| u.path.display().to_string()),
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
        self.switch_model(ui, meta)?;
        self.switch_sandbox(ui, meta)
    }
}
