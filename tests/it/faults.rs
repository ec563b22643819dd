//! The fault-injection suite (issue 9, item 7): what tern leaves when it dies at any write of its
//! state folder, when many processes share a session, when the provider misbehaves, when the disk
//! is full, and fuzzing of the parsers that read bytes tern does not control. Real processes, real
//! files, the real fake HTTP server; no mocks.
//!
//! - [`sweep`]: the kill-point sweep over the scripted sessions of [`scenario`], checking the
//!   invariants of [`check`]; it writes `RELIABILITY.md` (knobs: `TERN_FAULT_SWEEP=full`,
//!   `TERN_FAULT_THREADS`, `TERN_FAULT_ONLY=scenario[:k]`).
//! - [`create`]: `tern exec` killed at every point of creating its session (one commit point:
//!   the folder's rename), then what `--continue` says and what the next start sweeps.
//! - [`children`]: a parent killed before, during and after its sub-agent's run; the repaired
//!   `agent` result tells what the child's own record says.
//! - [`acp`]: an ACP prompt turn killed at every point; the next start sweeps and says the truth.
//! - [`turns`]: a continued turn killed between storing its prompt and recording its start.
//! - [`races`]: twenty processes on one session at once.
//! - [`hostile`]: a provider that resets, drips, storms and sends garbage.
//! - [`enospc`]: the state folder on a full tmpfs (root only, else SKIPPED).
//! - [`fuzz`]: proptest of the SSE decoder, JSONL loading and repair, bash arguments, the output
//!   shaper.
//!
//! [`run`] holds what they share: throw-away workspaces and bounded runs of the binary.

mod acp;
mod check;
mod children;
mod create;
mod enospc;
mod fuzz;
mod hostile;
mod races;
mod run;
mod scenario;
mod sweep;
mod turns;
