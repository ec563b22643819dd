//! The state-folder guard (DESIGN §10): where no jail makes the state folder read-only
//! (`danger-full-access`, `--no-jail`) and between commands (a job an earlier command left
//! running), tern notices what changed in the files it reads back as truth, puts back what it
//! can, and says so in a typed [`GuardReport`] whose one `Display` is the model's text.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::message::Message;
use crate::sandbox::{Change, Keep, Listing, RestoreOutcome, Snapshot};
use crate::store::fsutil::{FileStamp, stamp};
use crate::store::lease::Lease;
use crate::store::{Session, files};

/// The session as the runtime holds it, for the guard: what it protects and what it rewrites.
pub struct Site<'a> {
    /// This runtime's session.
    pub session: &'a Session,
    /// The runtime's lease on it (re-taken when a command removed the lease file).
    pub lease: &'a mut Option<Lease>,
    /// The stored history: `conversation.jsonl` is rewritten from it.
    pub history: &'a [Message],
    /// Whether this runtime keeps `.tern/current` pointing at its session.
    pub keeps_current: bool,
    /// The hooks files and trust record (the person's code: never the model's to change).
    pub hook_files: &'a [PathBuf],
}

/// What a check found and did. Empty parts are left out of the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardReport {
    /// This session's protected files that changed (put back where tern keeps a copy).
    pub changed: Vec<Change>,
    /// `events.jsonl` is among `changed`: it has no copy and cannot be put back.
    pub event_log: bool,
    /// What tern recreated around the session: `lease`, `.gitignore`, `current`, `NAME (a link)`.
    pub recreated: Vec<String>,
    /// Entries removed from the folders tern only adds to, as `folder/name`.
    pub removed: Vec<String>,
    /// Other sessions whose files changed, as `id (files)` (detected, never put back).
    pub others: Vec<String>,
}

impl GuardReport {
    /// Nothing to say.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.recreated.is_empty()
            && self.removed.is_empty()
            && self.others.is_empty()
    }

    /// tern rewrote files of this session (its memory of them must be taken again).
    pub fn rewrote_own(&self) -> bool {
        !self.changed.is_empty() || !self.recreated.is_empty()
    }
}

impl fmt::Display for GuardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if !self.changed.is_empty() {
            let list: Vec<String> = self
                .changed
                .iter()
                .map(|c| {
                    let name = c.path.file_name().map_or_else(
                        || c.path.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    );
                    format!("{name} ({})", c.kind.as_str())
                })
                .collect();
            let done = match (self.event_log, self.changed.len()) {
                (false, _) => "and tern put them back",
                (true, 1) => "but tern cannot put it back",
                (true, _) => "and tern put back the others",
            };
            let mut s = format!(
                "this command changed tern's own files in the session folder: {}. Those files are tern's: the change is refused {done}. Write the plan only to $PLAN_DRAFT_FILE, and track progress with the work tools.",
                list.join(", ")
            );
            if self.event_log {
                s.push_str(
                    " The event log (events.jsonl) cannot be put back: its earlier events are lost.",
                );
            }
            parts.push(s);
        } else if !self.recreated.is_empty() {
            parts.push("this command changed tern's own files in its state folder.".into());
        }
        if !self.recreated.is_empty() {
            parts.push(format!(
                "tern also recreated: {}.",
                self.recreated.join(", ")
            ));
        }
        if !self.removed.is_empty() {
            let mut named = self
                .removed
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if self.removed.len() > 10 {
                named.push_str(&format!(" and {} more", self.removed.len() - 10));
            }
            parts.push(format!(
                "this command removed (or moved away) what tern keeps in its state folder and cannot put back: {named}. They are lost unless moved back. Never remove or move anything under .tern/."
            ));
        }
        if !self.others.is_empty() {
            parts.push(format!(
                "this command changed other sessions' files, which are tern's: {}. tern keeps no copy of them, so they are not put back: review those sessions before resuming them.",
                self.others.join("; ")
            ));
        }
        f.write_str(&parts.join(" "))
    }
}

/// The guard's memory: the protected files as tern last left them.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    /// This session's files (None until the first refresh: no guard yet).
    own: Option<Snapshot>,
    /// The folders tern only adds to (this session's `archive/` and `agents/`, the state
    /// folder's `sessions/`), watched for entries a command removed.
    listings: Vec<Listing>,
    /// Other sessions' files: a change is detected and named, never undone (another pane may be
    /// running that session).
    others: Option<Snapshot>,
    /// The state folder's `current` at the last look.
    current: Option<FileStamp>,
}

