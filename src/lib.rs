//! tern: a bash-first minimal coding agent.
//!
//! Data flows one way: a surface (`main.rs`'s verbs, [`repl`], [`exec`], [`acp`], [`demo`]) →
//! the [`launcher`] (the one place sessions are opened) → the [`runtime`] (the turn loop,
//! `runtime/turn.rs`) → its rooms, each one value entered through one door ([`provider`],
//! [`tools`], [`commands`] with the [`sandbox`], [`hooks`], [`mcp`], [`checkpoint`], [`cost`],
//! [`trust`]) → the [`store`] (the session folder). [`render`] holds pure views of state.
//! docs/architecture.md lists every module (a test keeps that list and this one equal to the
//! files on disk).

pub mod acp;
pub mod cancel;
pub mod checkpoint;
pub mod child;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod config_file;
pub mod cost;
pub mod demo;
pub mod domain;
pub mod event;
pub mod exec;
pub mod fleet;
pub mod hooks;
pub mod launcher;
/// `println!` that never panics: a closed stdout (`tern … | head`) must not stop a turn.
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` that never panics (see [`outln!`]); flushes.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let mut o = std::io::stdout().lock();
        let _ = write!(o, $($t)*);
        let _ = o.flush();
    }};
}

/// `eprintln!` that never panics on a closed stderr.
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

pub mod mcp;
pub mod message;
pub mod op_id;
pub mod ops;
pub mod output;
pub mod policy;
pub mod procs;
pub mod provider;
pub mod relay;
pub mod render;
pub mod repl;
pub mod runtime;
pub mod sandbox;
pub mod sandbox_check;
pub mod setup;
pub mod skills;
pub mod stats;
pub mod status;
pub mod store;
pub mod text;
pub mod tools;
pub mod trust;
pub mod worktree;
