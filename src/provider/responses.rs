//! OpenAI's Responses API, streaming (`POST {base}/responses`): the wire OpenAI's reasoning
//! models keep their reasoning on between tool calls (OpenAI docs, "Reasoning models": with
//! `store: false`, ask `include: ["reasoning.encrypted_content"]` and pass every reasoning item
//! back in `input`; "Prompt caching": `prompt_cache_key` keeps one conversation's requests on a
//! warm cache).
//!
//! The body is compact JSON with a fixed field order and `input` last, each stored message
//! turning into the same items wherever it sits, so consecutive bodies share the longest byte
//! prefix. The system prompt is `instructions`; a user message is `{"role":"user","content":…}`;
//! an assistant message is its stored reasoning items (exactly as received, in output order),
//! then `{"role":"assistant","content":…}` for its text and a `function_call` item per call; a
//! tool result is a `function_call_output`. The tail is `"\n\n" + tail` on the latest item's
//! text.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::http::{HttpConfig, StreamDecoder, Transport, classify_error, redact, snippet};
use super::sse::SseEvent;
use super::{Completion, ErrorKind, Finish, Provider, ProviderError, RawToolCall, Request, Usage};
use crate::message::{Message, Reasoning};

/// A server of the Responses API (api.openai.com, or any that offers `/v1/responses`).
#[derive(Debug)]
pub struct Responses {
    transport: Transport,
    url: String,
    api_key: Option<String>,
}

impl Responses {
    /// A client for the server at `base_url` (`https://api.openai.com/v1`): requests go to
    /// `{base_url}/responses`; `api_key` is sent as `Authorization: Bearer …` when Some.
    pub fn new(config: HttpConfig, base_url: &str, api_key: Option<String>) -> Self {
        Responses {
            transport: Transport::new(config),
            url: super::http::endpoint(base_url, "", "/responses"),
            api_key,
        }
    }
}

impl Provider for Responses {
    fn name(&self) -> super::Wire {
        super::Wire::Responses
    }

    fn body(&self, req: &Request<'_>) -> Vec<u8> {
        body(req)
    }

    fn complete(
        &mut self,
        body: &[u8],
        _purpose: crate::event::Purpose,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &crate::cancel::CancelToken,
    ) -> Result<Completion, ProviderError> {
        let auth = self.api_key.as_ref().map(|k| format!("Bearer {k}"));
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ];
        if let Some(a) = &auth {
            headers.push(("authorization", a.as_str()));
        }
        let secret = self.api_key.as_deref();
        let mut decoder = Decoder::new(secret);
        self.transport.post_sse(
            &self.url,
            &headers,
            body,
            secret,
            &mut decoder,
            on_text,
            cancel,
        )
    }
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    stream: bool,
    /// Nothing is kept on OpenAI's side: the conversation is tern's, sent whole each time.
    store: bool,
    /// The reasoning items come back encrypted, to be passed back (`store: false`).
    include: [&'static str; 1],
    max_output_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    instructions: &'a str,
    input: Vec<Value>,
    /// `"none"` only when the runtime asks for a text answer; after `input`, so the body keeps
    /// its byte prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

/// The Responses body for `req` (see the module doc).
pub fn body(req: &Request<'_>) -> Vec<u8> {
    let mut input: Vec<Value> = Vec::with_capacity(req.messages.len() + 1);
    for m in req.messages {
        match m {
            Message::User { content, .. } => {
                input.push(json!({"role": "user", "content": content}));
            }
            Message::Assistant {
                text,
                tool_calls,
                reasoning,
            } => {
                if let Some(Reasoning::Responses { items }) = reasoning {
                    input.extend(items.iter().cloned());
                }
                if !text.trim().is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for c in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        // Serializing a Value cannot fail (its map keys are strings).
                        "arguments": serde_json::to_string(&c.arguments).unwrap_or_default(),
                    }));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => input.push(json!({
                "type": "function_call_output",
                "call_id": tool_call_id,
                "output": content,
            })),
        }
    }
    if let Some(tail) = req.tail.filter(|t| !t.trim().is_empty()) {
        append_tail(&mut input, tail);
    }
    let body = Body {
        model: req.model,
        stream: true,
        store: false,
        include: ["reasoning.encrypted_content"],
        max_output_tokens: req.max_output_tokens.max(16),
        temperature: req.temperature,
        reasoning: req
            .reasoning
            .effort
            // OpenAI API reference, Responses, `reasoning.effort`: the Chat Completions values.
            .map(|e| json!({"effort": e.openai(), "summary": "auto"})),
        tools: req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                })
            })
            .collect(),
        prompt_cache_key: req.cache_key,
        instructions: req.system,
        input,
        tool_choice: (!req.tools_allowed).then_some("none"),
    };
    // Serializing plain structs of strings and Values cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Appends the tail to the latest item's text: a user message's content, a tool result's
