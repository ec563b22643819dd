//! The `agent` tool as the model sees it: `{task, fork?, member?}`. Its runtime is
//! `runtime::agent`.

use serde_json::{Value, json};

use super::ToolSpec;

/// The tool's name.
pub const NAME: &str = "agent";

/// The advertised `agent` tool, appended after the others (the same bytes in parent and child
/// requests, so the cache holds).
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: include_str!("../../prompts/tools/agent.md").trim().into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "task": {"type": "string"},
                "fork": {"type": "boolean"},
                "member": {"type": "string"}
            },
            "required": ["task"]
        }),
    }
}

/// Validated arguments of one `agent` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    /// What the child is to do; non-empty.
    pub task: String,
    /// Continue from the parent's history (else a fresh child).
    pub fork: bool,
    /// The Fleet member (id or role).
    pub member: Option<String>,
}

/// Parses an `agent` call's arguments. Errors (plain text for an error result): not an object,
/// no or an empty `task`, a `fork` that is not a boolean, a `member` that is not a string.
pub fn parse_args(args: &Value) -> Result<AgentArgs, String> {
    let Some(obj) = args.as_object() else {
        return Err(format!(
            "agent arguments must be an object with task, got {}",
            crate::domain::json_kind(args)
        ));
    };
    let task = match obj.get("task") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) => return Err("\"task\" is empty".into()),
        None | Some(Value::Null) => {
            return Err("missing \"task\": what the sub-agent should do".into());
        }
        Some(other) => {
            return Err(format!(
                "\"task\" must be a string, got {}",
                crate::domain::json_kind(other)
            ));
        }
    };
    let fork = match obj.get("fork") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "\"fork\" must be true or false, got {}",
                crate::domain::json_kind(other)
            ));
        }
    };
    let member = match obj.get("member") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(other) => {
            return Err(format!(
                "\"member\" must be a string, got {}",
                crate::domain::json_kind(other)
            ));
        }
    };
    Ok(AgentArgs { task, fork, member })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_checked() {
        let a = parse_args(&json!({"task": " look ", "fork": true, "member": "rev"})).unwrap();
        assert_eq!(
            (a.task.as_str(), a.fork, a.member.as_deref()),
            ("look", true, Some("rev"))
        );
        assert!(!parse_args(&json!({"task": "x"})).unwrap().fork);
        for bad in [
            json!([]),
            json!({}),
            json!({"task": " "}),
            json!({"task": 1}),
            json!({"task": "x", "fork": "yes"}),
            json!({"task": "x", "member": 3}),
        ] {
            assert!(parse_args(&bad).is_err(), "{bad}");
        }
    }
}
