//! Commands: where and how a session's commands run (DESIGN §10). One value per runtime,
//! [`Commands`], holds the rules, the sandbox setting, the private `TMPDIR`, the jail's keeper
//! (`jail.rs`: the jail, its pins and its repositories' shadows), the state-folder guard
//! (`guard.rs`) and the disk floor's watcher (`disk.rs`); the runtime enters through
//! [`Commands::run`] (one command: sandbox, jail, guard), [`Commands::watch`] (the guard
//! between commands, before each model request) and [`Commands::end`] (what the commands left
//! running dies with the runtime).
//!
//! The room knows nothing of MCP or hooks (they sit above it): a command is handed the
//! descriptor it inherits ([`Request::channel`]), a hook that runs in the jail is one more
//! command ([`Commands::run_in_jail`]), and a long-lived program that must not share the
//! commands' jail (an MCP server running workspace code) gets a jail of its own from
//! [`ServerJails`] (`servers.rs`), built from the same rules.
//!
//! What the model reads about tern's refusals is typed ([`Verdict`]: a [`GuardReport`] or the
//! jail's [`JailNotes`]) and worded once, by its `Display`.

mod disk;
mod guard;
mod jail;
mod servers;

use std::ffi::OsString;
use std::fmt;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::policy::{Mode, Setting};
use crate::procs::ProcessGroups;
use crate::sandbox::TempFolder;
use crate::sandbox::jail::{Jail, Reach};
use crate::store::{Session, files};
use crate::tools::bash::{self, BashOutcome};

pub use servers::{JailedServer, ServerIo, ServerJails};

pub use disk::LowDisk;
pub use guard::{GuardReport, Site};

/// How commands may run in a runtime: where, and the person's choices, fixed for its life.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Where commands run (the jail's writable root in workspace-write).
    pub workspace: PathBuf,
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
    /// The workspace's door records what it applies for undo (checkpoints on): the most bytes
    /// of a replaced file it copies when linking it crosses file systems. None: no record.
    pub record: Option<u64>,
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
    /// A descriptor the command inherits and the environment that names it (the session's MCP
    /// channel, `crate::mcp::link`); None: nothing more.
    pub channel: Option<&'a Inherit>,
}

/// A descriptor one command inherits (at [`crate::sandbox::jail::CHANNEL_FD`]) and the
/// environment that names it: what a room above hands the commands room for a command to
/// reach it (the session's MCP channel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inherit {
    /// The descriptor, in this process.
    pub fd: RawFd,
    /// The variables that name it (and a `PATH` that finds the right `tern`, when it must).
    pub env: Vec<(&'static str, OsString)>,
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

/// Why a command (or a hook that runs in the jail) was not run: one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRun {
    /// The sandbox or the jail cannot hold it here (a sandboxed mode this machine cannot
    /// enforce refuses; it never runs unsandboxed).
    Refused(String),
    /// It could not be started (bash missing, its input not written).
    Failed(String),
}

impl fmt::Display for NotRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRun::Refused(why) | NotRun::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for NotRun {}

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
        /// What the door applied and held back of it (with a layer; DESIGN §10).
        door: Option<Box<crate::sandbox::door::Report>>,
    },
}

/// Where and how a runtime's commands run. At most 8 fields (DESIGN §1; the architecture test
/// fails on a ninth): a capability with state of its own is a room of its own (the jail's
/// keeper, the guard, the disk watcher), not one more field here.
#[derive(Debug)]
pub struct Commands {
    rules: Rules,
    setting: Setting,
    groups: Arc<ProcessGroups>,
    /// The commands' private `TMPDIR` in a sandboxed mode: made at the first call, emptied
    /// after each.
    tmp: Option<TempFolder>,
    /// The jail (started at the first command, gone with the runtime: [`Commands::end`]), its
    /// pins and its repositories' shadows.
    jail: jail::Keeper,
    guard: guard::Guard,
    /// A command ran: what it left running is killed at the end.
    ran: bool,
    /// The disk floor's watcher.
    disk: disk::DiskWatch,
}

impl Commands {
    /// Commands of a runtime by `rules`, registering their process groups in `groups`. Probes
    /// the kernel's Landlock ABI (no command runs here).
    pub fn new(rules: Rules, groups: Arc<ProcessGroups>) -> Commands {
        let setting = crate::sandbox::probe(rules.mode, rules.no_network, !rules.reach.no_jail);
        Commands {
            rules,
            setting,
            groups,
            tmp: None,
            jail: jail::Keeper::default(),
            guard: guard::Guard::default(),
            ran: false,
            disk: disk::DiskWatch::default(),
        }
    }

