//! The one integration test binary (ripgrep's layout): each module tests one area against real
//! parts — the real `tern` binary or the library's runtime, the fake provider in [`support`] (a
//! real HTTP server on 127.0.0.1), real processes, real files.

// A scenario reads best as one list of steps: the 100-line rule (Cargo.toml [lints], issue 39)
// holds for the crate, not for its tests.
#![allow(clippy::too_many_lines)]

mod support;

mod acp;
mod agents;
mod agents_md;
mod architecture;
mod bash_tool;
mod budget;
mod checkpoints;
mod config;
mod construct;
mod cost;
mod door;

mod durable;
mod endings;
mod exec;
mod faults;
mod fifos;
mod hardening;
mod hooks;
mod jail;
mod lifecycle;
mod links;
mod mcp;
mod prefix;
mod provider;
mod readme;
mod reasoning;
mod recall;
mod records;
mod repl;
mod repl_sync;
mod runtime;
mod sandbox;
mod scale;
mod shown;
mod skills;
mod small_models;
mod state_formats;
mod steer;
mod store;
mod tmux;
mod usage;
mod work_e2e;
mod work_surface;
mod worktree;
