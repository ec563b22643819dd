//! The launcher: the one place sessions are opened. It turns flags + the environment snapshot +
//! a session reference (new with a title, the current one, an id or unique part of one, a seeded
//! fork) into an open [`Runtime`], for every surface alike: `tern exec`, the REPL, the verbs, the
//! demo, ACP and sub-agents. It keeps the provider choice, so it can build a provider for a
//! child, and the per-process parts (the root cancel token, the process-group registry).
//!
//! Policy lives here too: whether a turn marks its session as `.tern/current` (a person's
//! session does, a child never does).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::config::{self, Env, ProviderChoice, ProviderFlags, ProviderKind};
use crate::domain::ledger::Ledger;
use crate::domain::plan::PlanFile;
use crate::event::{Ending, Event};
use crate::message::Message;
use crate::procs::ProcessGroups;
use crate::provider::Provider;
use crate::provider::anthropic::Anthropic;
use crate::provider::http::{HttpConfig, display_url};
use crate::provider::openai::OpenAi;
use crate::runtime::{
    ChildSpec, Config, Failure, Lineage, Parts, Runtime, Spawner, Surface, system,
};
use crate::store::{Meta, NewSession, Place, Session, StateDir, Status, files};

/// Which session to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRef {
    /// A new session; `title` (the first prompt) names it in `tern sessions`.
    New {
        /// Cut to 80 characters.
        title: String,
    },
    /// The session `.tern/current` names.
    Current,
    /// An exact id, a unique prefix, or a unique part of one.
    Id(String),
}

/// What a seeded session starts from (a fork): exact system prompt bytes, a history, and the
/// plan and ledger it carries. `tern relay --start` seeds with the handoff; a sub-agent's fork
/// seeds with its parent's history.
#[derive(Debug, Clone)]
pub struct Seed {
    /// The exact bytes of the parent's `system.txt`.
    pub system: String,
    /// The history the child starts with.
    pub history: Vec<Message>,
    /// The title in `tern sessions`.
    pub title: String,
    /// `plan.json` to carry (its locked plan is already inside `system`).
    pub plan: Option<PlanFile>,
    /// `ledger.json` to carry.
    pub ledger: Option<Ledger>,
    /// provider / model / base URL recorded in `meta.json`.
    pub route: (String, String, String),
}

/// What `main` sets up once per process and every runtime shares: the root cancel token (set by
/// the signal handlers), the registry of running process groups (killed by the emergency exit),
/// and the flag that asks a long-lived surface to leave (SIGTERM, SIGHUP).
#[derive(Debug, Clone, Default)]
pub struct Process {
    /// Ctrl-C, SIGTERM, SIGHUP: stop the running turn.
    pub cancel: CancelToken,
    /// SIGTERM, SIGHUP: leave (the REPL, `tern watch`, `tern acp`).
    pub term: Arc<std::sync::atomic::AtomicBool>,
    /// SIGINTs since the last reset: the third one is the emergency exit.
    pub sigints: Arc<std::sync::atomic::AtomicUsize>,
    /// The running commands' process groups.
    pub groups: Arc<ProcessGroups>,
}

/// Where the provider of a runtime comes from.
#[derive(Clone)]
enum Source {
    /// Resolved from flags + environment when first needed.
    Route,
    /// A provider handed in (the demo's replay), shared by every runtime this launcher opens (a
    /// parent and its sub-agents read one script), with its model name.
    Shared(Arc<Mutex<Box<dyn Provider>>>, String),
}

/// One handle on a [`Source::Shared`] provider.
struct SharedProvider {
    inner: Arc<Mutex<Box<dyn Provider>>>,
    name: crate::provider::Wire,
}

impl Provider for SharedProvider {
    fn name(&self) -> crate::provider::Wire {
        self.name
    }

    fn body(&self, req: &crate::provider::Request<'_>) -> Vec<u8> {
        match self.inner.lock() {
            Ok(p) => p.body(req),
            Err(poisoned) => poisoned.into_inner().body(req),
        }
    }

