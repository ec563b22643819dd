//! The session store under concurrency: many writers on one session lose no update and leave no
//! stray file; a symlink planted in the session folder is never written through.

use std::collections::HashSet;
use std::thread;

use tern::event::{Envelope, Event};
use tern::message::Message;
use tern::store::{StateDir, files};

fn state() -> (tempfile::TempDir, StateDir) {
    let d = tempfile::tempdir().unwrap();
    let st = StateDir {
        root: d.path().join(".tern"),
        workspace: d.path().to_path_buf(),
    };
    (d, st)
}

#[test]
fn concurrent_writers_lose_nothing_and_leave_no_stray_file() {
    let (_d, st) = state();
    let s = st
        .write_session(
            tern::store::Place::TopLevel,
            &tern::store::NewSession::default(),
        )
        .unwrap();
    let (id, dir) = (s.id.clone(), s.dir.clone());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (id, dir) = (id.clone(), dir.clone());
            thread::spawn(move || {
                // Each thread has its own handle, as separate processes would.
                let s = tern::store::Session::at(&id, dir);
                for i in 0..25 {
                    let mut e = Envelope::new(&id, None, Event::warning(format!("{t}-{i}")));
                    s.append_event(&mut e).unwrap();
                    s.append_messages(&[Message::user(format!("{t}-{i}"))])
                        .unwrap();
                    s.update_meta(|m| m.turns += 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = st.open_session(&id).unwrap();
    assert_eq!(
        s.read_meta().unwrap().turns,
        200,
        "no read-modify-write lost"
    );
    let events = s.read_events().unwrap();
    assert_eq!(events.items.len(), 200);
    assert!(events.skipped.is_empty());
    let seqs: HashSet<u64> = events
        .items
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 200, "every event has its own seq");
    assert_eq!(*seqs.iter().max().unwrap(), 200);
    let conv = s.read_conversation().unwrap();
    assert_eq!(conv.items.len(), 200);
    assert!(conv.skipped.is_empty());
    let stray: Vec<String> = std::fs::read_dir(&s.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "stray temp files: {stray:?}");
}

#[test]
fn planted_symlinks_are_never_written_through() {
    let (d, st) = state();
    let s = st
        .write_session(
            tern::store::Place::TopLevel,
            &tern::store::NewSession::default(),
        )
        .unwrap();
    let victim = d.path().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    for name in [files::CONVERSATION, files::EVENTS, files::LOCK] {
        let p = s.path(name);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(&victim, &p).unwrap();
    }
    assert!(s.append_messages(&[Message::user("x")]).is_err());
    assert!(
        s.append_event(&mut Envelope::new(&s.id, None, Event::warning("x")))
            .is_err()
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");

    // A session folder that is a symlink is refused.
    let elsewhere = tempfile::tempdir().unwrap();
    let link = st.root.join("sessions").join("20990101-000000-abcd");
    std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
    std::fs::write(elsewhere.path().join(files::META), "{}").unwrap();
    assert!(st.open_session("20990101-000000-abcd").is_err());
}

#[test]
fn session_ids_are_never_paths() {
    let (_d, st) = state();
    st.write_session(
        tern::store::Place::TopLevel,
        &tern::store::NewSession::default(),
    )
    .unwrap();
    for bad in ["../x", "a/b", "", ".hidden", "x\0y"] {
        assert!(st.open_session(bad).is_err(), "{bad:?} accepted");
    }
}