impl Guard {
    /// Whether the guard has taken its baseline.
    pub(crate) fn is_on(&self) -> bool {
        self.own.is_some()
    }

    /// Accepts `path` as tern just wrote it (see [`Snapshot::accept`]).
    pub(crate) fn accept(&mut self, path: &Path) {
        if let Some(g) = &mut self.own {
            g.accept(path);
        }
    }

    /// Accepts the state files as tern itself just left them (after each of its own writes);
    /// the first call takes the baseline.
    pub(crate) fn refresh(&mut self, site: &Site<'_>) {
        self.others = Some(Snapshot::take_kept(
            other_session_files(site.session)
                .into_iter()
                .map(|p| (p, Keep::Detect)),
        ));
        match &mut self.own {
            Some(g) => g.refresh(),
            None => {
                self.own = Some(Snapshot::take_kept(protected(site)));
                let skip = crate::store::fsutil::TEMP_PREFIX;
                let mut dirs = vec![
                    site.session.path(files::ARCHIVE),
                    site.session.path(files::AGENTS),
                ];
                dirs.extend(site.session.state_root().map(|r| r.join("sessions")));
                self.listings = dirs.into_iter().map(|d| Listing::take(d, skip)).collect();
            }
        }
    }

    /// Undoes any change to the state files since tern last wrote them (a command's, or a
    /// background process's), rewriting the conversation from `site.history`, and says what it
    /// found. None when the guard is off or nothing changed.
    pub(crate) fn check(&mut self, site: &mut Site<'_>, workspace: &Path) -> Option<GuardReport> {
        self.own.as_ref()?;
        let others = self.others_changed();
        let mut report = self.check_own(site, workspace).unwrap_or_default();
        if !others.is_empty() {
            self.others = Some(Snapshot::take_kept(
                other_session_files(site.session)
                    .into_iter()
                    .map(|p| (p, Keep::Detect)),
            ));
            report.others = others;
        }
        (!report.is_empty()).then_some(report)
    }

    /// [`Guard::check`] for this session's own files.
    fn check_own(&mut self, site: &mut Site<'_>, workspace: &Path) -> Option<GuardReport> {
        // First, so the fingerprints below are taken along the real path again.
        let unlinked = unlink_structure(site.session);
        let changes = self.own.as_ref()?.changes();
        // The checkpoint store's files appearing is the store being made, by this tern or by a
        // session beside it (under the store's lock, all at once): the new baseline, never a
        // command's change to put back (a put-back would delete another tern's new store).
        let store: Vec<PathBuf> = site
            .session
            .state_root()
            .map(|r| crate::checkpoint::guarded(&r))
            .unwrap_or_default();
        let (made, changes): (Vec<Change>, Vec<Change>) = changes.into_iter().partition(|c| {
            c.kind == crate::sandbox::ChangeKind::Created && store.contains(&c.path)
        });
        if let Some(g) = self.own.as_mut() {
            for c in &made {
                g.accept(&c.path);
            }
        }
        let mut recreated = self.repair_structure(site, workspace);
        recreated.extend(unlinked);
        if changes.is_empty() && recreated.is_empty() {
            let removed = self.vanished();
            return Some(GuardReport {
                removed,
                ..GuardReport::default()
            });
        }
        let outcomes = match self.own.as_mut() {
            Some(g) => g.restore(&changes),
            None => Vec::new(),
        };
        let conversation = site.session.path(files::CONVERSATION);
        if outcomes
            .iter()
            .any(|(p, o)| *p == conversation && *o != RestoreOutcome::Restored)
            && let Ok(lock) = site.session.lock()
        {
            let _ = site
                .session
                .replace_conversation_locked(&lock, site.history);
        }
        self.refresh(site);
        let events = site.session.path(files::EVENTS);
        let event_log = changes.iter().any(|c| c.path == events);
        // After the repair, so this session's own folder is back in `sessions/`.
        let removed = self.vanished();
        Some(GuardReport {
            changed: changes,
            event_log,
            recreated,
            removed,
            others: Vec::new(),
        })
    }

