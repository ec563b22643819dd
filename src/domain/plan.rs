//! The plan lifecycle `idle → drafting → revised → confirmed → executing → cleared` as an explicit
//! state machine over `plan.json` (DESIGN.md §5). Pure: the runtime does the file moves and the
//! compaction around these transitions; `tools::plan` advertises the plan tools.

use super::DomainError;
use serde::{Deserialize, Serialize};

/// Largest plan that can be confirmed, in bytes: the locked plan is part of every request.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// Lifecycle state of the session's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PlanState {
    /// No draft and no locked plan.
    #[default]
    Idle,
    /// A first draft exists (in PLAN_DRAFT_FILE, never in the prompt).
    Drafting,
    /// The draft was written again.
    Revised,
    /// PlanConfirm locked the draft into the system prompt; no item started yet.
    Confirmed,
    /// The first ledger update after confirm started or finished an item.
    Executing,
    /// PlanClear removed the locked plan from the prompt.
    Cleared,
}

impl PlanState {
    /// Lowercase name used in files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanState::Idle => "idle",
            PlanState::Drafting => "drafting",
            PlanState::Revised => "revised",
            PlanState::Confirmed => "confirmed",
            PlanState::Executing => "executing",
            PlanState::Cleared => "cleared",
        }
    }
}

/// Serde for an `Option<PlanState>` written as its name, or `""` for None (a receipt of an op
/// that had no session or no readable plan).
pub mod state_or_empty {
    use super::PlanState;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Writes the state's name, or `""`.
    pub fn serialize<S: Serializer>(v: &Option<PlanState>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(p) => p.serialize(s),
            None => s.serialize_str(""),
        }
    }

    /// Reads a state's name; `""` is None.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PlanState>, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Ok(None);
        }
        PlanState::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&s)).map(Some)
    }
}

/// `plan.json`: the lifecycle state, the draft revision counter, and a copy of the locked text
/// (a `plan.md` that differs from it was edited outside PlanConfirm and is not used).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Current state.
    pub state: PlanState,
    /// Draft revisions seen in this session (each changed draft counts one).
    pub revision: u64,
    /// RFC 3339 time of the last PlanConfirm.
    #[serde(default)]
    pub confirmed_at: Option<String>,
    /// The locked plan text exactly as placed in the system prompt; None when no plan is locked.
    #[serde(default)]
    pub locked: Option<String>,
    /// True once the locked plan started executing (so cancelling a new draft returns there).
    #[serde(default)]
    pub executing: bool,
    /// FNV-1a 64 of the draft last seen (hex), to notice a draft written with bash.
    #[serde(default)]
    pub draft_fingerprint: Option<String>,
}

/// What caused a plan transition (the `trigger` of a `plan_state` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A draft was written (first or again).
    Draft,
    /// The draft was emptied: back to the state before drafting.
    DraftEmptied,
    /// PlanConfirm locked the draft.
    PlanConfirm,
    /// PlanCancel discarded the draft.
    PlanCancel,
    /// PlanClear removed the locked plan.
    PlanClear,
    /// The first ledger update after confirm.
    WorkStarted,
}

impl Trigger {
    /// The snake_case name used in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Draft => "draft",
            Trigger::DraftEmptied => "draft_emptied",
            Trigger::PlanConfirm => "plan_confirm",
            Trigger::PlanCancel => "plan_cancel",
            Trigger::PlanClear => "plan_clear",
            Trigger::WorkStarted => "work_started",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifecycle transition, the payload of the `plan_state` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: PlanState,
    /// State after.
    pub to: PlanState,
    /// What caused it.
    pub trigger: Trigger,
    /// The draft revision after the transition.
    pub revision: u64,
}

/// FNV-1a 64-bit hash as 16 hex digits: stable across builds and platforms (std's hasher is not
/// promised to be), used only to notice that the draft changed.
pub fn fingerprint(text: &str) -> String {
    format!("{:016x}", fnv(0xcbf2_9ce4_8422_2325, text.as_bytes()))
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The draft file as tern reads it: at most [`MAX_PLAN_BYTES`] + 1 bytes of it and its real
/// size, so a huge draft (a command may `truncate -s 3G "$PLAN_DRAFT_FILE"`) costs bounded
/// memory, and still counts as changed when its bytes or its size change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draft {
    /// The bytes read: the whole file when it is within the limit.
    pub bytes: Vec<u8>,
    /// The file's size in bytes.
    pub size: u64,
}

impl Draft {
    /// How many bytes of the draft file a reader reads.
    pub const READ_LIMIT: usize = MAX_PLAN_BYTES + 1;

    /// A draft of this text.
    pub fn from_text(text: &str) -> Draft {
        Draft {
            bytes: text.as_bytes().to_vec(),
            size: u64::try_from(text.len()).unwrap_or(u64::MAX),
        }
    }

    /// True when the file is over [`MAX_PLAN_BYTES`] (then only its start was read).
    pub fn oversized(&self) -> bool {
        self.size > MAX_PLAN_BYTES as u64 || self.bytes.len() > MAX_PLAN_BYTES
    }