    fn complete(
        &mut self,
        body: &[u8],
        purpose: crate::event::Purpose,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &CancelToken,
    ) -> Result<crate::provider::Completion, crate::provider::ProviderError> {
        let mut p = match self.inner.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        p.complete(body, purpose, on_text, cancel)
    }
}

/// Turns flags + environment + a [`SessionRef`] into an open [`Runtime`].
#[derive(Clone)]
pub struct Launcher {
    /// The state folder and workspace.
    pub state: StateDir,
    /// The environment snapshot taken by `main`.
    pub env: Env,
    /// `--provider`, `--base-url`, `--model`.
    pub flags: ProviderFlags,
    /// Settings for the runtimes (the model is filled from the route).
    pub config: Config,
    /// Longest silence from the provider before an attempt fails.
    pub idle_timeout: Duration,
    /// The root cancel token (set by `main`'s signal handlers).
    pub cancel: CancelToken,
    /// The registry of running process groups (killed by the emergency exit).
    pub groups: Arc<ProcessGroups>,
    /// Whether a turn points `.tern/current` at its session.
    pub mark_current: bool,
    /// The folder tern was started in (the workspace unless `main` says otherwise): a new
    /// session reads the `AGENTS.md` files from the workspace root down to it.
    pub here: PathBuf,
    source: Source,
    /// The run's spending limit (`--max-cost`), shared by every runtime this launcher opens
    /// (a REPL's sessions, sub-agents).
    budget: Option<Arc<crate::cost::Budget>>,
    /// The MCP servers an editor passed (ACP `mcpServers`).
    pub mcp_editor: Vec<crate::mcp::Server>,
    /// The git worktree this launcher's workspace is (`--worktree NAME`), recorded in a new
    /// session's `meta.json`.
    pub worktree: Option<crate::worktree::Worktree>,
}

impl Launcher {
    /// A launcher for `state`, resolving providers from `flags` and `env` when needed, sharing
    /// `process`'s cancel token and process-group registry.
    pub fn new(
        state: StateDir,
        env: Env,
        flags: ProviderFlags,
        config: Config,
        process: &Process,
    ) -> Launcher {
        Launcher {
            budget: config.max_cost.map(crate::cost::Budget::new),
            here: state.workspace.clone(),
            state,
            env,
            flags,
            config,
            idle_timeout: HttpConfig::default().idle_timeout,
            cancel: process.cancel.clone(),
            groups: process.groups.clone(),
            mark_current: true,
            source: Source::Route,
            mcp_editor: Vec::new(),
            worktree: None,
        }
    }

    /// Uses `provider` (named `model`) for the runtime opened next instead of resolving one (the
    /// demo's replay; in-process tests).
    pub fn with_provider(mut self, provider: Box<dyn Provider>, model: &str) -> Launcher {
        self.source = Source::Shared(Arc::new(Mutex::new(provider)), model.to_string());
        self
    }

    /// Where a new session's instruction files are looked up: the user's global file, then the
    /// workspace root down to [`Launcher::here`].
    pub fn lookup(&self) -> system::Lookup {
        system::Lookup {
            workspace: self.state.workspace.clone(),
            here: self.here.clone(),
            global: crate::fleet::user_file(&self.env)
                .and_then(|f| Some(f.parent()?.join(system::AGENTS_MD))),
        }
    }

    /// Where Agent Skills are looked for: the project's folders from the workspace root down to
    /// where tern started, and the person's (`crate::skills::Roots::new`).
    pub fn skill_roots(&self) -> crate::skills::Roots {
        let path = |k: &str| self.env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        crate::skills::Roots::new(
            &self.state.workspace,
            &self.lookup().folders(),
            path("HOME").as_deref(),
            path("XDG_CONFIG_HOME").as_deref(),
        )
    }

    /// The skills found now and their catalog for a model with `context_window` tokens.
    pub fn skills(&self, context_window: u64) -> (crate::skills::Found, crate::skills::Catalog) {
        let found = crate::skills::discover(&self.skill_roots());
        let catalog =
            crate::skills::catalog(&found.skills, crate::skills::budget_for(context_window));
        (found, catalog)
    }

