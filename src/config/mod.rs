//! Which provider to talk to, from flags and environment: `--provider`, `--base-url`, `--model`,
//! OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, TERN_MODEL.

use std::collections::BTreeMap;

pub mod vars;

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
    /// OpenAI's Responses API (`/v1/responses`): reasoning kept between tool calls.
    #[value(name = "openai-responses")]
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
}

impl ProviderKind {
    /// Its name as a flag, a config file and the settings table write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenaiResponses => "openai-responses",
        }
    }
}

impl From<ProviderKind> for crate::event::Wire {
    fn from(k: ProviderKind) -> crate::event::Wire {
        match k {
            ProviderKind::Openai => crate::event::Wire::Openai,
            ProviderKind::Anthropic => crate::event::Wire::Anthropic,
            ProviderKind::OpenaiResponses => crate::event::Wire::Responses,
        }
    }
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
    // The checkpoint store's limits (config::vars::checkpoints).
    "TERN_CHECKPOINTS",
    "TERN_CHECKPOINT_MAX_FILE",
    "TERN_CHECKPOINT_BUDGET",
    "TERN_MAX_OUTPUT_TOKENS",
    "TERN_TEMPERATURE",
    // Reasoning models (provider::reasoning).
    "TERN_REASONING_EFFORT",
    "TERN_REASONING_REPLAY",
    // The jail's reach (sandbox::jail::Reach).
    "TERN_ADD_DIRS",
    "TERN_READ_DIRS",
    "TERN_ENV",
    "TERN_NO_JAIL",
    // The free space commands must leave (policy::DiskFloor).
    "TERN_DISK_FLOOR",
    // Where the user's Fleet and config files are (fleet::user_file, config_file::user_path).
    "XDG_CONFIG_HOME",
    "HOME",
    // Where the person's session keeps its sockets (policy::wide_root).
    "XDG_RUNTIME_DIR",
];

/// A snapshot of the environment variables tern reads ([`READ_ENV`]), taken before the secrets
/// leave the process environment. [`Env::get`] treats values that are empty or only whitespace
/// as unset; [`Env::var`] tells set-but-blank and not-UTF-8 apart from unset, for the variables
/// where a bad value must be an error rather than a silent default (the provider's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env(BTreeMap<String, Var>, Sources);

/// Where each setting came from (setting → (value as shown, source)), filled when the config
/// files are laid under the environment (`config_file::layer`); `tern status` and `/status`
/// show it.
pub type Sources = BTreeMap<String, (String, String)>;

/// One variable as the environment holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// Not set.
    Unset,
    /// Set to this text (possibly empty or blank).
    Text(String),
    /// Set, but not to UTF-8 text.
    NotUtf8,
}

impl Var {
    /// The text when set to a value that is not blank.
    fn filled(&self) -> Option<&str> {
        match self {
            Var::Text(v) if !v.trim().is_empty() => Some(v),
            _ => None,
        }
    }
}

