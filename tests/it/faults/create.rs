//! Session creation is one commit point (issue 18, item 1): `tern exec` killed at every fault
//! point of creating its session, up to and including the rename that commits the folder,
//! leaves either a complete session or a half-built `.tmp-*` folder that no reader lists; the
//! next start sweeps it, and `--continue` then says what to do in words naming flags `tern exec`
//! takes. The same for a sub-agent's folder lives in the sweep's `agents` scenario.

use super::check::{half_built, temps};
use super::run::{HANG, Site, points, run};
use crate::support::FakeServer;

/// The points of a first `tern exec` up to the commit of its session folder (the rename of
/// `sessions/.tmp-*` to `sessions/<id>`), 1-based counts.
fn creation_points(before: bool) -> usize {
    let site = Site::new();
    let fake = FakeServer::strict(vec![]);
    if before {
        let r = run(
            site.tern(&fake.openai_base(), &["exec", "--json", "first"]),
            None,
            HANG,
        );
        assert_eq!(r.code, Some(0), "{}", r.summary());
    }
    let log = site.log("dry");
    let mut cmd = site.tern(&fake.openai_base(), &["exec", "--json", "hello"]);
    cmd.env("TERN_FAULT_LOG", &log);
    let r = run(cmd, None, HANG);
    assert_eq!(r.code, Some(0), "{}", r.summary());
    let pts = points(&log, &site.root());
    let commit = pts
        .iter()
        .position(|p| p.kind == "renamed" && p.path == "sessions/<id>")
        .expect("the session folder is committed by a rename (a `renamed sessions/<id>` point)");
    commit + 1
}

/// Kills a new `tern exec` at each point of its session's creation, with and without an older
/// session, and checks what the next starts see and leave.
#[test]
fn a_killed_creation_leaves_nothing_behind() {
    for before in [false, true] {
        let n = creation_points(before);
        for k in 1..=n {
            let site = Site::new();
            let fake = FakeServer::strict(vec![]);
            let base = fake.openai_base();
            let older = before.then(|| {
                let r = run(site.tern(&base, &["exec", "--json", "first"]), None, HANG);
                assert_eq!(r.code, Some(0), "{}", r.summary());
                site.current().expect("the older session is current")
            });
            let mut cmd = site.tern(&base, &["exec", "--json", "hello"]);
            cmd.env("TERN_FAULT_AT", k.to_string());
            let r = run(cmd, None, HANG);
            assert!(r.killed(), "point {k}: {}", r.summary());
            // Right after the kill: nothing a reader lists is half made.
            let sessions = site.state().join("sessions");
            for e in std::fs::read_dir(&sessions).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(
                    name.starts_with(".tmp-") || e.path().join("meta.json").is_file(),
                    "point {k}: sessions/{name} is listed as a session but has no meta.json"
                );
            }
            let listed = run(site.tern(&base, &["sessions"]), None, HANG);
            assert_eq!(listed.code, Some(0), "point {k}: {}", listed.summary());
            assert!(!listed.stdout.contains(".tmp-"), "{}", listed.stdout);

            let cont = run(
                site.tern(&base, &["exec", "--json", "--continue", "go on"]),
                None,
                HANG,
            );
            match &older {
                // The older session is still current: it goes on, and the start sweeps.
                Some(id) => {
                    assert_eq!(cont.code, Some(0), "point {k}: {}", cont.summary());
                    assert_eq!(site.current().as_deref(), Some(id.as_str()));
                }
                // Nothing current: say so and how to go on, naming only flags exec takes.
                None => {
                    assert_eq!(cont.code, Some(2), "point {k}: {}", cont.summary());
                    let said = format!("{}{}", cont.stdout, cont.stderr);
                    // Killed before the rename: no session. After it, before `current` was
                    // written: a whole session that is not current; the hint names exec's flag.
                    assert!(
                        (said.contains("no session in") && said.contains("tern exec PROMPT"))
                            || (said.contains("no current session")
                                && said.contains("tern exec --resume ID")),
                        "point {k}: {said}"
                    );
                    // A start that refuses sweeps too (issue 30, item 2).
                    let left: Vec<_> = half_built(&sessions)
                        .into_iter()
                        .chain(temps(&site.state()))
                        .collect();
                    assert!(
                        left.is_empty(),
                        "point {k}: the refusing start left {left:?}"
                    );
                    let fresh = run(site.tern(&base, &["exec", "--json", "again"]), None, HANG);
                    assert_eq!(fresh.code, Some(0), "point {k}: {}", fresh.summary());
                }
            }
            let left = half_built(&sessions);
            assert!(
                left.is_empty(),
                "point {k} (older session: {before}): left {left:?}"
            );
        }
    }
}

/// `--continue` with sessions but no `current`: the hint names flags the command takes.
#[test]
fn continue_without_current_names_flags_exec_takes() {
    let site = Site::new();
    let fake = FakeServer::strict(vec![]);
    let base = fake.openai_base();
    let r = run(site.tern(&base, &["exec", "--json", "first"]), None, HANG);
    assert_eq!(r.code, Some(0), "{}", r.summary());
    std::fs::remove_file(site.state().join("current")).expect("remove current");
    let cont = run(
        site.tern(&base, &["exec", "--continue", "go on"]),
        None,
        HANG,
    );
    assert_eq!(cont.code, Some(2), "{}", cont.summary());
    assert!(
        cont.stderr.contains("no current session"),
        "{}",
        cont.stderr
    );
    assert!(
        cont.stderr.contains("tern exec --resume ID"),
        "the hint names exec's own flag: {}",
        cont.stderr
    );
    let help = run(site.tern(&base, &["exec", "--help"]), None, HANG);
    assert!(help.stdout.contains("--resume"), "{}", help.stdout);
}
