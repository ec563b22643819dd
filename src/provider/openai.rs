//! OpenAI-compatible Chat Completions, streaming (OpenAI, DeepSeek, OpenRouter, vLLM, llama.cpp,
//! Ollama).
//!
//! The body is compact JSON with a fixed field order and `messages` last, and every message
//! serializes to the same bytes wherever it sits, so consecutive bodies share the longest byte
//! prefix (the servers' prefix caches match on it). The tail is `"\n\n" + tail` on the latest
//! message's string content only.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::http::{HttpConfig, StreamDecoder, Transport, classify_error, snippet};
use super::reasoning::{self, Effort, Replay, Vendor};
use super::sse::SseEvent;
use super::{Completion, ErrorKind, Provider, ProviderError, RawToolCall, Request, Usage};
use crate::message::{Message, Reasoning};

/// An OpenAI-compatible Chat Completions server.
#[derive(Debug)]
pub struct OpenAi {
    transport: Transport,
    url: String,
    api_key: Option<String>,
}

impl OpenAi {
    /// A client for the server at `base_url` (e.g. `https://api.openai.com/v1`,
    /// `http://127.0.0.1:8080/v1`; a trailing slash is fine): requests go to
    /// `{base_url}/chat/completions`. `api_key` is sent as `Authorization: Bearer …` and left out
    /// when None (local servers).
    pub fn new(config: HttpConfig, base_url: &str, api_key: Option<String>) -> Self {
        OpenAi {
            transport: Transport::new(config),
            url: super::http::endpoint(base_url, "", "/chat/completions"),
            api_key,
        }
    }
}

