//! `tern setup`: the provider set up once. Asks for the provider, base URL, model and key (or
//! takes them as flags, for scripts), tests them with one tiny request, and writes
//! `~/.config/tern/config.json` ([`crate::config_file`]) atomically with mode 0600. It is also
//! the `terminal` auth method `tern acp` offers (an editor runs `tern setup` in a terminal).
//!
//! Exit codes: 0 written · 1 the test request failed (nothing written) or the file could not
//! be written · 2 a bad value (nothing written).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::config::{self, Env, ProviderFlags, ProviderKind};
use crate::config_file::{self, FileConfig};
use crate::message::Message;
use crate::provider::Provider;
use crate::provider::http::HttpConfig;

/// What the flags gave (each None: ask, or keep the saved value); `tern setup`'s flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SetupArgs {
    /// Wire format: openai (any OpenAI-compatible server) or anthropic.
    #[arg(long, value_enum)]
    pub provider: Option<ProviderKind>,
    /// The server's base URL.
    #[arg(long)]
    pub base_url: Option<String>,
    /// The model name.
    #[arg(long)]
    pub model: Option<String>,
    /// The API key (`-`: read it from stdin's first line, so it stays out of `ps`).
    #[arg(long)]
    pub api_key: Option<String>,
    /// A command that prints the API key (run at each start: `pass show openai`).
    #[arg(long, conflicts_with = "api_key")]
    pub api_key_command: Option<String>,
    /// The server needs no key.
    #[arg(long, conflicts_with_all = ["api_key", "api_key_command"])]
    pub no_api_key: bool,
    /// Models an editor may switch to, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Write without the test request.
    #[arg(long)]
    pub no_test: bool,
    /// Ask nothing: flags, then the saved values, then the defaults.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// How the key is given.
#[derive(Debug, Clone, PartialEq)]
enum Key {
    None,
    Value(String),
    Command(String),
}

/// Runs `tern setup`; `input` is stdin (a terminal when `ask`), prompts go to stderr. Returns
/// the exit code.
pub fn run(env: &Env, args: SetupArgs, input: &mut dyn BufRead, ask: bool) -> i32 {
    let Some(path) = config_file::user_path(env) else {
        crate::errln!(
            "tern setup: neither XDG_CONFIG_HOME nor HOME is set: no place for the config"
        );
        return 2;
    };
    match setup(&path, args, input, ask) {
        Ok(()) => 0,
        Err((code, e)) => {
            crate::errln!("tern setup: {e}");
            code
        }
    }
}

/// A failure of setup: its exit code and message.
type Refused = (i32, String);

fn setup(path: &Path, args: SetupArgs, input: &mut dyn BufRead, ask: bool) -> Result<(), Refused> {
    // The saved file is the default for every answer (a key in a file others can read is not
    // trusted as a default: it is asked for again).
    let saved = config_file::read(path, false)
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut prompt = Prompter { input, ask };
    let kind = ask_provider(&mut prompt, args.provider, &saved)?;
    let same_kind = saved.provider.unwrap_or(ProviderKind::Openai) == kind;
    let base_url = match args.base_url.clone() {
        Some(u) => u,
        None => {
            let def = saved
                .base_url
                .clone()
                .filter(|_| same_kind)
                .unwrap_or_else(|| {
                    match kind {
                        ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                            "https://api.openai.com/v1"
                        }
                        ProviderKind::Anthropic => "https://api.anthropic.com",
                    }
                    .to_string()
                });
            prompt.ask("Base URL", &def)?
        }
    };
    let model = match args.model.clone() {
        Some(m) => m,
        None => {
            let def = saved
                .model
                .clone()
                .filter(|_| same_kind)
                .unwrap_or_else(|| match kind {
                    ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                        config::DEFAULT_OPENAI_MODEL.to_string()
                    }
                    ProviderKind::Anthropic => config::DEFAULT_ANTHROPIC_MODEL.to_string(),
                });
            prompt.ask("Model", &def)?
        }
    };
    let saved_key = match (&saved.api_key, &saved.api_key_command) {
        (Some(k), _) if same_kind => Some(Key::Value(k.clone())),
        (None, Some(c)) if same_kind => Some(Key::Command(c.clone())),
        _ => None,
    };
    let key = ask_key(&mut prompt, &args, saved_key)?;
    let route = check_route(kind, &base_url, &model, &key, &saved)?;
    if !args.no_test {
        test_route(&mut prompt, &route)?;
    }
    let models = if args.models.is_empty() {
        saved.models.clone()
    } else {
        args.models
            .into_iter()
            .map(crate::config_file::ModelEntry::Name)
            .collect()
    };
    let file = FileConfig {
        provider: Some(kind),
        base_url: Some(route.base_url.clone()),
        model: Some(route.model.clone()),
        models,
        api_key: match &key {
            Key::Value(k) if !k.is_empty() => Some(k.clone()),
            _ => None,
        },
        api_key_command: match &key {
            Key::Command(c) => Some(c.clone()),
            _ => None,
        },
        // The other defaults are kept as they were.
        ..saved
    };
    write(path, &file).map_err(|e| (1, e))?;
    crate::outln!("wrote {} (mode 0600)", path.display());
    Ok(())
}

