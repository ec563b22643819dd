//! The domain: the To-do ledger, the plan lifecycle state machine and the strategy notes. Pure
//! types and rules without I/O, shared by the tools, the renderers, `status`, `relay` and the
//! runtime, so none of them owns another's types.

pub mod ledger;
pub mod plan;
pub mod strategy;

/// How a JSON value is named in an error message the model reads ("a string", "an array"…).
pub fn json_kind(v: &serde_json::Value) -> &'static str {
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
