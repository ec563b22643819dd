//! A full disk: the state folder (`--state-dir`) on a 256 KiB tmpfs that a filler file fills,
//! leaving 0, 1, 2, 4 or 8 pages free so the failing write lands at different points. A turn
//! there (bash calls, a ledger update, a cut output that spills) must end in a clear error (or
//! complete, when it fitted), never a panic or a hang; every file that exists must parse; and
//! once the filler is gone, `tern exec --continue` must complete against a strict provider.
//! Mounting needs root (CAP_SYS_ADMIN): without it the test prints SKIPPED and passes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::check::{self, Acked};
use super::run::{HANG, Site, run};
use crate::support::FakeServer;
use crate::support::Wire;
use crate::support::script::{bash, text, todo, work};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fills the filesystem of `dir` with `dir/filler`, then frees `free_pages` pages of it.
fn fill(dir: &Path, free_pages: u64) -> PathBuf {
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).expect("create filler");
    let page = [0u8; 4096];
    while f.write_all(&page).is_ok() {}
    let _ = f.flush();
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    f.set_len(len.saturating_sub(free_pages * 4096))
        .expect("free some pages");
    p
}

#[test]
fn a_full_disk_is_a_clear_error_and_continue_works_after() {
    let fs = match Tmpfs::mount("256k") {
        Ok(fs) => fs,
        Err(e) => {
            crate::support::skipped(
                "faults::enospc",
                &format!("cannot mount a tmpfs here ({e})"),
                false,
            );
            return;
        }
    };
    let mut problems = Vec::new();
    let mut outcomes = Vec::new();
    for free in [0u64, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48, 56, 64] {
        let site = Site::new();
        let state = fs.path().join(format!("state-{free}"));
        let state_arg = state.display().to_string();
        let w = Wire::OpenAi;
        // A session made while there is space.
        let first = FakeServer::strict(vec![text(w, "Hello.")]);
        let r = run(
            site.tern(
                &first.openai_base(),
                &["exec", "--json", "--state-dir", &state_arg, "Say hello."],
            ),
            None,
            HANG,
        );
        assert_eq!(r.code, Some(0), "setup: {}", r.summary());
        let filler = fill(fs.path(), free);

        let full = FakeServer::strict(vec![
            work(w, "n-w1", vec![todo("1", "fill the disk", "in_progress")]),
            bash(w, "n-b1", "seq 1 30000"),
            bash(w, "n-b2", "echo still here"),
            work(w, "n-w2", vec![todo("1", "fill the disk", "completed")]),
            text(w, "Done on a full disk."),
        ]);
        let r = run(
            site.tern(
                &full.openai_base(),
                &[
                    "exec",
                    "--json",
                    "--state-dir",
                    &state_arg,
                    "--continue",
                    "Work on a full disk.",
                ],
            ),
            None,
            HANG,
        );
        let said = format!("{}\n{}", r.stdout, r.stderr);
        // Clear: the error says the disk is full and names the file it could not write.
        let clear = (said.contains("No space left on device") || said.contains("os error 28"))
            && said.contains(&state_arg);
        match r.code {
            _ if r.hung => problems.push(format!("{free} pages free: hung")),
            Some(0) => {}
            Some(1) | Some(75) if clear => {}
            _ => problems.push(format!(
                "{free} pages free: no clear error: {}\n{}",
                r.summary(),
                r.stderr
            )),
        }
        if said.contains("panicked") {
            problems.push(format!("{free} pages free: panicked: {}", r.stderr));
        }
        outcomes.push(format!("{free} pages free: {}", r.summary()));
        // Every file that exists parses, even on a full disk.
        for v in check::at_any_moment(&state) {
            problems.push(format!(
                "{free} pages free, disk full: {}: {}",
                v.invariant, v.detail
            ));
        }

        std::fs::remove_file(&filler).expect("remove the filler");
        let after = FakeServer::strict(vec![]);
        let r2 = run(
            site.tern(
                &after.openai_base(),
                &[
                    "exec",
                    "--json",
                    "--state-dir",
                    &state_arg,
                    "--continue",
                    "There is space again.",
                ],
            ),
            None,
            HANG,
        );
        if r2.code != Some(0) {
            problems.push(format!(
                "{free} pages free, after freeing: {}",
                r2.summary()
            ));
        }
        let mut acked = Acked::default();
        acked.observe(&state, &[&r.stdout, &r2.stdout]);
        let current = std::fs::read_to_string(state.join("current"))
            .ok()
            .map(|s| s.trim().to_string());
        for v in check::after_recovery(&state, &acked, &after.requests(), current.as_deref()) {
            problems.push(format!(
                "{free} pages free, after freeing: {}: {}",
                v.invariant, v.detail
            ));
        }
        let _ = std::fs::remove_dir_all(&state);
    }
    println!("enospc:\n  {}", outcomes.join("\n  "));
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
