//! Which provider to talk to, from flags and environment: `--provider`, `--base-url`, `--model`,
//! OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, TERN_MODEL.

use std::collections::BTreeMap;

/// The wire format to speak.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (OpenAI, DeepSeek, OpenRouter, vLLM, llama.cpp, Ollama).
    Openai,
    /// Anthropic Messages API.
    Anthropic,
}

/// Environment variables holding API keys or provider URLs (which may carry credentials): removed
/// from the bash tool's environment. The keys are also redacted from everything tern writes.
pub const SECRET_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
];

/// The variables tern reads from its environment, captured once by `main` before the secrets
/// are scrubbed from the process: every later read goes through this snapshot.
pub const READ_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "TERN_MODEL",
    "TERN_APPROVAL",
    "TERN_STATE_DIR",
    "TERN_SANDBOX",
    // Where the user's Fleet file is (fleet::user_file).
    "XDG_CONFIG_HOME",
    "HOME",
];

/// A snapshot of the environment variables tern reads ([`READ_ENV`]), taken before the secrets
/// leave the process environment. Values that are empty or only whitespace count as unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// The snapshot of this process's environment. The keys and URL credentials found are
    /// registered for redaction at once, so [`hide_from_proc`] can wipe them.
    pub fn capture() -> Env {
        let env = Env(READ_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect());
        for k in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"] {
            if let Some(v) = env.get(k) {
                crate::store::redact::register(&v);
            }
        }
        for k in ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"] {
            if let Some(v) = env.get(k) {
                register_url_secrets(&v);
            }
        }
        env
    }

    /// A snapshot of exactly these pairs (tests, sub-agents).
    pub fn of(pairs: &[(&str, &str)]) -> Env {
        Env(pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// The value of `key`, None when unset or blank.
    pub fn get(&self, key: &str) -> Option<String> {
        self.0.get(key).filter(|v| !v.trim().is_empty()).cloned()
    }
}

/// Default model per provider when neither `--model` nor TERN_MODEL is set.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1-mini";
/// Default Anthropic model.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// A resolved provider choice.
#[derive(Debug, Clone)]
pub struct ProviderChoice {
    /// Wire format.
    pub kind: ProviderKind,
    /// Base URL (`https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`, `https://api.anthropic.com`).
    pub base_url: String,
    /// API key, if any (local servers need none).
    pub api_key: Option<String>,
    /// Model name.
    pub model: String,
}

/// What the person asked for on the command line (each None when not given).
#[derive(Debug, Clone, Default)]
pub struct ProviderFlags {
    /// `--provider`.
    pub provider: Option<ProviderKind>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
}

/// The message shown when no provider is configured.
pub const NO_PROVIDER: &str = "no model provider configured.
Set one of:
  OPENAI_API_KEY (and optionally OPENAI_BASE_URL) for OpenAI or any OpenAI-compatible server
    (DeepSeek, OpenRouter, vLLM, llama.cpp, Ollama: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 needs no key)
  ANTHROPIC_API_KEY (and optionally ANTHROPIC_BASE_URL) for Anthropic
and TERN_MODEL (or --model) for the model name (default: gpt-4.1-mini for OpenAI-compatible servers,
claude-sonnet-4-5 for Anthropic; local servers such as llama.cpp accept any name).
To see tern work without a model, run `tern demo`.";

/// Resolves the provider from `flags` and the environment read through `env`.
///
/// Order: `--provider`, else OpenAI when OPENAI_API_KEY or OPENAI_BASE_URL (or `--base-url`) is
/// set, else Anthropic when ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set. Errors with
/// [`NO_PROVIDER`] when none is configured, or when a base URL is not http(s).
pub fn resolve(
    flags: &ProviderFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProviderChoice, String> {
    let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let kind = match flags.provider {
        Some(k) => k,
        None if get("OPENAI_API_KEY").is_some()
            || get("OPENAI_BASE_URL").is_some()
            || flags.base_url.is_some() =>
        {
            ProviderKind::Openai
        }
        None if get("ANTHROPIC_API_KEY").is_some() || get("ANTHROPIC_BASE_URL").is_some() => {
            ProviderKind::Anthropic
        }
        None => return Err(NO_PROVIDER.into()),
    };
    let (key_var, url_var, default_url, default_model) = match kind {
        ProviderKind::Openai => (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            DEFAULT_OPENAI_MODEL,
        ),
        ProviderKind::Anthropic => (
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "https://api.anthropic.com",
            DEFAULT_ANTHROPIC_MODEL,
        ),
    };
    let api_key = get(key_var);
    let base_url = flags
        .base_url
        .clone()
        .or_else(|| get(url_var))
        .unwrap_or_else(|| default_url.to_string());
    let base_url = base_url.trim().trim_end_matches('/').to_string();
    let scheme = base_url
        .split("://")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    // Schemes are case-insensitive (RFC 3986): `HTTP://…` is written `http://…`.
    let base_url = match base_url.split_once("://") {
        Some((_, rest)) => format!("{scheme}://{rest}"),
        None => base_url,
    };
    if !base_url.contains("://") || !(scheme == "http" || scheme == "https") {
        return Err(format!(
            "the base URL {:?} is not an http:// or https:// URL",
            crate::store::redact::redact(&base_url)
        ));
    }
    if api_key.is_none() && base_url == default_url {
        return Err(format!(
            "{key_var} is not set: {default_url} needs an API key.\n\n{NO_PROVIDER}"
        ));
    }
    let model = flags
        .model
        .clone()
        .or_else(|| get("TERN_MODEL"))
        .unwrap_or_else(|| default_model.to_string());
    if model.trim().is_empty() {
        return Err("the model name is empty (--model / TERN_MODEL)".into());
    }
    if let Some(k) = &api_key {
        if !k.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{key_var} holds characters that cannot go in an HTTP header (spaces, control or non-ASCII characters)"
            ));
        }
        crate::store::redact::register(k);
    }
    register_url_secrets(&base_url);
    Ok(ProviderChoice {
        kind,
        base_url,
        api_key,
        model,
    })
}

