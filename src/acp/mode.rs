//! What a person picks in the editor: the session modes (tern's approval policies), the
//! permission options of a question, and the slash commands (tern's op table).

use super::protocol::{AvailableCommand, PermissionOption, SessionMode, SessionModeState};
use crate::ops;
use crate::runtime::Approval;

/// The session modes (ACP v1, session modes), mapped onto tern's approval policies. The mode is
/// stored with the session (`meta.json` `approval`), so a reconnect, `session/load` or
/// `session/resume` finds it as it was left; a new session starts from `--approval`. A change
/// during a turn applies to its next command (ask ↔ auto, or to plan: refused as declined);
/// leaving plan mode takes effect with the next prompt, since a plan-mode turn runs as
/// `--approval never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--approval ask`: each command becomes `session/request_permission`.
    Ask,
    /// `--approval auto`: commands run without asking.
    Auto,
    /// `--approval never`: commands are refused; the model can only draft the plan.
    Plan,
}

impl Mode {
    /// Every mode, in the order offered.
    pub const ALL: [Mode; 3] = [Mode::Ask, Mode::Auto, Mode::Plan];

    /// The mode id on the wire.
    pub fn id(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Auto => "auto",
            Mode::Plan => "plan",
        }
    }

    /// The mode with id `id`.
    pub fn parse(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.id() == id)
    }

    /// The mode of an approval policy.
    pub fn of(a: Approval) -> Mode {
        match a {
            Approval::Ask => Mode::Ask,
            Approval::Auto => Mode::Auto,
            Approval::Never => Mode::Plan,
        }
    }

    /// The approval policy this mode stands for (stored in `meta.json`).
    pub fn approval(self) -> Approval {
        match self {
            Mode::Ask => Approval::Ask,
            Mode::Auto => Approval::Auto,
            Mode::Plan => Approval::Never,
        }
    }

    fn describe(self) -> SessionMode {
        let (name, description) = match self {
            Mode::Ask => ("Ask", "Ask before each command runs"),
            Mode::Auto => ("Auto", "Run every command without asking"),
            Mode::Plan => (
                "Plan",
                "Refuse every command: the model can only draft the plan",
            ),
        };
        SessionMode {
            id: self.id().into(),
            name: name.into(),
            description: description.into(),
        }
    }

    /// The mode state for a session response.
    pub fn state(current: Mode) -> SessionModeState {
        SessionModeState {
            current_mode_id: current.id().into(),
            available_modes: Mode::ALL.into_iter().map(Mode::describe).collect(),
        }
    }
}

/// The ops offered as the client's commands (ACP v1, slash commands), by slash name. The draft
/// is dropped with `/discard` (an editor person reads `/cancel` as "stop the turn"; `/cancel`
/// still works, unlisted).
pub const COMMANDS: [&str; 9] = [
    "plan", "confirm", "discard", "clear", "compact", "status", "relay", "model", "goal",
];

/// The available commands: [`COMMANDS`] with their op table help.
pub fn available_commands() -> Vec<AvailableCommand> {
    COMMANDS
        .iter()
        .filter_map(|name| ops::by_slash(name))
        .map(|op| AvailableCommand {
            name: op.slash.trim_start_matches('/').to_string(),
            description: op.help.to_string(),
        })
        .collect()
}

/// The op a prompt names, when it is one of [`COMMANDS`] or a hidden alias of one (`/cancel`),
/// with its argument. Anything else (`/usr/bin is slow`) is a prompt for the model.
pub fn slash_op(text: &str) -> Option<(&'static ops::Op, Option<String>)> {
    let cmd = text.trim().strip_prefix('/')?;
    let (name, arg) = match cmd.split_once(char::is_whitespace) {
        Some((n, a)) => (n, Some(a.trim().to_string()).filter(|a| !a.is_empty())),
        None => (cmd, None),
    };
    let op = ops::by_slash(name)?;
    let offered = COMMANDS
        .iter()
        .any(|c| ops::by_slash(c).is_some_and(|o| o.id == op.id));
    offered.then_some((op, arg))
}

/// The permission choices (ACP v1, tool calls: "Permission Options"). "Always" switches the
/// session's mode (auto / plan) and says so with `current_mode_update`.
pub const OPTIONS: [PermissionOption; 4] = [
    PermissionOption {
        option_id: "allow-once",
        name: "Run it",
        kind: "allow_once",
    },
    PermissionOption {
        option_id: "allow-always",
        name: "Always run (auto mode)",
        kind: "allow_always",
    },
    PermissionOption {
        option_id: "reject-once",
        name: "Don't run it",
        kind: "reject_once",
    },
    PermissionOption {
        option_id: "reject-always",
        name: "Never run commands (plan mode)",
        kind: "reject_always",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_ops_are_only_the_offered_commands() {
        assert_eq!(
            slash_op("/status").map(|(o, _)| o.id.as_str()),
            Some("status")
        );
        assert_eq!(
            slash_op("  /confirm  ").map(|(o, a)| (o.id.as_str(), a)),
            Some(("plan.confirm", None))
        );
        assert_eq!(
            slash_op("/plan extra").map(|(o, a)| (o.id.as_str(), a)),
            Some(("plan.show", Some("extra".to_string())))
        );
        // The old name of /discard still works, unlisted.
        assert_eq!(
            slash_op("/cancel").map(|(o, _)| o.id.as_str()),
            Some("plan.cancel")
        );
        assert_eq!(
            slash_op("/discard").map(|(o, _)| o.id.as_str()),
            Some("plan.cancel")
        );
        assert!(slash_op("/usr/bin is slow, why?").is_none());
        assert!(slash_op("/quit").is_none());
        assert!(slash_op("status").is_none());
        let names: Vec<String> = available_commands().into_iter().map(|c| c.name).collect();
        assert_eq!(names, COMMANDS);
    }
}
