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

/// A `tools/call` result, typed (MCP 2025-11-25 and 2026-07-28, "Tool Result": `content`,
/// `structuredContent`, `isError`). Read leniently: a missing field is empty, a part of a type
/// tern does not know is kept by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallResult {
    /// `isError`: the tool ran and failed (exit 1).
    pub is_error: bool,
    /// The parts, in order.
    pub content: Vec<Content>,
    /// `structuredContent`, printed when no part is text.
    pub structured: Option<Value>,
}

/// One part of a tool result's `content`.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// `text`: printed as it is.
    Text(String),
    /// `image` or `audio`: base64 `data` saved to a file.
    Media {
        /// `"image"` or `"audio"`.
        kind: &'static str,
        /// `mimeType` (`application/octet-stream` when missing).
        mime: String,
        /// The base64 data.
        data: String,
    },
    /// `resource_link`: named, not fetched.
    ResourceLink {
        /// Its `uri`.
        uri: String,
        /// Its `name` (may be empty).
        name: String,
    },
    /// `resource`: an embedded resource, its text printed or its blob saved.
    Resource {
        /// Its `uri`.
        uri: String,
        /// Its `mimeType` (`application/octet-stream` when missing).
        mime: String,
        /// Its text or blob.
        body: Body,
    },
    /// A part of another type, by that type's name (shown only with `--json`).
    Other(String),
}

/// What an embedded resource carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `text`.
    Text(String),
    /// `blob`: base64.
    Blob(String),
    /// Neither.
    Empty,
}

impl CallResult {
    /// Reads a `tools/call` result (never fails; see [`CallResult`]).
    pub fn parse(result: &Value) -> CallResult {
        let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let mime_of =
            |v: &Value| str_of(v, "mimeType").unwrap_or_else(|| "application/octet-stream".into());
        let part = |p: &Value| match p.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => Content::Text(str_of(p, "text").unwrap_or_default()),
            k @ ("image" | "audio") => Content::Media {
                kind: if k == "image" { "image" } else { "audio" },
                mime: mime_of(p),
                data: str_of(p, "data").unwrap_or_default(),
            },
            "resource_link" => Content::ResourceLink {
                uri: str_of(p, "uri").unwrap_or_default(),
                name: str_of(p, "name").unwrap_or_default(),
            },
            "resource" => {
                let r = p.get("resource").cloned().unwrap_or(Value::Null);
                let body = match (str_of(&r, "text"), str_of(&r, "blob")) {
                    (Some(t), _) => Body::Text(t),
                    (None, Some(b)) => Body::Blob(b),
                    (None, None) => Body::Empty,
                };
                Content::Resource {
                    uri: str_of(&r, "uri").unwrap_or_default(),
                    mime: mime_of(&r),
                    body,
                }
            }
            other => Content::Other(other.to_string()),
        };
        CallResult {
            is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
            content: result
                .get("content")
                .and_then(Value::as_array)
                .map(|parts| parts.iter().map(part).collect())
                .unwrap_or_default(),
            structured: result.get("structuredContent").cloned(),
        }
    }
}

/// What a result shows: the text for stdout, notes for stderr, and each saved part (its index
/// in `content`, whether it is an embedded resource, and the file it went to).
#[derive(Debug, Default)]
struct Shown {
    text: String,
    notes: String,
    saved: Vec<(usize, bool, PathBuf)>,
}

/// Appends `s` to `out` as whole lines.
fn push_line(out: &mut String, s: &str) {
    out.push_str(s);
    if !s.ends_with('\n') {
        out.push('\n');
    }
}