    /// The state folder for `cwd` and an override (`--state-dir` / TERN_STATE_DIR).
    pub fn locate(cwd: &std::path::Path, state_dir: Option<PathBuf>, env: &Env) -> StateDir {
        let dir = state_dir.or_else(|| env.get("TERN_STATE_DIR").map(PathBuf::from));
        StateDir::locate(cwd, dir.as_deref())
    }

    /// A line announcing the workspace when it is not the current folder `cwd` (a `.tern/` or a
    /// git root further up moved it there), so commands do not run somewhere unexpected silently.
    pub fn workspace_note(&self, cwd: &std::path::Path) -> Option<String> {
        let ws = &self.state.workspace;
        if ws == cwd {
            return None;
        }
        let why = if ws.join(".tern").is_dir() {
            "the nearest folder holding .tern/"
        } else {
            "the git root"
        };
        Some(format!("workspace: {} ({why})", ws.display()))
    }

    /// The provider route from flags and environment. Errors (a usage error, exit 2): nothing
    /// configured, a bad URL or key.
    pub fn route(&self) -> Result<ProviderChoice, Failure> {
        config::resolve_named(&self.flags, &|k| self.env.var(k), &|k| {
            self.env.source_of(k)
        })
        .map_err(|e| Failure::Usage(e.into()))
    }

    /// Checks that a runtime can get a provider (a usage error when nothing is configured), so a
    /// surface can say so before it reads a prompt.
    pub fn ready(&self) -> Result<(), Failure> {
        match self.source {
            Source::Route => self.route().map(|_| ()),
            Source::Shared(..) => Ok(()),
        }
    }

    /// The route a verb's model call uses for `meta`'s session: server and key from this
    /// environment (never a URL saved in the session: it would receive this key), wire format
    /// and model defaulting to the session's.
    pub fn route_for(&self, meta: &Meta) -> Result<ProviderChoice, Failure> {
        let kind = match meta.provider.as_str() {
            "openai" => Some(ProviderKind::Openai),
            "anthropic" => Some(ProviderKind::Anthropic),
            "openai-responses" => Some(ProviderKind::OpenaiResponses),
            _ => None,
        };
        let mut f = self.flags.clone();
        if let Some(k) = kind {
            f.provider = f.provider.or(Some(k));
            // TERN_MODEL set at all (even blank, which `resolve` refuses) overrides the session's.
            if self.env.var("TERN_MODEL") == config::Var::Unset {
                f.model = f.model.or(Some(meta.model.clone()));
            }
        }
        config::resolve_named(&f, &|k| self.env.var(k), &|k| self.env.source_of(k)).map_err(|e| {
            Failure::Usage(if kind.is_none() {
                format!(
                    "this session's model was the demo's replay; a compaction needs a real model.\n{e}"
                )
            } else {
                e.into()
            })
        })
    }

    /// Builds a provider for `route` (also for a child: one per runtime).
    pub fn build(&self, route: &ProviderChoice) -> Box<dyn Provider> {
        let http = HttpConfig {
            idle_timeout: self.idle_timeout,
            ..HttpConfig::default()
        };
        match route.kind {
            ProviderKind::Openai => {
                Box::new(OpenAi::new(http, &route.base_url, route.api_key.clone()))
            }
            ProviderKind::Anthropic => {
                Box::new(Anthropic::new(http, &route.base_url, route.api_key.clone()))
            }
            ProviderKind::OpenaiResponses => Box::new(crate::provider::responses::Responses::new(
                http,
                &route.base_url,
                route.api_key.clone(),
            )),
        }
    }

    /// The session a reference names (None for [`SessionRef::New`]). One error text for every
    /// surface; a reference that names nothing is a usage error (exit 2). A state folder that
    /// is a symbolic link fails (exit 1) with the words `tern exec` refuses it with.
    pub fn find(&self, r: &SessionRef) -> Result<Option<Session>, Failure> {
        if !matches!(r, SessionRef::New { .. }) {
            self.state.check_links()?;
        }
        match r {
            SessionRef::New { .. } => Ok(None),
            SessionRef::Id(id) => self
                .state
                .open_session(id)
                .map(Some)
                .map_err(|e| Failure::Usage(e.to_string())),
            SessionRef::Current => match self.state.current() {
                Ok(Some(s)) => Ok(Some(s)),
                Ok(None) if self.state.session_ids().is_ok_and(|ids| !ids.is_empty()) => {
                    Err(Failure::Usage(format!(
                        "no current session: {} is missing or empty; name one by id: `tern exec --resume ID` or `tern chat --resume ID`, or a verb's `--session ID` (`tern sessions` lists them)",
                        self.state.root.join("current").display()
                    )))
                }
                Ok(None) => Err(Failure::Usage(format!(
                    "no session in {} yet: start one with `tern exec PROMPT` or `tern`",
                    self.state.root.display()
                ))),
                Err(e) => Err(Failure::Usage(e.to_string())),
            },
        }
    }

