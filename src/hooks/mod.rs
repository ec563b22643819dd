//! Hooks: the person's own commands, run at fixed points of a session, in Claude Code's format so
//! a person's existing scripts run unchanged (DESIGN.md §13, issue 19).
//!
//! Where they come from: `~/.config/tern/hooks.json` (the person's, trusted) and the project's
//! `.tern/hooks.json`, which runs only once `tern hooks trust` recorded its SHA-256 in
//! `~/.config/tern/trusted-hooks.json` (outside the workspace, so a repository cannot ship its own
//! trust; any change to the file needs trust again). An untrusted file is named on stderr and in
//! `session_start`; it is never run silently and never skipped silently.
//!
//! The file: `{"hooks": {EVENT: [{"matcher": …, "hooks": [{"type": "command", "command": …,
//! "timeout": SECONDS}]}]}}`, as in Claude Code's settings (its hooks reference, "Configuration").
//! Other top-level keys are ignored, so a whole `settings.json` can be pasted. Events tern does
//! not have and handler types other than `command` are named as notes, never run. An invalid
//! entry is an error that keeps every session from starting ([`invalid_message`] says why).
//!
//! How they run ([`run`]): outside the command sandbox (they are the person's code), one at a
//! time in file order (the person's file first), each with its timeout (Claude's default, 600 s)
//! and a bounded output. What a hook adds for the model goes into the newest message only (a tool
//! result, a user message), never the system prompt (`runtime::hooks`, the door).
//!
//! The room's parts: this file (the configuration, matchers, trust), [`run`] (one process),
//! [`goal`] (`--goal`'s file), [`cli`] (`tern hooks`); its one door into the runtime is
//! `runtime::hooks` (what each event does with a hook's answer, and the goal's Stop gate).

pub mod answer;
pub mod cli;
pub mod goal;
pub mod rule;
pub mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// Claude Code's default timeout of a `command` hook (its hooks reference: "Defaults: 600 for
/// command").
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest timeout a hook may ask for (a day).
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// The largest hooks file read (1 MiB); a bigger one is an error, never half-read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

pub use crate::event::HookEvent;
pub use crate::trust::covered;
use crate::trust::{Record, Standing, file_sha, sha256_hex};

/// Why a session ends, as SessionEnd's `reason` (Claude Code's hooks reference, SessionEnd:
/// `clear`, `logout`, `prompt_input_exit`, `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The conversation was cleared (a new one starts).
    Clear,
    /// The person logged out.
    Logout,
    /// The person left the prompt (the REPL's `/quit`, end of input).
    PromptInputExit,
    /// Anything else: a headless run's end, a signal, the runtime dropped.
    Other,
}

impl EndReason {
    /// The `reason` string hooks read (and their matcher matches).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Clear => "clear",
            EndReason::Logout => "logout",
            EndReason::PromptInputExit => "prompt_input_exit",
            EndReason::Other => "other",
        }
    }
}

/// Why the hooks room could not do what it was asked: one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    /// A hooks file's entry cannot be used (a matcher that is no regex, an `if` rule tern
    /// cannot read).
    Entry(String),
    /// Trust could not be given (no project file, no home folder, the record).
    Trust(String),
    /// The goal's state file cannot be read.
    Goal(String),
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookError::Entry(why) | HookError::Trust(why) | HookError::Goal(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for HookError {}

/// The line, for a receipt or an error list.
impl From<HookError> for String {
    fn from(e: HookError) -> String {
        e.to_string()
    }
}

/// Which file a hook came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `~/.config/tern/hooks.json`.
    User,
    /// `.tern/hooks.json`, trusted by hash.
    Project,
}

/// Which tool calls (or sources, triggers) a group applies to, as Claude Code reads `matcher`:
/// omitted, `""` or `*` match everything; a name of letters, digits and `_` (or several joined
/// by `|`) matches exactly (case-sensitive); anything else is a regular expression searched in
/// the name (`Notebook.*`, `^mcp__`).
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Everything.
    All,
    /// One of these names exactly.
    Names(Vec<String>),
    /// A regular expression.
    Pattern(regex_lite::Regex),
}