/// output, else one more user message.
fn append_tail(input: &mut Vec<Value>, tail: &str) {
    let last = input.last_mut();
    let field = match last.as_deref() {
        Some(v) if v["role"] == "user" => Some("content"),
        Some(v) if v["type"] == "function_call_output" => Some("output"),
        _ => None,
    };
    match (last, field) {
        (Some(v), Some(f)) => {
            let joined = format!("{}\n\n{tail}", v[f].as_str().unwrap_or(""));
            v[f] = Value::from(joined);
        }
        _ => input.push(json!({"role": "user", "content": tail})),
    }
}

/// Decoder of a Responses stream (OpenAI API reference, "Streaming events"):
/// `response.output_text.delta` (text), `response.output_item.added` / `.done` (function calls
/// and reasoning items, kept whole as the item came: `encrypted_content` included),
/// `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta` (shown as
/// thought), `response.completed` / `response.incomplete` (usage; the end), `response.failed`
/// and `error` (classified). End of stream before the end event → [`ErrorKind::EarlyEnd`].
///
/// Usage: input = `input_tokens`, cached = `input_tokens_details.cached_tokens`, output =
/// `output_tokens` (reasoning tokens included, as billed).
#[derive(Debug, Default)]
pub struct Decoder {
    secret: Option<String>,
    text: String,
    /// Function calls by output index.
    calls: BTreeMap<u64, RawToolCall>,
    /// Reasoning items by output index, as the `.done` event gave them.
    reasoning: BTreeMap<u64, Value>,
    finish: Option<Finish>,
    usage: Usage,
    usage_refused: Option<String>,
    done: bool,
}

impl Decoder {
    /// A decoder; `secret` (the API key) is redacted from error frames it quotes.
    pub fn new(secret: Option<&str>) -> Self {
        Decoder {
            secret: secret.map(str::to_string),
            ..Decoder::default()
        }
    }

    fn bad(&self, what: &str, data: &str) -> ProviderError {
        ProviderError::new(
            ErrorKind::BadResponse,
            format!(
                "{what}: {}",
                snippet(&redact(data, self.secret.as_deref()), 200)
            ),
        )
    }

    /// A function-call item (added or done): its call id, name and (when done) arguments.
    fn call_item(&mut self, index: u64, item: &Value) {
        let call = self.calls.entry(index).or_default();
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        if call.id.is_empty() {
            call.id = s("call_id").to_string();
        }
        if call.name.is_empty() {
            call.name = s("name").to_string();
        }
        if let Some(a) = item.get("arguments").and_then(Value::as_str)
            && !a.is_empty()
        {
            call.arguments = a.to_string();
        }
    }

    /// The end event's `response`: usage and why it ended.
    fn ended(&mut self, response: Option<&Value>) {
        self.done = true;
        let Some(r) = response else { return };
        let incomplete = r.get("status").and_then(Value::as_str) == Some("incomplete");
        let reason = r
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .unwrap_or("");
        self.finish = Some(match (incomplete, reason) {
            (true, "max_output_tokens") => Finish::Length,
            (true, other) => Finish::Other(other.to_string()),
            (false, _) if !self.calls.is_empty() => Finish::ToolCalls,
            (false, _) => Finish::Stop,
        });
        if let Some(u) = r.get("usage") {
            let mut refused = None;
            let mut num = |p: &str| {
                super::usage_figure(u.pointer(p), p).unwrap_or_else(|why| {
                    refused.get_or_insert(why);
                    None
                })
            };
            self.usage.input_tokens = num("/input_tokens").unwrap_or(0);
            self.usage.cached_tokens = num("/input_tokens_details/cached_tokens").unwrap_or(0);
            self.usage.output_tokens = num("/output_tokens").unwrap_or(0);
            self.usage.reasoning_tokens =
                num("/output_tokens_details/reasoning_tokens").unwrap_or(0);
            self.usage_refused = refused;
        }
    }
}

