//! Commands: where and how a session's commands run (DESIGN §10). One value per runtime,
//! [`Commands`], holds the sandbox setting, the private `TMPDIR`, the jail and the state-folder
//! guard; the runtime enters through [`Commands::run`] (one command: sandbox, jail, guard),
//! [`Commands::watch`] (the guard between commands, before each model request) and
//! [`Commands::end`] (what the commands left running dies with the runtime).
//!
//! What the model reads about tern's refusals is typed ([`Verdict`]: a [`GuardReport`] or the
//! jail's [`JailNotes`]) and worded once, by its `Display`.

mod disk;
mod guard;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::policy::{Mode, Setting};
use crate::procs::ProcessGroups;
use crate::sandbox::TempFolder;
use crate::sandbox::jail::{Jail, JailError, JailPaths, JailSlot, JailSpec, Reach};
use crate::store::{Session, files};
use crate::tools::bash::{self, BashOutcome};

pub use disk::LowDisk;
pub use guard::{GuardReport, Site};

/// How commands may run in a runtime: the person's choices, fixed for its life.
#[derive(Debug, Clone)]
pub struct Rules {
    /// `--sandbox`.
    pub mode: Mode,
    /// `--no-network`.
    pub no_network: bool,
    /// `--add-dir`, `--read-dir`, `--env`, `--no-jail`.
    pub reach: Reach,
    /// The program that serves as the jail's init (`tern __jail`); None: this process's own
    /// binary (`/proc/self/exe`). Set by embedders whose process is not `tern` (the tests).
    pub jail_exe: Option<PathBuf>,
    /// The free space a command must leave on what it writes.
    pub disk_floor: crate::policy::DiskFloor,
}

/// One command to run.
pub struct Request<'a> {
    /// The command line (`bash -c`).
    pub command: &'a str,
    /// Its wall-time limit.
    pub timeout: Duration,
    /// Stops it (Ctrl-C, a budget, the parent's cancel).
    pub cancel: &'a CancelToken,
    /// Its stdout and stderr wanted apart ([`bash::BashRequest::streams`]).
    pub streams: bool,
}

/// What tern noticed about a command it ran in the jail: what the copy-back of git's data
/// files kept back or settled (an index that adds a submodule, a file changed on both sides).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JailNotes {
    /// One sentence each.
    pub git: Vec<String>,
}

impl JailNotes {
    fn is_empty(&self) -> bool {
        self.git.is_empty()
    }
}

impl fmt::Display for JailNotes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.git.join(" "))
    }
}

/// What tern refused or undid of a command, for the model (appended to its result as an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Without a jail: the guard found (and put back) changes to tern's files.
    Guard(GuardReport),
    /// In the jail: git redirections removed, submodules named.
    Jail(JailNotes),
    /// The disk ran low while it ran: tern stopped it.
    DiskFloor(LowDisk),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Guard(r) => r.fmt(f),
            Verdict::Jail(n) => n.fmt(f),
            Verdict::DiskFloor(low) => write!(
                f,
                "tern stopped this command: {low}. Remove what it wrote that is not needed, or write less."
            ),
        }
    }
}

/// How a [`Commands::run`] ended.
#[derive(Debug)]
pub enum Ran {
    /// Not run: the sandbox or the jail cannot hold it here (one line: the model reads
    /// `not run: …`).
    Refused(String),
    /// bash itself could not start.
    Failed(String),
    /// It ran.
    Done {
        /// Its shaped output and process facts.
        out: BashOutcome,
        /// What tern refused or undid of it.
        verdict: Option<Verdict>,
    },
}