    /// Other sessions whose files changed since the last look, as `id (files)`, leaving out
    /// sessions another live process holds (their own turn writes them) and sessions whose
    /// event log grew with them: their own tern wrote them (a job beside this one that has
    /// ended since), as it records every write in `events.jsonl`.
    fn others_changed(&mut self) -> Vec<String> {
        let Some(snap) = &self.others else {
            return Vec::new();
        };
        let mut by_session: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in snap.changes() {
            let (Some(dir), Some(name)) = (c.path.parent(), c.path.file_name()) else {
                continue;
            };
            let id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if crate::store::held_elsewhere(&Session::at(&id, dir.to_path_buf())).is_some() {
                continue;
            }
            by_session
                .entry(id)
                .or_default()
                .push(name.to_string_lossy().into_owned());
        }
        by_session
            .into_iter()
            .filter(|(_, names)| !names.iter().any(|n| n == files::EVENTS))
            .map(|(id, f)| format!("{id} ({})", f.join(", ")))
            .collect()
    }

    /// What a command removed from the folders tern only adds to, as `folder/name` (sessions by
    /// id), since the last look.
    fn vanished(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for l in &mut self.listings {
            let folder = l
                .dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            gone.extend(l.vanished().into_iter().map(|n| format!("{folder}/{n}")));
        }
        gone
    }

    /// Puts back what a command removed around the session files (`rm -rf .tern`): the lease
    /// (re-taken: a removed lease file would let another process take a second one), the state
    /// folder's `.gitignore` (else git would see the conversation), `sessions/`, and `current`
    /// when this runtime keeps it. Returns what it recreated. Costs a few `lstat`s per call.
    fn repair_structure(&mut self, site: &mut Site<'_>, workspace: &Path) -> Vec<String> {
        let mut done = Vec::new();
        if site.lease.as_ref().is_some_and(|l| !l.intact()) {
            *site.lease = None;
            if let Ok(Ok(l)) = Lease::try_take(&site.session.dir) {
                *site.lease = Some(l);
                done.push("lease".to_string());
            }
        }
        let Some(root) = site.session.state_root() else {
            return done;
        };
        let gitignore = root.join(".gitignore");
        if std::fs::symlink_metadata(&gitignore).is_err() {
            let state = crate::store::StateDir {
                root: root.clone(),
                workspace: workspace.to_path_buf(),
            };
            if state.init().is_ok() {
                done.push(".gitignore".to_string());
            }
        }
        if site.keeps_current {
            let current = root.join("current");
            let now = stamp(&current);
            // Another pane may point `current` at its own session: fine. Garbage, or a session
            // that does not exist, is a command's doing: pointed back at this one. Read only
            // when it changed since the last look.
            let broken = now.is_none()
                || (now != self.current
                    && !crate::store::fsutil::read_text(&current).is_ok_and(|id| {
                        let id = id.unwrap_or_default();
                        let id = id.trim();
                        !id.is_empty()
                            && !id.contains(['/', '\0'])
                            && id != "."
                            && id != ".."
                            && std::fs::symlink_metadata(root.join("sessions").join(id))
                                .is_ok_and(|m| m.is_dir())
                    }));
            if broken && site.session.mark_current().is_ok() {
                done.push("current".to_string());
            }
            self.current = stamp(&current);
        }
        done
    }
}

/// The state files a command may not change: everything in the session folder that tern reads
/// back as truth, but the draft (DESIGN.md §10). The conversation is only detected (tern
/// rewrites it from memory) and the event log only watched for removal.
fn protected(site: &Site<'_>) -> Vec<(PathBuf, Keep)> {
    [
        (files::PLAN, Keep::Copy),
        (files::PLAN_STATE, Keep::Copy),
        (files::LEDGER, Keep::Copy),
        (files::CONVERSATION, Keep::Detect),
        (files::SYSTEM, Keep::Copy),
        (files::META, Keep::Copy),
        (files::EVENTS, Keep::Append),
        (files::GOAL, Keep::Copy),
    ]
    .iter()
    .map(|(n, k)| (site.session.path(n), *k))
    // The hooks files and the trust record run as the person's code: never the model's.
    .chain(site.hook_files.iter().map(|p| (p.clone(), Keep::Copy)))
    // The checkpoint store's refs and settings (the objects only the jail protects).
    .chain(
        site.session
            .state_root()
            .map(|r| crate::checkpoint::guarded(&r))
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p, Keep::Copy)),
    )
    .collect()
}

/// The files of the state folder's other sessions that a resume trusts (history, system
/// prompt, To-do, plan, metadata), for the fallback guard.
fn other_session_files(session: &Session) -> Vec<PathBuf> {
    let Some(root) = session.state_root() else {
        return Vec::new();
    };
    let Ok(rd) = std::fs::read_dir(root.join("sessions")) else {
        return Vec::new();
    };
    let mine: Vec<PathBuf> = session.dir.ancestors().map(Path::to_path_buf).collect();
    let mut out = Vec::new();
    for e in rd.flatten() {
        let dir = e.path();
        // A session another tern is making (`.tmp-*`, renamed into place when whole) is its.
        let staged = e
            .file_name()
            .to_string_lossy()
            .starts_with(crate::store::fsutil::TEMP_PREFIX);
        if staged || mine.contains(&dir) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for f in [
            files::CONVERSATION,
            files::SYSTEM,
            files::LEDGER,
            files::PLAN,
            files::PLAN_STATE,
            files::META,
            files::EVENTS,
        ] {
            out.push(dir.join(f));
        }
    }
    out
}

