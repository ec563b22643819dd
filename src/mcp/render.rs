//! What `tern mcp` prints, as pure functions: a tool result's parts (text printed, anything else
//! saved to a file whose path is printed: never binary on a terminal), the listing, a schema.

use std::path::PathBuf;

use base64::Engine;
use serde_json::Value;

use super::config::Server;
use super::rpc::{Agreed, Tool};

/// Bytes of a tool's description kept in `tern mcp list`.
pub const DESCRIPTION_CHARS: usize = 100;

/// What a verb prints and how it exits (0 done, 1 the tool answered `isError` or a hook blocked
/// the call, 2 bad usage, an unknown server or tool, or a protocol failure).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    /// For stdout.
    pub stdout: String,
    /// For stderr.
    pub stderr: String,
    /// The exit code.
    pub exit: i32,
}

impl Reply {
    /// A failure with exit `code` and the one-line `why` on stderr.
    pub fn fail(code: i32, why: &str) -> Reply {
        Reply {
            stdout: String::new(),
            stderr: format!("tern: {}\n", why.trim_end()),
            exit: code,
        }
    }
}

/// Saves a non-text part: (MIME type, bytes) → the file's path. Errors: the write failed.
pub type Save<'a> = dyn FnMut(&str, &[u8]) -> Result<PathBuf, String> + 'a;

/// A file-name extension for a MIME type.
pub fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or("").trim() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "text/plain" => "txt",
        _ => "bin",
    }
}

/// Decodes and saves base64 `data`; the line that stands for it, or why it could not.
fn saved(
    kind: &str,
    mime: &str,
    data: &str,
    save: &mut Save<'_>,
) -> Result<(String, PathBuf), String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| format!("[{kind} part ({mime}) whose data is not base64]"))?;
    let path = save(mime, &bytes).map_err(|e| format!("[{kind} part ({mime}) not saved: {e}]"))?;
    Ok((
        format!(
            "[{kind} ({mime}, {} bytes) saved to {}]",
            bytes.len(),
            path.display()
        ),
        path,
    ))
}

/// A `tools/call` result as `tern mcp call` prints it: text parts as they are, other parts
/// saved (see [`Save`]) and named; `json`: the whole result, each saved part's data replaced by
/// `"saved": PATH`. An `isError` result exits 1 with its text on stderr.
pub fn call_result(result: &Value, json: bool, save: &mut Save<'_>) -> Reply {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let mut doc = result.clone();
    let mut text = String::new();
    let mut notes = String::new();
    let push = |out: &mut String, s: &str| {
        out.push_str(s);
        if !s.ends_with('\n') {
            out.push('\n');
        }
    };
    if let Some(parts) = doc.get_mut("content").and_then(Value::as_array_mut) {
        for part in parts.iter_mut() {
            let kind = part
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match kind.as_str() {
                "text" => push(
                    &mut text,
                    part.get("text").and_then(Value::as_str).unwrap_or(""),
                ),
                "image" | "audio" => {
                    let mime = part
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("application/octet-stream")
                        .to_string();
                    let data = part
                        .get("data")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    match saved(&kind, &mime, &data, save) {
                        Ok((line, path)) => {
                            push(&mut text, &line);
                            if let Some(o) = part.as_object_mut() {
                                o.remove("data");
                                o.insert("saved".into(), Value::from(path.display().to_string()));
                            }
                        }
                        Err(line) => push(&mut notes, &line),
                    }
                }
                "resource_link" => {
                    let uri = part.get("uri").and_then(Value::as_str).unwrap_or("");
                    let name = part.get("name").and_then(Value::as_str).unwrap_or("");
                    push(
                        &mut text,
                        &format!(
                            "[resource link: {uri}{}]",
                            if name.is_empty() {
                                String::new()
                            } else {
                                format!(" ({name})")
                            }
                        ),
                    );
                }
                "resource" => {
                    let Some(r) = part.get_mut("resource") else {
                        continue;
                    };
                    let uri = r
                        .get("uri")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    if let Some(t) = r.get("text").and_then(Value::as_str) {
                        push(&mut text, t);
                    } else if let Some(blob) =
                        r.get("blob").and_then(Value::as_str).map(str::to_string)
                    {
                        let mime = r
                            .get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("application/octet-stream")
                            .to_string();
                        match saved("resource", &mime, &blob, save) {
                            Ok((line, path)) => {
                                push(&mut text, &format!("{line} {uri}"));
                                if let Some(o) = r.as_object_mut() {
                                    o.remove("blob");
                                    o.insert(
                                        "saved".into(),
                                        Value::from(path.display().to_string()),
                                    );
                                }
                            }
                            Err(line) => push(&mut notes, &line),
                        }
                    }
                }
                other => push(
                    &mut notes,
                    &format!("[a part of type {other:?} tern does not show: use --json]"),
                ),
            }
        }
    }
    if text.is_empty()
        && let Some(s) = result.get("structuredContent")
    {
        push(
            &mut text,
            &serde_json::to_string_pretty(s).unwrap_or_default(),
        );
    }
    let exit = i32::from(is_error);
    if json {
        let mut stdout = serde_json::to_string_pretty(&doc).unwrap_or_default();
        stdout.push('\n');
        return Reply {
            stdout,
            stderr: notes,
            exit,
        };
    }
    if is_error {
        let mut stderr = text;
        stderr.push_str(&notes);
        if stderr.is_empty() {
            stderr.push_str("the tool answered with an error and no text\n");
        }
        return Reply {
            stdout: String::new(),
            stderr,
            exit,
        };
    }
    Reply {
        stdout: text,
        stderr: notes,
        exit,
    }
}