/// Where and how a runtime's commands run.
#[derive(Debug)]
pub struct Commands {
    rules: Rules,
    workspace: PathBuf,
    setting: Setting,
    groups: Arc<ProcessGroups>,
    /// The commands' private `TMPDIR` in a sandboxed mode: made at the first call, emptied
    /// after each.
    tmp: Option<TempFolder>,
    /// Started at the first command, gone with the runtime ([`Commands::end`]).
    jail: JailSlot,
    guard: guard::Guard,
    /// A command ran: what it left running is killed at the end.
    ran: bool,
    /// The person answered "always" to an approval question.
    always: bool,
    /// Jails started so far (each gets shadows of its own).
    jails: u32,
    /// The folder of the running jail's repository shadows.
    shadows: Option<PathBuf>,
    /// Workspace files shown read-only (the scripts hooks run).
    protected: Vec<PathBuf>,
    /// The disk floor's watcher.
    disk: disk::DiskWatch,
    /// The session's MCP servers and the channel commands reach them through (opened at the
    /// first command).
    mcp: Mcp,
}

/// The MCP servers commands reach (see `crate::mcp::channel`).
#[derive(Default)]
struct Mcp {
    hub: Option<Arc<crate::mcp::Hub>>,
    channel: Option<crate::mcp::channel::Channel>,
    /// The commands' `PATH` when it must find this tern first (worked out once).
    path: Option<std::ffi::OsString>,
    /// Events the hub wrote while a command ran (its calls, their hooks), for the surface.
    events: Arc<Mutex<Vec<crate::event::Envelope>>>,
}

impl fmt::Debug for Mcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mcp")
            .field("servers", &self.hub.as_ref().map(|h| h.servers().names()))
            .field("open", &self.channel.is_some())
            .finish()
    }
}

impl Commands {
    /// Commands of a runtime whose workspace is `workspace`, registering their process groups
    /// in `groups`. Probes the kernel's Landlock ABI (no command runs here).
    pub fn new(rules: Rules, workspace: PathBuf, groups: Arc<ProcessGroups>) -> Commands {
        let setting = crate::sandbox::probe(rules.mode, rules.no_network, !rules.reach.no_jail);
        Commands {
            rules,
            workspace,
            setting,
            groups,
            tmp: None,
            jail: JailSlot::Unstarted,
            guard: guard::Guard::default(),
            ran: false,
            always: false,
            jails: 0,
            shadows: None,
            protected: Vec::new(),
            disk: disk::DiskWatch::default(),
            mcp: Mcp::default(),
        }
    }

    /// Gives this runtime's commands the MCP servers of `hub` (through a channel opened at the
    /// first command).
    pub fn set_mcp(
        &mut self,
        hub: Arc<crate::mcp::Hub>,
        events: Arc<Mutex<Vec<crate::event::Envelope>>>,
    ) {
        self.mcp = Mcp {
            hub: Some(hub),
            channel: None,
            path: None,
            events,
        };
        // The jail shows this tern's binary (read-only) wherever it lies, so a command's `tern
        // mcp` finds it even where the jail hides its folder (a build under `/tmp`).
        if let Some(exe) = self.tern_exe() {
            self.protect(vec![exe]);
        }
    }

    /// The tern binary commands reach the session through: the jail's init (set by embedders),
    /// else this process's own.
    fn tern_exe(&self) -> Option<PathBuf> {
        self.rules
            .jail_exe
            .clone()
            .or_else(|| std::env::current_exe().ok())
    }

