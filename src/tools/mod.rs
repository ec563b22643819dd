//! The model's tools: their schemas (fixed order, deterministic JSON) and implementations.
//!
//! `bash` is the main tool; the plan tools drive the lifecycle; `work_update` is the one progress
//! tool; `update_plan` carries strategy only.

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

/// How a JSON value is named in an error message the model reads ("a string", "an array"…).
pub(crate) fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
