//! Reasoning models (DESIGN §19): how much a model thinks ([`Effort`], `--reasoning-effort`) and
//! whether the reasoning it returned goes back in later requests ([`Replay`]), by each
//! provider's documented rule. Pure: a host in, a rule out; an effort and a wire in, the
//! request's fields out. Unit-tested here; the wires' bodies apply it.
//!
//! The replay rules, by host ([`Replay::for_host`]; the config's `reasoning_replay` overrides):
//! - **Required** — DeepSeek (`api.deepseek.com`; DeepSeek API docs, "Thinking Mode", tool
//!   calls: the `reasoning_content` of an assistant message that made tool calls must be sent
//!   back in every later request, else HTTP 400) and Moonshot's Kimi (`api.moonshot.ai`,
//!   `api.moonshot.cn`; Kimi API docs, thinking models: every tool-call turn carries
//!   `reasoning_content`, the key present even when empty).
//! - **Beneficial** — Zhipu's GLM (`open.bigmodel.cn`, `api.z.ai`; "preserved thinking", kept
//!   when the request asks `clear_thinking: false`) and local llama.cpp servers whose chat
//!   templates keep reasoning: sent when stored.
//! - **Forbidden** — Groq (`api.groq.com`) and Cerebras (`api.cerebras.ai`): an assistant
//!   message with `reasoning_content` is answered HTTP 400 ("property … is unsupported").
//! - **Unknown** — any other host: not sent (the safe side for a server that validates its
//!   input); a 400 whose body names the field switches the session to the other choice once.
//!
//! Anthropic's thinking blocks follow their own rule (Anthropic docs, "Extended thinking",
//! "Preserving thinking blocks": with thinking on, the blocks of the assistant turn in a
//! tool-use loop go back unchanged, signature and all): they are sent back whenever thinking is
//! on, in order, before the text and `tool_use` they preceded, and never when it is off.

use serde::{Deserialize, Serialize};

/// How much a reasoning model thinks (`--reasoning-effort`, config `reasoning_effort`, the
/// REPL's `/effort`). Unset: the provider's default, and nothing is sent.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// No reasoning where the model allows it.
    None,
    /// The least the model offers.
    Minimal,
    /// Little.
    Low,
    /// The usual middle.
    Medium,
    /// Much.
    High,
    /// The most the model offers.
    Max,
}

impl Effort {
    /// The name people write (`--reasoning-effort high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::None => "none",
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Max => "max",
        }
    }

    /// OpenAI Chat Completions' `reasoning_effort` (OpenAI API reference, "reasoning_effort":
    /// `none`, `minimal`, `low`, `medium`, `high`, `xhigh`; what a model does not offer it
    /// answers with a 400 naming the values it takes).
    pub fn openai(self) -> &'static str {
        match self {
            Effort::Max => "xhigh",
            e => e.as_str(),
        }
    }

    /// Anthropic's `thinking.budget_tokens` (Anthropic docs, "Extended thinking": at least
    /// 1,024, and below `max_tokens`); None: thinking off.
    pub fn anthropic_budget(self) -> Option<u32> {
        match self {
            Effort::None => None,
            Effort::Minimal => Some(1024),
            Effort::Low => Some(4096),
            Effort::Medium => Some(10_000),
            Effort::High => Some(24_000),
            Effort::Max => Some(48_000),
        }
    }
}

/// Whether stored reasoning goes back to the provider (see the module doc for each rule's
/// source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Replay {
    /// Sent on every assistant message that made tool calls, the key present even when empty.
    Required,
    /// Sent where stored.
    Beneficial,
    /// Never sent: the server refuses it.
    Forbidden,
    /// The host's rule is not known: not sent.
    #[default]
    Unknown,
}

/// The hosts whose rule is known, with the vendor whose switches they take.
const HOSTS: &[(&str, Replay, Vendor)] = &[
    ("api.deepseek.com", Replay::Required, Vendor::DeepSeek),
    ("api.moonshot.ai", Replay::Required, Vendor::Moonshot),
    ("api.moonshot.cn", Replay::Required, Vendor::Moonshot),
    ("open.bigmodel.cn", Replay::Beneficial, Vendor::Zhipu),
    ("api.z.ai", Replay::Beneficial, Vendor::Zhipu),
    ("api.groq.com", Replay::Forbidden, Vendor::Other),
    ("api.cerebras.ai", Replay::Forbidden, Vendor::Other),
    ("api.openai.com", Replay::Forbidden, Vendor::OpenAi),
];

/// Whose request switches a Chat Completions server takes for reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vendor {
    /// OpenAI: `reasoning_effort`.
    OpenAi,
    /// DeepSeek: `thinking: {"type": "enabled" | "disabled"}` (DeepSeek API docs, "Thinking
    /// Mode").
    DeepSeek,
    /// Moonshot's Kimi: `reasoning_effort`.
    Moonshot,
    /// Zhipu's GLM: `thinking: {"type": …, "clear_thinking": false}` (Z.AI docs, "Thinking
    /// Mode", preserved thinking).
    Zhipu,
    /// Anything else: `reasoning_effort`, the field most OpenAI-compatible servers take.
    #[default]
    Other,
}

