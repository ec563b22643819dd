//! The fault-injection suite (issue 9, item 7): what tern leaves when it dies at any write of its
//! state folder, when many processes share a session, when the provider misbehaves, when the disk
//! is full, and fuzzing of the parsers that read untrusted bytes. Real processes, real files, the
//! real fake HTTP server; no mocks.

mod check;
mod enospc;
mod fuzz;
mod hostile;
mod races;
mod run;
mod scenario;
mod sweep;