    /// Opens the session `r` names: a new one (pinning `system.txt` from the bundled prompt and
    /// the project's `AGENTS.md`), or an existing one (resumed: see [`Launcher::resume`]).
    pub fn open(&self, r: &SessionRef, ui: &mut dyn Surface) -> Result<Runtime, Failure> {
        self.check_workspace()?;
        // Every start sweeps what a killed creation or write left, even one that then refuses
        // (`--continue` with no session yet).
        if !matches!(r, SessionRef::New { .. }) {
            self.state.check_links()?;
            self.state.remove_stray_temps()?;
        }
        match (r, self.find(r)?) {
            (SessionRef::New { title }, _) => self.create(title, ui),
            (_, Some(session)) => self.resume(session, ui),
            (_, None) => Err(Failure::Usage("no session".into())),
        }
    }

    /// The runtime parts for a session of `route` (the provider comes from the route, or is a
    /// handle on the shared one).
    fn parts(&self, route: Option<ProviderChoice>) -> Result<Parts, Failure> {
        self.parts_with(self.config.clone(), route)
    }

    fn parts_with(&self, mut cfg: Config, route: Option<ProviderChoice>) -> Result<Parts, Failure> {
        let provider: Box<dyn Provider> = match (&self.source, route) {
            (Source::Shared(inner, model), _) => {
                cfg.model = model.clone();
                let name = match inner.lock() {
                    Ok(p) => p.name(),
                    Err(poisoned) => poisoned.into_inner().name(),
                };
                Box::new(SharedProvider {
                    inner: inner.clone(),
                    name,
                })
            }
            (Source::Route, route) => {
                let route = match route {
                    Some(r) => r,
                    None => self.route()?,
                };
                cfg.model = route.model.clone();
                cfg.base_url = route.base_url.clone();
                // The Responses wire always names its cache (`prompt_cache_key`: the session's
                // lineage, so forks and continues share it); Chat Completions only on OpenAI's.
                cfg.send_cache_key = config::is_openai_host(&route.base_url)
                    || route.kind == ProviderKind::OpenaiResponses;
                cfg.reasoning.vendor =
                    crate::provider::reasoning::Vendor::for_host(&route.base_url);
                // The settings a verb's model call (`tern compact`, `plan confirm`) takes from the
                // environment too, as a turn does: the same request, the same rule.
                if cfg.reasoning_replay.is_none() {
                    cfg.reasoning_replay = config::vars::reasoning_replay(&self.env).ok().flatten();
                }
                if cfg.reasoning.effort.is_none() {
                    cfg.reasoning.effort = config::vars::reasoning_effort(None, &self.env)
                        .ok()
                        .flatten();
                }
                cfg.reasoning.replay = cfg.reasoning_replay.unwrap_or_else(|| {
                    crate::provider::reasoning::Replay::for_host(&route.base_url)
                });
                self.build(&route)
            }
        };
        // A limit is counted in dollars: without a price it could not stop anything.
        if let Some(limit) = cfg.max_cost
            && cfg.prices.lookup(&cfg.model).is_none()
        {
            return Err(Failure::Usage(format!(
                "--max-cost {limit} needs the price of {:?}, and tern knows none: set \"price\" (USD per million tokens: input, cached_input, output) in ~/.config/tern/config.json",
                cfg.model
            )));
        }
        cfg.skills = Some(self.skill_roots());
        Ok(Parts {
            provider,
            cfg,
            workspace: self.state.workspace.clone(),
            cancel: self.cancel.clone(),
            groups: self.groups.clone(),
            lineage: Lineage {
                parent: None,
                mark_current: self.mark_current,
                depth: 0,
                cache_key: None,
                spawner: Some(Arc::new(self.clone())),
                budget: self.budget.clone(),
            },
        })
    }

