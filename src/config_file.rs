//! The provider set up once: `~/.config/tern/config.json` (`$XDG_CONFIG_HOME/tern/config.json`
//! when set) and the project's `.tern/config.json`, read at start and laid under the
//! environment, so the order is config < environment < flags (DESIGN.md §15; Codex's
//! `config.toml`, Claude Code's `settings.json`).
//!
//! ```json
//! {"provider": "openai", "base_url": "http://127.0.0.1:8080/v1", "model": "qwen",
//!  "models": ["qwen", {"name": "qwen-big", "price": {"input": 0.2, "output": 0.6}}],
//!  "max_output_tokens": 4096, "temperature": 0.2, "approval": "ask", "sandbox": "workspace-write",
//!  "price": {"input": 0.1, "cached_input": 0.01, "output": 0.3}, "max_cost": 5.0,
//!  "prices": {"claude-opus-4-6": {"input": 5, "output": 25}},
//!  "cache_ttl": "1h", "api_key": "…" | "api_key_command": "pass show openai"}
//! ```
//!
//! Rules:
//! - Unknown fields are refused (a typo must not be a silent default); the project file is read
//!   after the user's and wins field by field.
//! - Keys only in the user's file, which must not be readable by group or others (mode 0600;
//!   `tern setup` writes it so): a key in a 0644 file is refused with the `chmod` to run. The
//!   project's file (it may be committed or shared) may hold no key at all. `api_key_command`
//!   runs `sh -c CMD` once at start (stdin closed); its trimmed stdout is the key. It gets
//!   `api_key_command_timeout` seconds (default [`KEY_COMMAND_TIMEOUT`]): a command that hangs
//!   (a password manager waiting on a prompt no one sees) has its process group killed and
//!   tern stops with an error naming the file and the setting, rather than hanging with it.
//! - The environment wins: when it names any provider (`OPENAI_API_KEY`, `OPENAI_BASE_URL`,
//!   `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`), the file's provider, base URL and key are not
//!   used (so a key from the environment never goes to a URL from the file, nor the reverse);
//!   `TERN_MODEL`, `TERN_APPROVAL`, `TERN_SANDBOX`, `TERN_MAX_OUTPUT_TOKENS` and
//!   `TERN_TEMPERATURE` win over `model`, `approval`, `sandbox`, `max_output_tokens`,
//!   `temperature`. Flags win over both, where each value is read.
//! - A project's file may name the server (`provider`, `base_url`) only when the key does not
//!   come from the user's file: a cloned repository must not be able to send the person's key
//!   to a server of its choosing (refused, saying so).
//! - Prices (`price`, `prices`, a `models` entry's `price`) only in the user's file: they decide what a
//!   spending limit lets through, and a cloned repository must not change that.
//! - The file lives under `~/.config/tern/`, which the sandbox's jail hides from commands.

use crate::config::ConfigError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{Env, ProviderKind};
use crate::policy::Approval;

/// One config file's contents (every field optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Wire format: `openai` (any OpenAI-compatible server) or `anthropic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// The server's base URL (`http://127.0.0.1:8080/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Models an editor offers to switch to (`session/set_model`); any name still works. An
    /// entry is a name, or `{"name", "price"}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelEntry>,
    /// The output cap of every request, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// How much a reasoning model thinks: `none`, `minimal`, `low`, `medium`, `high`, `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<crate::provider::reasoning::Effort>,
    /// Whether stored reasoning goes back: `required`, `beneficial`, `forbidden`, `unknown`
    /// (default: the provider host's documented rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_replay: Option<crate::provider::reasoning::Replay>,
    /// The default approval policy: `ask`, `auto` or `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// The default sandbox: `read-only`, `workspace-write` or `danger-full-access`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::policy::Mode>,
    /// The API key (user file only, mode 0600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// A command printing the API key (user file only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_command: Option<String>,
    /// Seconds `api_key_command` may run before its process group is killed (1 to 600;
    /// default [`KEY_COMMAND_TIMEOUT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_command_timeout: Option<u64>,
    /// The price of `model` (of every model when the file names none), USD per million
    /// tokens (user file only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<crate::cost::Price>,
    /// Prices of any models by name, USD per million tokens (user file only): they win over
    /// the built-in table (`tern prices` shows both).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, crate::cost::Price>,
    /// The spending limit of a run in USD (`--max-cost` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// How long the Anthropic wire asks the provider to keep the prompt cache: `5m` (the
    /// default) or `1h` (writes cost 2× the input price instead of 1.25×).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl: Option<CacheTtl>,
}