/// Registers the credentials a URL may carry (`user:password@`, the query string) for
/// redaction, so they appear in no file, event or error.
pub fn register_url_secrets(url: &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        crate::store::redact::register(userinfo);
        if let Some((_, password)) = userinfo.split_once(':') {
            crate::store::redact::register(password);
        }
    }
    if let Some((_, query)) = rest.split_once('?') {
        let query = query.split('#').next().unwrap_or(query);
        crate::store::redact::register(query);
        // Each value too, where an error body may quote it alone (short ones are not secrets).
        for pair in query.split('&') {
            if let Some((_, value)) = pair.split_once('=') {
                crate::store::redact::register(value);
            }
        }
    }
}

/// Removes the provider variables ([`SECRET_ENV`]) from this process's own environment once
/// they have been read, so a command the model runs cannot find the key in
/// `/proc/<tern's pid>/environ` either.
///
/// Call only while no other thread runs (at start-up, before the REPL's reader thread and the
/// HTTP worker exist): changing the environment is not thread-safe.
pub fn scrub_environment() {
    for k in SECRET_ENV {
        // SAFETY: the caller guarantees this process is still single-threaded.
        unsafe { std::env::remove_var(k) };
    }
}

/// Makes the configured secrets unreadable through this process's `/proc` files, for every
/// command the model runs (DESIGN.md §10, issue "the key out of reach"):
/// - `remove_var` only drops the pointer; `/proc/<pid>/environ` and `cmdline` read the memory the
///   kernel laid out at exec, so every registered secret (key, URL credential) found there is
///   overwritten with `*`;
/// - the process becomes non-dumpable (`PR_SET_DUMPABLE` 0): its `/proc/<pid>/mem`, `environ`
///   and friends are no longer open to other processes of the same user; the bash tool also
///   drops `CAP_SYS_PTRACE` from a root shell's bounding set, so a command run as root cannot
///   read them either, and Landlock forbids it in the sandboxed modes.
///
/// Call once from `main`, after [`scrub_environment`] and before any other thread runs. Linux
/// only; elsewhere nothing happens.
pub fn hide_from_proc() {
    #[cfg(target_os = "linux")]
    {
        let secrets = crate::store::redact::registered();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
            && let Some(close) = stat.rfind(')')
        {
            // Fields 48..=51 of proc(5): arg_start, arg_end, env_start, env_end; the text after
            // the command name's ')' starts at field 3.
            let f: Vec<usize> = stat[close + 1..]
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            let field = |n: usize| f.get(n - 3).copied().unwrap_or(0);
            for (start, end) in [(field(48), field(49)), (field(50), field(51))] {
                if start == 0 || end <= start || end - start > (16 << 20) {
                    continue;
                }
                // SAFETY: [start, end) is this process's argument or environment block as the
                // kernel reports it: mapped, writable stack memory that no Rust reference points
                // into (clap and the environment snapshot copied what they need; the variables
                // holding secrets were removed from `environ` by `scrub_environment`), and no
                // other thread runs yet.
                let block =
                    unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
                for s in &secrets {
                    wipe(block, s.as_bytes());
                }
            }
        }
        // SAFETY: prctl(2) with PR_SET_DUMPABLE only changes this process's dumpable flag.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
    }
}