/// The provider: the flag's, else asked (the saved one, else openai, as the default).
fn ask_provider(
    prompt: &mut Prompter<'_>,
    flag: Option<ProviderKind>,
    saved: &FileConfig,
) -> Result<ProviderKind, Refused> {
    if let Some(k) = flag {
        return Ok(k);
    }
    let def = saved.provider.unwrap_or(ProviderKind::Openai);
    let a = prompt.ask(
        "Provider: openai (any OpenAI-compatible server), openai-responses (OpenAI's Responses API) or anthropic",
        ProviderKind::as_str(def),
    )?;
    match a.as_str() {
        "openai" => Ok(ProviderKind::Openai),
        "anthropic" => Ok(ProviderKind::Anthropic),
        "openai-responses" => Ok(ProviderKind::OpenaiResponses),
        other => Err((
            2,
            format!("unknown provider {other:?}: openai or anthropic"),
        )),
    }
}

/// The key: none, a command, the flag's (`-`: stdin's first line), else asked (empty keeps the
/// saved one; `!COMMAND` for a command), else the saved one.
fn ask_key(
    prompt: &mut Prompter<'_>,
    args: &SetupArgs,
    saved_key: Option<Key>,
) -> Result<Key, Refused> {
    if args.no_api_key {
        return Ok(Key::None);
    }
    if let Some(c) = &args.api_key_command {
        return Ok(Key::Command(c.clone()));
    }
    if let Some(k) = &args.api_key {
        if k != "-" {
            return Ok(Key::Value(k.clone()));
        }
        let mut line = String::new();
        prompt
            .input
            .read_line(&mut line)
            .map_err(|e| (1, format!("reading the key from stdin: {e}")))?;
        return Ok(Key::Value(line.trim().to_string()));
    }
    if !prompt.ask {
        return Ok(saved_key.unwrap_or(Key::None));
    }
    let keep = if saved_key.is_some() {
        " (empty: keep the saved one)"
    } else {
        " (empty: none)"
    };
    let a = prompt.secret(&format!(
        "API key{keep}; !COMMAND for a command that prints it"
    ))?;
    Ok(match (a.as_str(), saved_key) {
        ("", Some(k)) => k,
        ("", None) => Key::None,
        (c, _) if c.starts_with('!') => Key::Command(c[1..].trim().to_string()),
        (k, _) => Key::Value(k.to_string()),
    })
}

/// The answers checked as every surface checks them (URL shape, model name, key characters),
/// through the one resolver; a key command runs once here.
fn check_route(
    kind: ProviderKind,
    base_url: &str,
    model: &str,
    key: &Key,
    saved: &FileConfig,
) -> Result<config::ProviderChoice, Refused> {
    let key_text = match key {
        Key::None => None,
        Key::Value(k) => Some(k.clone()),
        Key::Command(c) => Some(
            config_file::run_key_command(
                c,
                saved.api_key_command_timeout.map_or(
                    config_file::KEY_COMMAND_TIMEOUT,
                    std::time::Duration::from_secs,
                ),
            )
            .map_err(|e| (1, format!("the key command {e}")))?,
        ),
    };
    let (key_var, url_var) = match kind {
        ProviderKind::Openai | ProviderKind::OpenaiResponses => {
            ("OPENAI_API_KEY", "OPENAI_BASE_URL")
        }
        ProviderKind::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    };
    let mut pairs = vec![(url_var, base_url), ("TERN_MODEL", model)];
    if let Some(k) = &key_text {
        pairs.push((key_var, k.as_str()));
    }
    let check_env = Env::of(&pairs);
    let flags = ProviderFlags {
        provider: Some(kind),
        ..ProviderFlags::default()
    };
    // Errors name what the person gave to setup, not the variables used to check it.
    let named = |k: &str| match k {
        "OPENAI_BASE_URL" | "ANTHROPIC_BASE_URL" => "the base URL given to tern setup".to_string(),
        "OPENAI_API_KEY" | "ANTHROPIC_API_KEY" => "the key given to tern setup".to_string(),
        "TERN_MODEL" => "the model given to tern setup".to_string(),
        other => other.to_string(),
    };
    config::resolve_named(&flags, &|k| check_env.var(k), &named).map_err(|e| (2, e.into()))
}

