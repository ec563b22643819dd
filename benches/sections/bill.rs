//! The bill model of section 5: what a provider's prompt cache makes of the request bodies a
//! session sent, in bytes, for both wire formats (issue 18, item 7).
//!
//! Sources of the rules:
//! - OpenAI, prompt-caching guide (platform docs; also the "Prompt Caching 201" cookbook):
//!   caching is automatic for prompts of 1,024 tokens or more; a request reuses the longest
//!   prefix it shares with a recently seen prompt, counted in `cached_tokens` in increments of
//!   128 tokens (so 0, 1,024, 1,152, …). Cached input costs a fraction of the input price (0.1×
//!   on the current models, the figure used here).
//! - Anthropic, prompt caching (platform.claude.com, build-with-claude/prompt-caching): the prompt
//!   is tools → system → messages; a `cache_control` breakpoint caches the prefix up to and
//!   including its block, and only when that prefix is at least the model's minimum (1,024
//!   tokens for Sonnet 4.x and Opus 4.1/4); a request reads the longest cached prefix found at a
//!   breakpoint or at one of the 20 block boundaries before it; what lies between the read
//!   prefix and the last breakpoint is written to the cache at 1.25× (5-minute entries), reads
//!   cost 0.1×, the rest is plain input.
//!
//! Tokens are bytes / [`support::BYTES_PER_TOKEN`] (4, as the fake provider counts them) unless a
//! row says otherwise; the bytes are the request bodies as tern sent them (the Anthropic
//! breakpoint markers, request metadata, are left out of the prefixes compared). Entries are
//! assumed to live through a session (a 40-step session takes seconds; entries last 5 minutes
//! after their last use).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::*;

/// The smallest prompt prefix either provider caches, in tokens.
pub(super) const MIN_CACHE_TOKENS: usize = 1024;
/// OpenAI's cache-hit granularity, in tokens.
const OPENAI_INCREMENT_TOKENS: usize = 128;
/// How many blocks before a breakpoint Anthropic looks for an earlier cache entry.
const LOOKBACK_BLOCKS: usize = 20;
/// Price of a cached (read) input byte and of a cache write, relative to plain input.
pub(super) const READ_PRICE: f64 = 0.1;
const WRITE_PRICE: f64 = 1.25;
/// The Anthropic breakpoint marker as tern and the modelled peer send it.
const MARKER: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// Bytes of a run of requests, split by what the cache did with them.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Bill {
    /// Request bodies as sent.
    pub(super) total: u64,
    /// Served from the cache (OpenAI `cached_tokens`, Anthropic `cache_read_input_tokens`).
    pub(super) read: u64,
    /// Written to the cache (Anthropic `cache_creation_input_tokens`; 0 on OpenAI).
    pub(super) written: u64,
    /// Requests whose cache read was 0.
    pub(super) cold: u64,
    /// Requests billed.
    pub(super) requests: u64,
}

impl Bill {
    fn add(&mut self, o: Bill) {
        self.total += o.total;
        self.read += o.read;
        self.written += o.written;
        self.cold += o.cold;
        self.requests += o.requests;
    }
    /// Bytes not served from the cache (writes included).
    pub(super) fn uncached(&self) -> u64 {
        self.total - self.read
    }
    /// uncached + 0.1 × cached, the issue's cost-weighted bytes.
    pub(super) fn weighted(&self) -> f64 {
        self.uncached() as f64 + READ_PRICE * self.read as f64
    }
    /// As billed with Anthropic's write premium: plain + 1.25 × written + 0.1 × read.
    pub(super) fn billed(&self) -> f64 {
        (self.uncached() - self.written) as f64
            + WRITE_PRICE * self.written as f64
            + READ_PRICE * self.read as f64
    }
}

/// One provider's prompt cache, shared by every session billed through it.
pub(super) struct Cache {
    wire: support::Wire,
    bytes_per_token: f64,
    /// OpenAI: every prompt seen that was long enough to be cached.
    seen: Vec<Vec<u8>>,
    /// Anthropic: hashes of the cached prefixes (marker-free bytes up to a block's end).
    entries: HashSet<u64>,
}

