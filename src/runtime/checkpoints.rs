//! The checkpoint door (src/checkpoint): the one place the runtime passes through it, at the
//! moments of [`Moment`]: the session opened, a turn began, a command or sub-agents are about to
//! run. Never fails a turn: what the checkpoint room says becomes `warning` events.

use super::{Runtime, Surface};
use crate::checkpoint::Moment;
use crate::event::Event;

impl Runtime {
    /// Passes `moment` to the checkpoint room. Sub-agents pass through without effect (their
    /// parent's turn recorded the workspace before they ran); so does a runtime with
    /// checkpoints off.
    pub fn checkpoint(&mut self, moment: Moment, ui: &mut dyn Surface) {
        if self.depth() > 0 || !self.cfg.checkpoints.enabled {
            return;
        }
        let limits = self.cfg.checkpoints;
        let notes = match moment {
            Moment::Open => {
                self.checkpoints
                    .opened(&self.session, self.commands.workspace(), limits)
            }
            Moment::TurnStart => {
                let n = self.prefix.history.len();
                self.checkpoints.turn_started(&self.session, n)
            }
            Moment::BeforeCommand | Moment::BeforeAgents => {
                // Through the door, its record is the checkpoint: asked once a turn. A command
                // starts the jail it needs anyway, so the kernel's answer on the layer is known
                // first; sub-agents use jails of their own, so this one is not started for them.
                let start = moment == Moment::BeforeCommand;
                let door = self.checkpoints.records_now()
                    && self.commands.through_door(&self.session, start);
                if self.checkpoints.records_now() && !door {
                    ui.progress("recording the workspace for undo…");
                }
                let (notes, written) = self.checkpoints.before_command(
                    &self.session,
                    self.commands.workspace(),
                    limits,
                    door,
                );
                // tern's own writes: the guard's baseline, not a command's change.
                for p in written {
                    self.guard_accept(&p);
                }
                notes
            }
        };
        for n in notes {
            self.emit(ui, Event::warning(n));
        }
    }
}