impl Provider for OpenAi {
    fn name(&self) -> super::Wire {
        super::Wire::Openai
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
    stream_options: StreamOptions,
    /// The output cap (other servers' name for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// The output cap (OpenAI's own API: `max_tokens` is refused by its newer models).
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// `--reasoning-effort` where the server takes `reasoning_effort` (OpenAI, Kimi, most
    /// OpenAI-compatible servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    /// `--reasoning-effort` where the server takes a `thinking` switch (DeepSeek, GLM).
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    messages: Vec<Msg<'a>>,
    /// `"none"` only when the runtime asks for a text answer; after `messages`, so such a
    /// request (a compaction's summary) still extends the previous body byte for byte.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Msg<'a> {
    System {
        content: &'a str,
    },
    User {
        content: Cow<'a, str>,
    },
    Assistant {
        content: Option<Cow<'a, str>>,
        /// Stored reasoning sent back by the host's rule (`provider::reasoning`).
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<&'a str>,
        /// The same, for servers that sent it as `reasoning` (OpenRouter).
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: String,
}

/// The Chat Completions body for `req` (compact JSON): `model`, `stream`, `stream_options`,
/// `tools` (omitted when empty), `prompt_cache_key` (when `req.cache_key` is Some), `messages`.
/// No `max_tokens`: several OpenAI models reject it and the others have sane defaults.
///
/// Messages: the system prompt first; an assistant message has `content` null only when its
/// text is empty or whitespace, and `tool_calls` with the arguments as compact JSON strings; an
/// assistant message with neither text nor tool calls is left out (case C12). The tail is
/// appended to the latest message's content as `"\n\n" + tail`.
pub fn body(req: &Request<'_>) -> Vec<u8> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(Msg::System {
            content: req.system,
        });
    }
    let last = req.messages.len().saturating_sub(1);
    for (i, m) in req.messages.iter().enumerate() {
        let tail = if i == last {
            req.tail.filter(|t| !t.trim().is_empty())
        } else {
            None
        };
        match m {
            Message::User { content, .. } => messages.push(Msg::User {
                content: append_tail(content, tail),
            }),
            Message::Assistant {
                text,
                tool_calls,
                reasoning,
            } => {
                let (reasoning_content, reasoning) = replayed(
                    reasoning.as_ref(),
                    req.reasoning.replay,
                    !tool_calls.is_empty(),
                );
                let text = if text.trim().is_empty() { "" } else { text };
                if text.is_empty() && tool_calls.is_empty() && tail.is_none() {
                    continue;
                }
                let content = match (text.is_empty(), tail) {
                    (true, None) => None,
                    (true, Some(t)) => Some(Cow::Borrowed(t)),
                    (false, t) => Some(append_tail(text, t)),
                };
                let tool_calls = tool_calls
                    .iter()
                    .map(|c| Call {
                        id: &c.id,
                        kind: "function",
                        function: CallFunction {
                            name: &c.name,
                            // Serializing a Value cannot fail (its map keys are strings).
                            arguments: serde_json::to_string(&c.arguments).unwrap_or_default(),
                        },
                    })
                    .collect();
                messages.push(Msg::Assistant {
                    content,
                    reasoning_content,
                    reasoning,
                    tool_calls,
                });
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => messages.push(Msg::Tool {
                tool_call_id,
                content: append_tail(content, tail),
            }),
        }
    }
    let body = Body {
        model: req.model,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_tokens: (!req.official_openai).then_some(req.max_output_tokens.max(1)),
        max_completion_tokens: req.official_openai.then_some(req.max_output_tokens.max(1)),
        temperature: req.temperature,
        reasoning_effort: effort_field(&req.reasoning),
        thinking: thinking_switch(&req.reasoning),
        tools: req
            .tools
            .iter()
            .map(|t| Tool {
                kind: "function",
                function: Function {
                    name: t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        tool_choice: (!req.tools_allowed).then_some("none"),
        prompt_cache_key: req.cache_key,
        messages,
    };
    // Serializing plain structs of strings and Values cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// An assistant message's stored reasoning as it goes back (`reasoning_content`, `reasoning`),
/// by the host's rule: a Chat Completions reasoning under the field it came in; the key empty
/// where the rule wants it on every tool-call turn; nothing otherwise (another wire's
/// reasoning, after a provider switch, is never sent here).
fn replayed(
    stored: Option<&Reasoning>,
    rule: Replay,
    tool_calls: bool,
) -> (Option<&str>, Option<&str>) {
    match stored {
        Some(Reasoning::Chat { field, text }) if rule.sends(tool_calls) => {
            if field == "reasoning" {
                (None, Some(text))
            } else {
                (Some(text), None)
            }
        }
        _ if tool_calls && rule.always_keyed() => (Some(""), None),
        _ => (None, None),
    }
}

/// `reasoning_effort` for servers that take it (not DeepSeek's or GLM's `thinking` switch).
fn effort_field(s: &reasoning::Settings) -> Option<&'static str> {
    match s.vendor {
        Vendor::DeepSeek | Vendor::Zhipu => None,
        Vendor::OpenAi | Vendor::Moonshot | Vendor::Other => s.effort.map(Effort::openai),
    }
}

/// DeepSeek's and GLM's `thinking` switch for `--reasoning-effort` (DeepSeek API docs,
/// "Thinking Mode": `{"type": "enabled" | "disabled"}`; Z.AI docs, "Thinking Mode": the same,
/// with `clear_thinking: false` to keep earlier turns' thinking).
fn thinking_switch(s: &reasoning::Settings) -> Option<serde_json::Value> {
    let kind = match s.effort? {
        Effort::None => "disabled",
        _ => "enabled",
    };
    match s.vendor {
        Vendor::DeepSeek => Some(serde_json::json!({"type": kind})),
        Vendor::Zhipu => Some(serde_json::json!({"type": kind, "clear_thinking": false})),
        Vendor::OpenAi | Vendor::Moonshot | Vendor::Other => None,
    }
}

fn append_tail<'a>(content: &'a str, tail: Option<&str>) -> Cow<'a, str> {
    match tail {
        Some(t) => Cow::Owned(format!("{content}\n\n{t}")),
        None => Cow::Borrowed(content),
    }
}

/// Decoder of a Chat Completions stream: `data:` chunks of `choices[0].delta` (`content`,
/// `tool_calls` fragments joined per `index`), `finish_reason`, a usage chunk, `[DONE]`.
///
/// Complete on `[DONE]`, or at end of stream after a non-null `finish_reason` (some servers
/// omit `[DONE]`); otherwise [`ErrorKind::EarlyEnd`] (case C10). `reasoning_content` (or
/// `reasoning`) is shown as thought and kept in the completion; unknown fields are ignored; an
/// `{"error":…}` chunk is classified by
/// [`classify_error`].
#[derive(Debug, Default)]
pub struct Decoder {
    secret: Option<String>,
    text: String,
    /// Tool calls by the stream's `index`, so fragments of parallel calls join correctly.
    calls: BTreeMap<u64, RawToolCall>,
    last_index: Option<u64>,
    finish_reason: Option<super::Finish>,
    usage: Usage,
    /// Why a usage figure was not believed ([`super::usage_figure`]).
    usage_refused: Option<String>,
    done: bool,
    /// The reasoning streamed so far and the field it came in (None: none came).
    reasoning: Option<(&'static str, String)>,
    /// Runaway watches of the text and of the call being streamed.
    watch_text: super::runaway::Watch,
    watch_call: super::runaway::Watch,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<serde_json::Value>,
    /// llama.cpp server: `timings.cache_n` are the prompt tokens it reused from its cache.
    #[serde(default)]
    timings: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    /// The reasoning of reasoning models (DeepSeek, Kimi, GLM, vLLM, llama.cpp): shown and kept
    /// apart from the answer.
    #[serde(default)]
    reasoning_content: Option<serde_json::Value>,
    /// The same under OpenRouter's name.
    #[serde(default)]
    reasoning: Option<serde_json::Value>,
    #[serde(default)]
    tool_calls: Option<Vec<DeltaCall>>,
}

#[derive(Deserialize)]
struct DeltaCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<DeltaFunction>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

impl Decoder {
    /// A decoder; `secret` (the API key) is redacted from error frames it quotes.
    pub fn new(secret: Option<&str>) -> Self {
        Decoder {
            secret: secret.map(str::to_string),
            ..Decoder::default()
        }
    }

    fn tool_delta(&mut self, d: DeltaCall) {
        let id = d.id.filter(|s| !s.is_empty());
        // Servers that omit `index` send one call at a time: a new id starts the next call.
        let index = match (d.index, self.last_index) {
            (Some(i), _) => i,
            (None, None) => 0,
            (None, Some(last)) => match (&id, self.calls.get(&last)) {
                (Some(id), Some(c)) if !c.id.is_empty() && &c.id != id => last.saturating_add(1),
                _ => last,
            },
        };
        self.last_index = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(f) = d.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(a) = f.arguments {
                call.arguments.push_str(&a);
            }
        }
    }
}

impl Decoder {
    /// Ends the answer here (finish reason `repetition`) when it runs away: its text or the call
    /// being streamed repeats itself, or one call is made a fourth time (the three kept).
    fn stop_a_runaway(&mut self) {
        let current = self.last_index.and_then(|i| self.calls.get(&i));
        let args_run = current.is_some_and(|c| self.watch_call.runaway(&c.arguments));
        let text_run = self.watch_text.runaway(&self.text);
        let complete = self.calls.len().saturating_sub(1);
        let same_call_again = complete >= 4 && {
            let done: Vec<&RawToolCall> = self.calls.values().take(complete).collect();
            let last = done[done.len() - 1];
            done.iter()
                .filter(|c| c.name == last.name && c.arguments == last.arguments)
                .count()
                >= 4
        };
        if same_call_again {
            // Keep the first three copies; drop the fourth and the call after it.
            let keep: Vec<u64> = self.calls.keys().copied().take(complete - 1).collect();
            self.calls.retain(|k, _| keep.contains(k));
        }
        if args_run || text_run || same_call_again {
            self.finish_reason = Some(super::Finish::Repetition);
            self.done = true;
        }
    }
}

impl StreamDecoder for Decoder {
    fn event(
        &mut self,
        ev: &SseEvent,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
    ) -> Result<(), ProviderError> {
        let secret = self.secret.as_deref();
        match ev.event.as_deref() {
            None | Some("message") => {}
            Some("error") => return Err(classify_error(None, &ev.data, secret)),
            // Pings and other named events are not part of the Chat Completions stream.
            Some(_) => return Ok(()),
        }
        let data = ev.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            ProviderError::new(
                ErrorKind::BadResponse,
                format!(
                    "a stream chunk is not valid JSON ({e}): {}",
                    snippet(&super::http::redact(data, secret), 200)
                ),
            )
        })?;
        if chunk.error.as_ref().is_some_and(|e| !e.is_null()) {
            return Err(classify_error(None, data, secret));
        }
        let applied = match (&chunk.usage, &chunk.timings) {
            (Some(u), t) => apply_usage(&mut self.usage, u, t.as_ref()),
            (None, Some(t)) => apply_usage(&mut self.usage, &serde_json::Value::Null, Some(t)),
            (None, None) => Ok(()),
        };
        if let Err(why) = applied {
            self.usage_refused = Some(why);
        }
        let choices = chunk.choices.unwrap_or_default();
        // One completion was asked for (no `n`): choice 0.
        let Some(choice) = choices.into_iter().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(());
        };
        if let Some(delta) = choice.delta {
            let thought = [
                ("reasoning_content", &delta.reasoning_content),
                ("reasoning", &delta.reasoning),
            ]
            .into_iter()
            .find_map(|(field, v)| Some((field, v.as_ref()?.as_str()?)));
            if let Some((field, t)) = thought {
                // Kept as received: it may go back byte for byte (`provider::reasoning`).
                let kept = self.reasoning.get_or_insert_with(|| (field, String::new()));
                kept.1.push_str(t);
                if !t.is_empty() {
                    on_text(crate::provider::Streamed::Thought(t));
                }
            }
            if let Some(t) = delta.content.filter(|t| !t.is_empty()) {
                on_text(crate::provider::Streamed::Text(&t));
                self.text.push_str(&t);
            }
            for d in delta.tool_calls.unwrap_or_default() {
                self.tool_delta(d);
            }
        }
        if let Some(r) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.finish_reason = Some(super::Finish::from_wire(&r));
        }
        self.stop_a_runaway();
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) -> Result<Completion, ProviderError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ProviderError::new(
                ErrorKind::EarlyEnd,
                format!(
                    "the stream ended without finish_reason or [DONE] after {} bytes of text and {} tool call(s)",
                    self.text.len(),
                    self.calls.len()
                ),
            ));
        }
        let (usage, usage_refused) = super::believed(self.usage, self.usage_refused.take());
        Ok(Completion {
            text: std::mem::take(&mut self.text),
            tool_calls: std::mem::take(&mut self.calls).into_values().collect(),
            finish_reason: self.finish_reason.take(),
            usage,
            reasoning: self.reasoning.take().map(|(field, text)| Reasoning::Chat {
                field: field.to_string(),
                text,
            }),
            usage_refused,
        })
    }
}

