//! The approval policy: when the bash tool may run. A plain type of its own, shared by the
//! runtime, the events and the Fleet.

/// When the bash tool may run (`--approval`, `TERN_APPROVAL`). Ordered from the narrowest
/// (`never`) to the widest (`auto`): a sub-agent gets the narrowest of its parent's and its
/// member's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Refuse every command with an error tool result: the model can only plan.
    Never,
    /// Ask the person before each command (the REPL's default).
    Ask,
    /// Run every command (the default of `exec`).
    Auto,
}
