//! tern: a bash-first minimal coding agent.
//!
//! Data flows one way: surface (`main.rs`, `repl`) → [`runtime`] (the turn loop) → [`provider`]
//! and [`tools`] → [`store`] (the session folder). [`render`] holds pure views of state.

pub mod message;
pub mod provider;
pub mod render;
pub mod tools;
pub mod clock;
pub mod store;
pub mod config;
pub mod demo;
pub mod exec;
pub mod output;
pub mod runtime;
pub mod stats;
pub mod status;
pub mod ops;
pub mod relay;
pub mod cli;
pub mod repl;