/// One entry of `models`: a name, or a name with its price. Anything else is an error that
/// says which shapes are meant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ModelEntry {
    /// `"qwen"`.
    Name(String),
    /// `{"name": "qwen-big", "price": {...}}`.
    Priced {
        /// The model name.
        name: String,
        /// Its price.
        price: crate::cost::Price,
    },
}

impl<'de> Deserialize<'de> for ModelEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Priced {
            name: String,
            price: crate::cost::Price,
        }
        let v = serde_json::Value::deserialize(d)?;
        if let Some(name) = v.as_str() {
            return Ok(ModelEntry::Name(name.to_string()));
        }
        let shape = "a \"models\" entry is a name (\"qwen\") or {\"name\": \"qwen-big\", \"price\": {\"input\": 0.2, \"output\": 0.6}}";
        match serde_json::from_value::<Priced>(v) {
            Ok(p) => Ok(ModelEntry::Priced {
                name: p.name,
                price: p.price,
            }),
            Err(e) => Err(serde::de::Error::custom(format!("{shape}: {e}"))),
        }
    }
}

impl ModelEntry {
    /// The model name.
    pub fn name(&self) -> &str {
        match self {
            ModelEntry::Name(n) | ModelEntry::Priced { name: n, .. } => n,
        }
    }
}

/// The prompt cache lifetime the Anthropic wire asks for (`cache_ttl`: `"5m"` or `"1h"`, the
/// two Anthropic offers; any other value is an error naming the setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CacheTtl {
    /// Five minutes (Anthropic's default).
    #[serde(rename = "5m")]
    FiveMinutes,
    /// One hour.
    #[serde(rename = "1h")]
    OneHour,
}

impl<'de> Deserialize<'de> for CacheTtl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        match v.as_str() {
            Some("5m") => Ok(CacheTtl::FiveMinutes),
            Some("1h") => Ok(CacheTtl::OneHour),
            _ => Err(serde::de::Error::custom(format!(
                "\"cache_ttl\" is {v}: give \"5m\" or \"1h\" (the prompt cache lifetimes Anthropic offers)"
            ))),
        }
    }
}

/// What the files say about money: the prices by model, the spending limit, the cache lifetime.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Costs {
    /// Prices the person set.
    pub prices: crate::cost::PriceBook,
    /// `max_cost`.
    pub max_cost: Option<f64>,
    /// `cache_ttl`: `Some(true)` for `"1h"`, `Some(false)` for `"5m"`, None when no file says
    /// (the surface chooses: one hour for the REPL and editors, five minutes for `exec`).
    pub long_cache: Option<bool>,
}

