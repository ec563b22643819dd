//! Building the fake provider's script: tool calls with JSON arguments, in either wire.
//!
//! Two families: `openai_*` are plain OpenAI streams like [`super::openai_tool_calls`] (no
//! usage); [`text`], [`calls`], [`call`], [`bash`] and [`work`] take the wire and report usage
//! from the simulated prefix cache ([`Reply::auto_usage`]).
#![allow(dead_code)]

use serde_json::{Value, json};

use super::{Reply, Wire, anthropic_text, anthropic_tool_calls, openai_text, openai_tool_calls};

/// The arguments text of a `bash` tool call running `command`.
pub fn bash_args(command: &str) -> String {
    json!({ "command": command }).to_string()
}

/// An OpenAI stream with one tool call `name(args)`.
pub fn openai_call(id: &str, name: &str, args: Value) -> Reply {
    tool_calls(Wire::OpenAi, &[(id, name, args)])
}

/// An OpenAI stream with one `bash` tool call running `command`.
pub fn openai_bash(id: &str, command: &str) -> Reply {
    openai_tool_calls(&[(id, "bash", &bash_args(command))])
}

/// A stream of `wire` with the tool calls `(id, name, arguments)`, no usage.
pub fn tool_calls(wire: Wire, list: &[(&str, &str, Value)]) -> Reply {
    let owned: Vec<(String, String, String)> = list
        .iter()
        .map(|(id, name, args)| (id.to_string(), name.to_string(), args.to_string()))
        .collect();
    let borrowed: Vec<(&str, &str, &str)> = owned
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    match wire {
        Wire::OpenAi => openai_tool_calls(&borrowed),
        Wire::Anthropic => anthropic_tool_calls(&borrowed),
    }
}

/// A final text answer in `wire`, with usage.
pub fn text(wire: Wire, t: &str) -> Reply {
    match wire {
        Wire::OpenAi => openai_text(t),
        Wire::Anthropic => anthropic_text(t),
    }
    .auto_usage()
}

/// Tool calls `(id, name, arguments)` in `wire`, with usage.
pub fn calls(wire: Wire, list: &[(&str, &str, Value)]) -> Reply {
    tool_calls(wire, list).auto_usage()
}

/// One tool call `name(args)` in `wire`, with usage.
pub fn call(wire: Wire, id: &str, name: &str, args: Value) -> Reply {
    calls(wire, &[(id, name, args)])
}

/// One `bash` tool call running `command` in `wire`, with usage.
pub fn bash(wire: Wire, id: &str, command: &str) -> Reply {
    call(wire, id, "bash", json!({ "command": command }))
}

/// One To-do item of a `work_update` call.
pub fn todo(id: &str, content: &str, status: &str) -> Value {
    json!({"id": id, "content": content, "status": status})
}

/// One `work_update` call setting `todos` in `wire`, with usage.
pub fn work(wire: Wire, id: &str, todos: Vec<Value>) -> Reply {
    call(wire, id, "work_update", json!({ "todos": todos }))
}

/// `r` (a scripted answer) with `t` as its assistant text, before its tool calls: the partial
/// output a budget keeps comes from such texts.
pub fn with_text(mut r: Reply, t: &str) -> Reply {
    if let super::Content::Answer { text, .. } = &mut r.content {
        *text = t.to_string();
    }
    r
}

/// One `agent` tool call with `args` in `wire`, with usage.
pub fn agent(wire: Wire, id: &str, args: Value) -> Reply {
    call(wire, id, "agent", args)
}