    /// The draft's text; None when it is over the limit or not UTF-8.
    pub fn text(&self) -> Option<&str> {
        if self.oversized() {
            return None;
        }
        std::str::from_utf8(&self.bytes).ok()
    }

    /// True for an empty or all-whitespace draft (no draft at all). An oversized or non-UTF-8
    /// draft is never blank.
    pub fn is_blank(&self) -> bool {
        self.text().is_some_and(|t| t.trim().is_empty())
    }

    /// Why the draft cannot be shown or confirmed: over the limit, or not UTF-8 text.
    pub fn problem(&self) -> Option<String> {
        if self.oversized() {
            return Some(format!(
                "the draft is {} bytes, over the {MAX_PLAN_BYTES}-byte limit: shorten it",
                self.size
            ));
        }
        if std::str::from_utf8(&self.bytes).is_err() {
            return Some(format!(
                "the draft ({} bytes) is not UTF-8 text: rewrite it as text",
                self.size
            ));
        }
        None
    }

    /// The fingerprint [`PlanFile`] keeps to notice a change; None for a blank draft. A text
    /// draft's is [`fingerprint`] of its text; an oversized one's covers the bytes read and the
    /// size.
    pub fn fingerprint(&self) -> Option<String> {
        if self.is_blank() {
            return None;
        }
        let h = fnv(0xcbf2_9ce4_8422_2325, &self.bytes);
        Some(if self.oversized() {
            format!("{:016x}", fnv(h, &self.size.to_le_bytes()))
        } else {
            format!("{h:016x}")
        })
    }
}

impl PlanFile {
    /// True while an unconfirmed draft is pending (drafting or revised).
    pub fn draft_pending(&self) -> bool {
        matches!(self.state, PlanState::Drafting | PlanState::Revised)
    }

    /// The state to return to when no draft is pending.
    fn resting_state(&self) -> PlanState {
        match (&self.locked, self.executing) {
            (Some(_), true) => PlanState::Executing,
            (Some(_), false) => PlanState::Confirmed,
            (None, _) if self.confirmed_at.is_some() => PlanState::Cleared,
            (None, _) => PlanState::Idle,
        }
    }

    fn go(&mut self, to: PlanState, trigger: Trigger) -> Transition {
        let from = self.state;
        self.state = to;
        Transition {
            from,
            to,
            trigger,
            revision: self.revision,
        }
    }

    /// The plan state a new session inherits (`tern relay --start`): the locked plan and its
    /// progress, without the draft (a pending draft stays with the old session).
    pub fn carried(&self) -> PlanFile {
        PlanFile {
            state: self.resting_state(),
            revision: self.revision,
            confirmed_at: self.confirmed_at.clone(),
            locked: self.locked.clone(),
            executing: self.executing,
            draft_fingerprint: None,
        }
    }

    /// Observes the draft's current content (after a write by a tool, bash, a person or `tern plan
    /// draft`). Returns the transition when it changed: a non-empty new draft → drafting (first
    /// write) or revised (later writes), revision counted; an emptied draft → back to the resting
    /// state. None when unchanged.
    pub fn observe_draft(&mut self, draft: &str) -> Option<Transition> {
        self.observe(&Draft::from_text(draft))
    }

    /// [`PlanFile::observe_draft`] for a draft as read from its file (perhaps oversized or not
    /// UTF-8: still a draft, which changes when its bytes do).
    pub fn observe(&mut self, draft: &Draft) -> Option<Transition> {
        let fp = draft.fingerprint();
        if fp == self.draft_fingerprint {
            return None;
        }
        self.draft_fingerprint = fp.clone();
        if fp.is_none() {
            let rest = self.resting_state();
            return (self.state != rest).then(|| self.go(rest, Trigger::DraftEmptied));
        }
        self.revision = self.revision.saturating_add(1);
        let to = if self.draft_pending() {
            PlanState::Revised
        } else {
            PlanState::Drafting
        };
        Some(self.go(to, Trigger::Draft))
    }