/// The money settings of `loaded`. Errors (naming the file and the setting): a price with a
/// negative or non-finite figure, a `max_cost` that is not a positive number of dollars.
pub fn costs(loaded: &Loaded) -> Result<Costs, ConfigError> {
    let c = &loaded.merged;
    let at = |field: &str| file_of(loaded, field);
    // Errors are shown after "config: ": the file alone.
    let file = |field: &str| {
        loaded
            .from
            .get(field)
            .map_or_else(|| "the config".into(), |p| p.display().to_string())
    };
    let priced = |p: crate::cost::Price, field: &str| -> Result<crate::cost::Priced, String> {
        let p = p.complete();
        p.check()
            .map_err(|e| ConfigError::File(format!("{}: {e}", file(field))))?;
        Ok(crate::cost::Priced {
            price: p,
            source: format!("\"{field}\" in {}", at(field)),
        })
    };
    let mut prices = crate::cost::PriceBook::default();
    for m in &c.models {
        if let ModelEntry::Priced { name, price } = m {
            prices
                .models
                .push((name.clone(), priced(*price, "models")?));
        }
    }
    for (name, p) in &c.prices {
        if !prices.models.iter().any(|(m, _)| m == name) {
            let named = p.complete().check().map_err(|e| {
                ConfigError::File(format!(
                    "{}: {}",
                    file("prices"),
                    e.replacen("price.", &format!("prices.{name:?}."), 1)
                ))
            });
            named?;
            prices.models.push((name.clone(), priced(*p, "prices")?));
        }
    }
    if let Some(p) = c.price {
        prices.default = Some((c.model.clone(), priced(p, "price")?));
    }
    if let Some(m) = c.max_cost
        && !(m.is_finite() && m > 0.0)
    {
        return Err(ConfigError::File(format!(
            "{}: \"max_cost\" is {m}: give a number of US dollars above 0",
            file("max_cost")
        )));
    }
    Ok(Costs {
        prices,
        max_cost: c.max_cost,
        long_cache: c.cache_ttl.map(|t| t == CacheTtl::OneHour),
    })
}

/// How long `api_key_command` may run when `api_key_command_timeout` does not say (10 s: a
/// password manager answers in well under that; one waiting on an unseen prompt never does).
pub const KEY_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest `api_key_command_timeout` accepted, in seconds.
pub const MAX_KEY_COMMAND_TIMEOUT_S: u64 = 600;

/// `$XDG_CONFIG_HOME/tern/config.json`, else `~/.config/tern/config.json` (None without HOME).
pub fn user_path(env: &Env) -> Option<PathBuf> {
    let base = env
        .get("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("tern").join("config.json"))
}

/// Where each setting came from, for `tern status`: setting → (value as shown, source).
pub use crate::config::Sources;

/// The settings `tern status` explains, in its order.
pub const SETTINGS: [&str; 10] = [
    "provider",
    "base_url",
    "model",
    "api_key",
    "max_output_tokens",
    "temperature",
    "reasoning_effort",
    "reasoning_replay",
    "approval",
    "sandbox",
];

/// What was read: the merged file settings and which file gave each field.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The user's file, then the project's over it.
    pub merged: FileConfig,
    /// field → the file that set it.
    pub from: BTreeMap<&'static str, PathBuf>,
    /// The project's file names a provider or server (`provider`, `base_url`).
    pub project_server: bool,
}