impl Cache {
    /// An empty cache of `wire` counting `bytes_per_token` bytes a token.
    pub(super) fn new(wire: support::Wire, bytes_per_token: f64) -> Cache {
        Cache {
            wire,
            bytes_per_token,
            seen: Vec::new(),
            entries: HashSet::new(),
        }
    }

    /// Bills `bodies` in order (one session) and keeps what they cached.
    pub(super) fn session(&mut self, bodies: &[Vec<u8>]) -> R<Bill> {
        let mut b = Bill::default();
        for body in bodies {
            b.add(self.request(body)?);
        }
        Ok(b)
    }

    /// Bills one request body and keeps what it caches.
    fn request(&mut self, body: &[u8]) -> R<Bill> {
        let min_bytes = (MIN_CACHE_TOKENS as f64 * self.bytes_per_token).ceil() as usize;
        let mut bill = Bill {
            total: body.len() as u64,
            requests: 1,
            ..Bill::default()
        };
        match self.wire {
            support::Wire::OpenAi => {
                let common = self
                    .seen
                    .iter()
                    .map(|p| common_prefix(p, body))
                    .max()
                    .unwrap_or(0);
                let step = (OPENAI_INCREMENT_TOKENS as f64 * self.bytes_per_token).round() as usize;
                let cached = common / step * step;
                bill.read = if cached >= min_bytes {
                    cached as u64
                } else {
                    0
                };
                if body.len() >= min_bytes {
                    self.seen.push(body.to_vec());
                }
            }
            support::Wire::Anthropic => {
                let raw = std::str::from_utf8(body).map_err(|e| e.to_string())?;
                let blocks: Vec<(usize, bool)> = blocks(self.wire, raw)?
                    .into_iter()
                    .map(|(_, end, marked)| (end, marked))
                    .collect();
                let bare = raw.replace(MARKER, "");
                let key = |end: usize| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    bare.as_bytes()[..end].hash(&mut h);
                    h.finish()
                };
                let marked: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].1).collect();
                let Some(&last) = marked.last() else {
                    bill.cold = 1;
                    return Ok(bill);
                };
                // The longest entry found at a breakpoint or up to 20 blocks before it.
                let mut read = 0;
                for &m in &marked {
                    for i in (m.saturating_sub(LOOKBACK_BLOCKS)..=m).rev() {
                        if self.entries.contains(&key(blocks[i].0)) {
                            read = read.max(blocks[i].0);
                            break;
                        }
                    }
                }
                let end = blocks[last].0;
                bill.read = read as u64;
                if end >= min_bytes {
                    bill.written = end.saturating_sub(read) as u64;
                    for &m in &marked {
                        if blocks[m].0 >= min_bytes {
                            self.entries.insert(key(blocks[m].0));
                        }
                    }
                }
            }
        }
        bill.cold = u64::from(bill.read == 0);
        Ok(bill)
    }
}