/// Undoes a folder on the way from the state folder down to this session (`.tern`, `sessions`,
/// the session's own, a parent's `agents`) replaced by a symbolic link (`mv .tern/sessions x &&
/// ln -s x .tern/sessions`): tern never writes through links in its state folder, and a link out
/// of the workspace would let the command have tern write where the sandbox lets no command
/// write. The link is removed and the folder it named renamed back into place (or, across file
/// systems, an empty folder made, which the guard then refills). Returns what it put back, as
/// "NAME (a link)". One `lstat` per level.
fn unlink_structure(session: &Session) -> Vec<String> {
    let Some(root) = session.state_root() else {
        return Vec::new();
    };
    let mut chain: Vec<PathBuf> = session
        .dir
        .ancestors()
        .take_while(|a| a.starts_with(&root))
        .map(Path::to_path_buf)
        .collect();
    chain.reverse();
    let mut done = Vec::new();
    for dir in chain {
        let is_link = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            continue;
        }
        let target = std::fs::read_link(&dir).ok().map(|t| match dir.parent() {
            Some(p) if t.is_relative() => p.join(t),
            _ => t,
        });
        if std::fs::remove_file(&dir).is_err() {
            continue;
        }
        let back = target
            .filter(|t| std::fs::symlink_metadata(t).is_ok_and(|m| m.is_dir()))
            .is_some_and(|t| std::fs::rename(&t, &dir).is_ok());
        if !back {
            let _ = crate::store::fsutil::ensure_dir(&dir);
        }
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        done.push(format!("{name} (a link)"));
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::ChangeKind;

    fn change(name: &str, kind: ChangeKind) -> Change {
        Change {
            path: PathBuf::from("/s").join(name),
            kind,
            restorable: true,
        }
    }

    #[test]
    fn a_changed_file_is_named_and_said_put_back() {
        let r = GuardReport {
            changed: vec![change("plan.json", ChangeKind::Modified)],
            ..GuardReport::default()
        };
        assert_eq!(
            r.to_string(),
            "this command changed tern's own files in the session folder: plan.json (modified). Those files are tern's: the change is refused and tern put them back. Write the plan only to $PLAN_DRAFT_FILE, and track progress with the work tools."
        );
        assert!(r.rewrote_own());
    }

    #[test]
    fn the_event_log_alone_is_not_said_put_back() {
        let only = GuardReport {
            changed: vec![change("events.jsonl", ChangeKind::Removed)],
            event_log: true,
            ..GuardReport::default()
        };
        let s = only.to_string();
        assert!(
            s.contains("the change is refused but tern cannot put it back."),
            "{s}"
        );
        assert!(s.ends_with("its earlier events are lost."), "{s}");
        let two = GuardReport {
            changed: vec![
                change("events.jsonl", ChangeKind::Removed),
                change("ledger.json", ChangeKind::Modified),
            ],
            event_log: true,
            ..GuardReport::default()
        };
        assert!(
            two.to_string()
                .contains("the change is refused and tern put back the others.")
        );
    }

    #[test]
    fn recreated_removed_and_others_follow_in_order() {
        let r = GuardReport {
            recreated: vec!["lease".into(), ".gitignore".into()],
            removed: (0..12).map(|i| format!("archive/a{i}")).collect(),
            others: vec!["s2 (meta.json)".into()],
            ..GuardReport::default()
        };
        let s = r.to_string();
        assert!(s.starts_with("this command changed tern's own files in its state folder. tern also recreated: lease, .gitignore. this command removed"), "{s}");
        assert!(s.contains("archive/a9 and 2 more."), "{s}");
        assert!(
            s.ends_with("review those sessions before resuming them."),
            "{s}"
        );
        let only_others = GuardReport {
            others: vec!["s2 (meta.json)".into()],
            ..GuardReport::default()
        };
        assert!(
            only_others
                .to_string()
                .starts_with("this command changed other sessions' files")
        );
        assert!(!only_others.rewrote_own());
        assert!(GuardReport::default().is_empty());
    }
}