impl StreamDecoder for Decoder {
    fn event(
        &mut self,
        ev: &SseEvent,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
    ) -> Result<(), ProviderError> {
        let data = ev.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| self.bad(&format!("a stream event is not valid JSON ({e})"), data))?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("");
        let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let item = v.get("item");
        let kind = item.and_then(|i| i.get("type")).and_then(Value::as_str);
        match ty {
            "response.output_text.delta" => {
                if let Some(t) = v
                    .get("delta")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    on_text(crate::provider::Streamed::Text(t));
                    self.text.push_str(t);
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(t) = v
                    .get("delta")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    on_text(crate::provider::Streamed::Thought(t));
                }
            }
            "response.output_item.added" | "response.output_item.done" => match (kind, item) {
                (Some("function_call"), Some(i)) => self.call_item(index, i),
                // Kept exactly as given: it goes back in every later request.
                (Some("reasoning"), Some(i)) if ty.ends_with(".done") => {
                    self.reasoning.insert(index, i.clone());
                }
                _ => {}
            },
            "response.function_call_arguments.delta" => {
                if let Some(d) = v.get("delta").and_then(Value::as_str) {
                    self.calls.entry(index).or_default().arguments.push_str(d);
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(a) = v.get("arguments").and_then(Value::as_str) {
                    self.calls.entry(index).or_default().arguments = a.to_string();
                }
            }
            "response.completed" | "response.incomplete" => self.ended(v.get("response")),
            "response.failed" | "error" => {
                return Err(classify_error(None, data, self.secret.as_deref()));
            }
            // created, in_progress, content_part, …: nothing to keep.
            _ => {}
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) -> Result<Completion, ProviderError> {
        if !self.done {
            return Err(ProviderError::new(
                ErrorKind::EarlyEnd,
                format!(
                    "the stream ended before response.completed after {} bytes of text and {} tool call(s)",
                    self.text.len(),
                    self.calls.len()
                ),
            ));
        }
        let (usage, usage_refused) = super::believed(self.usage, self.usage_refused.take());
        Ok(Completion {
            text: std::mem::take(&mut self.text),
            tool_calls: std::mem::take(&mut self.calls).into_values().collect(),
            finish_reason: self.finish.take(),
            usage,
            reasoning: (!self.reasoning.is_empty()).then(|| Reasoning::Responses {
                items: std::mem::take(&mut self.reasoning).into_values().collect(),
            }),
            usage_refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::provider::http::decode_chunks;
    use crate::provider::reasoning::Effort;
    use crate::tools::ToolSpec;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "bash",
            description: "Run a command.".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    fn req<'a>(
        tools: &'a [ToolSpec],
        messages: &'a [Message],
        tail: Option<&'a str>,
    ) -> Request<'a> {
        Request {
            model: "gpt-5",
            system: "sys",
            tools,
            messages,
            tail,
            cache_key: Some("s1"),
            max_output_tokens: 100,
            temperature: None,
            official_openai: true,
            tools_allowed: true,
            long_cache: false,
            reasoning: Default::default(),
        }
    }

    #[test]
    fn the_body_keeps_reasoning_items_in_place_and_the_tail_on_the_latest_item() {
        let t = tools();
        let item =
            json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"});
        let call = ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
        };
        let msgs = vec![
            Message::user("go"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call.clone()],
                reasoning: Some(Reasoning::Responses {
                    items: vec![item.clone()],
                }),
            },
            Message::tool(&call, "a\nb", false),
        ];
        let mut r = req(&t, &msgs, Some("<tern:work_state>x</tern:work_state>"));
        r.reasoning.effort = Some(Effort::Low);
        let v: Value = serde_json::from_slice(&body(&r)).unwrap();
        assert_eq!(v["store"], false);
        assert_eq!(v["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(v["reasoning"], json!({"effort": "low", "summary": "auto"}));
        assert_eq!(v["prompt_cache_key"], "s1");
        assert_eq!(v["instructions"], "sys");
        assert_eq!(v["tools"][0]["type"], "function");
        let input = v["input"].as_array().unwrap();
        assert_eq!(input[1], item, "the item goes back exactly as received");
        assert_eq!(input[2]["type"], "function_call");
        assert_eq!(input[2]["arguments"], "{\"command\":\"ls\"}");
        assert_eq!(
            input[3]["output"],
            "a\nb\n\n<tern:work_state>x</tern:work_state>"
        );
        // The stored part is the same bytes without the tail.
        let plain = body(&req(&t, &msgs, None));
        let with = body(&req(&t, &msgs, Some("tail")));
        let common = crate::provider::common_prefix(&plain, &with);
        assert!(common > plain.len() - 20, "{common} of {}", plain.len());
    }

    #[test]
    fn a_stream_gives_text_calls_reasoning_items_and_usage() {
        let ev = |t: &str, v: Value| format!("event: {t}\ndata: {v}\n\n");
        let mut s = String::new();
        s += &ev(
            "response.created",
            json!({"type": "response.created", "response": {}}),
        );
        s += &ev(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1"}}),
        );
        s += &ev(
            "response.reasoning_summary_text.delta",
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "plan"}),
        );
        s += &ev(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}], "encrypted_content": "gAAA"}}),
        );
        s += &ev(
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "ok"}),
        );
        s += &ev(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "bash", "arguments": ""}}),
        );
        s += &ev(
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{\"command\""}),
        );
        s += &ev(
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": ":\"ls\"}"}),
        );
        s += &ev(
            "response.completed",
            json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1536}, "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 32}}}}),
        );
        let (mut text, mut thought) = (String::new(), String::new());
        let c = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |t| match t {
            crate::provider::Streamed::Text(t) => text.push_str(t),
            crate::provider::Streamed::Thought(t) => thought.push_str(t),
            crate::provider::Streamed::Waiting { .. } => {}
        })
        .unwrap();
        assert_eq!((text.as_str(), thought.as_str()), ("ok", "plan"));
        assert_eq!(c.tool_calls[0].id, "call_9");
        assert_eq!(c.tool_calls[0].arguments, "{\"command\":\"ls\"}");
        assert_eq!(c.finish_reason, Some(Finish::ToolCalls));
        assert_eq!(
            (
                c.usage.input_tokens,
                c.usage.cached_tokens,
                c.usage.output_tokens,
                c.usage.reasoning_tokens
            ),
            (2000, 1536, 50, 32)
        );
        let Some(Reasoning::Responses { items }) = c.reasoning else {
            panic!("no reasoning kept");
        };
        assert_eq!(items[0]["encrypted_content"], "gAAA");
    }

    #[test]
    fn an_early_end_and_a_failure_are_errors() {
        let s = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"o\"}\n\n";
        let e = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, ErrorKind::EarlyEnd);
        let s = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n";
        assert!(decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |_| {}).is_err());
        let s = "data: not json\n\n";
        let e = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadResponse);
    }

    /// Hostile bytes never panic the decoder: every prefix of a real stream, and the stream
    /// with events of the wrong shape (numbers for strings, missing fields, nulls).
    #[test]
    fn hostile_streams_are_errors_or_completions_never_panics() {
        let ev = |v: Value| format!("data: {v}\n\n");
        let mut s = String::new();
        s += &ev(
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "call_id": "c", "name": "bash"}}),
        );
        s += &ev(
            json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{}"}),
        );
        s += &ev(
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "reasoning", "encrypted_content": "x"}}),
        );
        s += &ev(json!({"type": "response.completed", "response": {"usage": {"input_tokens": 5}}}));
        for cut in 0..=s.len() {
            let _ = decode_chunks(
                &[&s.as_bytes()[..cut]],
                &mut Decoder::new(None),
                &mut |_| {},
            );
        }
        for odd in [
            json!({"type": "response.output_text.delta", "delta": 7}),
            json!({"type": "response.output_item.added", "item": null}),
            json!({"type": "response.output_item.done", "output_index": -1, "item": {"type": "function_call", "arguments": 3}}),
            json!({"type": "response.function_call_arguments.done"}),
            json!({"type": "response.completed", "response": {"status": 1, "usage": {"input_tokens": -3, "output_tokens": "x"}}}),
            json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
            json!([1, 2]),
            json!("text"),
        ] {
            let stream = ev(odd);
            let _ = decode_chunks(&[stream.as_bytes()], &mut Decoder::new(None), &mut |_| {});
        }
        let cut = ev(
            json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
        );
        let c = decode_chunks(&[cut.as_bytes()], &mut Decoder::new(None), &mut |_| {}).unwrap();
        assert_eq!(c.finish_reason, Some(Finish::Length));
        let bad =
            ev(json!({"type": "response.completed", "response": {"usage": {"input_tokens": -3}}}));
        let c = decode_chunks(&[bad.as_bytes()], &mut Decoder::new(None), &mut |_| {}).unwrap();
        assert!(
            c.usage_refused.is_some(),
            "a negative count is not believed"
        );
    }
}
