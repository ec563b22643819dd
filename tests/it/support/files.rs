//! Reading what tern leaves on disk: text, JSON and JSONL files (failing the test with the path
//! when one is missing or malformed), and every file of a folder at once.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// The text of `p`.
pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// `p` parsed as JSON.
pub fn read_json(p: &Path) -> Value {
    let t = read(p);
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{} does not parse: {e}\n{t}", p.display()))
}

/// Every line of the JSONL file `p`, each asserted to be one JSON object; the file is empty or
/// ends with a newline (DESIGN.md §3: append-only JSONL, one object a line).
pub fn jsonl(p: &Path) -> Vec<Value> {
    let t = read(p);
    assert!(
        t.is_empty() || t.ends_with('\n'),
        "{} does not end with a newline",
        p.display()
    );
    t.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: bad line {l:?}: {e}", p.display()));
            assert!(v.is_object(), "{}: not an object: {l}", p.display());
            v
        })
        .collect()
}

/// Every file under `root` (recursively), by path relative to `root`, with its bytes.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).expect("under root");
                out.insert(rel.display().to_string(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// `git ARGS` in `dir` as a person would run it (author and committer set), requiring success;
/// returns stdout.
pub fn person_git(dir: &std::path::Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@p")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@p")
        .output()
        .expect("git");
    assert!(o.status.success(), "git {args:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A tmpfs mounted for a test (root only: mounting needs CAP_SYS_ADMIN), unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`64m`) on a new temporary folder. Errors: mount's words (not
    /// root, no tmpfs).
    pub fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir })
    }

    /// Its mount point.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // A folder of the mount still open somewhere (a store's anchors): the lazy unmount
        // detaches it.
        let ok = std::process::Command::new("umount")
            .arg(self.dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}