/// Reads `path`: None when absent. Errors name the file: unreadable, not JSON, an unknown field,
/// a key in a file others can read, any key in the project's file.
pub fn read(path: &Path, project: bool) -> Result<Option<FileConfig>, ConfigError> {
    // A link to nothing is a mistake to name, not "no config" (issue 46).
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        let to = std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        return Err(ConfigError::File(format!(
            "{} is a link to {to}, which does not exist: point it at your config or remove it",
            path.display()
        )));
    }
    // Not blocking on a FIFO; a config file is small, 1 MiB is far past any real one: a bigger
    // one is named, never cut and misread.
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 1 << 20) {
        return Err(ConfigError::File(format!(
            "{} is larger than 1 MiB: a config file is a few lines (is it the right file?)",
            path.display()
        )));
    }
    let text = match crate::store::fsutil::read_regular(path, 1 << 20).and_then(|b| {
        b.map(|b| String::from_utf8(b).map_err(|_| std::io::Error::other("not valid UTF-8")))
            .transpose()
    }) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        // Absent, or a folder on the way is not one (a `.tern` file: the surfaces say that
        // themselves, with the words for the state folder).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Ok(None);
        }
        Err(e) => {
            return Err(ConfigError::File(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let cfg: FileConfig = serde_json::from_str(&text)
        .map_err(|e| ConfigError::File(format!("{}: {e}", path.display())))?;
    let has_key = cfg.api_key.is_some() || cfg.api_key_command.is_some();
    if project && has_key {
        return Err(ConfigError::File(format!(
            "{} holds a key (api_key or api_key_command): a project's config may be shared, so tern reads keys only from ~/.config/tern/config.json (tern setup writes it)",
            path.display()
        )));
    }
    // A project's file is the project's word, not the person's: it may narrow the sandbox but
    // never widen what a command may do (a cloned repository must not turn the sandbox or the
    // approval questions off).
    if project && cfg.sandbox == Some(crate::policy::Mode::DangerFullAccess) {
        return Err(ConfigError::File(format!(
            "{} sets \"sandbox\": \"danger-full-access\": a project's config may narrow the sandbox, never turn it off; set it in ~/.config/tern/config.json or pass --sandbox",
            path.display()
        )));
    }
    let priced = cfg.price.is_some()
        || !cfg.prices.is_empty()
        || cfg
            .models
            .iter()
            .any(|m| matches!(m, ModelEntry::Priced { .. }));
    if project && priced {
        return Err(ConfigError::File(format!(
            "{} sets a price: prices decide what a spending limit lets through, so tern reads them only from ~/.config/tern/config.json",
            path.display()
        )));
    }
    if project && cfg.approval.is_some() {
        return Err(ConfigError::File(format!(
            "{} sets \"approval\": a project's config may not decide when commands run without asking; set it in ~/.config/tern/config.json or pass --approval",
            path.display()
        )));
    }
    if let Some(t) = cfg.api_key_command_timeout
        && !(1..=MAX_KEY_COMMAND_TIMEOUT_S).contains(&t)
    {
        return Err(ConfigError::File(format!(
            "{}: \"api_key_command_timeout\" is {t}: give a number of seconds from 1 to {MAX_KEY_COMMAND_TIMEOUT_S}",
            path.display()
        )));
    }
    if cfg.api_key.is_some() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| ConfigError::File(format!("cannot read {}: {e}", path.display())))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(ConfigError::File(format!(
                "{} holds an API key but others can read it (mode {:o}): run `chmod 600 {}`",
                path.display(),
                mode & 0o777,
                path.display()
            )));
        }
    }
    Ok(Some(cfg))
}

/// Reads the user's file and the project's (`<state root>/config.json`), the project's fields
/// over the user's.
pub fn load(env: &Env, state_root: &Path) -> Result<Loaded, ConfigError> {
    let mut loaded = Loaded::default();
    let files = [
        (user_path(env), false),
        (Some(state_root.join("config.json")), true),
    ];
    for (path, project) in files {
        let Some(path) = path else { continue };
        let Some(c) = read(&path, project)? else {
            continue;
        };
        if project && (c.provider.is_some() || c.base_url.is_some()) {
            loaded.project_server = true;
        }
        let m = &mut loaded.merged;
        let mut set = |field: &'static str| {
            loaded.from.insert(field, path.clone());
        };
        macro_rules! take {
            ($f:ident) => {
                if c.$f.is_some() {
                    m.$f = c.$f.clone();
                    set(stringify!($f));
                }
            };
        }
        take!(provider);
        take!(base_url);
        take!(model);
        take!(max_output_tokens);
        take!(temperature);
        take!(reasoning_effort);
        take!(reasoning_replay);
        take!(approval);
        take!(sandbox);
        take!(api_key);
        take!(api_key_command);
        take!(api_key_command_timeout);
        take!(price);
        if !c.prices.is_empty() {
            m.prices = c.prices.clone();
            set("prices");
        }
        take!(max_cost);
        take!(cache_ttl);
        if !c.models.is_empty() {
            m.models = c.models.clone();
            set("models");
        }
    }
    Ok(loaded)
}

/// The environment variables that name a provider: when any is set, the file's provider is
/// not used.
const PROVIDER_ENV: [&str; 4] = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
];

/// Lays `loaded` under `env` (see the module docs) and says where each setting came from.
/// Runs `api_key_command` when its key is needed. Errors: the command failed or printed
/// nothing.
pub fn layer(mut env: Env, loaded: &Loaded) -> Result<Env, ConfigError> {
    let c = &loaded.merged;
    let mut sources = Sources::new();
    let env_named = PROVIDER_ENV.iter().find(|k| env.is_set(k)).copied();
    let file_provider = c.provider.is_some() || c.base_url.is_some() || has_key(c);
    match env_named {
        None if file_provider => {
            refuse_project_server(loaded)?;
            layer_provider(&mut env, loaded, &mut sources)?;
        }
        None => {}
        Some(var) => note_env_provider(&env, var, &mut sources),
    }
    layer_plain(&mut env, loaded, &mut sources);
    env.set_sources(sources);
    Ok(env)
}

