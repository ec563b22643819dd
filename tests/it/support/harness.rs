//! The in-process harness: a [`Launcher`] built the way `main` builds one, against the fake
//! provider, with a surface that collects the typed events. Turn-loop properties (the loop
//! guard, compaction, repair, prefix stability) are asserted here without starting a process;
//! what only a process shows (signals, exit codes, stdout purity, tmux) stays in the process
//! tests.
#![allow(dead_code)]

use std::path::Path;

use tern::config::{Env, ProviderFlags};
use tern::event::{Envelope, Event};
use tern::launcher::{Launcher, Process, SessionRef};
use tern::runtime::{Answer, Config, Runtime, Surface};
use tern::store::StateDir;

use super::{FakeServer, Wire};

/// A surface that keeps every event and the streamed text; approvals answer `answer`.
pub struct Collect {
    /// Every event, in order.
    pub events: Vec<Envelope>,
    /// The streamed assistant text.
    pub text: String,
    /// What an approval question gets.
    pub answer: Answer,
}

impl Default for Collect {
    fn default() -> Self {
        Collect {
            events: Vec::new(),
            text: String::new(),
            answer: Answer::Yes,
        }
    }
}

impl Surface for Collect {
    fn event(&mut self, ev: &Envelope) {
        self.events.push(ev.clone());
    }
    fn text_delta(&mut self, text: &str) {
        self.text.push_str(text);
    }
    fn approve(&mut self, _command: &str) -> Answer {
        self.answer
    }
}

impl Collect {
    /// The `type` names of the events, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.event.kind()).collect()
    }

    /// The events of one kind.
    pub fn of(&self, kind: &str) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| e.event.kind() == kind)
            .map(|e| &e.event)
            .collect()
    }
}

/// The environment snapshot that points `wire` at `fake`, model `m`.
pub fn env_for(fake: &FakeServer, wire: Wire) -> Env {
    match wire {
        Wire::OpenAi => Env::of(&[
            ("OPENAI_BASE_URL", &fake.openai_base()),
            ("TERN_MODEL", "m"),
        ]),
        Wire::Anthropic => Env::of(&[
            ("ANTHROPIC_BASE_URL", &fake.base_url()),
            ("TERN_MODEL", "m"),
        ]),
    }
}

/// A launcher for the workspace `root` (which holds `.tern/`) talking `wire` to `fake`.
pub fn launcher(root: &Path, fake: &FakeServer, wire: Wire, cfg: Config) -> Launcher {
    Launcher::new(
        StateDir::locate(root, None),
        env_for(fake, wire),
        ProviderFlags::default(),
        cfg,
        &Process::default(),
    )
}

/// Fast retries for tests: 600 ms in all.
pub fn fast_config() -> Config {
    let mut cfg = Config::new("m");
    cfg.retry.max_total = std::time::Duration::from_millis(600);
    cfg.retry.base_delay = std::time::Duration::from_millis(20);
    cfg.retry.max_delay = std::time::Duration::from_millis(50);
    // The test binary is not `tern`: the jail's init is the real binary.
    cfg.jail_exe = Some(crate::support::cli::TERN.into());
    cfg
}

/// A workspace folder with `.tern/`, an in-process launcher on it, and the fake provider.
pub struct InProc {
    /// The workspace (removed when dropped).
    pub dir: tempfile::TempDir,
    /// The fake provider.
    pub fake: FakeServer,
    /// The launcher.
    pub launcher: Launcher,
}

impl InProc {
    /// A new workspace and launcher talking `wire` to a fake server answering `script`.
    pub fn new(wire: Wire, script: Vec<super::Reply>, cfg: Config) -> InProc {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".tern")).expect("mkdir .tern");
        let fake = FakeServer::start(script);
        let launcher = launcher(dir.path(), &fake, wire, cfg);
        InProc {
            dir,
            fake,
            launcher,
        }
    }

    /// Opens a new session.
    pub fn open(&self, ui: &mut Collect) -> Runtime {
        self.launcher
            .open(&SessionRef::New { title: "t".into() }, ui)
            .expect("open a session")
    }

    /// Reopens the current session.
    pub fn resume(&self, ui: &mut Collect) -> Runtime {
        self.launcher
            .open(&SessionRef::Current, ui)
            .expect("resume the session")
    }
}