impl Env {
    /// The snapshot of this process's environment. The keys and URL credentials found are
    /// registered for redaction at once, so [`hide_from_proc`] can wipe them.
    pub fn capture() -> Env {
        let env = Env(
            READ_ENV
                .iter()
                .filter_map(|k| {
                    let v = match std::env::var(k) {
                        Ok(v) => Var::Text(v),
                        Err(std::env::VarError::NotUnicode(_)) => Var::NotUtf8,
                        Err(std::env::VarError::NotPresent) => return None,
                    };
                    Some((k.to_string(), v))
                })
                .collect(),
            Sources::new(),
        );
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
        Env(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Var::Text(v.to_string())))
                .collect(),
            Sources::new(),
        )
    }

    /// The value of `key`, None when unset, blank or not UTF-8.
    pub fn get(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(Var::filled).map(str::to_string)
    }

    /// `key` as the environment holds it: unset, its text (even blank), or not UTF-8.
    pub fn var(&self, key: &str) -> Var {
        self.0.get(key).cloned().unwrap_or(Var::Unset)
    }

    /// Where each setting came from (empty before `config_file::layer`).
    pub fn sources(&self) -> &Sources {
        &self.1
    }

    /// Records that a flag set setting `name` to `value` (the top of config < environment <
    /// flags), so `tern status` and `/status` show what this run uses and why.
    pub fn note_flag(&mut self, name: &str, value: &str) {
        self.1
            .insert(name.to_string(), (value.to_string(), "flag".to_string()));
    }

    /// Where the value of variable `var` came from, for an error message: a config file's
    /// setting laid under it (`"base_url" in /home/me/.config/tern/config.json`), else `var`
    /// itself.
    pub fn source_of(&self, var: &str) -> String {
        let setting = match var {
            "OPENAI_BASE_URL" | "ANTHROPIC_BASE_URL" => "base_url",
            "OPENAI_API_KEY" | "ANTHROPIC_API_KEY" => "api_key",
            "TERN_MODEL" => "model",
            _ => return var.to_string(),
        };
        match self.1.get(setting).map(|(_, from)| from.as_str()) {
            Some(from) if from.starts_with("config") => {
                let rest = from.trim_start_matches("config").trim();
                let (path, field) = match rest.strip_suffix(" (api_key_command)") {
                    Some(p) => (p, "api_key_command"),
                    None => (rest, setting),
                };
                if path.is_empty() {
                    format!("\"{field}\" in the config file")
                } else {
                    format!("\"{field}\" in {path}")
                }
            }
            _ => var.to_string(),
        }
    }

    /// Records where each setting came from.
    pub fn set_sources(&mut self, sources: Sources) {
        self.1 = sources;
    }

    /// True when the environment set `key` (even blank).
    pub fn is_set(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Sets `key` to `value` unless it is set: a config file's value laid under the
    /// environment's (`config_file::layer`).
    pub fn set_default(&mut self, key: &str, value: &str) {
        self.0
            .entry(key.to_string())
            .or_insert_with(|| Var::Text(value.to_string()));
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

/// Why the provider or a setting cannot be used (a usage error, exit 2): the line (or lines,
/// with the way out) naming the flag, variable or config value and what it takes. One type for
/// the config room's doors ([`resolve`], the settings of [`vars`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A flag, an environment variable or a config value tern cannot use, or no provider is
    /// configured ([`NO_PROVIDER`]).
    Invalid(String),
    /// A config file (`~/.config/tern/config.json`, `.tern/config.json`) cannot be read or
    /// holds what tern refuses (a key in a project file, an unknown field).
    File(String),
    /// `api_key_command` failed, timed out or printed no key.
    KeyCommand(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Invalid(why) | ConfigError::File(why) | ConfigError::KeyCommand(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// A helper's one-line reason (a name check, a path check) is an invalid setting.
impl From<String> for ConfigError {
    fn from(why: String) -> ConfigError {
        ConfigError::Invalid(why)
    }
}

/// The message, for callers that report one line (the surfaces).
impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

/// The message shown when no provider is configured.
pub const NO_PROVIDER: &str = "no model provider configured.
Run `tern setup` to choose one and save it (~/.config/tern/config.json), or set one of:
  OPENAI_API_KEY (and optionally OPENAI_BASE_URL) for OpenAI or any OpenAI-compatible server
    (DeepSeek, OpenRouter, vLLM, llama.cpp, Ollama: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 needs no key)
  ANTHROPIC_API_KEY (and optionally ANTHROPIC_BASE_URL) for Anthropic
and TERN_MODEL (or --model) for the model name (default: gpt-4.1-mini for OpenAI-compatible servers,
claude-sonnet-4-5 for Anthropic; local servers such as llama.cpp accept any name).
To see tern work without a model, run `tern demo`.";

/// Resolves the provider from `flags` and the environment read through `env` (each variable as
/// [`Env::var`] gives it).
///
/// Order: `--provider`, else OpenAI when OPENAI_API_KEY (not blank) or OPENAI_BASE_URL (set at
/// all, even blank) or `--base-url` is given, else Anthropic when ANTHROPIC_API_KEY or
/// ANTHROPIC_BASE_URL is. Errors with [`NO_PROVIDER`] when none is configured, and with a message
/// naming the flag or variable when a base URL is blank, not UTF-8, not http(s) or a full
/// endpoint instead of a base, when a model name is blank, not UTF-8 or holds control characters,
/// or when a key cannot go in an HTTP header.
pub fn resolve(
    flags: &ProviderFlags,
    env: &dyn Fn(&str) -> Var,
) -> Result<ProviderChoice, ConfigError> {
    resolve_named(flags, env, &|k| k.to_string())
}

/// [`resolve`], its errors naming where each value really came from: `name(VAR)` (also
/// `name("--base-url")`, `name("--model")` for the values in `flags`) says where the value came
/// from (the variable itself, or a config file's setting laid under
/// it: [`Env::source_of`]), so a bad `base_url` in a config file is not blamed on
/// `OPENAI_BASE_URL`.
pub fn resolve_named(
    flags: &ProviderFlags,
    env: &dyn Fn(&str) -> Var,
    name: &dyn Fn(&str) -> String,
) -> Result<ProviderChoice, ConfigError> {
    // A key set to blank counts as unset (`OPENAI_API_KEY= tern …` runs without it); a URL or a
    // model set to blank is a mistake worth saying, never a silent default.
    let kind = provider_kind(flags, env)?;
    let (key_var, url_var, default_url, default_model) = match kind {
        ProviderKind::Openai | ProviderKind::OpenaiResponses => (
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
    let (key_name, url_name) = (name(key_var), name(url_var));
    // The way to fall back to the default: unset a variable; remove a config file's setting.
    let unset = |var: &str, named: &str| {
        if named == var {
            format!("unset {var}")
        } else {
            format!("remove {named}")
        }
    };
    let api_key = match env(key_var) {
        Var::NotUtf8 => {
            return Err(ConfigError::Invalid(format!(
                "{key_name} is not UTF-8 text: it cannot go in an HTTP header"
            )));
        }
        v => v.filled().map(str::to_string),
    };
    let base_url = match (&flags.base_url, env(url_var)) {
        (Some(u), _) => base_url(u, kind, &name("--base-url"))?,
        (None, Var::Text(u)) if u.trim().is_empty() => {
            return Err(ConfigError::Invalid(format!(
                "the base URL {u:?} ({url_name}) is not an http:// or https:// URL\n({} to use {default_url})",
                unset(url_var, &url_name)
            )));
        }
        (None, Var::Text(u)) => base_url(&u, kind, &url_name)?,
        (None, Var::NotUtf8) => {
            return Err(ConfigError::Invalid(format!(
                "{url_name} is not UTF-8 text: give an http:// or https:// base URL, or unset it to use {default_url}"
            )));
        }
        (None, Var::Unset) => default_url.to_string(),
    };
    if api_key.is_none() && base_url == default_url {
        return Err(ConfigError::Invalid(format!(
            "{key_var} is not set: {default_url} needs an API key.\n\n{NO_PROVIDER}"
        )));
    }
    let model = model_of(flags, env, name, default_model)?;
    if let Some(k) = &api_key {
        if !k.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Invalid(format!(
                "{key_name} holds characters that cannot go in an HTTP header (spaces, control or non-ASCII characters)"
            )));
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

/// Which wire format: the flag's, else the one whose key or base URL is set (OpenAI's first).
/// A key set to blank counts as unset (`OPENAI_API_KEY= tern …` runs without it); a URL set
/// at all counts. Errors: none is named.
fn provider_kind(
    flags: &ProviderFlags,
    env: &dyn Fn(&str) -> Var,
) -> Result<ProviderKind, ConfigError> {
    let key_set = |k: &str| match env(k) {
        Var::Text(v) => !v.trim().is_empty(),
        Var::NotUtf8 => true,
        Var::Unset => false,
    };
    let url_set = |k: &str| env(k) != Var::Unset;
    match flags.provider {
        Some(k) => Ok(k),
        None if key_set("OPENAI_API_KEY")
            || url_set("OPENAI_BASE_URL")
            || flags.base_url.is_some() =>
        {
            Ok(ProviderKind::Openai)
        }
        None if key_set("ANTHROPIC_API_KEY") || url_set("ANTHROPIC_BASE_URL") => {
            Ok(ProviderKind::Anthropic)
        }
        None => Err(ConfigError::Invalid(NO_PROVIDER.into())),
    }
}

/// The model: `--model`, else TERN_MODEL, else `default_model`. A name set to blank or not UTF-8
/// is an error (never a silent default), worded with `name`'s names for the sources.
fn model_of(
    flags: &ProviderFlags,
    env: &dyn Fn(&str) -> Var,
    name: &dyn Fn(&str) -> String,
    default_model: &str,
) -> Result<String, ConfigError> {
    let src = name("TERN_MODEL");
    match (&flags.model, env("TERN_MODEL")) {
        (Some(m), _) => model_name(m, &name("--model")),
        (None, Var::Text(m)) if m.trim().is_empty() => {
            let fix = if src == "TERN_MODEL" {
                "unset TERN_MODEL".to_string()
            } else {
                format!("remove {src}")
            };
            Err(ConfigError::Invalid(format!(
                "the model name is empty ({src})\n({fix} to use {default_model})"
            )))
        }
        (None, Var::Text(m)) => model_name(&m, &src),
        (None, Var::NotUtf8) => Err(ConfigError::Invalid(format!(
            "the model name in TERN_MODEL is not UTF-8 text\n(unset TERN_MODEL to use {default_model})"
        ))),
        (None, Var::Unset) => Ok(default_model.to_string()),
    }
}

/// The endpoint each wire format adds to its base URL, which a pasted base must not end in
/// already (it would be doubled: `…/v1/chat/completions/chat/completions`).
fn endpoint_suffix(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Openai => "/chat/completions",
        ProviderKind::OpenaiResponses => "/responses",
        ProviderKind::Anthropic => "/v1/messages",
    }
}

/// `url` (from `source`: `--base-url` or a variable) checked and normalised: trimmed, no trailing
/// `/`, the scheme in lower case. Errors: not an http(s) URL, or the full endpoint rather than the
/// base. URLs are shown redacted (they may carry credentials).
fn base_url(url: &str, kind: ProviderKind, source: &str) -> Result<String, ConfigError> {
    // Errors show the value as given (`--base-url " "` is `" "`), not what trimming left.
    let given = crate::store::redact::redact(url).into_owned();
    let url = url.trim().trim_end_matches('/');
    let scheme = url.split("://").next().unwrap_or("").to_ascii_lowercase();
    // Schemes are case-insensitive (RFC 3986): `HTTP://…` is written `http://…`.
    let url = match url.split_once("://") {
        Some((_, rest)) => format!("{scheme}://{rest}"),
        None => url.to_string(),
    };
    if !url.contains("://") || !(scheme == "http" || scheme == "https") {
        return Err(ConfigError::Invalid(format!(
            "the base URL {given:?} ({source}) is not an http:// or https:// URL"
        )));
    }
    if let Err(why) = authority_ok(&url) {
        return Err(ConfigError::Invalid(format!(
            "the base URL {given:?} ({source}) is not a valid URL: {why}"
        )));
    }
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let (path, tail) = url.split_at(end);
    let path = path.trim_end_matches('/');
    let suffix = endpoint_suffix(kind);
    let cut = path.len().saturating_sub(suffix.len());
    if path.len() > suffix.len()
        && path.is_char_boundary(cut)
        && path[cut..].eq_ignore_ascii_case(suffix)
    {
        let base = format!("{}{tail}", &path[..cut]);
        return Err(ConfigError::Invalid(format!(
            "the base URL {:?} ({source}) is the full endpoint, not the base: give {:?} (tern adds {suffix} itself)",
            crate::store::redact::redact(&url),
            crate::store::redact::redact(&base)
        )));
    }
    Ok(url)
}

/// The authority of `url` (`scheme://[userinfo@]host[:port]…`) checked, so a URL the HTTP
/// client would refuse at the first request is refused at start instead (a usage error):
/// a host (a name, an IPv4 address or a bracketed IPv6 one, RFC 3986 §3.2.2) and, when given,
/// a port from 1 to 65535. Then the HTTP client's own parser must accept the whole URL.
fn authority_ok(url: &str) -> Result<(), String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let Some((inside, after)) = v6.split_once(']') else {
            return Err("the IPv6 address has no closing `]`".into());
        };
        // A zone (`%25eth0`) is allowed after the address.
        let addr = inside.split('%').next().unwrap_or(inside);
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("[{inside}] is not an IPv6 address"));
        }
        match after {
            "" => (inside, None),
            p => match p.strip_prefix(':') {
                Some(port) => (inside, Some(port)),
                None => return Err(format!("unexpected {p:?} after the IPv6 address")),
            },
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err("it names no host".into());
    }
    if !hostport.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~%!$&'()*+,;=".contains(c) || !c.is_ascii())
    {
        return Err(format!(
            "the host {host:?} holds characters a host name cannot"
        ));
    }
    if let Some(p) = port
        && !(p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n)))
    {
        return Err(format!("the port {p:?} is not a number from 1 to 65535"));
    }
    url.parse::<ureq::http::Uri>()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `name` (from `source`: `--model` or TERN_MODEL) checked: not blank, and no control
/// characters (the name is shown in the banner, the status and `tern sessions`, where a newline
/// or an escape sequence would garble the terminal).
pub(crate) fn model_name(name: &str, source: &str) -> Result<String, ConfigError> {
    if name.trim().is_empty() {
        return Err(ConfigError::Invalid(format!(
            "the model name is empty ({source})"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ConfigError::Invalid(format!(
            "the model name {name:?} ({source}) holds control characters"
        )));
    }
    Ok(name.to_string())
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
    crate::provider::reasoning::host(base_url).eq_ignore_ascii_case("api.openai.com")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Var {
        move |k| Env::of(pairs).var(k)
    }

    #[test]
    fn no_provider_names_the_variables_and_the_demo() {
        let e = resolve(&ProviderFlags::default(), &env_of(&[]))
            .unwrap_err()
            .to_string();
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
        .unwrap_err()
        .to_string();
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
                .to_string()
                .contains("ANTHROPIC_API_KEY")
        );
    }

    /// An environment of these text pairs with `not_utf8` set to bytes that are not UTF-8.
    fn env_with_bad(
        pairs: &'static [(&'static str, &'static str)],
        not_utf8: &'static str,
    ) -> impl Fn(&str) -> Var {
        move |k| {
            if k == not_utf8 {
                Var::NotUtf8
            } else {
                Env::of(pairs).var(k)
            }
        }
    }

    const LOCAL: (&str, &str) = ("OPENAI_BASE_URL", "http://127.0.0.1:8088/v1");

    #[test]
    fn a_blank_or_non_utf8_model_variable_is_an_error_naming_it() {
        let e = resolve(
            &ProviderFlags::default(),
            &env_of(&[LOCAL, ("TERN_MODEL", " ")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("model name is empty (TERN_MODEL)"), "{e}");
        let e = resolve(
            &ProviderFlags::default(),
            &env_with_bad(&[LOCAL], "TERN_MODEL"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("TERN_MODEL is not UTF-8"), "{e}");
        let flag = |m: &str| ProviderFlags {
            model: Some(m.into()),
            ..ProviderFlags::default()
        };
        let e = resolve(&flag(""), &env_of(&[LOCAL]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("model name is empty (--model)"), "{e}");
        // The flag wins over a blank variable, as it wins over any.
        assert_eq!(
            resolve(&flag("q"), &env_of(&[LOCAL, ("TERN_MODEL", "")]))
                .unwrap()
                .model,
            "q"
        );
    }

    #[test]
    fn a_model_name_with_control_characters_is_refused() {
        let e = resolve(
            &ProviderFlags::default(),
            &env_of(&[LOCAL, ("TERN_MODEL", "a\nb")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("control characters") && e.contains("TERN_MODEL"),
            "{e}"
        );
        let flags = ProviderFlags {
            model: Some("a\u{1b}[2Jb".into()),
            ..ProviderFlags::default()
        };
        let e = resolve(&flags, &env_of(&[LOCAL])).unwrap_err().to_string();
        assert!(
            e.contains("control characters") && e.contains("--model"),
            "{e}"
        );
    }

    #[test]
    fn a_blank_or_non_utf8_url_variable_is_an_error_naming_it() {
        for (var, value) in [
            ("OPENAI_BASE_URL", " "),
            ("OPENAI_BASE_URL", ""),
            ("ANTHROPIC_BASE_URL", " "),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(Box::new([(var, value)]));
            let e = resolve(&ProviderFlags::default(), &env_of(pairs))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("({var}) is not an http:// or https:// URL")),
                "{var}={value:?}: {e}"
            );
        }
        let e = resolve(
            &ProviderFlags::default(),
            &env_with_bad(&[], "ANTHROPIC_BASE_URL"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ANTHROPIC_BASE_URL is not UTF-8"), "{e}");
        let e = resolve(
            &ProviderFlags::default(),
            &env_with_bad(&[], "OPENAI_API_KEY"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("OPENAI_API_KEY is not UTF-8"), "{e}");
        // A blank key still counts as unset: the local server runs without one.
        let c = resolve(
            &ProviderFlags::default(),
            &env_of(&[LOCAL, ("OPENAI_API_KEY", " ")]),
        )
        .unwrap();
        assert_eq!(c.api_key, None);
    }

    #[test]
    fn a_full_endpoint_given_as_the_base_is_refused_with_the_base() {
        let e = resolve(
            &ProviderFlags::default(),
            &env_of(&[("OPENAI_BASE_URL", "http://host/v1/chat/completions")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("(OPENAI_BASE_URL)") && e.contains("give \"http://host/v1\""),
            "{e}"
        );
        let flags = |u: &str| ProviderFlags {
            base_url: Some(u.into()),
            ..ProviderFlags::default()
        };
        let e = resolve(
            &flags("http://host/v1/Chat/Completions/?key=k"),
            &env_of(&[]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("(--base-url)") && e.contains("give \"http://host/v1?key=k\""),
            "{e}"
        );
        let anthropic = |u: &str| ProviderFlags {
            provider: Some(ProviderKind::Anthropic),
            ..flags(u)
        };
        let e = resolve(&anthropic("https://host/v1/messages"), &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("give \"https://host\""), "{e}");
        for ok in ["https://host", "https://host/v1"] {
            assert_eq!(resolve(&anthropic(ok), &env_of(&[])).unwrap().base_url, ok);
        }
        // A path that merely contains the endpoint's words is a base like any other.
        assert!(
            resolve(
                &flags("http://host/chat/completions-proxy/v1"),
                &env_of(&[])
            )
            .is_ok()
        );
    }

    #[test]
    fn a_refused_base_url_is_shown_as_given() {
        let e = base_url(" ", ProviderKind::Openai, "--base-url")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\" \""), "{e}");
        let e = base_url("ftp://h/ ", ProviderKind::Openai, "--base-url")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"ftp://h/ \""), "{e}");
    }

    #[test]
    fn base_url_authorities_are_checked() {
        for good in [
            "http://127.0.0.1:8080/v1",
            "http://[::1]:8080/v1",
            "http://[::1]/v1",
            "https://user:pw@example.com/v1",
            "http://localhost",
        ] {
            assert!(
                authority_ok(good).is_ok(),
                "{good}: {:?}",
                authority_ok(good)
            );
        }
        for bad in [
            "http://[::1",
            "http://[::1/v1",
            "http://[zz]/v1",
            "http://h:0/v1",
            "http://h:65536/v1",
            "http://h:/v1",
            "http://a b/v1",
            "http:///v1",
        ] {
            assert!(authority_ok(bad).is_err(), "{bad}");
        }
    }
}