    /// The tern binary commands reach the session through: the jail's init (set by embedders),
    /// else this process's own.
    pub fn tern_exe(&self) -> Option<PathBuf> {
        self.rules
            .jail_exe
            .clone()
            .or_else(|| std::env::current_exe().ok())
    }

    /// The registry commands' (and hooks') process groups go in, shared.
    pub fn groups_arc(&self) -> Arc<ProcessGroups> {
        self.groups.clone()
    }

    /// Where commands run.
    pub fn workspace(&self) -> &Path {
        &self.rules.workspace
    }

    /// What commands may write, as probed at start.
    pub fn setting(&self) -> Setting {
        self.setting
    }

    /// The registry commands' (and hooks') process groups go in.
    pub fn groups(&self) -> &ProcessGroups {
        &self.groups
    }

    /// Runs one command: in the sandbox and, in the sandboxed modes, the jail (started at the
    /// first command); without a jail, the guard checks tern's files before and after it.
    pub fn run(&mut self, req: &Request<'_>, site: &mut Site<'_>) -> Ran {
        let session = site.session;
        // The paths as they are, bytes and all: a workspace whose path is not UTF-8 must still
        // give the command a $PLAN_DRAFT_FILE it can write.
        let mut env: Vec<(&str, OsString)> = vec![
            ("PLAN_DRAFT_FILE", session.path(files::DRAFT).into()),
            ("PLAN_FILE", session.path(files::PLAN).into()),
            ("TERN_SESSION_DIR", session.dir.clone().into()),
        ];
        if let Some(i) = req.channel {
            env.extend(i.env.iter().map(|(k, v)| (*k, v.clone())));
        }
        let spill = session.path(files::SPILL);
        // Full outputs go to spill/: never through a link planted in its place.
        if let Err(e) = crate::store::fsutil::ensure_dir(&spill) {
            return Ran::Failed(format!("not run: {e}"));
        }
        let (jail, prepared) = match self.sandbox_for(session) {
            Ok(x) => x,
            Err(why) => return Ran::Refused(why.to_string()),
        };
        // Without a jail (danger-full-access, --no-jail), changes since tern last wrote its
        // files (a process an earlier command left behind) are undone before this command
        // runs, and reported with its result. In the jail the state folder is read-only.
        let before = match jail {
            None => {
                let b = self.guard.check(site, &self.rules.workspace);
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
            cwd: &self.rules.workspace,
            env: &env,
            env_remove: crate::config::SECRET_ENV,
            pass_env: &self.rules.reach.pass_env,
            spill_dir: &spill,
            groups: &self.groups,
            sandbox: Some(&prepared),
            jail: jail.as_deref(),
            mcp: req.channel.map(|i| i.fd),
            streams: req.streams,
        };
        let watched = self.watched_folders();
        self.ran = true;
        // The command's own token: the disk floor stops this command, never the turn.
        let cancel = req.cancel.child();
        let low_between = self.disk.begin(&watched, self.rules.disk_floor, &cancel);
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
                .check(site, &self.rules.workspace)
                .or(before)
                .map(Verdict::Guard),
            Some(j) => {
                notes.git.extend(j.sync_git());
                (!notes.is_empty()).then_some(Verdict::Jail(notes))
            }
        };
        // Through the door: what the command wrote in its layer reaches the workspace now.
        let mut door = self.jail.pass();
        if let Some(b) = low_between {
            door.get_or_insert_with(Default::default)
                .said
                .push(b.to_string());
        }
        // What the command left running is watched until the next one: the floors hold between
        // commands too.
        if let Some(j) = jail.as_ref().filter(|j| !j.idle()) {
            self.disk.between(&watched, self.rules.disk_floor, j.pgid());
        }
        Ran::Done {
            out,
            verdict,
            door: door.map(Box::new),
        }
    }