/// Normalises Chat Completions usage (see [`Usage`]): input = `prompt_tokens`; cached =
/// `prompt_tokens_details.cached_tokens` (OpenAI), else `prompt_cache_hit_tokens` (DeepSeek),
/// else llama.cpp `timings.cache_n`; output = `completion_tokens`. Without `usage`, llama.cpp
/// `timings` alone give input = `prompt_n + cache_n`, output = `predicted_n`. A figure that is
/// not a token count ([`super::usage_figure`]) is an error naming it; `usage` is then unchanged.
fn apply_usage(
    usage: &mut Usage,
    u: &serde_json::Value,
    timings: Option<&serde_json::Value>,
) -> Result<(), String> {
    use super::usage_figure as num;
    let t = |k: &str| num(timings.and_then(|t| t.get(k)), &format!("timings.{k}"));
    let input = match num(u.get("prompt_tokens"), "prompt_tokens")? {
        Some(i) => Some(i),
        None => match t("prompt_n")? {
            Some(p) => Some(p.saturating_add(t("cache_n")?.unwrap_or(0))),
            None => None,
        },
    };
    let cached = match num(
        u.pointer("/prompt_tokens_details/cached_tokens"),
        "prompt_tokens_details.cached_tokens",
    )? {
        Some(c) => Some(c),
        None => match num(u.get("prompt_cache_hit_tokens"), "prompt_cache_hit_tokens")? {
            Some(c) => Some(c),
            None => t("cache_n")?,
        },
    };
    let output = match num(u.get("completion_tokens"), "completion_tokens")? {
        Some(o) => Some(o),
        None => t("predicted_n")?,
    };
    if let Some(i) = input {
        usage.input_tokens = i;
    }
    if let Some(c) = cached {
        usage.cached_tokens = c;
    }
    if let Some(o) = output {
        usage.output_tokens = o;
    }
    if let Some(r) = num(
        u.pointer("/completion_tokens_details/reasoning_tokens"),
        "completion_tokens_details.reasoning_tokens",
    )? {
        usage.reasoning_tokens = r;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::provider::http::decode_chunks;
    use crate::tools::ToolSpec;
    use serde_json::{Value, json};

    fn decode(stream: &str) -> Result<Completion, ProviderError> {
        decode_chunks(&[stream.as_bytes()], &mut Decoder::new(None), &mut |_| {})
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "bash",
            description: "Run a command.".into(),
            parameters: json!({"type":"object","properties":{"command":{"type":"string"}}}),
        }]
    }

    fn req<'a>(
        tools: &'a [ToolSpec],
        messages: &'a [Message],
        tail: Option<&'a str>,
    ) -> Request<'a> {
        Request {
            model: "m",
            system: "sys",
            tools,
            messages,
            tail,
            cache_key: None,
            max_output_tokens: 100,
            temperature: None,
            official_openai: false,
            tools_allowed: true,
            long_cache: false,
            reasoning: Default::default(),
        }
    }

    fn call(id: &str, cmd: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: json!({"command": cmd}),
        }
    }

    /// The output cap goes on every request, under the name the server takes; a temperature only
    /// when set.
    #[test]
    fn output_cap_and_temperature() {
        let t = tools();
        let msgs = vec![Message::user("hi")];
        let mut r = req(&t, &msgs, None);
        let b = String::from_utf8(body(&r)).unwrap();
        assert!(
            b.contains(r#""max_tokens":100"#) && !b.contains("temperature"),
            "{b}"
        );
        r.official_openai = true;
        r.temperature = Some(0.2);
        let b = String::from_utf8(body(&r)).unwrap();
        assert!(
            b.contains(r#""max_completion_tokens":100,"temperature":0.2"#),
            "{b}"
        );
        assert!(!b.contains(r#""max_tokens""#), "{b}");
    }

    /// One answer repeating the same call, or its text running on, is cut mid-stream.
    #[test]
    fn a_runaway_answer_is_stopped() {
        let mut stream = String::new();
        for i in 0..8 {
            stream.push_str(&format!(
                "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"c{i}\",\"function\":{{\"name\":\"bash\",\"arguments\":\"{{\\\"command\\\":\\\"ls\\\"}}\"}}}}]}}}}]}}\n\n"
            ));
        }
        stream.push_str("data: [DONE]\n\n");
        let c = decode(&stream).unwrap();
        assert_eq!(c.finish_reason, Some(crate::provider::Finish::Repetition));
        assert_eq!(c.tool_calls.len(), 3, "{:?}", c.tool_calls);
        let mut text = String::new();
        for _ in 0..400 {
            text.push_str("data: {\"choices\":[{\"delta\":{\"content\":\"Buy milk. \"}}]}\n\n");
        }
        let c = decode(&text).unwrap();
        assert_eq!(c.finish_reason, Some(crate::provider::Finish::Repetition));
        assert!(c.text.len() < 4000, "{}", c.text.len());
    }

    #[test]
    fn body_shape() {
        let t = tools();
        let c = call("call_1", "ls");
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: String::new(),
                tool_calls: vec![c.clone()],
            },
            Message::tool(&c, "a.txt", false),
        ];
        let mut r = req(&t, &msgs, Some("<tern:work_state/>"));
        r.cache_key = Some("sess-1");
        let body = String::from_utf8(body(&r)).unwrap();
        assert_eq!(
            body,
            concat!(
                r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"#,
                r#""tools":[{"type":"function","function":{"name":"bash","description":"Run a command.","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"#,
                r#""prompt_cache_key":"sess-1","#,
                r#""messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"},"#,
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},"#,
                r#"{"role":"tool","tool_call_id":"call_1","content":"a.txt\n\n<tern:work_state/>"}]}"#
            )
        );
        // No tools: the field is left out.
        let body = String::from_utf8(super::body(&req(&[], &msgs, None))).unwrap();
        assert!(!body.contains("\"tools\""));
    }

    #[test]
    fn c12_no_empty_assistant_messages() {
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: "  \n".into(),
                tool_calls: vec![],
            },
            Message::user("again"),
        ];
        let body = String::from_utf8(super::body(&req(&[], &msgs, None))).unwrap();
        assert!(!body.contains("assistant"), "{body}");
        let c = call("c1", "ls");
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: " ".into(),
                tool_calls: vec![c.clone()],
            },
            Message::tool(&c, "x", false),
        ];
        let body = String::from_utf8(super::body(&req(&[], &msgs, None))).unwrap();
        assert!(
            body.contains(r#"{"role":"assistant","content":null,"tool_calls""#),
            "{body}"
        );
    }

    /// The previous body without its tail, minus the closing `]}`, is a byte prefix of the next
    /// body: every message serializes to the same bytes wherever it sits.
    #[test]
    fn consecutive_bodies_share_the_prefix() {
        let t = tools();
        let mut msgs = vec![Message::user("build it")];
        for i in 0..6 {
            let before = body(&req(&t, &msgs, None));
            let c = call(&format!("call_{i}"), &format!("echo {i} é"));
            msgs.push(Message::Assistant {
                reasoning: None,
                text: if i % 2 == 0 {
                    format!("step {i}")
                } else {
                    String::new()
                },
                tool_calls: vec![c.clone()],
            });
            msgs.push(Message::tool(&c, format!("out {i}\n"), i == 3));
            let next = body(&req(
                &t,
                &msgs,
                Some("<tern:work_state>\n- [ ] x\n</tern:work_state>"),
            ));
            let prefix = &before[..before.len() - 2];
            assert!(
                next.starts_with(prefix),
                "request {i} does not extend the previous one"
            );
        }
    }

    #[test]
    fn c09_comments_pings_and_spacing() {
        let c = decode(":\n\n: PROCESSING\n\nevent: ping\ndata: {}\n\ndata:{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n").unwrap();
        assert_eq!(c.text, "hi");
        assert_eq!(c.finish_reason, None);
    }

    #[test]
    fn c21_pretty_printed_arguments_split_over_deltas() {
        let frags = ["{\n", "  \"command\": ", "\"echo hi > hello.txt\"", "\n}"];
        let mut s = String::from(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"\"}}]}}]}\n\n",
        );
        for f in frags {
            let chunk = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":f}}]}}]});
            s.push_str(&format!("data: {chunk}\n\n"));
        }
        s.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"timings\":{\"cache_n\":512,\"prompt_n\":100,\"predicted_n\":20}}\n\ndata: [DONE]\n\n");
        let c = decode(&s).unwrap();
        assert_eq!(c.tool_calls.len(), 1);
        assert_eq!(c.tool_calls[0].id, "call_a");
        assert_eq!(c.tool_calls[0].name, "bash");
        assert_eq!(c.tool_calls[0].arguments, frags.concat());
        let v: serde_json::Value = serde_json::from_str(&c.tool_calls[0].arguments).unwrap();
        assert_eq!(v["command"], "echo hi > hello.txt");
        assert_eq!(c.finish_reason, Some(crate::provider::Finish::ToolCalls));
        assert_eq!(c.usage.cached_tokens, 512);
        assert_eq!(c.usage.input_tokens, 612);
        assert_eq!(c.usage.output_tokens, 20);
    }

    #[test]
    fn parallel_tool_calls_join_by_index() {
        let s = concat!(
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"bash","arguments":"{\"co"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"work_update","arguments":"{}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"mmand\":\"ls\"}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            "\n\n",
        );
        // No [DONE]: EOF after a finish_reason completes.
        let c = decode(s).unwrap();
        assert_eq!(
            c.tool_calls,
            vec![
                RawToolCall {
                    id: "a".into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"ls"}"#.into()
                },
                RawToolCall {
                    id: "b".into(),
                    name: "work_update".into(),
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn c11_truncated_arguments_come_through_raw() {
        let s = concat!(
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"bash","arguments":"{\"command\": \"ls"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{},"finish_reason":"length"}]}"#,
            "\n\n",
            "data: [DONE]\n\n",
        );
        let c = decode(s).unwrap();
        assert_eq!(c.finish_reason, Some(crate::provider::Finish::Length));
        assert_eq!(c.tool_calls[0].arguments, r#"{"command": "ls"#);
    }

    #[test]
    fn usage_of_each_server() {
        let openai = r#"data: {"choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":1920}}}"#;
        let deepseek = r#"data: {"choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":9,"prompt_cache_hit_tokens":1920,"prompt_cache_miss_tokens":80}}"#;
        for u in [openai, deepseek] {
            let s = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"reasoning_content\":\"hmm\",\"content\":\"ok\"}},\"finish_reason\":\"stop\"}}]}}\n\n{u}\n\ndata: [DONE]\n\n"
            );
            let c = decode(&s).unwrap();
            assert_eq!(c.text, "ok");
            assert_eq!(
                c.usage,
                Usage {
                    reasoning_tokens: 0,
                    input_tokens: 2000,
                    cached_tokens: 1920,
                    cache_write_tokens: 0,
                    output_tokens: 9
                }
            );
        }
    }

    #[test]
    fn reasoning_streams_as_thoughts_and_stays_out_of_the_answer() {
        let s = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"let me \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning\":\"think\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let (mut text, mut thought) = (String::new(), String::new());
        let c = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |t| match t {
            crate::provider::Streamed::Text(t) => text.push_str(t),
            crate::provider::Streamed::Thought(t) => thought.push_str(t),
            crate::provider::Streamed::Waiting { .. } => {}
        })
        .unwrap();
        assert_eq!((text.as_str(), thought.as_str()), ("ok", "let me think"));
        assert_eq!(c.text, "ok");
    }

    #[test]
    fn c10_early_end_is_an_error() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n";
        let mut seen = String::new();
        let e = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |t| {
            if let crate::provider::Streamed::Text(t) = t {
                seen.push_str(t)
            }
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::EarlyEnd);
        assert!(e.retryable());
        assert_eq!(seen, "hello");
        // finish_reason: null is not a finish.
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
        assert_eq!(decode(s).unwrap_err().kind, ErrorKind::EarlyEnd);
    }

    #[test]
    fn error_frames_are_classified() {
        let s = "data: {\"error\":{\"message\":\"Provider overloaded\",\"code\":529}}\n\n";
        assert_eq!(decode(s).unwrap_err().kind, ErrorKind::Overloaded);
        let s = "event: error\ndata: {\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\"}}\n\n";
        assert_eq!(decode(s).unwrap_err().kind, ErrorKind::ContextOverflow);
        let s = "data: {not json\n\n";
        assert_eq!(decode(s).unwrap_err().kind, ErrorKind::BadResponse);
    }

    /// The reasoning streamed with an answer is kept, joined, under the field it came in.
    #[test]
    fn reasoning_is_kept_in_the_completion_under_its_field() {
        let s = "data: {\"choices\":[{\"delta\":{\"reasoning\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning\":\"b\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let c = decode(s).unwrap();
        assert_eq!(
            c.reasoning,
            Some(Reasoning::Chat {
                field: "reasoning".into(),
                text: "ab".into()
            })
        );
        let none = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":null,\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(decode(none).unwrap().reasoning, None);
    }

    /// Each replay rule as the body says it: required keys every tool-call turn (empty when
    /// nothing was stored), beneficial sends what is stored, forbidden and unknown send nothing,
    /// and another wire's reasoning never goes out here.
    #[test]
    fn stored_reasoning_goes_back_by_the_rule() {
        let t = tools();
        let stored = |text: &str| {
            Some(Reasoning::Chat {
                field: "reasoning_content".into(),
                text: text.into(),
            })
        };
        let msgs = vec![
            Message::user("go"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("c1", "ls")],
                reasoning: stored("think 1"),
            },
            Message::tool(
                &ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: json!({}),
                },
                "a",
                false,
            ),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("c2", "ls")],
                reasoning: None,
            },
            Message::tool(
                &ToolCall {
                    id: "c2".into(),
                    name: "bash".into(),
                    arguments: json!({}),
                },
                "b",
                false,
            ),
            Message::Assistant {
                text: "done".into(),
                tool_calls: Vec::new(),
                reasoning: stored("think 3"),
            },
            Message::Assistant {
                text: "and".into(),
                tool_calls: Vec::new(),
                reasoning: Some(Reasoning::Anthropic {
                    blocks: vec![json!({"type": "thinking", "thinking": "x", "signature": "s"})],
                }),
            },
            Message::user("more"),
        ];
        let body_with = |replay: Replay| {
            let mut r = req(&t, &msgs, None);
            r.reasoning.replay = replay;
            let v: Value = serde_json::from_slice(&body(&r)).unwrap();
            v["messages"].as_array().unwrap().clone()
        };
        let m = body_with(Replay::Required);
        assert_eq!(m[2]["reasoning_content"], "think 1");
        assert_eq!(m[4]["reasoning_content"], "", "keyed even when empty");
        assert!(m[6].get("reasoning_content").is_none(), "no tool calls");
        let m = body_with(Replay::Beneficial);
        assert_eq!(m[2]["reasoning_content"], "think 1");
        assert!(m[4].get("reasoning_content").is_none());
        assert_eq!(m[6]["reasoning_content"], "think 3");
        assert!(m[7].get("reasoning_content").is_none(), "Anthropic's form");
        for rule in [Replay::Forbidden, Replay::Unknown] {
            let m = body_with(rule);
            assert!(
                m.iter().all(|m| m.get("reasoning_content").is_none()),
                "{rule:?}"
            );
        }
    }

    /// `--reasoning-effort` in each server's form: `reasoning_effort` for most, DeepSeek's and
    /// GLM's `thinking` switch for theirs; unset sends neither.
    #[test]
    fn the_effort_goes_out_in_each_servers_form() {
        let t = tools();
        let msgs = vec![Message::user("go")];
        let body_with = |effort: Option<Effort>, vendor: Vendor| {
            let mut r = req(&t, &msgs, None);
            r.reasoning.effort = effort;
            r.reasoning.vendor = vendor;
            serde_json::from_slice::<Value>(&body(&r)).unwrap()
        };
        let b = body_with(None, Vendor::Other);
        assert!(b.get("reasoning_effort").is_none() && b.get("thinking").is_none());
        assert_eq!(
            body_with(Some(Effort::High), Vendor::OpenAi)["reasoning_effort"],
            "high"
        );
        let d = body_with(Some(Effort::High), Vendor::DeepSeek);
        assert_eq!(d["thinking"], json!({"type": "enabled"}));
        assert!(d.get("reasoning_effort").is_none());
        assert_eq!(
            body_with(Some(Effort::None), Vendor::DeepSeek)["thinking"],
            json!({"type": "disabled"})
        );
        assert_eq!(
            body_with(Some(Effort::Low), Vendor::Zhipu)["thinking"],
            json!({"type": "enabled", "clear_thinking": false})
        );
    }
}
