//! tern: a bash-first minimal coding agent.
//!
//! Data flows one way: surface (`main.rs`, `repl`) → [`runtime`] (the turn loop) → [`provider`]
//! and [`tools`] → [`store`] (the session folder). [`render`] holds pure views of state.

pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod exec;
pub mod message;
pub mod ops;
pub mod output;
pub mod provider;
pub mod relay;
pub mod render;
pub mod repl;
pub mod runtime;
pub mod stats;
pub mod status;
pub mod store;
pub mod tools;