/// One tiny request to the route; a failure asks whether to save anyway (refused without a
/// terminal).
fn test_route(prompt: &mut Prompter<'_>, route: &config::ProviderChoice) -> Result<(), Refused> {
    crate::errln!(
        "testing {} with model {} …",
        crate::provider::http::display_url(&route.base_url),
        route.model
    );
    match test_request(route) {
        Ok(ms) => {
            crate::errln!("ok: the model answered in {ms} ms");
            Ok(())
        }
        Err(e) => {
            let e = crate::store::redact::redact(&e).into_owned();
            if prompt.ask
                && prompt.yes_no(&format!("the test request failed: {e}\nSave anyway?"))?
            {
                crate::errln!("saving without a working test");
                Ok(())
            } else {
                Err((
                    1,
                    format!("the test request failed: {e}\nnothing was written"),
                ))
            }
        }
    }
}

/// Writes `file` to `path` atomically (tempfile in the same folder, mode 0600, fsync, rename);
/// the folder is made with mode 0700 when missing.
pub fn write(path: &Path, file: &FileConfig) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(file).map_err(|e| e.to_string())?;
    text.push('\n');
    // The tempfile is created 0600 (tempfile's default) before a byte is written, so the key
    // is never readable by others, not even for a moment.
    crate::store::fsutil::atomic_write(path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777);
    if mode.as_ref().is_ok_and(|m| m & 0o077 != 0) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot chmod {}: {e}", path.display()))?;
    }
    Ok(())
}

/// One tiny request (a 16-token answer to "Reply with OK."); its duration in ms.
fn test_request(route: &config::ProviderChoice) -> Result<u128, String> {
    let http = HttpConfig::default();
    let mut p: Box<dyn Provider> = match route.kind {
        ProviderKind::Openai => Box::new(crate::provider::openai::OpenAi::new(
            http,
            &route.base_url,
            route.api_key.clone(),
        )),
        ProviderKind::Anthropic => Box::new(crate::provider::anthropic::Anthropic::new(
            http,
            &route.base_url,
            route.api_key.clone(),
        )),
        ProviderKind::OpenaiResponses => Box::new(crate::provider::responses::Responses::new(
            http,
            &route.base_url,
            route.api_key.clone(),
        )),
    };
    let messages = [Message::user("Reply with OK.")];
    let body = p.body(&crate::provider::Request {
        model: &route.model,
        system: "You are a connection test. Reply with OK.",
        tools: &[],
        messages: &messages,
        tail: None,
        cache_key: None,
        max_output_tokens: 16,
        temperature: None,
        official_openai: config::is_openai_host(&route.base_url),
        tools_allowed: true,
        long_cache: false,
        reasoning: Default::default(),
    });
    let t = Instant::now();
    p.complete(
        &body,
        crate::event::Purpose::Turn,
        &mut |_| {},
        &CancelToken::default(),
    )
    .map_err(|e| e.to_string())?;
    Ok(t.elapsed().as_millis())
}

struct Prompter<'a> {
    input: &'a mut dyn BufRead,
    ask: bool,
}

impl Prompter<'_> {
    /// `question [default]: ` → the answer, or `default` for an empty line (and when not
    /// asking).
    fn ask(&mut self, question: &str, default: &str) -> Result<String, (i32, String)> {
        if !self.ask {
            return Ok(default.to_string());
        }
        eprint_flush(&format!("{question} [{default}]: "));
        let line = self.line()?;
        Ok(if line.is_empty() {
            default.to_string()
        } else {
            line
        })
    }

    /// A question whose answer is not echoed (a terminal's echo is off while it is typed).
    fn secret(&mut self, question: &str) -> Result<String, (i32, String)> {
        eprint_flush(&format!("{question}: "));
        let echo = EchoOff::new();
        let line = self.line();
        drop(echo);
        crate::errln!();
        line
    }

    fn yes_no(&mut self, question: &str) -> Result<bool, (i32, String)> {
        eprint_flush(&format!("{question} [y/N]: "));
        Ok(matches!(
            self.line()?.to_ascii_lowercase().as_str(),
            "y" | "yes"
        ))
    }

    fn line(&mut self) -> Result<String, (i32, String)> {
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) => Err((2, "stdin closed before every question was answered".into())),
            Ok(_) => Ok(line.trim().to_string()),
            Err(e) => Err((1, format!("reading stdin: {e}"))),
        }
    }
}

fn eprint_flush(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// Turns the terminal's echo off on stdin while it lives (nothing when stdin is no terminal).
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> EchoOff {
        // SAFETY: tcgetattr/tcsetattr on descriptor 0 with a zeroed termios out-parameter;
        // a failure (not a terminal) leaves everything as it was.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return EchoOff(None);
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return EchoOff(None);
            }
            EchoOff(Some(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: restores the settings read in `new` on the same descriptor.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, t);
            }
        }
    }
}