    /// The events the MCP hub wrote since the last look (in `events.jsonl` already), for the
    /// surface: a command's calls show where they happened, before its result.
    pub fn take_mcp_events(&self) -> Vec<crate::event::Envelope> {
        std::mem::take(&mut *self.mcp.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The MCP servers' hub of this runtime.
    pub fn mcp_hub(&self) -> Option<Arc<crate::mcp::Hub>> {
        self.mcp.hub.clone()
    }

    /// The names of the MCP servers commands reach.
    pub fn mcp_names(&self) -> Vec<String> {
        self.mcp
            .hub
            .as_ref()
            .map(|h| h.servers().names())
            .unwrap_or_default()
    }

    /// The registry commands' (and hooks') process groups go in, shared.
    pub fn groups_arc(&self) -> Arc<ProcessGroups> {
        self.groups.clone()
    }

    /// The channel commands get, opened now if servers are configured (None: none, or it could
    /// not be opened; then `tern mcp` in a command says the channel is missing).
    fn mcp_channel(&mut self) -> Option<std::os::fd::RawFd> {
        let hub = self.mcp.hub.as_ref()?;
        if self.mcp.channel.is_none() {
            self.mcp.channel = crate::mcp::channel::Channel::open(hub.clone()).ok();
            self.mcp.path = crate::mcp::channel::path_with_tern(self.tern_exe().as_deref());
        }
        self.mcp.channel.as_ref().map(|c| c.fd())
    }

    /// Where commands run.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// What commands may write, as probed at start.
    pub fn setting(&self) -> Setting {
        self.setting
    }

    /// The registry commands' (and hooks') process groups go in.
    pub fn groups(&self) -> &ProcessGroups {
        &self.groups
    }

    /// The person answered "always": later commands of this runtime run without a question.
    pub fn approved_always(&self) -> bool {
        self.always
    }

    /// Records an "always" answer.
    pub fn approve_always(&mut self) {
        self.always = true;
    }

    /// Runs one command: in the sandbox and, in the sandboxed modes, the jail (started at the
    /// first command); without a jail, the guard checks tern's files before and after it.
    pub fn run(&mut self, req: &Request<'_>, site: &mut Site<'_>) -> Ran {
        let session = site.session;
        // The paths as they are, bytes and all: a workspace whose path is not UTF-8 must still
        // give the command a $PLAN_DRAFT_FILE it can write.
        let mcp = self.mcp_channel();
        let mut env: Vec<(&str, std::ffi::OsString)> = vec![
            ("PLAN_DRAFT_FILE", session.path(files::DRAFT).into()),
            ("PLAN_FILE", session.path(files::PLAN).into()),
            ("TERN_SESSION_DIR", session.dir.clone().into()),
        ];
        if mcp.is_some() {
            env.push((
                crate::mcp::channel::ENV,
                crate::mcp::channel::FD.to_string().into(),
            ));
            if let Some(path) = &self.mcp.path {
                env.push(("PATH", path.clone()));
            }
        }
        let spill = session.path(files::SPILL);
        // Full outputs go to spill/: never through a link planted in its place.
        if let Err(e) = crate::store::fsutil::ensure_dir(&spill) {
            return Ran::Failed(format!("not run: {e}"));
        }
        let (jail, prepared) = match self.sandbox_for(session) {
            Ok(x) => x,
            Err(why) => return Ran::Refused(why),
        };
        // Without a jail (danger-full-access, --no-jail), changes since tern last wrote its
        // files (a process an earlier command left behind) are undone before this command
        // runs, and reported with its result. In the jail the state folder is read-only.
        let before = match jail {
            None => {
                let b = self.guard.check(site, &self.workspace);
                if !self.guard.is_on() {
                    self.guard.refresh(site);
                }
                b
            }
            Some(_) => None,
        };
        // git's data files as the person left them go into the jail's copies first (and what a
        // job left running wrote since the last command is settled with this one).
        let mut notes = JailNotes {
            git: jail.as_ref().map(|j| j.sync_git()).unwrap_or_default(),
        };
        let breq = bash::BashRequest {
            command: req.command,
            timeout: req.timeout,
            cwd: &self.workspace,
            env: &env,
            env_remove: crate::config::SECRET_ENV,
            pass_env: &self.rules.reach.pass_env,
            spill_dir: &spill,
            groups: &self.groups,
            sandbox: Some(&prepared),
            jail: jail.as_deref(),
            mcp,
            streams: req.streams,
        };
        let watched = self.watched_folders();
        self.ran = true;
        // The command's own token: the disk floor stops this command, never the turn.
        let cancel = req.cancel.child();
        self.disk.begin(&watched, self.rules.disk_floor, &cancel);
        let ran = bash::run(&breq, &cancel);
        let low = self.disk.end();
        let mut out = match ran {
            Ok(out) => out,
            Err(e) => return Ran::Failed(format!("could not run bash: {e}")),
        };
        if low.is_some() && !req.cancel.is_cancelled() {
            // Stopped by tern, not by the person: the turn goes on and the model reads why.
            out.interrupted = false;
        }
        if out.spill_path.is_some() {
            crate::tools::output::enforce_spill_budget(&spill, bash::SPILL_BUDGET_BYTES);
        }
        // Nothing a call leaves in its TMPDIR reaches the next one.
        self.clear_tmp();
        let verdict = match &jail {
            _ if low.is_some() => low.map(Verdict::DiskFloor),
            None => self
                .guard
                .check(site, &self.workspace)
                .or(before)
                .map(Verdict::Guard),
            Some(j) => {
                notes.git.extend(j.sync_git());
                (!notes.is_empty()).then_some(Verdict::Jail(notes))
            }
        };
        Ran::Done { out, verdict }
    }

    /// The private `TMPDIR`, the jail and the Landlock ruleset of one call (the same for the
    /// model's commands, the goal and a hook run in the jail). Errors: the one line of why the
    /// call is not run (a sandboxed mode this machine cannot enforce refuses, never runs
    /// unsandboxed).
    fn sandbox_for(
        &mut self,
        session: &Session,
    ) -> Result<(Option<Arc<Jail>>, crate::sandbox::Prepared), String> {
        // Emptied before the call too: a job an earlier call left running may have written.
        self.clear_tmp();
        if self.rules.mode.is_sandboxed() && self.tmp.is_none() {
            self.tmp = Some(TempFolder::new().map_err(|e| format!("not run: {e}"))?);
        }
        let jail = self.jail(session).map_err(|e| format!("not run: {e}"))?;
        let policy = crate::sandbox::Policy {
            mode: self.rules.mode,
            workspace: self.workspace.clone(),
            no_network: self.rules.no_network,
            // In the jail the network namespace holds it, and loopback inside still works.
            network_in_namespace: jail.is_some(),
            add_dirs: self
                .rules
                .reach
                .add_dirs
                .iter()
                .cloned()
                // In the jail the repositories are their shadows (the copies tern wrote) and the
                // real data folders bound in them: Landlock's second layer lets git write there.
                .chain(jail.iter().flat_map(|j| {
                    let s = j.spec();
                    s.git_shadows
                        .iter()
                        .map(|(_, copy)| copy.clone())
                        .chain(s.git_data.iter().cloned())
                        .collect::<Vec<_>>()
                }))
                .collect(),
            draft_file: Some(session.path(files::DRAFT)),
            tmpdir: self.tmp.as_ref().map(|t| t.path().to_path_buf()),
        };
        let prepared = crate::sandbox::prepare(&policy).map_err(|e| format!("not run: {e}"))?;
        Ok((jail, prepared))
    }

    /// Runs a hook that asks to run inside the jail (`"jail": true`): `command` with `input` on
    /// its stdin, in the jail and sandbox the model's commands get, its stdout and stderr apart
    /// (up to the hooks' cap), supervised with its timeout and the turn's cancel. Never fails: a
    /// hook that cannot run there (no jail in this mode, the kernel refused it) is a
    /// [`crate::hooks::run::Ran`] with `spawn_error`.
    pub fn run_hook(
        &mut self,
        command: &str,
        input: &[u8],
        timeout: Duration,
        cancel: &CancelToken,
        session: &Session,
    ) -> crate::hooks::run::Ran {
        let started = std::time::Instant::now();
        let failed = |why: String| crate::hooks::run::Ran {
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
            interrupted: false,
            spawn_error: Some(why),
            duration: started.elapsed(),
        };
        let (jail, prepared) = match self.sandbox_for(session) {
            Ok((Some(j), p)) => (j, p),
            Ok((None, _)) => {
                return failed(
                    "it asks to run inside the jail (\"jail\": true) and this session has none (--sandbox danger-full-access or --no-jail): not run".into(),
                );
            }
            Err(why) => return failed(why),
        };
        let Some(tmp) = self.tmp.as_ref().map(|t| t.path().to_path_buf()) else {
            return failed("no private TMPDIR for its input".into());
        };
        let input_file = tmp.join(".tern-hook-input.json");
        if let Err(e) = std::fs::write(&input_file, input) {
            return failed(format!("could not write its input: {e}"));
        }
        let ws = self.workspace.clone().into_os_string();
        let env = [
            ("CLAUDE_PROJECT_DIR", ws.clone()),
            ("TERN_PROJECT_DIR", ws),
            ("TERN_SESSION_DIR", session.dir.clone().into()),
        ];
        let spill = session.path(files::SPILL);
        let req = bash::BashRequest {
            command,
            timeout,
            cwd: &self.workspace,
            env: &env,
            env_remove: crate::config::SECRET_ENV,
            pass_env: &self.rules.reach.pass_env,
            spill_dir: &spill,
            groups: &self.groups,
            sandbox: Some(&prepared),
            jail: Some(&jail),
            mcp: None,
            // `run_split` reads them apart itself.
            streams: false,
        };
        self.ran = true;
        let split = bash::run_split(
            &req,
            &input_file,
            crate::hooks::run::MAX_OUTPUT_BYTES,
            cancel,
        );
        self.clear_tmp();
        match split {
            Err(why) => failed(why),
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                let stopped = s.stop.is_some();
                crate::hooks::run::Ran {
                    exit_code: if stopped {
                        None
                    } else {
                        s.status.and_then(|st| st.code())
                    },
                    stdout: String::from_utf8_lossy(&s.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&s.stderr).into_owned(),
                    timed_out: s.stop == Some(crate::child::Stop::Timeout),
                    interrupted: matches!(s.stop, Some(crate::child::Stop::Interrupt(_))),
                    spawn_error: match s.status {
                        Some(st) if st.code().is_none() && !stopped => {
                            Some(format!("killed by signal {}", st.signal().unwrap_or(0)))
                        }
                        _ => None,
                    },
                    duration: started.elapsed(),
                }
            }
        }
    }

    /// Shows `files` read-only to commands from the next jail on (the workspace files the
    /// person's hooks run).
    pub fn protect(&mut self, files: Vec<PathBuf>) {
        for f in files {
            if !self.protected.contains(&f) {
                self.protected.push(f);
            }
        }
    }

    /// The guard between commands (before each model request): what a process an earlier
    /// command left behind changed in tern's files, put back where tern can. None when nothing
    /// changed or the guard has no baseline yet.
    pub fn watch(&mut self, site: &mut Site<'_>) -> Option<GuardReport> {
        if self.jailed() {
            return None;
        }
        self.guard.check(site, &self.workspace)
    }

    /// tern wrote its files: they are the guard's new baseline (the first call takes it).
    pub fn settle(&mut self, site: &Site<'_>) {
        if !self.jailed() {
            self.guard.refresh(site);
        }
    }

    /// [`Commands::settle`] only when the guard has a baseline already.
    pub fn settle_if_on(&mut self, site: &Site<'_>) {
        if self.guard.is_on() && !self.jailed() {
            self.guard.refresh(site);
        }
    }

    /// tern wrote `path` alone: its new state is the baseline.
    pub fn accept(&mut self, path: &Path) {
        self.guard.accept(path);
    }

    /// Whether commands run in the jail, where the state folder is read-only to them and to
    /// what they leave running: nothing there is theirs to change, so the guard does not
    /// look (a change there is another tern's: a session beside this one in the workspace).
    fn jailed(&self) -> bool {
        self.rules.mode.is_sandboxed()
            && !self.rules.reach.no_jail
            && !matches!(self.jail, JailSlot::Refused(_))
    }

    /// The runtime ends: in a jail, what the commands left running dies with it (its PID
    /// namespace), then what they planted in git's folder is removed; without one, what they
    /// left running (found by `TERN_SESSION_DIR`) is killed, unless another process holds the
    /// session (those are its commands). `holds` says whether this runtime holds the lease.
    pub fn end(&mut self, session: &Session, holds: bool) {
        // The channel's thread stops and the servers the session started go with it.
        self.mcp.channel = None;
        if let Some(h) = self.mcp.hub.take() {
            h.close();
        }
        if let JailSlot::Running(j) = std::mem::take(&mut self.jail) {
            // The last word of git's data files, then the jail (and all it left running) goes,
            // then its shadows.
            j.sync_git();
            drop(j);
            self.remove_shadows();
            return;
        }
        if self.ran && (holds || crate::store::held_elsewhere(session).is_none()) {
            bash::kill_orphans(&session.dir);
        }
    }

    /// Where this runtime's jails write their repositories' shadows: `<base>/<pid>-<n>` (`n`
    /// counts the jails of this runtime), the base a memory file system of the person's own
    /// ([`shadow_base`]) or else `<state folder>/jail`.
    fn shadow_dir(&self, session: &Session) -> Option<PathBuf> {
        let base = shadow_base().or_else(|| Some(session.state_root()?.join("jail")))?;
        Some(base.join(format!("{}-{}", std::process::id(), self.jails)))
    }

    /// Removes the shadows of this runtime's jails.
    fn remove_shadows(&mut self) {
        if let Some(d) = self.shadows.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// The folders whose file systems a command may fill: the workspace and `--add-dir`s (in
    /// the modes that write them), the private `TMPDIR`.
    fn watched_folders(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        if self.rules.mode != Mode::ReadOnly {
            v.push(self.workspace.clone());
            v.extend(self.rules.reach.add_dirs.iter().cloned());
        }
        v.extend(self.tmp.as_ref().map(|t| t.path().to_path_buf()));
        v
    }

    /// Empties the private `TMPDIR`; a folder that cannot be emptied (a command changed its
    /// mode) is dropped and made anew at the next call.
    fn clear_tmp(&mut self) {
        if self.tmp.as_ref().is_some_and(|t| t.clear().is_err()) {
            self.tmp = None;
        }
    }

    /// The jail this runtime's commands run in: `None` in danger-full-access and with
    /// `--no-jail` (Landlock alone); started at the first command (its cost is paid once, not
    /// per session that never runs one) and restarted only when its private `TMPDIR` had to be
    /// made anew.
    ///
    /// Errors: the one line of [`crate::sandbox::jail::refusal`], for this and every later
    /// command (the kernel's answer does not change within a run).
    fn jail(&mut self, session: &Session) -> Result<Option<Arc<Jail>>, String> {
        if !self.rules.mode.is_sandboxed() || self.rules.reach.no_jail {
            return Ok(None);
        }
        let tmp = self.tmp.as_ref().map(|t| t.path().to_path_buf());
        if let JailSlot::Running(j) = &self.jail {
            // The same private TMPDIR (it is made anew only when it could not be emptied) and
            // the jail still there: keep it. Else a new one.
            let same_tmp = tmp.as_ref().is_none_or(|t| {
                j.spec().writable.contains(t)
                    || std::fs::canonicalize(t).is_ok_and(|t| j.spec().writable.contains(&t))
            });
            if same_tmp && j.is_alive() {
                return Ok(Some(j.clone()));
            }
            // What the old jail's git wrote since the last command goes back before its
            // shadows go.
            j.sync_git();
            self.jail = JailSlot::Unstarted;
        }
        if let JailSlot::Refused(why) = &self.jail {
            return Err(why.clone());
        }
        let draft = session.path(files::DRAFT);
        let state = session.state_root().unwrap_or_else(|| session.dir.clone());
        // A new jail gets new shadows of the repositories (the last one's are gone).
        self.remove_shadows();
        self.jails += 1;
        let shadows = self.shadow_dir(session).filter(|d| {
            if let Some(base) = d.parent() {
                sweep_shadows(base);
            }
            crate::store::fsutil::ensure_dir(d).is_ok()
        });
        self.shadows = shadows.clone();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        // tern's own config, wherever XDG_CONFIG_HOME puts it (the keys may be there).
        let tern_config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|x| !x.is_empty())
            .map(|x| PathBuf::from(x).join("tern"))
            .or_else(|| home.as_ref().map(|h| h.join(".config/tern")));
        let spec = JailSpec::new(&JailPaths {
            workspace: &self.workspace,
            workspace_writable: self.rules.mode == Mode::WorkspaceWrite,
            state_dir: &state,
            draft: Some(&draft),
            tmpdir: tmp.as_deref(),
            add_dirs: &self.rules.reach.add_dirs,
            read_dirs: &self.rules.reach.read_dirs,
            home: home.as_deref(),
            tern_config: tern_config.as_deref(),
            shadows: shadows.as_deref(),
            read_only: &self.protected,
            no_network: self.rules.no_network,
        });
        match self.start_jail(&spec) {
            Ok(j) => {
                let j = Arc::new(j);
                self.jail = JailSlot::Running(j.clone());
                Ok(Some(j))
            }
            Err(e) => {
                let why = crate::sandbox::jail::refusal(self.rules.mode, &e);
                self.jail = JailSlot::Refused(why.clone());
                Err(why)
            }
        }
    }

    fn start_jail(&self, spec: &JailSpec) -> Result<Jail, JailError> {
        // Debug builds only: a test switch that makes the kernel's refusal happen here.
        #[cfg(debug_assertions)]
        if std::env::var_os(crate::sandbox::jail::FAKE_REFUSAL_ENV).is_some() {
            return Err(JailError {
                step: "user namespace".into(),
                reason: format!(
                    "Operation not permitted ({} is set, a test switch)",
                    crate::sandbox::jail::FAKE_REFUSAL_ENV
                ),
            });
        }
        let exe = self
            .rules
            .jail_exe
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
        Jail::start(&exe, spec, Some(&self.groups))
    }
}

/// A folder for the repositories' shadows on a memory file system, the person's alone:
/// `$XDG_RUNTIME_DIR/tern-shadows`, else `/dev/shm/tern-shadows-<uid>` (made mode 0700; one
/// that exists must be a folder of this user's that nobody else can enter). A shadow is a few
/// small files made at every jail start and looked at after every command: memory makes that
/// cheap. None: there is none (the state folder is used).
fn shadow_base() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let candidates = [
        std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(d).join("tern-shadows")),
        Some(PathBuf::from(format!("/dev/shm/tern-shadows-{uid}"))),
    ];
    candidates.into_iter().flatten().find(|d| {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(d);
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    })
}

/// Removes the shadow folders under `jail_dir` (`<pid>-<n>`) whose process is gone (a tern
/// killed before it could remove its own).
fn sweep_shadows(jail_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(jail_dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        // SAFETY: kill(2) with signal 0 only asks whether the process exists.
        let gone = pid.is_some_and(|p| unsafe { libc::kill(p, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH));
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_notes_join_their_sentences() {
        let n = JailNotes {
            git: vec!["one.".into(), "two.".into()],
        };
        assert_eq!(Verdict::Jail(n).to_string(), "one. two.");
        assert!(JailNotes::default().is_empty());
        let low = LowDisk {
            path: PathBuf::from("/w"),
            free: 1000,
            floor: 2_000_000,
        };
        assert!(
            Verdict::DiskFloor(low)
                .to_string()
                .starts_with("tern stopped this command: the disk holding /w has only 1.0 kB free, below tern's floor of 2.0 MB")
        );
    }
}