impl Matcher {
    /// Parses `matcher`. Errors: a regular expression that does not compile.
    pub fn parse(text: Option<&str>) -> Result<Matcher, HookError> {
        let t = text.unwrap_or("").trim();
        if t.is_empty() || t == "*" {
            return Ok(Matcher::All);
        }
        if t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Ok(Matcher::Names(
                t.split('|')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            ));
        }
        regex_lite::Regex::new(t)
            .map(Matcher::Pattern)
            .map_err(|e| {
                HookError::Entry(format!(
                    "matcher {t:?} is not a valid regular expression: {e}"
                ))
            })
    }

    /// Whether a tool matcher can match one of tern's tools or an MCP tool (`mcp__…`).
    fn can_fire_in_tern(&self) -> bool {
        rule::TOOL_NAMES.iter().any(|t| self.matches(Some(t)))
            || match self {
                Matcher::All => true,
                Matcher::Names(names) => names.iter().any(|n| n.starts_with("mcp__")),
                Matcher::Pattern(r) => {
                    r.is_match("mcp__server__tool") || r.as_str().contains("mcp")
                }
            }
    }

    /// Whether `value` (a tool name, a source, a trigger) is matched; events without a value
    /// (UserPromptSubmit, Stop, SubagentStop) match every group, as in Claude Code.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(v) = value else { return true };
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|n| n == v),
            Matcher::Pattern(r) => r.is_match(v),
        }
    }
}

/// One `command` hook.
#[derive(Debug, Clone)]
pub struct Handler {
    /// Run with `bash -c` in the workspace.
    pub command: String,
    /// Killed (its process group) after this long.
    pub timeout: Duration,
    /// The file it came from.
    pub source: Source,
    /// Run inside the jail, like the model's commands (issue 42, DESIGN §10): by default when
    /// its command could run a program the workspace holds (it runs a workspace file commands
    /// can write, or a runner such as `npm` or `make` that reads the workspace), so a script a
    /// command rewrote gains nothing the model's own commands lack; `"jail": true` / `false` (tern's
    /// own field) decides it per entry.
    pub jail: bool,
    /// `"jail"` as the entry gives it (None: not given, the default above applies). An asked
    /// jail is never left out; a default one is, in a mode with no jail (the model's commands
    /// then reach as far).
    pub jail_asked: Option<bool>,
    /// The workspace files its command names (see `covered.rs`), each with the SHA-256 it is
    /// trusted with (the project file's: recorded by `tern hooks trust`; the person's: as the
    /// session found it). None: never trusted. Read-only inside the jail.
    pub covered: Vec<(PathBuf, Option<String>)>,
    /// The runner of workspace code it calls that tern cannot name (`npm`, `make`).
    pub opaque: Option<String>,
    /// Its `if` (Claude Code's permission-rule syntax, see [`rule`]): it runs only for the tool
    /// calls the rule names. None: whenever its group matches.
    pub cond: Option<rule::Rule>,
    /// Its `if` as written (shown by `tern hooks`).
    pub cond_text: Option<String>,
    /// `"async": true`: it runs in the background and decides nothing; its outcome is logged as
    /// a `hook` event when it ends.
    pub background: bool,
}

impl Handler {
    /// Whether it runs for a hook input with these `fields`: always without an `if`, and for an
    /// event without a tool call; else when the rule names the call (`tool_name`, and for Bash
    /// `tool_input.command`).
    pub fn applies(&self, fields: &serde_json::Map<String, Value>) -> bool {
        let (Some(cond), Some(tool)) =
            (&self.cond, fields.get("tool_name").and_then(Value::as_str))
        else {
            return true;
        };
        let command = fields
            .get("tool_input")
            .and_then(|i| i.get("command"))
            .and_then(Value::as_str);
        cond.applies(tool, command)
    }

    /// Why it must not run now: a covered file changed since it was trusted (or was never
    /// trusted). None: it may run. Hashes each covered file (small scripts).
    pub fn suspended(&self) -> Option<String> {
        for (path, trusted) in &self.covered {
            let now = file_sha(path);
            if now.as_ref() != trusted.as_ref() {
                return Some(format!(
                    "{} {} since the hooks were trusted, so this hook does not run until the person runs `tern hooks trust` again",
                    path.display(),
                    match (trusted, now) {
                        (None, _) => "was never trusted",
                        (Some(_), None) => "is gone",
                        (Some(_), Some(_)) => "changed",
                    }
                ));
            }
        }
        None
    }

