//! tern: a bash-first minimal coding agent.
//!
//! Data flows one way: surface (`main.rs`, `repl`) → [`runtime`] (the turn loop) → [`provider`]
//! and [`tools`] → [`store`] (the session folder). [`render`] holds pure views of state.

pub mod message;
pub mod provider;
pub mod render;
pub mod tools;
