//! Recovery of tool calls that a model wrote as text.
//!
//! Small local models often write the call their chat template asks for (`{"name": …,
//! "arguments": …}`, bare or in a ```json block) without the server turning it into a real tool
//! call: llama.cpp's parser misses it when the fence is absent or `arguments` is a string. Such an
//! answer would end the turn with the work undone. When an answer has no native tool calls, this
//! module recognises exactly that shape, for an advertised tool name only, and nothing looser.

use serde_json::{Value, json};

use crate::provider::RawToolCall;

/// Tool calls found in `text`, and the text left once they are taken out; None when `text` does
/// not hold any. A call is a JSON object with `name` (one of `tools`) and `arguments` (or
/// `parameters`): an object, a string holding an object, or for `bash` a plain command string or a
/// list of command lines.
/// The object is either the whole text or inside ```json / ``` fences.
pub fn recover(text: &str, tools: &[&str]) -> Option<(Vec<RawToolCall>, String)> {
    let whole = text.trim();
    if let Some(call) = parse_call(whole, tools) {
        return Some((vec![call], String::new()));
    }
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut remaining = text;
    while let Some(start) = remaining.find("```") {
        let after = &remaining[start + 3..];
        let Some(end) = after.find("```") else { break };
        let block = after[..end]
            .trim_start_matches("json")
            .trim_start_matches("JSON");
        match parse_call(block.trim(), tools) {
            Some(call) => {
                rest.push_str(&remaining[..start]);
                calls.push(call);
            }
            None => rest.push_str(&remaining[..start + 3 + end + 3]),
        }
        remaining = &after[end + 3..];
    }
    rest.push_str(remaining);
    (!calls.is_empty()).then(|| (calls, rest.trim().to_string()))
}

fn parse_call(s: &str, tools: &[&str]) -> Option<RawToolCall> {
    if !s.starts_with('{') {
        return None;
    }
    let v: Value = serde_json::from_str(s).ok()?;
    let name = v.get("name")?.as_str()?;
    if !tools.contains(&name) {
        return None;
    }
    let args = v.get("arguments").or_else(|| v.get("parameters"))?;
    let args = match args {
        Value::Object(_) => args.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => o,
            _ if name == "bash" => json!({"command": s}),
            _ => return None,
        },
        // A list of command lines for bash: run as one script, line by line.
        Value::Array(lines) if name == "bash" && lines.iter().all(Value::is_string) => {
            let lines: Vec<&str> = lines.iter().filter_map(Value::as_str).collect();
            json!({"command": lines.join("\n")})
        }
        _ => return None,
    };
    Some(RawToolCall {
        id: String::new(),
        name: name.to_string(),
        arguments: args.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &["bash", "plan_confirm"];

    #[test]
    fn bare_object_with_string_arguments() {
        let (calls, rest) = recover(
            "{\n  \"name\": \"bash\",\n  \"arguments\": \"echo hi\"\n}",
            TOOLS,
        )
        .unwrap();
        assert_eq!(calls[0].name, "bash");
        assert_eq!(calls[0].arguments, r#"{"command":"echo hi"}"#);
        assert!(rest.is_empty());
    }

    #[test]
    fn fenced_blocks_with_text_around() {
        let text = "I'll check.\n```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```\nthen more";
        let (calls, rest) = recover(text, TOOLS).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(rest, "I'll check.\n\nthen more");
    }

    #[test]
    fn unknown_names_and_prose_are_left_alone() {
        assert!(recover("{\"name\": \"rm_rf\", \"arguments\": {}}", TOOLS).is_none());
        assert!(recover("Here is JSON: {\"name\": \"bash\"}", TOOLS).is_none());
        assert!(recover("```\nls -la\n```", TOOLS).is_none());
        assert!(recover("{\"name\": \"plan_confirm\", \"arguments\": \"x\"}", TOOLS).is_none());
    }
}