    /// Starts a new session: `meta.json`, the pinned `system.txt`, an empty draft, then
    /// `session_start`.
    fn create(&self, title: &str, ui: &mut dyn Surface) -> Result<Runtime, Failure> {
        let parts = self.parts(None)?;
        let hooks = self.load_hooks()?;
        let servers = self.mcp_servers();
        let (mode, no_network) = (parts.cfg.sandbox, parts.cfg.no_network);
        let (found, catalog) = self.skills(parts.cfg.context_window);
        let system = system::base_from(
            &self.lookup(),
            &system::sandbox_lines(mode, no_network, &servers.names()),
            &catalog.text,
        );
        let meta = Meta {
            sandbox: Some(crate::sandbox::probe(
                mode,
                no_network,
                !parts.cfg.reach.no_jail,
            )),
            cwd: self.state.workspace.display().to_string(),
            provider: parts.provider.name().to_string(),
            model: parts.cfg.model.clone(),
            base_url: display_url(&parts.cfg.base_url),
            title: title.to_string(),
            worktree: self.worktree.as_ref().map(|w| crate::store::WorktreeLink {
                name: w.name.clone(),
                branch: w.branch.clone(),
            }),
            ..Meta::default()
        };
        let new = NewSession {
            meta,
            system: system.clone(),
            ..NewSession::default()
        };
        let session = self.state.write_session(Place::TopLevel, &new)?;
        if self.mark_current {
            self.state.set_current(&session.id)?;
        }
        let mut rt = Runtime::assemble(session, parts, system, Vec::new());
        rt.set_hooks(hooks.0, hooks.1);
        self.set_mcp(&mut rt, servers);
        rt.begin(ui, false, None)?;
        for w in crate::skills::warnings(&found, &catalog) {
            rt.emit(ui, crate::event::Event::warning(w));
        }
        Ok(rt)
    }

    /// Reopens `session`: reuses the pinned `system.txt`, marks a turn whose process died as
    /// interrupted, repairs the history (torn line, dangling tool calls, merged roles) and saves
    /// the repair, and records a model switch as a declared boundary.
    ///
    /// Errors: a turn of this session is running in another live process.
    pub fn resume(&self, session: Session, ui: &mut dyn Surface) -> Result<Runtime, Failure> {
        self.check_workspace()?;
        self.reopen(session, None, ui)
    }

    /// Refuses workspace-write where it would let commands create what the person's tools later
    /// run or trust (issue 29): a workspace that is or holds the home folder (`.bash_profile`,
    /// `~/.ssh/authorized_keys`, `~/.local/bin/git` that did not exist), `/`, a folder where
    /// other programs keep sockets, or a system folder. A usage error (exit 2) naming why and
    /// the ways on.
    pub fn check_workspace(&self) -> Result<(), Failure> {
        if self.config.sandbox != crate::policy::Mode::WorkspaceWrite {
            return Ok(());
        }
        let ws = std::fs::canonicalize(&self.state.workspace)
            .unwrap_or_else(|_| self.state.workspace.clone());
        let canon = |k: &str| self.env.get(k).and_then(|v| std::fs::canonicalize(v).ok());
        let (home, runtime) = (canon("HOME"), canon("XDG_RUNTIME_DIR"));
        match crate::policy::wide_root(&ws, home.as_deref(), runtime.as_deref()) {
            None => Ok(()),
            Some(why) => Err(Failure::Usage(format!(
                "the workspace is {why}: workspace-write would let commands write all of it, and create files that your own tools later run. Run tern in a project folder (cd into one, or pass --cd DIR), or pass --sandbox read-only"
            ))),
        }
    }

