//! Cancel tokens that form a tree: cancelling a token cancels every token made from it with
//! [`CancelToken::child`], never the reverse. The runtime's root token is set by `main`'s signal
//! handlers (Ctrl-C, SIGTERM, SIGHUP) or by a surface (ACP's `session/cancel`); a sub-agent runs
//! on a child token, so the person's Ctrl-C stops every child while a child's budget ending stops
//! only that child.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The last of SIGINT, SIGTERM, SIGHUP this process received (0: none): what stopped a turn
/// when no budget did, so a result says "stopped by SIGTERM" rather than blame a person who
/// pressed nothing (issue 46). Written by the signal handlers (an atomic store is
/// async-signal-safe).
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Records that signal `sig` arrived; for signal handlers (async-signal-safe).
pub fn note_signal(sig: i32) {
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Why a run was stopped when no budget did, in words: "interrupted by the user" (Ctrl-C, an
/// editor's cancel), "stopped by SIGTERM", "stopped by SIGHUP (the terminal closed)".
pub fn who_stopped() -> &'static str {
    match LAST_SIGNAL.load(Ordering::SeqCst) {
        libc::SIGTERM => "stopped by SIGTERM",
        libc::SIGHUP => "stopped by SIGHUP (the terminal closed)",
        _ => "interrupted by the user",
    }
}
use std::sync::{Arc, Mutex};

/// A shareable cancel flag with an optional parent. Cheap to clone (one `Arc`).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<Node>);

#[derive(Debug, Default)]
struct Node {
    flag: Arc<AtomicBool>,
    parent: Option<CancelToken>,
    /// Why this token was cancelled when it was a budget, not a person (see
    /// [`CancelToken::cancel_for_budget`]).
    budget: Mutex<Option<String>>,
}

impl CancelToken {
    /// A new root token, not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// A token that is cancelled when this one (or any ancestor) is, or when cancelled itself.
    pub fn child(&self) -> CancelToken {
        CancelToken(Arc::new(Node {
            flag: Arc::new(AtomicBool::new(false)),
            parent: Some(self.clone()),
            budget: Mutex::new(None),
        }))
    }

    /// Cancels this token and so every descendant.
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::SeqCst);
    }

    /// Cancels this token because a budget ran out (`why`, in words: "its wall time of 3 s ran
    /// out"), so the run it stops ends as `budget_exhausted`, not `interrupted`.
    pub fn cancel_for_budget(&self, why: String) {
        if let Ok(mut b) = self.0.budget.lock() {
            *b = Some(why);
        }
        self.cancel();
    }

    /// Why this token (or the nearest cancelled ancestor: a tool's token is a child of the
    /// run's) was cancelled, when a budget did it (None: a person, or not cancelled).
    pub fn budget(&self) -> Option<String> {
        let mut t = Some(self);
        while let Some(tok) = t {
            if tok.0.flag.load(Ordering::SeqCst) {
                return tok.0.budget.lock().ok().and_then(|b| b.clone());
            }
            t = tok.0.parent.as_ref();
        }
        None
    }

    /// Clears this token's own flag (the REPL after an interrupted turn); an ancestor's cancel
    /// still counts.
    pub fn reset(&self) {
        self.0.flag.store(false, Ordering::SeqCst);
    }

    /// Takes this token's own flag: true (and cleared) when it was set.
    pub fn take(&self) -> bool {
        self.0.flag.swap(false, Ordering::SeqCst)
    }

    /// True when this token or an ancestor was cancelled.
    pub fn is_cancelled(&self) -> bool {
        let mut t = Some(self);
        while let Some(tok) = t {
            if tok.0.flag.load(Ordering::Relaxed) {
                return true;
            }
            t = tok.0.parent.as_ref();
        }
        false
    }

    /// This token's own flag, for a signal handler to set (`signal_hook::flag::register`).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.flag.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::CancelToken;

    #[test]
    fn a_parent_cancels_its_children_not_the_reverse() {
        let root = CancelToken::new();
        let a = root.child();
        let b = a.child();
        let sibling = root.child();
        b.cancel();
        assert!(b.is_cancelled() && !a.is_cancelled() && !root.is_cancelled());
        b.reset();
        root.cancel();
        assert!(a.is_cancelled() && b.is_cancelled() && sibling.is_cancelled());
        assert!(root.take() && !root.is_cancelled() && !b.is_cancelled());
    }

    #[test]
    fn a_budget_cancel_is_seen_from_below_and_a_person_cancel_is_not_a_budget() {
        let run = CancelToken::new();
        let tool = run.child();
        run.cancel_for_budget("the run's wall time ran out".into());
        assert_eq!(
            tool.budget().as_deref(),
            Some("the run's wall time ran out")
        );
        let person = CancelToken::new();
        let child = person.child();
        person.cancel();
        assert_eq!(child.budget(), None);
    }
}
