//! MCP servers in jails of their own (issue 42, part 3): a stdio server that runs workspace code
//! starts inside a jail built from the same rules as the model's commands' (the same walls, the
//! workspace seen through a layer of its own), never in the commands' jail — there the model's
//! commands could read the server's tokens from `/proc/<pid>/environ` — and its writes reach the
//! workspace only through its own door, passed after each call, at each turn's end and when the
//! session ends. A rewritten script, or a `json.py` put beside a server that imports `json`,
//! then runs with the model's authority and no more.
//!
//! One [`Keeper`] per server, so two servers never see each other's processes either. Their
//! doors do not record for undo (the record is the commands' door's, one writer): a server's
//! writes are not undone by `tern undo`, as they were not before it ran in a jail.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::jail::Keeper;
use super::{Rules, policy_of};
use crate::procs::ProcessGroups;
use crate::sandbox::TempFolder;
use crate::sandbox::jail::{Jail, JailedChild, Spawn};
use crate::store::Session;

/// The jails of a session's MCP servers, one per server started in one (see the module).
#[derive(Debug)]
pub struct ServerJails {
    rules: Rules,
    session: (String, PathBuf),
    groups: Arc<ProcessGroups>,
    each: Mutex<BTreeMap<String, One>>,
}

/// One server's jail: its keeper (jail, layer, door) and its private `TMPDIR`.
#[derive(Debug, Default)]
struct One {
    keeper: Keeper,
    tmp: Option<TempFolder>,
}

/// The descriptors a server starts with (the caller keeps its ends of the pipes).
#[derive(Debug, Clone, Copy)]
pub struct ServerIo {
    /// Read end of the pipe its requests come on.
    pub stdin: RawFd,
    /// Write end of the pipe its answers go on.
    pub stdout: RawFd,
    /// Where its stderr goes (its log).
    pub stderr: RawFd,
}

/// A server running in its jail: the jail lives while it does.
#[derive(Debug)]
pub struct JailedServer {
    child: JailedChild,
    _jail: Arc<Jail>,
}

impl JailedServer {
    /// Its exit status once it exited (never blocks; a jail that died counts as SIGKILL).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait()
    }

    /// Sends `sig` to its process group in the jail.
    pub fn signal_group(&self, sig: i32) {
        self.child.signal_group(sig);
    }
}

impl ServerJails {
    /// The jails for the servers of `session` under the commands' `rules` (their door keeps no
    /// undo record: see the module).
    pub fn new(rules: &Rules, session: &Session, groups: Arc<ProcessGroups>) -> ServerJails {
        let mut rules = rules.clone();
        rules.record = None;
        ServerJails {
            rules,
            session: (session.id.clone(), session.dir.clone()),
            groups,
            each: Mutex::new(BTreeMap::new()),
        }
    }

    fn session(&self) -> Session {
        Session::at(&self.session.0, self.session.1.clone())
    }

    /// Starts `command args` for `server` in its jail (started now, or the one it had), with
    /// tern's environment less the provider keys, plus `env`, its own `TMPDIR`, in the
    /// workspace. The program is found on the jail's `PATH` by bash (`exec`), as a shell would.
    ///
    /// Errors: why it could not start there (the kernel refused the jail, the jail could not
    /// start the program), one line.
    pub fn spawn(
        &self,
        server: &str,
        command: &str,
        args: &[String],
        env: &[(String, String)],
        io: ServerIo,
    ) -> Result<JailedServer, String> {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        let one = each.entry(server.to_string()).or_default();
        if one.tmp.is_none() {
            one.tmp = Some(TempFolder::new().map_err(|e| e.to_string())?);
        }
        let tmp = one.tmp.as_ref().map(|t| t.path().to_path_buf());
        let session = self.session();
        let jail = one
            .keeper
            .get(&self.rules, &session, tmp.as_deref(), &self.groups)
            .map_err(|e| e.to_string())?
            .ok_or("this session has no jail (--sandbox danger-full-access or --no-jail)")?;
        let policy = policy_of(&self.rules, Some(&jail), None, tmp.clone());
        let prepared = crate::sandbox::prepare(&policy).map_err(|e| e.to_string())?;
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                !crate::config::SECRET_ENV.iter().any(|s| OsStr::new(s) == k)
                    && k != "TMPDIR"
                    && !env.iter().any(|(e, _)| OsStr::new(e) == k)
            })
            .collect();
        vars.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
        vars.extend(tmp.map(|t| (OsString::from("TMPDIR"), t.into_os_string())));
        let bash = crate::tools::bash::find_bash(&vars);
        let mut argv: Vec<&OsStr> = vec![
            OsStr::new("-c"),
            OsStr::new("exec \"$0\" \"$@\""),
            OsStr::new(command),
        ];
        argv.extend(args.iter().map(OsStr::new));
        let child = jail
            .spawn(&Spawn {
                program: &bash,
                args: &argv,
                env: &vars,
                cwd: &self.rules.workspace,
                draft: None,
                ruleset: prepared.child_hook().ruleset_fd(),
                stdout: io.stdout,
                stderr: io.stderr,
                stdin: Some(io.stdin),
                mcp: None,
            })
            .map_err(|e| format!("could not start it in its jail: {e}"))?;
        Ok(JailedServer { child, _jail: jail })
    }

    /// The door's pass for `server`'s layer (after a call): what the model should read (held
    /// back, not applied, one-time notices), None when nothing.
    pub fn pass(&self, server: &str) -> Option<String> {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        let r = each.get_mut(server)?.keeper.pass()?;
        (!r.is_quiet_for_model()).then(|| r.to_string())
    }

    /// The listed files every server's door applied since the last call (a turn's end), each
    /// once; each layer is passed first (what a server wrote in the background meanwhile).
    pub fn take_listed(&self) -> Vec<PathBuf> {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        let mut v = Vec::new();
        for one in each.values_mut() {
            one.keeper.pass_quietly();
            v.extend(one.keeper.take_listed());
        }
        v
    }

    /// The session ends (the servers were stopped): each jail goes, then its door's last pass
    /// and its layer.
    pub fn end(&self) {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        for (_, mut one) in std::mem::take(&mut *each) {
            one.keeper.end();
        }
    }
}