/// Where `field` was set: `config PATH`.
fn file_of(loaded: &Loaded, field: &str) -> String {
    loaded
        .from
        .get(field)
        .map(|p| format!("config {}", p.display()))
        .unwrap_or_else(|| "config".into())
}

/// A cloned repository must not be able to send the person's key to a server of its choosing:
/// with a key from the user's file, the server comes from the user's file too.
fn refuse_project_server(loaded: &Loaded) -> Result<(), ConfigError> {
    if !(loaded.project_server && has_key(&loaded.merged)) {
        return Ok(());
    }
    Err(ConfigError::File(format!(
        "the project's config ({}) names the provider or base URL, and your key is in {}: tern does not send that key to a server a project chose. Remove provider/base_url from the project's file, or give the key in the environment",
        loaded
            .from
            .get("base_url")
            .or_else(|| loaded.from.get("provider"))
            .map_or_else(|| ".tern/config.json".into(), |p| p.display().to_string()),
        loaded
            .from
            .get("api_key")
            .or_else(|| loaded.from.get("api_key_command"))
            .map_or_else(
                || "~/.config/tern/config.json".into(),
                |p| p.display().to_string()
            )
    )))
}

/// The file's provider, base URL and key under the environment (which names none); runs
/// `api_key_command` for the key.
fn layer_provider(
    env: &mut Env,
    loaded: &Loaded,
    sources: &mut Sources,
) -> Result<(), ConfigError> {
    let c = &loaded.merged;
    let kind = c.provider.unwrap_or(ProviderKind::Openai);
    let (key_var, url_var) = match kind {
        ProviderKind::Openai | ProviderKind::OpenaiResponses => {
            ("OPENAI_API_KEY", "OPENAI_BASE_URL")
        }
        ProviderKind::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    };
    let from = if c.provider.is_some() {
        file_of(loaded, "provider")
    } else {
        "default".into()
    };
    sources.insert("provider".into(), (ProviderKind::as_str(kind).into(), from));
    if let Some(u) = &c.base_url {
        crate::config::register_url_secrets(u);
        env.set_default(url_var, u);
        let shown = crate::provider::http::display_url(u);
        sources.insert("base_url".into(), (shown, file_of(loaded, "base_url")));
    }
    let key = match (&c.api_key, &c.api_key_command) {
        (Some(k), _) => Some((k.trim().to_string(), file_of(loaded, "api_key"))),
        (None, Some(cmd)) => {
            let timeout = c
                .api_key_command_timeout
                .map_or(KEY_COMMAND_TIMEOUT, std::time::Duration::from_secs);
            let key = run_key_command(cmd, timeout).map_err(|e| {
                let at = loaded
                    .from
                    .get("api_key_command")
                    .map_or_else(|| "the config file".into(), |p| p.display().to_string());
                format!("{at}: \"api_key_command\" {e}")
            })?;
            let from = format!("{} (api_key_command)", file_of(loaded, "api_key_command"));
            Some((key, from))
        }
        (None, None) => None,
    };
    if let Some((k, from)) = key {
        crate::store::redact::register(&k);
        env.set_default(key_var, &k);
        sources.insert("api_key".into(), ("set (hidden)".into(), from));
    }
    Ok(())
}

/// The environment names the provider (`var`): the file's provider settings are not used;
/// the sources say where each came from.
fn note_env_provider(env: &Env, var: &str, sources: &mut Sources) {
    let (kind, key_var, url_var) = if var.starts_with("OPENAI") {
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    } else {
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    };
    sources.insert(
        "provider".into(),
        (kind.into(), format!("environment {var}")),
    );
    if let Some(u) = env.get(url_var) {
        let shown = crate::provider::http::display_url(&u);
        sources.insert("base_url".into(), (shown, format!("environment {url_var}")));
    }
    if env.get(key_var).is_some() {
        sources.insert(
            "api_key".into(),
            ("set (hidden)".into(), format!("environment {key_var}")),
        );
    }
}