    /// [`Launcher::resume`] for a verb's model call: the provider of this environment with the
    /// session's model (see [`Launcher::route_for`]).
    pub fn resume_for_verb(
        &self,
        session: Session,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        let route = match &self.source {
            Source::Route => Some(self.route_for(&session.read_meta()?)?),
            Source::Shared(..) => None,
        };
        self.reopen(session, route, ui)
    }

    fn reopen(
        &self,
        session: Session,
        route: Option<ProviderChoice>,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        let hooks = self.load_hooks()?;
        let mut notes = Vec::new();
        // Check, and mark a dead turn interrupted, under one lock: a process that takes the
        // session in between must not have its status overwritten.
        let (before, was_interrupted) = {
            let lock = session.lock()?;
            if let Some(pid) = crate::store::held_elsewhere(&session) {
                return Err(Failure::Held(crate::runtime::held_message(
                    &session.id,
                    Some(pid),
                )));
            }
            let mut meta = match session.read_meta() {
                Ok(m) => m,
                Err(e) => {
                    let m = rebuild_meta(&session, &self.state.workspace);
                    session.write_meta_locked(&lock, &m)?;
                    notes.push(format!("{e}: rebuilt meta.json from the session folder"));
                    m
                }
            };
            // Nobody holds it: meta.json is brought in line with events.jsonl, the record a
            // turn's end is committed to last (a turn_end on record is never called
            // interrupted; totals a failed write missed are taken from the usage events).
            // Only a status that a crash or a failed write can leave behind (running, or idle
            // after a killed creation) is checked: reading the whole events.jsonl at every
            // resume of a long session would be a start-up cost for nothing.
            let before = meta.clone();
            let unsettled = matches!(meta.status, Status::Running | Status::Idle);
            let recorded = if unsettled {
                Some(session.recorded())
            } else {
                None
            };
            let changed = match recorded {
                None => false,
                Some(Ok(rec)) => meta.settle(&rec),
                Some(Err(_)) if meta.status == Status::Running => {
                    meta.status = Status::Ended(Ending::Interrupted);
                    meta.pid = None;
                    true
                }
                Some(Err(_)) => false,
            };
            if changed {
                meta.updated_at = crate::clock::now_rfc3339();
                session.write_meta_locked(&lock, &meta)?;
                if before.status == Status::Running
                    && meta.status != Status::Ended(Ending::Interrupted)
                {
                    notes.push(format!(
                        "meta.json still said running, but events.jsonl records how the last turn ended ({}): meta.json is set from it",
                        meta.status.as_str()
                    ));
                }
            }
            let was_interrupted = before.status == Status::Running
                && meta.status == Status::Ended(Ending::Interrupted);
            (before, was_interrupted)
        };
        // Nobody holds the session: what a crash left is cleaned up and completed now.
        if before.status == Status::Running {
            crate::tools::bash::kill_orphans(&session.dir);
            for child in crate::runtime::agent::mark_dead_children(&session.dir) {
                notes.push(format!(
                    "the sub-agent session {child} was running when tern stopped: marked interrupted"
                ));
            }
        }
        self.state.remove_stray_temps()?;
        session.remove_stray_temps()?;
        if let Some(repair) = session.repair_events()? {
            notes.push(repair.note());
        }
        let servers = self.mcp_servers();
        let lines = system::sandbox_lines(
            self.config.sandbox,
            self.config.no_network,
            &servers.names(),
        );
        notes.extend(crate::runtime::plan::reconcile(
            &session,
            &self.state.workspace,
            &lines,
        )?);
        let system = session.read_text(files::SYSTEM)?.unwrap_or_default();
        let parts = self.parts(route)?;
        let mut rt = Runtime::assemble(session, parts, system, Vec::new());
        rt.set_hooks(hooks.0, hooks.1);
        self.set_mcp(&mut rt, servers);
        rt.begin(ui, true, Some((&before, was_interrupted)))?;
        for n in notes {
            rt.emit(ui, Event::warning(n));
        }
        Ok(rt)
    }