/// The heading line of a server in `tern mcp list`.
pub fn server_line(server: &Server, agreed: Option<&Agreed>, tools: usize) -> String {
    let proto = agreed
        .map(|a| format!(", MCP {}", a.version))
        .unwrap_or_default();
    format!(
        "{} ({}{proto}, from {}): {tools} tool{}",
        server.name,
        server.kind(),
        server.source,
        if tools == 1 { "" } else { "s" }
    )
}

/// The tools of a server, one line each: `  NAME — first line of the description`.
pub fn tool_lines(tools: &[Tool]) -> String {
    let mut out = String::new();
    for t in tools {
        let d = t.one_line(DESCRIPTION_CHARS);
        if d.is_empty() {
            out.push_str(&format!("  {}\n", t.name));
        } else {
            out.push_str(&format!("  {} — {d}\n", t.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_printed_and_binary_saved() {
        let mut saves = Vec::new();
        let mut save = |mime: &str, b: &[u8]| {
            saves.push((mime.to_string(), b.to_vec()));
            Ok(PathBuf::from(format!(
                "/s/{}.{}",
                saves.len(),
                extension(mime)
            )))
        };
        let r = json!({"content":[
            {"type":"text","text":"hello"},
            {"type":"image","mimeType":"image/png","data":"iVBORw=="},
            {"type":"resource_link","uri":"file:///a","name":"a"},
            {"type":"resource","resource":{"uri":"x:1","text":"embedded"}},
            {"type":"resource","resource":{"uri":"x:2","mimeType":"application/pdf","blob":"JVBERg=="}},
            {"type":"image","mimeType":"image/png","data":"***"},
            {"type":"weird"}]});
        let out = call_result(&r, false, &mut save);
        assert_eq!(out.exit, 0);
        assert_eq!(
            out.stdout,
            "hello\n[image (image/png, 4 bytes) saved to /s/1.png]\n[resource link: file:///a (a)]\nembedded\n[resource (application/pdf, 4 bytes) saved to /s/2.pdf] x:2\n"
        );
        assert!(out.stderr.contains("not base64") && out.stderr.contains("\"weird\""));
        let mut save = |_: &str, _: &[u8]| Ok(PathBuf::from("/s/x.png"));
        let j = call_result(&r, true, &mut save);
        let v: Value = serde_json::from_str(&j.stdout).unwrap();
        assert_eq!(v["content"][1]["saved"], "/s/x.png");
        assert!(v["content"][1].get("data").is_none());
    }

    #[test]
    fn errors_exit_1_on_stderr_and_structured_content_shows() {
        let mut save = |_: &str, _: &[u8]| -> Result<PathBuf, String> { Err("no".into()) };
        let r = call_result(
            &json!({"isError":true,"content":[{"type":"text","text":"bad repo"}]}),
            false,
            &mut save,
        );
        assert_eq!(
            (r.exit, r.stdout.as_str(), r.stderr.as_str()),
            (1, "", "bad repo\n")
        );
        let r = call_result(
            &json!({"content":[],"structuredContent":{"n":3}}),
            false,
            &mut save,
        );
        assert_eq!(r.stdout, "{\n  \"n\": 3\n}\n");
        assert_eq!(Reply::fail(2, "x").stderr, "tern: x\n");
    }
}
