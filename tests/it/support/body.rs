//! Reading recorded request bodies and stored messages: the messages of a request, a message's
//! text, roles, the system prompt, the tool result answering a call.
#![allow(dead_code)]

use serde_json::Value;

use super::Recorded;

/// The messages of a recorded request body (OpenAI: the system message included).
pub fn messages(req: &Recorded) -> Vec<Value> {
    req.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no messages in {}", req.body_str()))
}

/// A message's `content` when it is a string, else "".
pub fn content(m: &Value) -> String {
    m["content"].as_str().unwrap_or("").to_string()
}

/// The role of each message, in order ("?" where there is none).
pub fn roles(msgs: &[Value]) -> Vec<&str> {
    msgs.iter()
        .map(|m| m["role"].as_str().unwrap_or("?"))
        .collect()
}

/// The stored tool result answering call `id` (conversation.jsonl or an OpenAI request).
pub fn tool_result(conversation: &[Value], id: &str) -> Value {
    conversation
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool result for {id}: {conversation:?}"))
}

/// The system prompt of a request body: Anthropic's `system` blocks joined, else the first
/// message, which must be the OpenAI system message.
pub fn system_of(body: &Value) -> String {
    if let Some(blocks) = body["system"].as_array() {
        return blocks
            .iter()
            .map(|b| b["text"].as_str().unwrap_or_default())
            .collect();
    }
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "the system prompt comes first");
    first["content"].as_str().expect("system text").to_string()
}

/// The events of type `kind`, in order.
pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The `tool_result` event answering call `id`.
pub fn result_of<'a>(events: &'a [Value], id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["id"] == id)
        .unwrap_or_else(|| panic!("no tool_result {id}"))
}

/// The text of the `tool_result` event answering call `id`, which must be an error.
pub fn error_text(events: &[Value], id: &str) -> String {
    let r = result_of(events, id);
    assert_eq!(r["is_error"], true, "{r}");
    r["content"].as_str().unwrap_or("").to_string()
}

/// The raw JSON text of the value of the top-level `"key":` in `raw` (string-aware bracket
/// match), as the bytes went on the wire.
pub fn raw_value<'a>(raw: &'a str, key: &str) -> &'a str {
    let start = raw
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in body"))
        + key.len()
        + 3;
    let (mut depth, mut in_str, mut esc) = (0i32, false, false);
    for (i, ch) in raw[start..].char_indices() {
        if in_str {
            match (esc, ch) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') if depth == 0 => return &raw[start..start + i + 1],
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => in_str = true,
            '[' | '{' => depth += 1,
            ']' | '}' if depth == 1 => return &raw[start..start + i + 1],
            ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    panic!("unterminated {key}");
}