/// The blocks of a body in prompt order, as (top-level key, end offset in the body with every
/// breakpoint marker removed, whether the block carries a marker): each tool, each system
/// block, and each message (OpenAI) or each content block of each message (Anthropic).
/// Errors: not a JSON object of that shape.
fn blocks(wire: support::Wire, raw: &str) -> R<Vec<(String, usize, bool)>> {
    let message_depth = match wire {
        support::Wire::OpenAi => 3,
        support::Wire::Anthropic => 5,
    };
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    let mut key = String::new();
    let mut str_start = 0;
    let mut markers = 0;
    for (i, &c) in raw.as_bytes().iter().enumerate() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => {
                    in_str = false;
                    if depth == 1 {
                        key = raw[str_start..i].to_string();
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => {
                in_str = true;
                str_start = i + 1;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                let block_depth = match key.as_str() {
                    "tools" | "system" => 3,
                    "messages" => message_depth,
                    _ => 0,
                };
                if c == b'}' && depth == block_depth {
                    let marked = raw[..=i].ends_with(&format!("{MARKER}}}"));
                    markers += usize::from(marked);
                    out.push((key.clone(), i + 1 - markers * MARKER.len(), marked));
                }
                depth = depth.checked_sub(1).ok_or("unbalanced body")?;
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err("a body without blocks".into());
    }
    Ok(out)
}

/// Where the fixed prefix (tools + system prompt) ends in `raw`, in bytes from the body's start
/// (breakpoint markers left out): the end of the system message (OpenAI) or block (Anthropic).
pub(super) fn fixed_prefix_end(wire: support::Wire, raw: &[u8]) -> R<usize> {
    let raw = std::str::from_utf8(raw).map_err(|e| e.to_string())?;
    let b = blocks(wire, raw)?;
    let end = match wire {
        support::Wire::OpenAi => b.iter().find(|x| x.0 == "messages"),
        support::Wire::Anthropic => b.iter().rfind(|x| x.0 == "system"),
    };
    end.map(|x| x.1)
        .ok_or_else(|| "no system prompt in the body".into())
}

/// The recorded bodies of `bodies` with the system prompt's text `from` replaced by `to`
/// (OpenAI: the first message's content; Anthropic: the first system block), re-serialized.
/// Errors: a body that does not re-serialize to its own bytes, or holds no `from`.
pub(super) fn with_system(
    wire: support::Wire,
    bodies: &[Vec<u8>],
    from: &str,
    to: &str,
) -> R<Vec<Vec<u8>>> {
    bodies
        .iter()
        .map(|b| {
            let mut v: Value = serde_json::from_slice(b).map_err(|e| e.to_string())?;
            if serde_json::to_vec(&v).map_err(|e| e.to_string())? != *b {
                return Err("re-serializing a recorded body does not give its bytes".into());
            }
            let slot = match wire {
                support::Wire::OpenAi => &mut v["messages"][0]["content"],
                support::Wire::Anthropic => &mut v["system"][0]["text"],
            };
            let text = slot.as_str().ok_or("no system prompt")?;
            if !text.contains(from) {
                return Err("the system prompt does not hold the text to replace".into());
            }
            *slot = Value::from(text.replacen(from, to, 1));
            serde_json::to_vec(&v).map_err(|e| e.to_string())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// mini-swe-agent's requests, modelled

/// Sizes of mini-swe-agent's first request, from its default config (`mini.yaml`, the `mini`
/// command's, at github.com/SWE-agent/mini-swe-agent commit a83fcae): the system template
/// renders to 62 bytes; the instance template with this script's task and a Linux uname to
/// 2,891 bytes in 88 lines, the task in its first line; one `bash` tool of 226 bytes as
/// serialized. Its text is not copied: the model needs only lengths and what repeats.
const MINI_SYSTEM_BYTES: usize = 62;
const MINI_INSTANCE_BYTES: usize = 2891;
const MINI_INSTANCE_LINES: usize = 88;
const MINI_TOOL_DESCRIPTION_BYTES: usize = 22;
const MINI_COMMAND_DESCRIPTION_BYTES: usize = 27;

/// `n` bytes of filler words (ASCII, no character JSON escapes), with `lines` lines.
fn filler(n: usize, lines: usize) -> String {
    let words = "the model reads this text once per request and the cache may serve it ";
    let mut s = String::with_capacity(n);
    let per_line = n / lines.max(1);
    while s.len() < n {
        let line_len = per_line.min(n - s.len());
        let mut line: String = words.chars().cycle().take(line_len).collect();
        if s.len() + line_len < n && line_len > 0 {
            line.pop();
            line.push('\n');
        }
        s.push_str(&line);
    }
    s
}

/// mini-swe-agent's request bodies for `steps` bash steps of `echo xN` with `reasoning` bytes
/// of text before each call, on `wire`, as its LiteLLM model sends them: system, the instance
/// message (the task in its first line), then per step the assistant message (text and one
/// `bash` call) and a tool message with its observation (`{"returncode": 0, "output": "xN\n"}`
/// in its JSON template). On Anthropic it marks only the last message with `cache_control`
/// (its `set_cache_control: default_end`, chosen for Anthropic models by default).
pub(super) fn mini_bodies(
    wire: support::Wire,
    task: &str,
    steps: usize,
    reasoning: usize,
) -> Vec<Vec<u8>> {
    let first = format!("Please solve this issue: {task}\n");
    let instance = format!(
        "{first}{}",
        filler(
            MINI_INSTANCE_BYTES.saturating_sub(first.len()),
            MINI_INSTANCE_LINES - 1
        )
    );
    let system = filler(MINI_SYSTEM_BYTES, 1);
    let tool_desc = filler(MINI_TOOL_DESCRIPTION_BYTES, 1);
    let cmd_desc = filler(MINI_COMMAND_DESCRIPTION_BYTES, 1);
    let schema = json!({"type":"object","properties":{"command":{"type":"string","description":cmd_desc}},"required":["command"]});
    let thought = filler(reasoning, 1 + reasoning / 200);
    let mut out = Vec::new();
    for n in 1..=steps {
        let body = match wire {
            support::Wire::OpenAi => {
                let mut msgs = vec![
                    json!({"role":"system","content":system}),
                    json!({"role":"user","content":instance}),
                ];
                for k in 1..n {
                    let args = json!({"command": format!("echo x{k}")}).to_string();
                    msgs.push(json!({"role":"assistant","content":thought,"tool_calls":[{"id":format!("call_{k}"),"type":"function","function":{"name":"bash","arguments":args}}]}));
                    msgs.push(json!({"role":"tool","tool_call_id":format!("call_{k}"),"content":format!("{{\n  \"returncode\": 0,\n  \"output\": \"x{k}\\n\"\n}}")}));
                }
                json!({"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"bash","description":tool_desc,"parameters":schema}}],"messages":msgs})
            }
            support::Wire::Anthropic => {
                let mut msgs =
                    vec![json!({"role":"user","content":[{"type":"text","text":instance}]})];
                for k in 1..n {
                    let mut blocks = Vec::new();
                    if reasoning > 0 {
                        blocks.push(json!({"type":"text","text":thought}));
                    }
                    blocks.push(json!({"type":"tool_use","id":format!("call_{k}"),"name":"bash","input":{"command":format!("echo x{k}")}}));
                    msgs.push(json!({"role":"assistant","content":blocks}));
                    msgs.push(json!({"role":"user","content":[{"type":"tool_result","tool_use_id":format!("call_{k}"),"content":format!("{{\n  \"returncode\": 0,\n  \"output\": \"x{k}\\n\"\n}}")}]}));
                }
                if let Some(b) = msgs
                    .last_mut()
                    .and_then(|m| m["content"].as_array_mut())
                    .and_then(|c| c.last_mut())
                {
                    b["cache_control"] = json!({"type":"ephemeral"});
                }
                json!({"model":"m","max_tokens":4096,"stream":true,"tools":[{"name":"bash","description":tool_desc,"input_schema":schema}],"system":[{"type":"text","text":system}],"messages":msgs})
            }
        };
        out.push(serde_json::to_vec(&body).unwrap_or_default());
    }
    out
}

/// The reasoning bytes per step that make mini-swe-agent's `steps` requests on `wire` total
/// `target` bytes (its quoted session), found by bisection (the total grows with it).
pub(super) fn mini_fit(wire: support::Wire, task: &str, steps: usize, target: usize) -> usize {
    let total =
        |r: usize| -> usize { mini_bodies(wire, task, steps, r).iter().map(Vec::len).sum() };
    let (mut lo, mut hi) = (0, 4096);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if total(mid) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}