    /// Fills `covered` and `opaque` from the command (the files as they are now, or as
    /// `record` trusted them).
    fn cover(
        &mut self,
        workspace: &Path,
        record: Option<&std::collections::BTreeMap<String, String>>,
    ) {
        let scan = covered::scan(&self.command, workspace);
        let workspace_code = scan.runs_workspace_code(workspace);
        self.opaque = scan.opaque;
        self.jail = self.jail_asked.unwrap_or(workspace_code);
        self.covered = scan
            .named
            .into_iter()
            .filter(|p| p.is_file())
            .map(|p| {
                let sha = match record {
                    Some(r) => r.get(&p.display().to_string()).cloned(),
                    None => file_sha(&p),
                };
                (p, sha)
            })
            .collect();
    }
}

#[derive(Debug, Clone)]
struct Group {
    matcher: Matcher,
    handlers: Vec<Handler>,
}

/// A project hooks file that has not been trusted (or changed since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The file.
    pub path: PathBuf,
    /// Its SHA-256 now (hex).
    pub sha256: String,
    /// It was trusted before with other content.
    pub changed: bool,
}

/// The hooks of one workspace, loaded once when a runtime opens (as Claude Code takes a snapshot
/// at start-up): later edits apply to the next session.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    groups: [Vec<Group>; 8],
    /// The project file, when it exists and is not trusted: its hooks are not loaded.
    pub untrusted: Option<Untrusted>,
    /// What the person should know: events and handler types tern does not run (valid in
    /// Claude Code's format, not tern's to run). Shown as warnings when a session opens and by
    /// `tern hooks`.
    pub notes: Vec<String>,
    /// Entries that are not valid, each `FILE: hooks.EVENT[i].hooks[j]: why` (a file that cannot
    /// be read or is not JSON: `FILE: why`). A file with any runs none of its hooks, and no
    /// session starts while there are any (the launcher refuses, exit 2): see
    /// [`invalid_message`] for why.
    pub errors: Vec<String>,
    /// Hooks files that exist but cannot be read (a FIFO, a folder, too big, no permission):
    /// neither trusted nor trustable, whoever's they are (their error is in [`Hooks::errors`]).
    pub unreadable: Vec<PathBuf>,
}

/// The refusal for hooks files with invalid entries.
///
/// Why refuse rather than warn and go on: hooks are often gates (a PreToolUse hook that
/// blocks `rm -rf`, a Stop hook that makes the tests pass first). Running without them because
/// one entry has a typo would fail open, quietly. Claude Code does not run a settings file
/// with errors either: it names the file and each invalid entry and asks whether to exit and
/// fix it or continue without that file; tern cannot ask in a script, so it takes the first,
/// safe answer and stops before anything runs.
pub fn invalid_message(errors: &[String]) -> String {
    format!(
        "a hooks file has invalid entries, so tern does not start (running without the hooks it holds could let through what they gate):\n  {}\nFix them (`tern hooks` lists the files), or move the file aside to run without its hooks.",
        errors.join("\n  ")
    )
}

