//! The model's tools: their schemas (fixed order, deterministic JSON) and implementations.
//!
//! `bash` is the main tool; the plan tools drive the lifecycle; `work_update` is the one progress
//! tool; `update_plan` carries strategy only.

pub mod agent;
pub mod bash;
pub mod output;
pub mod plan;
pub mod work;

use serde::Serialize;

/// One tool as advertised to the model. Serializes deterministically: `parameters` is a
/// `serde_json::Value` built from `json!` literals, whose keys keep their written order
/// (serde_json `preserve_order`), so the same binary produces the same bytes in every process
/// (case C19).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Tool name, `[a-z_]+`.
    pub name: &'static str,
    /// What the model reads about the tool, limits included.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// The tools in their fixed order: `bash`, the plan tools, `work_update`, `update_plan`,
/// `agent`. The same list at every depth: limits are enforced when a tool runs.
pub fn specs() -> Vec<ToolSpec> {
    let mut tools = vec![bash::spec()];
    tools.extend(plan::specs());
    tools.push(work::work_update_spec());
    tools.push(work::update_plan_spec());
    tools.push(agent::spec());
    tools
}

/// Why a tool call gave an error result. [`std::fmt::Display`] is the message alone; the model
/// reads it behind the one `Error: ` prefix that [`ToolError::to_model`] adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments are not what the tool takes; the call did not run.
    Arguments(String),
    /// Not run, by policy or by the person: approval, sandbox, the lifecycle's order.
    Refused(String),
    /// It ran and failed, or could not be started.
    Failed(String),
    /// The person (or a cancel) stopped it: the turn ends once the result is stored.
    Interrupted(String),
}

impl ToolError {
    /// The message without the prefix.
    pub fn message(&self) -> &str {
        match self {
            ToolError::Arguments(m)
            | ToolError::Refused(m)
            | ToolError::Failed(m)
            | ToolError::Interrupted(m) => m,
        }
    }

    /// What the model reads: `Error: ` and the message.
    pub fn to_model(&self) -> String {
        format!("Error: {}", self.message())
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ToolError {}

/// The message, for callers that report one line.
impl From<ToolError> for String {
    fn from(e: ToolError) -> String {
        e.message().to_string()
    }
}
