//! The `agent` tool as the model sees it: `{task, fork?, member?, read_only?}`. Its runtime is
//! `runtime::agent`.

use serde_json::{Value, json};

use super::{ToolError, ToolSpec};

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
                "member": {"type": "string"},
                "read_only": {"type": "boolean"}
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
    /// The call's own request for authority: a read-only sandbox. It can only narrow what the
    /// parent and the member allow (issue 11: the intersection of the three).
    pub read_only: bool,
}

/// Parses an `agent` call's arguments. Errors (plain text for an error result): not an object,
/// no or an empty `task`, a `fork` or `read_only` that is not a boolean, a `member` that is not a
/// string.
pub fn parse_args(args: &Value) -> Result<AgentArgs, ToolError> {
    let Some(obj) = args.as_object() else {
        return Err(ToolError::Arguments(format!(
            "agent arguments must be an object with task, got {}",
            crate::domain::json_kind(args)
        )));
    };
    let task = match obj.get("task") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) => return Err(ToolError::Arguments("\"task\" is empty".into())),
        None | Some(Value::Null) => {
            return Err(ToolError::Arguments(
                "missing \"task\": what the sub-agent should do".into(),
            ));
        }
        Some(other) => {
            return Err(ToolError::Arguments(format!(
                "\"task\" must be a string, got {}",
                crate::domain::json_kind(other)
            )));
        }
    };
    let flag = |name: &str| match obj.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ToolError::Arguments(format!(
            "\"{name}\" must be true or false, got {}",
            crate::domain::json_kind(other)
        ))),
    };
    let fork = flag("fork")?;
    let read_only = flag("read_only")?;
    let member = match obj.get("member") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(other) => {
            return Err(ToolError::Arguments(format!(
                "\"member\" must be a string, got {}",
                crate::domain::json_kind(other)
            )));
        }
    };
    Ok(AgentArgs {
        task,
        fork,
        member,
        read_only,
    })
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
        assert!(
            parse_args(&json!({"task": "x", "read_only": true}))
                .unwrap()
                .read_only
        );
        for bad in [
            json!([]),
            json!({}),
            json!({"task": " "}),
            json!({"task": 1}),
            json!({"task": "x", "fork": "yes"}),
            json!({"task": "x", "member": 3}),
            json!({"task": "x", "read_only": "yes"}),
        ] {
            assert!(parse_args(&bad).is_err(), "{bad}");
        }
    }
}