    /// The private `TMPDIR`, the jail and the Landlock ruleset of one call (the same for the
    /// model's commands, the goal and a hook run in the jail). Errors: the one line of why the
    /// call is not run (a sandboxed mode this machine cannot enforce refuses, never runs
    /// unsandboxed).
    fn sandbox_for(
        &mut self,
        session: &Session,
    ) -> Result<(Option<Arc<Jail>>, crate::sandbox::Prepared), NotRun> {
        // Emptied before the call too: a job an earlier call left running may have written.
        self.clear_tmp();
        if self.rules.mode.is_sandboxed() && self.tmp.is_none() {
            self.tmp =
                Some(TempFolder::new().map_err(|e| NotRun::Refused(format!("not run: {e}")))?);
        }
        let tmp = self.tmp.as_ref().map(|t| t.path().to_path_buf());
        let jail = self
            .jail
            .get(&self.rules, session, tmp.as_deref(), &self.groups)
            .map_err(|e| NotRun::Refused(format!("not run: {e}")))?;
        let policy = policy_of(
            &self.rules,
            jail.as_deref(),
            Some(session.path(files::DRAFT)),
            tmp,
        );
        let prepared = crate::sandbox::prepare(&policy)
            .map_err(|e| NotRun::Refused(format!("not run: {e}")))?;
        Ok((jail, prepared))
    }