    /// Writes a new top-level session seeded from `seed` (a fork: the parent's exact system
    /// bytes, the given history, the carried plan and ledger) without opening a runtime on it:
    /// `tern relay --start` needs no provider. It becomes the current session when this
    /// launcher marks sessions current.
    pub fn seed(&self, seed: &Seed) -> Result<Session, Failure> {
        let (provider, model, base_url) = seed.route.clone();
        let meta = Meta {
            cwd: self.state.workspace.display().to_string(),
            provider,
            model,
            base_url,
            title: seed.title.clone(),
            ..Meta::default()
        };
        let plan = match &seed.plan {
            Some(p) => Some((
                p.locked.clone(),
                serde_json::to_value(p).map_err(std::io::Error::other)?,
            )),
            None => None,
        };
        let ledger = match &seed.ledger {
            Some(l) => Some(serde_json::to_value(l).map_err(std::io::Error::other)?),
            None => None,
        };
        let new = NewSession {
            meta,
            system: seed.system.clone(),
            history: seed.history.clone(),
            plan,
            ledger,
            extra: Vec::new(),
        };
        let session = self.state.write_session(Place::TopLevel, &new)?;
        if self.mark_current {
            self.state.set_current(&session.id)?;
        }
        Ok(session)
    }
}

impl Launcher {
    /// Opens a sub-agent of `parent`: a session folder under the parent's (`agents/<id>/`) whose
    /// `system.txt` holds `spec.system` exactly and whose history is `spec.history`, on a cancel
    /// token that is a child of the parent's (the parent's Ctrl-C stops it, not the reverse). It
    /// never becomes `.tern/current`; its events name the parent.
    pub fn child(
        &self,
        parent: &Runtime,
        spec: ChildSpec,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        let fork = spec.fork;
        let hooks = self.load_hooks()?;
        let mut parts = self.parts_with(spec.cfg, spec.route)?;
        parts.cancel = parent.cancel_token().child();
        parts.lineage = Lineage {
            parent: Some(parent.session().id.clone()),
            mark_current: false,
            depth: parent.depth() + 1,
            cache_key: Some(parent.cache_key().to_string()),
            spawner: parts.lineage.spawner.clone(),
            budget: parts.lineage.budget.clone(),
        };
        let meta = Meta {
            cwd: self.state.workspace.display().to_string(),
            provider: parts.provider.name().to_string(),
            model: parts.cfg.model.clone(),
            base_url: display_url(&parts.cfg.base_url),
            title: spec.title.clone(),
            sandbox: Some(crate::sandbox::probe(
                parts.cfg.sandbox,
                parts.cfg.no_network,
                !parts.cfg.reach.no_jail,
            )),
            parent: Some(crate::store::session::ParentLink {
                session: parent.session().id.clone(),
                call_id: spec.parent_call.clone(),
                member: spec.member.clone(),
                fork,
            }),
            ..Meta::default()
        };
        let new = NewSession {
            meta,
            system: spec.system,
            history: spec.history,
            ..NewSession::default()
        };
        let session = self
            .state
            .write_session(Place::ChildOf(parent.session()), &new)?;
        let NewSession {
            system, history, ..
        } = new;
        let mut rt = Runtime::assemble(session, parts, system, history);
        rt.set_hooks(hooks.0, hooks.1);
        self.set_mcp(&mut rt, self.mcp_servers());
        rt.begin(ui, false, None)?;
        // A fork repeats its parent's prefix: the parent's last request is its cache's source.
        if fork {
            rt.follow_requests_of(parent);
        }
        Ok(rt)
    }
}

impl Launcher {
    /// The hooks files of this workspace (the person's, the project's, the trust record).
    pub fn hook_files(&self) -> crate::hooks::Files {
        crate::hooks::Files::new(&self.state.root, &self.state.workspace, &self.env)
    }

    /// The MCP servers of this workspace: the person's, the trusted project's, the editor's.
    pub fn mcp_servers(&self) -> crate::mcp::Servers {
        crate::mcp::Files::new(&self.state.workspace, &self.env)
            .load(&crate::mcp::config::process_vars(), &self.mcp_editor)
    }

    /// A hub over [`Launcher::mcp_servers`] for `tern mcp` outside a session (servers started
    /// here, stopped when it is closed).
    pub fn mcp_hub(&self, saves: Option<PathBuf>) -> crate::mcp::Hub {
        let mut opts = self.mcp_options();
        opts.groups = Some(self.groups.clone());
        crate::mcp::Hub::new(self.mcp_servers(), opts, saves)
    }