/// The settings that are one variable each (model, output cap, temperature, approval,
/// sandbox): the file's value under the environment's.
fn layer_plain(env: &mut Env, loaded: &Loaded, sources: &mut Sources) {
    let c = &loaded.merged;
    let plain: [(&'static str, &str, Option<String>); 7] = [
        ("model", "TERN_MODEL", c.model.clone()),
        (
            "max_output_tokens",
            "TERN_MAX_OUTPUT_TOKENS",
            c.max_output_tokens.map(|n| n.to_string()),
        ),
        (
            "temperature",
            "TERN_TEMPERATURE",
            c.temperature.map(|t| t.to_string()),
        ),
        (
            "reasoning_effort",
            "TERN_REASONING_EFFORT",
            c.reasoning_effort.map(|e| e.as_str().to_string()),
        ),
        (
            "reasoning_replay",
            "TERN_REASONING_REPLAY",
            c.reasoning_replay.map(|r| r.as_str().to_string()),
        ),
        (
            "approval",
            "TERN_APPROVAL",
            c.approval.map(|a| Approval::as_str(a).to_string()),
        ),
        (
            "sandbox",
            "TERN_SANDBOX",
            c.sandbox.map(|s| s.as_str().to_string()),
        ),
    ];
    for (field, var, value) in plain {
        if env.is_set(var) {
            let v = env.get(var).unwrap_or_default();
            sources.insert(field.into(), (v, format!("environment {var}")));
        } else if let Some(v) = value {
            env.set_default(var, &v);
            sources.insert(field.into(), (v, file_of(loaded, field)));
        }
    }
}

/// What a setting is when nothing sets it, as `tern status` shows it.
fn default_of(name: &str) -> &'static str {
    match name {
        "max_output_tokens" => "8192",
        "temperature" => "the server's",
        "reasoning_effort" => "the model's (nothing sent)",
        "reasoning_replay" => "the provider host's rule",
        "approval" => "exec: auto; chat, acp: ask",
        "sandbox" => "workspace-write",
        _ => "",
    }
}

fn has_key(c: &FileConfig) -> bool {
    c.api_key.is_some() || c.api_key_command.is_some()
}

/// Runs `api_key_command` (`sh -c`, stdin closed, stderr passed through, in its own process
/// group); its trimmed stdout is the key. Past `timeout` the whole group is killed (SIGKILL:
/// what the command started goes too). Errors, worded to follow `"api_key_command" `: it could
/// not start, ran past `timeout`, exited non-zero, or printed nothing. `tern setup` uses it
/// too.
pub fn run_key_command(cmd: &str, timeout: std::time::Duration) -> Result<String, ConfigError> {
    use crate::child;
    let mut command = std::process::Command::new("sh");
    command.args(["-c", cmd]);
    let out = child::run(child::Job {
        cmd: command,
        input: None,
        stderr: child::Stderr::Inherit,
        max_output: 1 << 20,
        limits: child::Limits {
            timeout: Some(timeout),
            kill_grace: std::time::Duration::ZERO,
            drain_grace: std::time::Duration::from_secs(1),
            reap_limit: std::time::Duration::from_secs(5),
        },
        cancel: None,
        groups: None,
        // What it left running in the background (holding stdout, say) goes with it.
        kill_leftovers: true,
    })
    .map_err(|e| ConfigError::KeyCommand(format!("could not start: {e}")))?;
    if out.stop.is_some() {
        return Err(ConfigError::KeyCommand(format!(
            "did not finish within {} s, so its process group was killed (set \"api_key_command_timeout\" to allow longer)",
            timeout.as_secs_f64()
        )));
    }
    match out.status {
        Some(s) if s.success() => {}
        Some(s) => return Err(ConfigError::KeyCommand(format!("failed ({s})"))),
        None => return Err(ConfigError::KeyCommand("could not be waited for".into())),
    }
    let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if key.is_empty() {
        return Err(ConfigError::KeyCommand("printed no key".into()));
    }
    Ok(key)
}