    /// Runs a hook that asks to run inside the jail (`"jail": true`): `command` with `input` on
    /// its stdin, in the jail and sandbox the model's commands get, its stdout and stderr apart
    /// (each up to `max` bytes), supervised with its timeout and the turn's cancel.
    ///
    /// Errors: why it could not run there (no jail in this mode, the kernel refused it, its
    /// input could not be written), one line.
    pub fn run_in_jail(
        &mut self,
        command: &str,
        input: &[u8],
        (timeout, max): (Duration, usize),
        cancel: &CancelToken,
        session: &Session,
    ) -> Result<bash::Split, NotRun> {
        let (jail, prepared) = match self.sandbox_for(session)? {
            (Some(j), p) => (j, p),
            (None, _) => return Err(NotRun::Refused("it asks to run inside the jail (\"jail\": true) and this session has none (--sandbox danger-full-access or --no-jail): not run".into())),
        };
        let tmp = self
            .tmp
            .as_ref()
            .map(|t| t.path().to_path_buf())
            .ok_or_else(|| NotRun::Failed("no private TMPDIR for its input".into()))?;
        let input_file = tmp.join(".tern-hook-input.json");
        std::fs::write(&input_file, input)
            .map_err(|e| NotRun::Failed(format!("could not write its input: {e}")))?;
        let ws = self.rules.workspace.clone().into_os_string();
        let env = [
            ("CLAUDE_PROJECT_DIR", ws.clone()),
            ("TERN_PROJECT_DIR", ws),
            ("TERN_SESSION_DIR", session.dir.clone().into()),
        ];
        let spill = session.path(files::SPILL);
        let req = bash::BashRequest {
            command,
            timeout,
            cwd: &self.rules.workspace,
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
        let split = bash::run_split(&req, &input_file, max, cancel);
        self.clear_tmp();
        // What it wrote goes through the door now (its held changes are recorded and said
        // with the next command's pass; files a person's tool runs are named at the turn's end).
        self.jail.pass_quietly();
        split.map_err(|e| NotRun::Failed(e.into()))
    }

    /// Shows `files` read-only to commands from the next jail on (the workspace files the
    /// person's hooks and MCP servers run).
    pub fn protect(&mut self, files: Vec<PathBuf>) {
        self.jail.pin(files);
    }

    /// Shows a program's binary (this tern's) read-only to commands, wherever it lies; unlike a
    /// script, its folder is not named by the door.
    pub fn protect_binary(&mut self, exe: PathBuf) {
        self.jail.pin_binary(exe);
    }

    /// The guard between commands (before each model request): what a process an earlier
    /// command left behind changed in tern's files, put back where tern can. None when nothing
    /// changed or the guard has no baseline yet.
    pub fn watch(&mut self, site: &mut Site<'_>) -> Option<GuardReport> {
        if self.jailed() {
            return None;
        }
        self.guard.check(site, &self.rules.workspace)
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
        self.rules.mode.is_sandboxed() && !self.rules.reach.no_jail && !self.jail.refused()
    }

    /// The runtime ends: in a jail, what the commands left running dies with it (its PID
    /// namespace), then what they planted in git's folder is removed; without one, what they
    /// left running (found by `TERN_SESSION_DIR`) is killed, unless another process holds the
    /// session (those are its commands). `holds` says whether this runtime holds the lease.
    pub fn end(&mut self, session: &Session, holds: bool) {
        let _ = self.disk.end();
        if self.jail.end() {
            return;
        }
        if self.ran && (holds || crate::store::held_elsewhere(session).is_none()) {
            bash::kill_orphans(&session.dir);
        }
    }

    /// The folders whose file systems a command may fill: the workspace and `--add-dir`s (in
    /// the modes that write them), the private `TMPDIR`, the layers' folder (what commands
    /// write lands there first), and each layer against the folder it stands for.
    fn watched_folders(&self) -> disk::Watch {
        let mut v = Vec::new();
        if self.rules.mode != Mode::ReadOnly {
            v.push(self.rules.workspace.clone());
            v.extend(self.rules.reach.add_dirs.iter().cloned());
        }
        v.extend(self.tmp.as_ref().map(|t| t.path().to_path_buf()));
        v.extend(self.jail.layer_dir().map(Path::to_path_buf));
        disk::Watch {
            folders: v,
            layers: self.jail.layer_pairs(),
        }
    }

    /// Whether this runtime's commands change the workspace only through the door, which
    /// records what it applies (issue 42): then that record is the turn's checkpoint and no
    /// snapshot is taken. With `start`, the jail is started now when it has not been (the
    /// command about to run needs it anyway), so a kernel that refuses the layer is known
    /// before the command runs; without, the answer is what the settings promise.
    pub fn through_door(&mut self, session: &Session, start: bool) -> bool {
        if self.rules.record.is_none()
            || self.rules.mode != Mode::WorkspaceWrite
            || self.rules.reach.no_layer
            || !self.jail_available()
            || self.jail.layer_refused()
        {
            return false;
        }
        if !start {
            return true;
        }
        self.sandbox_for(session).is_ok() && self.jail.has_doors()
    }

    /// Jails for the session's MCP servers under these rules (None where commands have no
    /// jail: danger-full-access, `--no-jail`, a kernel that refused it).
    pub fn server_jails(&self, session: &Session) -> Option<ServerJails> {
        self.jail_available()
            .then(|| ServerJails::new(&self.rules, session, self.groups.clone()))
    }

    /// Whether commands run in a jail here (a sandboxed mode, the jail not turned off and not
    /// refused by the kernel): where a hook that runs workspace code runs by default.
    pub fn jail_available(&self) -> bool {
        self.rules.mode.is_sandboxed() && !self.rules.reach.no_jail && !self.jail.refused()
    }

    /// The files a person's tools run on their own that the door applied since the last call
    /// (the end of a turn), each once, relative to the workspace.
    pub fn take_listed(&mut self) -> Vec<PathBuf> {
        self.jail.take_listed()
    }

    /// The workspace's layer: its bytes and entries (None: commands write the workspace
    /// directly).
    pub fn layer_size(&self) -> Option<(u64, u64)> {
        self.jail.layer_size()
    }

    /// Empties the private `TMPDIR`; a folder that cannot be emptied (a command changed its
    /// mode) is dropped and made anew at the next call.
    fn clear_tmp(&mut self) {
        if self.tmp.as_ref().is_some_and(|t| t.clear().is_err()) {
            self.tmp = None;
        }
    }
}

/// The Landlock policy of one call under `rules` (the model's commands, a hook or an MCP server
/// in a jail): the workspace and `--add-dir`s by mode, the private `tmp`, the writable `draft`
/// file, and in `jail` its repositories' shadows and git data folders.
fn policy_of(
    rules: &Rules,
    jail: Option<&Jail>,
    draft: Option<PathBuf>,
    tmp: Option<PathBuf>,
) -> crate::sandbox::Policy {
    crate::sandbox::Policy {
        mode: rules.mode,
        workspace: rules.workspace.clone(),
        no_network: rules.no_network,
        // In the jail the network namespace holds it, and loopback inside still works.
        network_in_namespace: jail.is_some(),
        add_dirs: rules
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
        draft_file: draft,
        tmpdir: tmp,
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
            inodes: false,
            between: false,
        };
        assert!(
            Verdict::DiskFloor(low)
                .to_string()
                .starts_with("tern stopped this command: the disk holding /w has only 1.0 kB free, below tern's floor of 2.0 MB")
        );
    }
}