/// Shows each part of `call` (saving the non-text ones through `save`).
fn show(call: &CallResult, save: &mut Save<'_>) -> Shown {
    let mut shown = Shown::default();
    for (i, part) in call.content.iter().enumerate() {
        let line = match part {
            Content::Text(t) => Ok(t.clone()),
            Content::Media { kind, mime, data } => {
                saved(kind, mime, data, save).map(|(line, p)| {
                    shown.saved.push((i, false, p));
                    line
                })
            }
            Content::ResourceLink { uri, name } if name.is_empty() => {
                Ok(format!("[resource link: {uri}]"))
            }
            Content::ResourceLink { uri, name } => Ok(format!("[resource link: {uri} ({name})]")),
            Content::Resource {
                body: Body::Text(t),
                ..
            } => Ok(t.clone()),
            Content::Resource {
                uri,
                mime,
                body: Body::Blob(b),
            } => saved("resource", mime, b, save).map(|(line, p)| {
                shown.saved.push((i, true, p));
                format!("{line} {uri}")
            }),
            Content::Resource {
                body: Body::Empty, ..
            } => continue,
            Content::Other(kind) => Err(format!(
                "[a part of type {kind:?} tern does not show: use --json]"
            )),
        };
        match line {
            Ok(l) => push_line(&mut shown.text, &l),
            Err(l) => push_line(&mut shown.notes, &l),
        }
    }
    if shown.text.is_empty()
        && let Some(s) = &call.structured
    {
        push_line(
            &mut shown.text,
            &serde_json::to_string_pretty(s).unwrap_or_default(),
        );
    }
    shown
}

/// `result` with each saved part's data replaced by `"saved": PATH` (for `--json`).
fn with_saved(result: &Value, saved: &[(usize, bool, PathBuf)]) -> Value {
    let mut doc = result.clone();
    for (i, resource, path) in saved {
        let Some(part) = doc.get_mut("content").and_then(|c| c.get_mut(*i)) else {
            continue;
        };
        let (obj, key) = match (resource, part.get_mut("resource")) {
            (true, Some(r)) => (r, "blob"),
            _ => (part, "data"),
        };
        if let Some(o) = obj.as_object_mut() {
            o.remove(key);
            o.insert("saved".into(), Value::from(path.display().to_string()));
        }
    }
    doc
}

/// A `tools/call` result as `tern mcp call` prints it: text parts as they are, other parts
/// saved (see [`Save`]) and named; `json`: the whole result, each saved part's data replaced by
/// `"saved": PATH`. An `isError` result exits 1 with its text on stderr.
pub fn call_result(result: &Value, json: bool, save: &mut Save<'_>) -> Reply {
    let call = CallResult::parse(result);
    let shown = show(&call, save);
    let exit = i32::from(call.is_error);
    if json {
        let doc = with_saved(result, &shown.saved);
        let mut stdout = serde_json::to_string_pretty(&doc).unwrap_or_default();
        stdout.push('\n');
        return Reply {
            stdout,
            stderr: shown.notes,
            exit,
        };
    }
    if call.is_error {
        let mut stderr = shown.text;
        stderr.push_str(&shown.notes);
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
        stdout: shown.text,
        stderr: shown.notes,
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

    #[test]
    fn a_result_is_read_into_its_content_kinds_leniently() {
        let r = json!({"isError": false, "content": [
            {"type":"text"},
            {"type":"audio","data":"AA=="},
            {"type":"resource_link","uri":"u"},
            {"type":"resource"},
            {"type":"resource","resource":{"uri":"x","blob":"AA==","mimeType":"image/png"}},
            {"type": 7},
            "not an object"]});
        let c = CallResult::parse(&r);
        assert!(!c.is_error && c.structured.is_none());
        assert_eq!(
            c.content,
            vec![
                Content::Text(String::new()),
                Content::Media {
                    kind: "audio",
                    mime: "application/octet-stream".into(),
                    data: "AA==".into()
                },
                Content::ResourceLink {
                    uri: "u".into(),
                    name: String::new()
                },
                Content::Resource {
                    uri: String::new(),
                    mime: "application/octet-stream".into(),
                    body: Body::Empty
                },
                Content::Resource {
                    uri: "x".into(),
                    mime: "image/png".into(),
                    body: Body::Blob("AA==".into())
                },
                Content::Other(String::new()),
                Content::Other(String::new()),
            ]
        );
        assert_eq!(CallResult::parse(&json!("x")), CallResult::default());
        // --json: a saved blob's data is replaced where it was, in the resource.
        let mut save = |_: &str, _: &[u8]| Ok(PathBuf::from("/s/r.png"));
        let j = call_result(&r, true, &mut save);
        let v: Value = serde_json::from_str(&j.stdout).unwrap();
        assert_eq!(v["content"][4]["resource"]["saved"], "/s/r.png");
        assert!(v["content"][4]["resource"].get("blob").is_none());
        assert_eq!(v["content"][1]["saved"], "/s/r.png");
    }
}
