//! The session's link to its MCP servers (the room's one value in the runtime): the [`Hub`],
//! the [`Channel`] every command inherits (opened at the first command), and the events the
//! hub wrote while a command ran. The commands room knows none of this: it is handed a
//! descriptor and the environment that names it ([`Inherit`], its own type), and runs the
//! command.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::Hub;
use super::channel::{self, Channel};
use crate::event::Envelope;

pub use crate::commands::Inherit;

/// The MCP servers a session's commands reach (see [`channel`]). Empty (no server usable):
/// [`Link::inherit`] is None and nothing is opened.
#[derive(Default)]
pub struct Link {
    hub: Option<Arc<Hub>>,
    channel: Option<Channel>,
    /// The commands' `PATH` when it must find this tern first (worked out with the channel).
    path: Option<OsString>,
    /// This tern's binary (what a command's `tern mcp` must run).
    exe: Option<PathBuf>,
    /// Events the hub wrote while a command ran (its calls, their hooks), for the surface.
    events: Arc<Mutex<Vec<Envelope>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("servers", &self.names())
            .field("open", &self.channel.is_some())
            .finish()
    }
}

impl Link {
    /// A link to `hub`'s servers; `events` is where the hub's gate writes what the surface
    /// shows after the command; `exe` is this tern's binary.
    pub fn new(hub: Arc<Hub>, events: Arc<Mutex<Vec<Envelope>>>, exe: Option<PathBuf>) -> Link {
        Link {
            hub: Some(hub),
            channel: None,
            path: None,
            exe,
            events,
        }
    }

    /// The hub (None: no server is usable).
    pub fn hub(&self) -> Option<Arc<Hub>> {
        self.hub.clone()
    }

    /// The names of the servers commands reach (empty without a hub).
    pub fn names(&self) -> Vec<String> {
        self.hub
            .as_ref()
            .map(|h| h.servers().names())
            .unwrap_or_default()
    }

    /// The door: what the next command inherits, the channel opened now if servers are
    /// configured. None: none are, or the channel could not be opened (then `tern mcp` in the
    /// command says the channel is missing).
    pub fn inherit(&mut self) -> Option<Inherit> {
        let hub = self.hub.as_ref()?;
        if self.channel.is_none() {
            self.channel = Channel::open(hub.clone()).ok();
            self.path = channel::path_with_tern(self.exe.as_deref());
        }
        let fd = self.channel.as_ref()?.fd();
        Some(Inherit {
            fd,
            env: inherit_env(self.path.clone()),
        })
    }

    /// The events the hub wrote since the last look (in `events.jsonl` already), for the
    /// surface: a command's calls show where they happened, before its result.
    pub fn take_events(&self) -> Vec<Envelope> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The session ends: the channel's thread stops and the servers it started go with it.
    pub fn close(&mut self) {
        self.channel = None;
        if let Some(h) = self.hub.take() {
            h.close();
        }
    }
}

/// The environment a command needs to find the channel (pure): [`channel::ENV`] naming
/// [`channel::FD`], and `path` as `PATH` when it must change.
fn inherit_env(path: Option<OsString>) -> Vec<(&'static str, OsString)> {
    let mut env = vec![(channel::ENV, channel::FD.to_string().into())];
    env.extend(path.map(|p| ("PATH", p)));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_told_the_descriptor_and_path_only_when_it_must_change() {
        let env = inherit_env(None);
        assert_eq!(
            env,
            [(channel::ENV, OsString::from(channel::FD.to_string()))]
        );
        let env = inherit_env(Some("/opt/tern:/usr/bin".into()));
        assert_eq!(env.len(), 2);
        assert_eq!(env[1], ("PATH", OsString::from("/opt/tern:/usr/bin")));
    }

    #[test]
    fn an_empty_link_opens_nothing() {
        let mut l = Link::default();
        assert!(l.inherit().is_none());
        assert!(l.names().is_empty());
        assert!(l.take_events().is_empty());
        l.close();
        assert!(l.hub().is_none());
    }
}