/// The host of a base URL (`https://api.deepseek.com/v1` → `api.deepseek.com`; user info and
/// port left out).
pub(crate) fn host(base_url: &str) -> &str {
    let rest = base_url
        .strip_prefix("https://")
        .or_else(|| base_url.strip_prefix("http://"))
        .unwrap_or(base_url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    authority.split(':').next().unwrap_or("")
}

impl Replay {
    /// The rule of the server at `base_url` (see the module doc).
    pub fn for_host(base_url: &str) -> Replay {
        let h = host(base_url).to_ascii_lowercase();
        HOSTS
            .iter()
            .find(|(name, _, _)| *name == h)
            .map_or(Replay::Unknown, |(_, r, _)| *r)
    }

    /// Whether an assistant message's stored reasoning goes back (`tool_calls`: it made some).
    pub fn sends(self, tool_calls: bool) -> bool {
        match self {
            Replay::Required => tool_calls,
            Replay::Beneficial => true,
            Replay::Forbidden | Replay::Unknown => false,
        }
    }

    /// Whether the key goes back even with no stored reasoning (empty), for a message that made
    /// tool calls.
    pub fn always_keyed(self) -> bool {
        self == Replay::Required
    }

    /// The other choice, after a 400 whose body names the reasoning field: a server that
    /// refused it gets none, one that wanted it gets it.
    pub fn flipped(self) -> Replay {
        match self {
            Replay::Required | Replay::Beneficial => Replay::Forbidden,
            Replay::Forbidden | Replay::Unknown => Replay::Required,
        }
    }

    /// The name the config takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Replay::Required => "required",
            Replay::Beneficial => "beneficial",
            Replay::Forbidden => "forbidden",
            Replay::Unknown => "unknown",
        }
    }
}

impl Vendor {
    /// The vendor of the server at `base_url`.
    pub fn for_host(base_url: &str) -> Vendor {
        let h = host(base_url).to_ascii_lowercase();
        HOSTS
            .iter()
            .find(|(name, _, _)| *name == h)
            .map_or(Vendor::Other, |(_, _, v)| *v)
    }
}

/// What a request says about reasoning: the effort (None: nothing sent) and the replay rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// `--reasoning-effort`.
    pub effort: Option<Effort>,
    /// Whether stored reasoning goes back.
    pub replay: Replay,
    /// Whose switches the server takes.
    pub vendor: Vendor,
}

/// Whether a provider's 400 body is about the reasoning field (`reasoning_content`, the field
/// the replay rule decides on, appears in it): the runtime then flips the session's
/// [`Replay`] once and says so. A 400 about anything else (a model that does not think, a
/// `thinking` switch it refuses) is no reason to change what goes back.
pub fn names_reasoning(body: &str) -> bool {
    body.to_ascii_lowercase().contains("reasoning_content")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_known_host_has_its_documented_rule_and_others_send_nothing() {
        let r = Replay::for_host;
        assert_eq!(r("https://api.deepseek.com"), Replay::Required);
        assert_eq!(r("https://api.deepseek.com/v1"), Replay::Required);
        assert_eq!(r("https://API.Moonshot.ai/v1"), Replay::Required);
        assert_eq!(r("https://api.groq.com/openai/v1"), Replay::Forbidden);
        assert_eq!(r("https://api.cerebras.ai/v1"), Replay::Forbidden);
        assert_eq!(
            r("https://open.bigmodel.cn/api/paas/v4"),
            Replay::Beneficial
        );
        assert_eq!(r("http://127.0.0.1:8080/v1"), Replay::Unknown);
        // A look-alike is not the host.
        assert_eq!(
            r("https://api.deepseek.com.evil.example/v1"),
            Replay::Unknown
        );
        assert_eq!(r("https://user@api.deepseek.com:443/v1"), Replay::Required);
        assert_eq!(
            Vendor::for_host("https://api.deepseek.com"),
            Vendor::DeepSeek
        );
        assert_eq!(Vendor::for_host("http://localhost:1234"), Vendor::Other);
    }

    #[test]
    fn replay_sends_by_rule_and_flips_once_to_the_other_choice() {
        assert!(Replay::Required.sends(true) && !Replay::Required.sends(false));
        assert!(Replay::Required.always_keyed());
        assert!(Replay::Beneficial.sends(false) && !Replay::Beneficial.always_keyed());
        assert!(!Replay::Forbidden.sends(true) && !Replay::Unknown.sends(true));
        assert_eq!(Replay::Unknown.flipped(), Replay::Required);
        assert_eq!(Replay::Required.flipped(), Replay::Forbidden);
        assert!(names_reasoning(
            r#"{"error":{"message":"Missing `reasoning_content` field in the assistant message"}}"#
        ));
        assert!(names_reasoning(
            "property 'messages.1.reasoning_content' is unsupported"
        ));
        assert!(!names_reasoning("context length exceeded"));
        assert!(!names_reasoning("thinking is not supported for this model"));
    }

    #[test]
    fn efforts_map_to_each_wires_documented_values() {
        assert_eq!(Effort::Max.openai(), "xhigh");
        assert_eq!(Effort::Minimal.openai(), "minimal");
        assert_eq!(Effort::None.anthropic_budget(), None);
        // Anthropic's floor is 1,024 tokens; every budget is at least that.
        for e in [
            Effort::Minimal,
            Effort::Low,
            Effort::Medium,
            Effort::High,
            Effort::Max,
        ] {
            assert!(e.anthropic_budget().unwrap() >= 1024, "{e:?}");
        }
        assert!(Effort::Low < Effort::High);
    }
}
