//! What the dispatcher and a session's thread share: the prompts not yet answered, the mode
//! and the model, behind one mutex ([`Slot`]); and where the mode is stored.

use std::sync::{Mutex, MutexGuard};

use super::mode::Mode;
use crate::cancel::CancelToken;
use crate::store::Session;

/// What the dispatcher and a session thread share.
pub struct Slot {
    /// The prompts and ops not yet answered, oldest first: the one running, then those waiting
    /// behind it.
    pub pending: Vec<Pending>,
    /// The current mode.
    pub mode: Mode,
    /// The model the next request goes to.
    pub model: String,
}

/// One prompt or op not yet answered.
pub struct Pending {
    /// Its number in this session (to find it again).
    pub seq: u64,
    /// Its cancel flag.
    pub cancel: CancelToken,
}

/// Locks a slot. The slot holds plain values; a panicked holder leaves nothing half-written.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stores `mode` with the session (`meta.json` `approval`); a failure is logged, the mode
/// still holds for this connection.
pub fn persist_mode(session: &Session, mode: Mode) {
    if let Err(e) = session.update_meta(|m| m.approval = Some(mode.approval())) {
        crate::errln!("tern acp: could not store the mode of {}: {e}", session.id);
    }
}