impl Hooks {
    /// True when no hook is configured (the turn loop then does no hook work at all).
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(Vec::is_empty)
    }

    /// The handlers for `event` whose group matches `value`, in file order.
    pub fn matching(&self, event: HookEvent, value: Option<&str>) -> Vec<&Handler> {
        self.groups[event.index()]
            .iter()
            .filter(|g| g.matcher.matches(value))
            .flat_map(|g| g.handlers.iter())
            .collect()
    }

    /// Every handler of `event`, with its group's matcher text, for `tern hooks`.
    pub fn listing(&self) -> Vec<(HookEvent, String, &Handler)> {
        let mut out = Vec::new();
        for e in HookEvent::ALL {
            for g in &self.groups[e.index()] {
                let m = match &g.matcher {
                    Matcher::All => "*".to_string(),
                    Matcher::Names(n) => n.join("|"),
                    Matcher::Pattern(r) => r.as_str().to_string(),
                };
                for h in &g.handlers {
                    out.push((e, m.clone(), h));
                }
            }
        }
        out
    }

    /// Loads the person's file `user` (trusted) and the project's `project` (run only when
    /// `trust` records its hash). A missing file adds nothing; a file that cannot be read or
    /// has an invalid entry adds [`Hooks::errors`] and none of its hooks (the launcher then
    /// refuses to start: [`invalid_message`]).
    pub fn load(
        user: Option<&Path>,
        project: &Path,
        trust: Option<&Path>,
        workspace: &Path,
    ) -> Hooks {
        let mut hooks = Hooks::default();
        if let Some(u) = user {
            hooks.add_file(u, Source::User);
        }
        hooks.cover(workspace, Source::User, None);
        match read_bounded(project) {
            Ok(None) => {}
            Err(e) => {
                hooks
                    .errors
                    .push(format!("{}: cannot be read: {e}", project.display()));
                hooks.unreadable.push(project.to_path_buf());
            }
            Ok(Some(bytes)) => match Record::read_or_empty(trust).standing(project, &bytes) {
                Standing::Trusted(covered) => {
                    hooks.add_bytes(project, &bytes, Source::Project);
                    hooks.cover(workspace, Source::Project, Some(&covered));
                }
                Standing::Untrusted { changed } => {
                    hooks.untrusted = Some(Untrusted {
                        path: project.to_path_buf(),
                        sha256: sha256_hex(&bytes),
                        changed,
                    });
                }
            },
        }
        hooks
    }

    /// Fills the covered files of the handlers from `source` (see [`Handler::cover`]): their
    /// trusted hashes from `record`, or (None) as the files are now.
    pub(crate) fn cover(
        &mut self,
        workspace: &Path,
        source: Source,
        record: Option<&std::collections::BTreeMap<String, String>>,
    ) {
        for g in self.groups.iter_mut().flatten() {
            for h in g.handlers.iter_mut().filter(|h| h.source == source) {
                h.cover(workspace, record);
            }
        }
    }

    /// Every workspace file a hook names: read-only inside the jail.
    pub fn covered_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self
            .groups
            .iter()
            .flatten()
            .flat_map(|g| g.handlers.iter())
            .flat_map(|h| h.covered.iter().map(|(p, _)| p.clone()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    fn add_file(&mut self, path: &Path, source: Source) {
        match read_bounded(path) {
            Ok(None) => {}
            Ok(Some(bytes)) => self.add_bytes(path, &bytes, source),
            Err(e) => {
                self.errors
                    .push(format!("{}: cannot be read: {e}", path.display()));
                self.unreadable.push(path.to_path_buf());
            }
        }
    }

    pub(crate) fn add_bytes(&mut self, path: &Path, bytes: &[u8], source: Source) {
        let at = path.display();
        let root: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                self.errors.push(format!("{at}: not JSON ({e})"));
                return;
            }
        };
        if !root.is_object() {
            self.errors.push(format!(
                "{at}: must be a JSON object ({{\"hooks\": {{…}}}})"
            ));
            return;
        }
        let Some(events) = root.get("hooks").filter(|h| !h.is_null()) else {
            return;
        };
        let Some(events) = events.as_object() else {
            self.errors
                .push(format!("{at}: hooks: must be an object of events"));
            return;
        };
        // Checked whole before anything is kept: a file with an error runs none of its hooks
        // (and the launcher refuses to start), never some of them.
        let mut parsed: Vec<(HookEvent, Group)> = Vec::new();
        let mut notes = Vec::new();
        let mut errors = Vec::new();
        for (name, groups) in events {
            let Some(event) = HookEvent::parse(name) else {
                notes.push(format!(
                    "{at}: tern has no {name} event; those hooks never run"
                ));
                continue;
            };
            let Some(groups) = groups.as_array() else {
                errors.push(format!(
                    "{at}: hooks.{name}: must be a list of matcher groups"
                ));
                continue;
            };
            for (i, g) in groups.iter().enumerate() {
                match parse_group(g, source) {
                    Ok((group, skipped)) => {
                        notes.extend(
                            skipped
                                .into_iter()
                                .map(|s| format!("{at}: hooks.{name}[{i}].{s}")),
                        );
                        // A tool matcher that names none of tern's tools (`Edit|Write`, common
                        // in Claude Code settings) never fires here: said, not silent.
                        let tool_event =
                            matches!(event, HookEvent::PreToolUse | HookEvent::PostToolUse);
                        if tool_event && !group.matcher.can_fire_in_tern() {
                            notes.push(format!(
                                "{at}: hooks.{name}[{i}]: its matcher names no tool of tern's ({}, mcp__SERVER__TOOL): these hooks never run",
                                rule::TOOL_NAMES.join(", ")
                            ));
                        }
                        parsed.push((event, group));
                    }
                    Err(es) => errors.extend(
                        es.into_iter()
                            .map(|e| format!("{at}: hooks.{name}[{i}]{e}")),
                    ),
                }
            }
        }
        self.notes.extend(notes);
        if !errors.is_empty() {
            self.errors.extend(errors);
            return;
        }
        for (e, g) in parsed {
            if !g.handlers.is_empty() {
                self.groups[e.index()].push(g);
            }
        }
    }
}

