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

/// Why the domain would not make a change (nothing changed): the one line the model (a tool
/// result) or the person (a verb's receipt) reads. One type for the ledger, the plan lifecycle
/// and the strategy notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainError {
    /// The arguments or the content cannot be used (not an array, an unknown status, a bad
    /// goal, an oversized or non-text draft).
    Invalid(String),
    /// The lifecycle refuses it now (starting items while a draft is pending, nothing to
    /// confirm, cancel or clear).
    Refused(String),
}

impl std::fmt::Display for DomainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DomainError::Invalid(why) | DomainError::Refused(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for DomainError {}

/// The line, for a tool result or a receipt.
impl From<DomainError> for String {
    fn from(e: DomainError) -> String {
        e.to_string()
    }
}

/// A helper's line (a missing field) is invalid arguments.
impl From<String> for DomainError {
    fn from(why: String) -> DomainError {
        DomainError::Invalid(why)
    }
}
