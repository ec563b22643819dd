//! Op ids: the stable names of tern's operations in receipts and `receipt` events
//! (`plan.confirm`, `compact`, …). A leaf module, so the event types can name an op without
//! depending on the ops themselves.

use serde::{Deserialize, Serialize};

/// Every op, by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpId {
    /// `plan.show`
    PlanShow,
    /// `plan.path`
    PlanPath,
    /// `plan.draft`
    PlanDraft,
    /// `plan.edit`
    PlanEdit,
    /// `plan.confirm`
    PlanConfirm,
    /// `plan.cancel`
    PlanCancel,
    /// `plan.clear`
    PlanClear,
    /// `compact`
    Compact,
    /// `status`
    Status,
    /// `relay`
    Relay,
    /// `stats`
    Stats,
    /// `sessions`
    Sessions,
    /// `resume`
    Resume,
    /// `undo`
    Undo,
    /// `redo`
    Redo,
    /// `checkpoints`
    Checkpoints,
    /// `diff`
    Diff,
    /// `fork`
    Fork,
    /// `rewind`
    Rewind,
    /// `help`
    Help,
    /// `quit`
    Quit,
    /// `goal`
    Goal,
    /// `model`
    Model,
    /// `effort`
    Effort,
    /// `mcp`
    Mcp,
}

impl OpId {
    /// Every op id, in declaration order.
    pub const ALL: [OpId; 25] = [
        OpId::PlanShow,
        OpId::PlanPath,
        OpId::PlanDraft,
        OpId::PlanEdit,
        OpId::PlanConfirm,
        OpId::PlanCancel,
        OpId::PlanClear,
        OpId::Compact,
        OpId::Status,
        OpId::Relay,
        OpId::Stats,
        OpId::Sessions,
        OpId::Resume,
        OpId::Undo,
        OpId::Redo,
        OpId::Checkpoints,
        OpId::Diff,
        OpId::Fork,
        OpId::Rewind,
        OpId::Help,
        OpId::Quit,
        OpId::Goal,
        OpId::Model,
        OpId::Effort,
        OpId::Mcp,
    ];

    /// The op id named `s` (its [`OpId::as_str`]); None for any other string.
    pub fn parse(s: &str) -> Option<OpId> {
        OpId::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// The stable id used in receipts and events, e.g. `plan.confirm`.
    pub fn as_str(self) -> &'static str {
        match self {
            OpId::PlanShow => "plan.show",
            OpId::PlanPath => "plan.path",
            OpId::PlanDraft => "plan.draft",
            OpId::PlanEdit => "plan.edit",
            OpId::PlanConfirm => "plan.confirm",
            OpId::PlanCancel => "plan.cancel",
            OpId::PlanClear => "plan.clear",
            OpId::Compact => "compact",
            OpId::Status => "status",
            OpId::Relay => "relay",
            OpId::Stats => "stats",
            OpId::Sessions => "sessions",
            OpId::Resume => "resume",
            OpId::Undo => "undo",
            OpId::Redo => "redo",
            OpId::Checkpoints => "checkpoints",
            OpId::Diff => "diff",
            OpId::Fork => "fork",
            OpId::Rewind => "rewind",
            OpId::Help => "help",
            OpId::Quit => "quit",
            OpId::Goal => "goal",
            OpId::Model => "model",
            OpId::Effort => "effort",
            OpId::Mcp => "mcp",
        }
    }
}

impl Serialize for OpId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OpId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        OpId::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown op {s:?}")))
    }
}