/// One matcher group; returns it and notes on handlers it does not run (each starting with
/// its place, `hooks[j]: …`). Errors name every invalid entry of the group, not just the first
/// (a bad `matcher` must not hide a bad `timeout`); each starts with the place inside the group
/// (`.matcher: …`, `.hooks[j].command: …`), so the caller can prefix `hooks.EVENT[i]`.
fn parse_group(g: &Value, source: Source) -> Result<(Group, Vec<String>), Vec<String>> {
    if !g.is_object() {
        return Err(vec![
            ": a matcher group must be an object ({\"matcher\": …, \"hooks\": […]})".into(),
        ]);
    }
    let mut errors = Vec::new();
    let matcher = match g.get("matcher") {
        None | Some(Value::Null) => Some(Matcher::All),
        Some(Value::String(s)) => Matcher::parse(Some(s))
            .map_err(|e| errors.push(format!(".matcher: {e}")))
            .ok(),
        Some(_) => {
            errors.push(".matcher: must be a string".into());
            None
        }
    };
    let Some(list) = g.get("hooks").and_then(Value::as_array) else {
        errors.push(".hooks: a matcher group needs \"hooks\": a list of handlers".into());
        return Err(errors);
    };
    let mut handlers = Vec::new();
    let mut skipped = Vec::new();
    for (j, h) in list.iter().enumerate() {
        handlers.extend(parse_handler(h, j, source, &mut errors, &mut skipped));
    }
    match matcher {
        Some(matcher) if errors.is_empty() => Ok((Group { matcher, handlers }, skipped)),
        _ => Err(errors),
    }
}

/// One handler of a matcher group (`.hooks[j]`): None when it is not one tern runs (an error
/// or a note says why, each a line that names its place).
fn parse_handler(
    h: &Value,
    j: usize,
    source: Source,
    errors: &mut Vec<String>,
    skipped: &mut Vec<String>,
) -> Option<Handler> {
    let place = format!(".hooks[{j}]");
    if !h.is_object() {
        errors.push(format!("{place}: a handler must be an object"));
        return None;
    }
    let kind = match h.get("type") {
        None | Some(Value::Null) => "command",
        Some(Value::String(k)) => k.as_str(),
        Some(_) => {
            errors.push(format!("{place}.type: must be a string"));
            return None;
        }
    };
    if kind != "command" {
        // Claude Code's other handler types are valid entries tern does not run (a note);
        // anything else is a typo that would drop a guard silently: an invalid entry.
        if matches!(kind, "prompt" | "agent" | "http" | "mcp") {
            skipped.push(format!(
                "hooks[{j}]: a {kind:?} handler is not run (tern runs \"command\" hooks only)"
            ));
        } else {
            errors.push(format!(
                "{place}.type: {kind:?} is no handler type (\"command\"; Claude Code's \"prompt\" and \"agent\" are named and not run)"
            ));
        }
        return None;
    }
    let command = h
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty());
    if command.is_none() {
        errors.push(format!(
            "{place}.command: a command hook needs a non-empty \"command\" string"
        ));
    }
    let timeout = match h.get("timeout") {
        None | Some(Value::Null) => Some(DEFAULT_TIMEOUT),
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= MAX_TIMEOUT_S as f64 => Some(Duration::from_secs_f64(s)),
            _ => {
                errors.push(format!(
                    "{place}.timeout: must be a number of seconds from 1 to {MAX_TIMEOUT_S} (it is {v})"
                ));
                None
            }
        },
    };
    let jail = match h.get("jail") {
        None | Some(Value::Null) => Some(None),
        Some(Value::Bool(b)) => Some(Some(*b)),
        Some(_) => {
            errors.push(format!("{place}.jail: must be true or false"));
            None
        }
    };
    let cond = match h.get("if") {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(r)) => match rule::Rule::parse(r) {
            Ok(rule) => {
                if let rule::Rule::Never(why) = &rule {
                    skipped.push(format!("hooks[{j}].if: {why}: this handler never runs"));
                }
                Some(Some(rule))
            }
            Err(e) => {
                errors.push(format!("{place}.if: {e}"));
                None
            }
        },
        Some(_) => {
            errors.push(format!(
                "{place}.if: must be a rule like \"Bash(rm *)\" (a string)"
            ));
            None
        }
    };
    let background = flag(h, "async", &place, errors);
    Some(Handler {
        command: command?.to_string(),
        timeout: timeout?,
        source,
        jail: jail?.unwrap_or(false),
        jail_asked: jail?,
        covered: Vec::new(),
        opaque: None,
        cond: cond?,
        cond_text: h.get("if").and_then(Value::as_str).map(str::to_string),
        background: background?,
    })
}