    /// Checks that PlanConfirm may run with this draft. Errors (nothing changes): an empty draft,
    /// or one over [`MAX_PLAN_BYTES`] (it would go into every request's system prompt).
    /// Returns the draft's text.
    pub fn check_confirm<'a>(&self, draft: &'a Draft) -> Result<&'a str, DomainError> {
        if draft.oversized() {
            return Err(DomainError::Invalid(format!(
                "the draft is {} bytes; a locked plan may be at most {MAX_PLAN_BYTES} bytes (it goes into every request). Shorten it first.",
                draft.size
            )));
        }
        let Some(text) = draft.text() else {
            return Err(DomainError::Invalid(
                "the draft is not UTF-8 text; a locked plan goes into every request as text. Rewrite it as text first."
                    .into(),
            ));
        };
        if text.trim().is_empty() {
            return Err(DomainError::Refused(
                "no plan draft to confirm. Write the plan to $PLAN_DRAFT_FILE \
                        (or call plan_draft) first, then call plan_confirm."
                    .into(),
            ));
        }
        Ok(text)
    }

    /// Records a successful PlanConfirm of `draft` (after the compaction succeeded).
    pub fn confirm(&mut self, draft: &str, now: &str) -> Transition {
        self.locked = Some(draft.to_string());
        self.confirmed_at = Some(now.to_string());
        self.executing = false;
        self.draft_fingerprint = None;
        self.go(PlanState::Confirmed, Trigger::PlanConfirm)
    }

    /// Cancels the pending draft (the caller archives and empties it). Errors: no draft.
    pub fn cancel(&mut self, draft: &Draft) -> Result<Transition, DomainError> {
        if draft.is_blank() {
            return Err(DomainError::Refused("no plan draft to cancel.".into()));
        }
        self.draft_fingerprint = None;
        let rest = self.resting_state();
        Ok(self.go(rest, Trigger::PlanCancel))
    }

    /// Checks that PlanClear may run. Errors (nothing changes): no locked plan.
    pub fn check_clear(&self) -> Result<(), DomainError> {
        if self.locked.is_none() {
            return Err(DomainError::Refused(
                "no locked plan to clear. Only a plan confirmed with plan_confirm \
                        can be cleared."
                    .into(),
            ));
        }
        Ok(())
    }

    /// Records a successful PlanClear (after the compaction succeeded).
    pub fn clear(&mut self) -> Transition {
        self.locked = None;
        self.executing = false;
        let to = if self.draft_pending() {
            self.state
        } else {
            PlanState::Cleared
        };
        self.go(to, Trigger::PlanClear)
    }

    /// Notes that a ledger update started or finished an item: confirmed → executing.
    pub fn work_started(&mut self) -> Option<Transition> {
        if self.locked.is_none() || self.executing {
            return None;
        }
        self.executing = true;
        (self.state == PlanState::Confirmed)
            .then(|| self.go(PlanState::Executing, Trigger::WorkStarted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_lifecycle() {
        let mut p = PlanFile::default();
        let t = p.observe_draft("step 1").unwrap();
        assert_eq!(
            (t.from, t.to, t.revision),
            (PlanState::Idle, PlanState::Drafting, 1)
        );
        assert!(p.observe_draft("step 1").is_none());
        let t = p.observe_draft("step 1\nstep 2").unwrap();
        assert_eq!((t.to, t.revision), (PlanState::Revised, 2));
        assert!(p.check_confirm(&Draft::from_text("step 1\nstep 2")).is_ok());
        let t = p.confirm("step 1\nstep 2", "now");
        assert_eq!(t.to, PlanState::Confirmed);
        assert!(p.observe_draft("").is_none());
        assert_eq!(p.work_started().unwrap().to, PlanState::Executing);
        assert!(p.work_started().is_none());
        assert_eq!(p.clear().to, PlanState::Cleared);
        assert!(p.check_clear().is_err());
    }

    #[test]
    fn a_relayed_plan_leaves_its_draft_behind() {
        let mut p = PlanFile::default();
        p.observe_draft("a");
        p.confirm("a", "now");
        p.observe_draft("b");
        assert_eq!(p.state, PlanState::Drafting);
        let c = p.carried();
        assert_eq!(c.state, PlanState::Confirmed);
        assert!(!c.draft_pending());
        assert_eq!(c.locked.as_deref(), Some("a"));
    }

    #[test]
    fn refused_transitions_change_nothing() {
        let mut p = PlanFile::default();
        let before = p.clone();
        assert!(p.check_confirm(&Draft::from_text("  \n")).is_err());
        assert!(p.cancel(&Draft::default()).is_err());
        assert!(p.check_clear().is_err());
        assert_eq!(p, before);
    }

    #[test]
    fn an_oversized_draft_changes_with_its_size_and_is_refused_with_it() {
        let start = vec![0u8; Draft::READ_LIMIT];
        let big = |size: u64| Draft {
            bytes: start.clone(),
            size,
        };
        let mut p = PlanFile::default();
        assert_eq!(p.observe(&big(3 << 30)).unwrap().to, PlanState::Drafting);
        assert!(p.observe(&big(3 << 30)).is_none());
        assert_eq!(
            p.observe(&big((3 << 30) + 1)).unwrap().to,
            PlanState::Revised
        );
        let e = p.check_confirm(&big(3 << 30)).unwrap_err().to_string();
        assert!(e.contains(&format!("{} bytes", 3u64 << 30)), "{e}");
        assert!(!big(3 << 30).is_blank());
        // A text draft keeps its old fingerprint (plan.json files already written stay valid).
        let d = Draft::from_text("1. a\n");
        assert_eq!(d.fingerprint(), Some(fingerprint("1. a\n")));
        let odd = Draft {
            bytes: b"\xff".to_vec(),
            size: 1,
        };
        assert!(odd.problem().unwrap().contains("not UTF-8"));
        assert!(p.check_confirm(&odd).is_err());
    }

    #[test]
    fn cancel_returns_to_locked_plan() {
        let mut p = PlanFile::default();
        p.observe_draft("a");
        p.confirm("a", "now");
        p.work_started();
        p.observe_draft("b");
        assert_eq!(p.state, PlanState::Drafting);
        assert!(p.draft_pending());
        assert_eq!(
            p.cancel(&Draft::from_text("b")).unwrap().to,
            PlanState::Executing
        );
    }
}