/// Overwrites every occurrence of `needle` in `hay` with `*`.
fn wipe(hay: &mut [u8], needle: &[u8]) {
    if needle.is_empty() || needle.len() > hay.len() {
        return;
    }
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if &hay[i..i + needle.len()] == needle {
            hay[i..i + needle.len()].fill(b'*');
            i += needle.len();
        } else {
            i += 1;
        }
    }
}

/// True when `base_url` is OpenAI's own API (where `prompt_cache_key` is accepted).
pub fn is_openai_host(base_url: &str) -> bool {
    let rest = base_url
        .strip_prefix("https://")
        .or_else(|| base_url.strip_prefix("http://"))
        .unwrap_or(base_url);
    let host = rest.split(['/', ':']).next().unwrap_or("");
    host == "api.openai.com"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(a, _)| *a == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn no_provider_names_the_variables_and_the_demo() {
        let e = resolve(&ProviderFlags::default(), &env_of(&[])).unwrap_err();
        assert!(e.contains("OPENAI_API_KEY") && e.contains("ANTHROPIC_API_KEY"));
        assert!(e.contains("tern demo"));
    }

    #[test]
    fn local_server_needs_no_key() {
        let c = resolve(
            &ProviderFlags::default(),
            &env_of(&[
                ("OPENAI_BASE_URL", "http://127.0.0.1:8088/v1/"),
                ("TERN_MODEL", "qwen"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kind, ProviderKind::Openai);
        assert_eq!(c.base_url, "http://127.0.0.1:8088/v1");
        assert_eq!(c.model, "qwen");
        assert!(!is_openai_host(&c.base_url));
        assert!(is_openai_host("https://api.openai.com/v1"));
    }

    #[test]
    fn url_credentials_never_kept() {
        let url = "http://alice:hunter2secret@127.0.0.1:8902/v1?api-key=querysecret";
        assert_eq!(
            crate::provider::http::display_url(url),
            "http://127.0.0.1:8902/v1"
        );
        let c = resolve(
            &ProviderFlags {
                base_url: Some(url.into()),
                ..ProviderFlags::default()
            },
            &env_of(&[]),
        )
        .unwrap();
        let shown = crate::store::redact::redact(&c.base_url);
        assert!(
            !shown.contains("hunter2secret") && !shown.contains("querysecret"),
            "{shown}"
        );
    }

    #[test]
    fn keys_that_cannot_be_headers_are_refused() {
        let e = resolve(
            &ProviderFlags::default(),
            &env_of(&[("OPENAI_API_KEY", "sk-ünïcødé")]),
        )
        .unwrap_err();
        assert!(e.contains("OPENAI_API_KEY"), "{e}");
    }

    #[test]
    fn bad_url_and_missing_key_rejected() {
        assert!(
            resolve(
                &ProviderFlags::default(),
                &env_of(&[("OPENAI_BASE_URL", "ftp://x")])
            )
            .is_err()
        );
        let flags = ProviderFlags {
            provider: Some(ProviderKind::Anthropic),
            ..ProviderFlags::default()
        };
        assert!(
            resolve(&flags, &env_of(&[]))
                .unwrap_err()
                .contains("ANTHROPIC_API_KEY")
        );
    }
}