/// A handler's boolean `key` (absent: false); an error names `place` when it is not one.
fn flag(h: &Value, key: &str, place: &str, errors: &mut Vec<String>) -> Option<bool> {
    match h.get(key) {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            errors.push(format!("{place}.{key}: must be true or false"));
            None
        }
    }
}

/// A file's bytes, None when it does not exist; refused over [`MAX_FILE_BYTES`] or when it is a
/// symbolic link (a link could point the trusted hash at one file and the run at another).
fn read_bounded(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        // Absent, or a folder on the way is not one (a `.tern` file: the surfaces say that
        // themselves, with the words for the state folder).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    // Opened without blocking and checked again: a FIFO swapped in after the look above.
    let Some(bytes) = crate::store::fsutil::read_regular(path, MAX_FILE_BYTES + 1)? else {
        return Ok(None);
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(Some(bytes))
}

/// tern's folder in the person's configuration: `$XDG_CONFIG_HOME/tern`, else `~/.config/tern`.
pub fn config_dir(env: &crate::config::Env) -> Option<PathBuf> {
    env.get("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|b| b.join("tern"))
}

/// Where the hooks of a workspace come from.
#[derive(Debug, Clone)]
pub struct Files {
    /// The person's `hooks.json` (None without a home folder).
    pub user: Option<PathBuf>,
    /// The project's, `<state folder>/hooks.json`.
    pub project: PathBuf,
    /// The trust record (None without a home folder: nothing can be trusted).
    pub trust: Option<PathBuf>,
    /// The workspace the hooks run in (`$CLAUDE_PROJECT_DIR`).
    pub workspace: PathBuf,
}

impl Files {
    /// The files for the state folder `state_root` and the environment `env`.
    pub fn new(state_root: &Path, workspace: &Path, env: &crate::config::Env) -> Files {
        let dir = config_dir(env);
        Files {
            user: dir.as_ref().map(|d| d.join("hooks.json")),
            project: state_root.join("hooks.json"),
            trust: crate::trust::record_path(dir.as_deref()),
            workspace: std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf()),
        }
    }

    /// Loads them (see [`Hooks::load`]).
    pub fn load(&self) -> Arc<Hooks> {
        Arc::new(Hooks::load(
            self.user.as_deref(),
            &self.project,
            self.trust.as_deref(),
            &self.workspace,
        ))
    }

    /// Every file a model's command must not change: the two hooks files and the trust record.
    pub fn protected(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.user.iter().cloned().collect();
        v.push(self.project.clone());
        v.extend(self.trust.iter().cloned());
        v
    }
}

/// The line a person sees for a `session_start` naming an untrusted project hooks file.
pub fn untrusted_line(path: &str) -> String {
    format!(
        "{path} is not trusted (or changed since it was trusted): its hooks do not run. Read it, then run `tern hooks trust` to let them run."
    )
}

/// The line a person sees for a `hook` event (the REPL, `tern exec`'s stderr, `tern status`, an
/// editor's thought chunk); None for other events.
pub fn run_line(ev: &crate::event::Event) -> Option<String> {
    use crate::event::HookDecision as D;
    let crate::event::Event::Hook {
        event,
        command,
        exit_code,
        duration_ms,
        decision,
        message,
    } = ev
    else {
        return None;
    };
    let clip = |t: &str| {
        let line = t.lines().next().unwrap_or("");
        let c = crate::text::cut(line, 200);
        if c.len() < line.len() {
            format!("{c}…")
        } else {
            c.to_string()
        }
    };
    let what = match decision {
        D::None => "ok",
        D::Allow => "allow",
        D::Deny => "deny",
        D::Ask => "ask",
        D::Block => "block",
        D::Stop => "stop",
        D::Error => "warning",
    };
    let exit = exit_code.map_or_else(String::new, |c| format!(", exit {c}"));
    let msg = message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map_or_else(String::new, |m| format!(": {}", clip(m)));
    Some(format!(
        "hook {} `{}`: {what}{exit}, {duration_ms} ms{msg}",
        event.as_str(),
        clip(command)
    ))
}

/// The line an untrusted project file gets on stderr (and, shorter, in `session_start`).
pub fn untrusted_note(u: &Untrusted) -> String {
    let why = if u.changed {
        "changed since it was trusted"
    } else {
        "not trusted"
    };
    format!(
        "{} is {why}: its hooks do not run. Read it, then run `tern hooks trust` to let them run.",
        u.path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_follow_claude() {
        let m = |t: &str, v: &str| Matcher::parse(Some(t)).unwrap().matches(Some(v));
        assert!(m("", "Bash") && m("*", "Bash"));
        assert!(m("Bash", "Bash") && !m("Bash", "bash") && !m("Bas", "Bash"));
        assert!(m("Edit|Bash", "Bash") && !m("Edit|Write", "Bash"));
        assert!(m("Notebook.*", "NotebookEdit") && m("^work_", "work_update"));
        assert!(!m("^work_", "bash"));
        assert!(Matcher::parse(Some("(")).is_err());
        // No value (Stop): every group.
        assert!(Matcher::parse(Some("Bash")).unwrap().matches(None));
    }

    #[test]
    fn files_parse_and_name_what_they_skip() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.json");
        std::fs::write(
            &user,
            r#"{"permissions": {}, "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "a", "timeout": 5},
                    {"type": "prompt", "prompt": "x"}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "n"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "b"}]}]}}"#,
        )
        .unwrap();
        let h = Hooks::load(Some(&user), &dir.path().join("none.json"), None, dir.path());
        assert_eq!(h.matching(HookEvent::PreToolUse, Some("Bash")).len(), 1);
        assert_eq!(
            h.matching(HookEvent::PreToolUse, Some("work_update")).len(),
            0
        );
        let pre = h.matching(HookEvent::PreToolUse, Some("Bash"));
        assert_eq!(pre[0].timeout, Duration::from_secs(5));
        assert_eq!(
            h.matching(HookEvent::Stop, None)[0].timeout,
            DEFAULT_TIMEOUT
        );
        assert_eq!(h.notes.len(), 2, "{:?}", h.notes);
        // A broken file runs nothing, and names the entry and why.
        std::fs::write(
            &user,
            r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "ok"}]}],
                "Stop": [{"hooks": [{"command": ""}]}]}}"#,
        )
        .unwrap();
        let h = Hooks::load(Some(&user), &dir.path().join("none.json"), None, dir.path());
        assert!(h.is_empty() && h.errors.len() == 1, "{:?}", h.errors);
        assert!(
            h.errors[0].contains("hooks.Stop[0].hooks[0].command"),
            "{:?}",
            h.errors
        );
    }

    #[test]
    fn project_hooks_need_trust_by_hash() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("hooks.json");
        let trust = dir.path().join("trusted.json");
        let text = r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}"#;
        std::fs::write(&project, text).unwrap();
        let h = Hooks::load(None, &project, Some(&trust), dir.path());
        assert!(h.is_empty());
        let u = h.untrusted.clone().unwrap();
        assert!(!u.changed);
        let mut t = Record::default();
        t.files.insert(crate::trust::key_of(&project), u.sha256);
        t.write(&trust).unwrap();
        let h = Hooks::load(None, &project, Some(&trust), dir.path());
        assert!(h.untrusted.is_none() && !h.is_empty());
        std::fs::write(&project, text.replace('x', "y")).unwrap();
        let h = Hooks::load(None, &project, Some(&trust), dir.path());
        assert!(h.is_empty() && h.untrusted.unwrap().changed);
    }
}
