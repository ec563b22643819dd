//! Recovery of tool calls that a model wrote as text.
//!
//! Small local models often write the call their chat template asks for (`{"name": …,
//! "arguments": …}`, bare or in a ```json block) without the server turning it into a real tool
//! call: llama.cpp's parser misses it when the fence is absent or `arguments` is a string. Such an
//! answer would end the turn with the work undone. When an answer has no native tool calls, this
//! module recognises exactly that shape, for an advertised tool name only, and nothing looser.

use serde_json::{Value, json};

use crate::provider::RawToolCall;

/// The tool calls `text` consists of; None unless the whole answer is calls and nothing else.
/// A call is a JSON object with `name` (one of `tools`) and `arguments` (or `parameters`): an
/// object, a string holding an object, or for `bash` a plain command string or a list of command
/// lines. The answer is one such object, or only ```json / ``` fenced blocks of them: any prose
/// around a block makes it an example the model is showing, which is never run.
pub fn recover(text: &str, tools: &[&str]) -> Option<Vec<RawToolCall>> {
    let whole = text.trim();
    if let Some(call) = parse_call(whole, tools) {
        return Some(vec![call]);
    }
    let mut calls = Vec::new();
    let mut remaining = whole;
    while !remaining.is_empty() {
        let after = remaining.strip_prefix("```")?;
        let end = after.find("```")?;
        let block = after[..end]
            .trim_start_matches("json")
            .trim_start_matches("JSON");
        calls.push(parse_call(block.trim(), tools)?);
        remaining = after[end + 3..].trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

/// What an answer that [`recover`] did not take is, when it still has the shape of a call
/// (a `{"name": …, "arguments": …}` object, bare or in fenced blocks, with any name or
/// arguments that did not parse): the name it calls, so the model is told it did not run. None
/// for anything else (prose, an example inside prose).
pub fn unrun_call(text: &str) -> Option<String> {
    let whole = text.trim();
    let name_of = |s: &str| -> Option<String> {
        let s = s.trim();
        if !s.starts_with('{') {
            return None;
        }
        match serde_json::from_str::<Value>(s) {
            Ok(v) => {
                let name = v.get("name")?.as_str()?;
                (v.get("arguments").is_some() || v.get("parameters").is_some())
                    .then(|| name.to_string())
            }
            // Call-shaped but not JSON: the name as written, when there is one.
            Err(_) => {
                let at = s.find("\"name\"")?;
                let rest = s[at + 6..].trim_start().strip_prefix(':')?.trim_start();
                let rest = rest.strip_prefix('"')?;
                (s.contains("\"arguments\"") || s.contains("\"parameters\""))
                    .then(|| rest.split('"').next().unwrap_or("").to_string())
            }
        }
    };
    if let Some(n) = name_of(whole) {
        return Some(n);
    }
    let mut names = Vec::new();
    let mut remaining = whole;
    while !remaining.is_empty() {
        let after = remaining.strip_prefix("```")?;
        let end = after.find("```")?;
        let block = after[..end]
            .trim_start_matches("json")
            .trim_start_matches("JSON");
        names.push(name_of(block)?);
        remaining = after[end + 3..].trim_start();
    }
    names.into_iter().next()
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
        let calls = recover(
            "{\n  \"name\": \"bash\",\n  \"arguments\": \"echo hi\"\n}",
            TOOLS,
        )
        .unwrap();
        assert_eq!(calls[0].name, "bash");
        assert_eq!(calls[0].arguments, r#"{"command":"echo hi"}"#);
    }

    #[test]
    fn only_fenced_calls_are_calls() {
        let block = "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```";
        assert_eq!(
            recover(&format!("{block}\n{block}\n"), TOOLS)
                .unwrap()
                .len(),
            2
        );
        // Prose around a block: an example being shown, never run.
        let shown = format!("Example only, do not run:\n{block}\nThat is all.");
        assert!(recover(&shown, TOOLS).is_none());
        assert!(recover(&format!("{block}\nthen more"), TOOLS).is_none());
    }

    #[test]
    fn unrun_calls_are_told_from_prose() {
        assert_eq!(
            unrun_call("{\"name\": \"rm_rf\", \"arguments\": {}}").as_deref(),
            Some("rm_rf")
        );
        assert_eq!(
            unrun_call("```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"x\"\n```")
                .as_deref(),
            Some("bash"),
            "arguments that are not JSON"
        );
        assert!(unrun_call("Done: the file says hi.").is_none());
        assert!(
            unrun_call("Example:\n```json\n{\"name\": \"bash\", \"arguments\": {}}\n```\nok")
                .is_none()
        );
    }

    #[test]
    fn unknown_names_and_prose_are_left_alone() {
        assert!(recover("{\"name\": \"rm_rf\", \"arguments\": {}}", TOOLS).is_none());
        assert!(recover("Here is JSON: {\"name\": \"bash\"}", TOOLS).is_none());
        assert!(recover("```\nls -la\n```", TOOLS).is_none());
        assert!(recover("{\"name\": \"plan_confirm\", \"arguments\": \"x\"}", TOOLS).is_none());
    }
}