/// `tern status`'s block: each setting, its value and where it came from (config < environment
/// < flags; flags are per command, so a status shows the first two).
pub fn explain(sources: &Sources) -> String {
    let mut out = String::from("settings (config < environment < flags):\n");
    for name in SETTINGS {
        let (value, from) = match sources.get(name) {
            Some((v, f)) => (v.as_str(), f.as_str()),
            None => (default_of(name), "default"),
        };
        let value = if value.is_empty() { "-" } else { value };
        out.push_str(&format!(
            "  {name:<18} {:<32} {from}\n",
            crate::store::redact::redact(value)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(c: FileConfig) -> Loaded {
        Loaded {
            merged: c,
            from: BTreeMap::new(),
            project_server: false,
        }
    }

    #[test]
    fn a_project_cannot_send_the_users_key_to_its_own_server() {
        let mut l = loaded(FileConfig {
            base_url: Some("http://evil.example/v1".into()),
            api_key: Some("sk-mine".into()),
            ..FileConfig::default()
        });
        l.project_server = true;
        let e = layer(Env::default(), &l).unwrap_err().to_string();
        assert!(e.contains("does not send that key"), "{e}");
        // With the key in the environment, the environment's provider wins anyway.
        assert!(layer(Env::of(&[("OPENAI_API_KEY", "sk-env")]), &l).is_ok());
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let c = FileConfig {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("file-model".into()),
            approval: Some(Approval::Never),
            ..FileConfig::default()
        };
        let env = layer(Env::of(&[("TERN_MODEL", "env-model")]), &loaded(c.clone())).unwrap();
        let src = env.sources().clone();
        assert_eq!(env.get("TERN_MODEL").as_deref(), Some("env-model"));
        assert_eq!(
            env.get("OPENAI_BASE_URL").as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(env.get("TERN_APPROVAL").as_deref(), Some("never"));
        assert_eq!(src["model"].1, "environment TERN_MODEL");
        // A provider in the environment: the file's URL is not used at all.
        let env = layer(Env::of(&[("OPENAI_API_KEY", "sk-env")]), &loaded(c)).unwrap();
        let src = env.sources().clone();
        assert_eq!(env.get("OPENAI_BASE_URL"), None);
        assert_eq!(src["provider"].1, "environment OPENAI_API_KEY");
    }

    #[test]
    fn the_key_command_gives_the_key() {
        let c = FileConfig {
            provider: Some(ProviderKind::Anthropic),
            api_key_command: Some("echo ' sk-from-cmd '".into()),
            ..FileConfig::default()
        };
        let env = layer(Env::default(), &loaded(c)).unwrap();
        assert_eq!(env.get("ANTHROPIC_API_KEY").as_deref(), Some("sk-from-cmd"));
        let bad = FileConfig {
            api_key_command: Some("exit 3".into()),
            ..FileConfig::default()
        };
        assert!(layer(Env::default(), &loaded(bad)).is_err());
    }

    #[test]
    fn a_key_command_past_its_timeout_is_killed() {
        use std::time::Duration;
        let e = run_key_command("sleep 30 & wait", Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not finish"), "{e}");
        assert_eq!(
            run_key_command("echo sk-1", Duration::from_secs(30)).unwrap(),
            "sk-1"
        );
        assert_eq!(KEY_COMMAND_TIMEOUT, Duration::from_secs(10));
    }

    #[test]
    fn unknown_fields_and_shared_keys_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        std::fs::write(&p, r#"{"modle": "x"}"#).unwrap();
        assert!(read(&p, false).unwrap_err().to_string().contains("modle"));
        std::fs::write(&p, r#"{"api_key": "sk-1"}"#).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            read(&p, false)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read(&p, false).unwrap().unwrap().api_key.as_deref(),
            Some("sk-1")
        );
        assert!(read(&p, true).unwrap_err().to_string().contains("shared"));
    }
}