    /// The MCP clients' settings: the workspace, `MCP_TIMEOUT` and `MCP_TOOL_TIMEOUT`.
    fn mcp_options(&self) -> crate::mcp::Options {
        crate::mcp::Options::new(
            self.state.workspace.clone(),
            &crate::mcp::config::process_vars(),
        )
    }

    /// Gives `rt`'s commands the MCP `servers`.
    fn set_mcp(&self, rt: &mut Runtime, servers: crate::mcp::Servers) {
        rt.set_mcp(servers, self.mcp_options());
    }

    /// Checks the hooks files (loaded as a session start loads them) so a surface can refuse to start
    /// before it reads a prompt. Errors: a usage error naming each invalid entry.
    pub fn check_hooks(&self) -> Result<(), Failure> {
        self.load_hooks().map(|_| ())
    }

    /// Loads the hooks (a snapshot, as Claude Code takes one at start-up) and the files the
    /// runtime guards, before anything of a session is written. Errors (usage, exit 2): a hooks
    /// file with an invalid entry, each named with its place and why (`hooks::Hooks::errors`):
    /// no runtime runs without the gates a person configured.
    fn load_hooks(&self) -> Result<(std::sync::Arc<crate::hooks::Hooks>, Vec<PathBuf>), Failure> {
        let files = self.hook_files();
        let hooks = files.load();
        if !hooks.errors.is_empty() {
            return Err(Failure::Usage(crate::hooks::invalid_message(&hooks.errors)));
        }
        Ok((hooks, files.protected()))
    }
}

impl Spawner for Launcher {
    fn child(
        &self,
        parent: &Runtime,
        spec: ChildSpec,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        Launcher::child(self, parent, spec, ui)
    }

    fn fleet(&self) -> Result<crate::fleet::Fleet, crate::fleet::FleetError> {
        crate::fleet::Fleet::load(
            &self.state.root,
            crate::fleet::user_file(&self.env).as_deref(),
        )
    }

    fn env(&self) -> &Env {
        &self.env
    }
}

/// A `meta.json` rebuilt from what the session folder still holds, for one that is missing or
/// does not parse: the id and creation time from the folder name, the route from the latest
/// `session_start` event, the counts from the `usage` events, the title from the first prompt.
fn rebuild_meta(session: &Session, workspace: &std::path::Path) -> Meta {
    let events = session.read_envelopes().unwrap_or_default();
    let mut meta = Meta {
        id: session.id.clone(),
        created_at: created_at_of(&session.id),
        updated_at: crate::clock::now_rfc3339(),
        cwd: workspace.display().to_string(),
        status: Status::Ended(Ending::Interrupted),
        ..Meta::default()
    };
    for e in &events {
        match &e.event {
            Event::SessionStart {
                provider, model, ..
            } => {
                meta.provider = provider.to_string();
                meta.model = model.clone();
            }
            Event::TurnStart { prompt } if meta.title.is_empty() => {
                meta.title = crate::text::title(prompt);
            }
            Event::Usage {
                input_tokens,
                cached_tokens,
                cache_write_tokens,
                output_tokens,
                ..
            } => {
                meta.turns = meta.turns.saturating_add(1);
                meta.usage.add(&crate::message::Usage {
                    reasoning_tokens: 0,
                    input_tokens: *input_tokens,
                    cached_tokens: *cached_tokens,
                    cache_write_tokens: *cache_write_tokens,
                    output_tokens: *output_tokens,
                });
            }
            _ => {}
        }
    }
    meta
}

/// `20261201-093015-ab12` → `2026-12-01T09:30:15Z` (now, when the id is not of that shape).
fn created_at_of(id: &str) -> String {
    let d: String = id.chars().filter(char::is_ascii_digit).take(14).collect();
    if d.len() < 14 {
        return crate::clock::now_rfc3339();
    }
    format!(
        "{}-{}-{}T{}:{}:{}Z",
        &d[0..4],
        &d[4..6],
        &d[6..8],
        &d[8..10],
        &d[10..12],
        &d[12..14]
    )
}
