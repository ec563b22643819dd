//! The trust store (DESIGN §13, §16): a project file that makes tern run programs (the
//! project's hooks file, `.mcp.json`) is used only as the person trusted it, by its SHA-256 and
//! those of the workspace files its commands run ([`covered`]), recorded outside the workspace
//! in `~/.config/tern/trusted-hooks.json` (a repository cannot ship its own trust). One record,
//! one hash format and one verb's logic ([`grant`]) for the hooks room and the MCP room alike;
//! what a changed covered file means (a suspended hook, an unusable server list) is each room's.
//!
//! The record's shape (state/README.md): `{"files": {KEY: SHA256}, "covered": {KEY: {PATH:
//! SHA256}}}`, KEY the project file's absolute path ([`key_of`]), hashes lowercase hex.

pub mod covered;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's file name in tern's configuration folder.
pub const RECORD_FILE: &str = "trusted-hooks.json";

/// Bytes read of a covered file for its hash (larger files hash as unreadable).
const MAX_COVERED_BYTES: u64 = 16 << 20;

/// Why the record could not be read or written.
#[derive(Debug)]
pub enum TrustError {
    /// No home folder (`HOME` / `XDG_CONFIG_HOME`): nowhere to record trust.
    NoHome,
    /// The record cannot be read (I/O), at this path.
    Read(PathBuf, std::io::Error),
    /// The record is not the record's shape.
    Shape(PathBuf, serde_json::Error),
    /// The record (or its folder) cannot be written.
    Write(PathBuf, std::io::Error),
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustError::NoHome => {
                f.write_str("no home folder (HOME / XDG_CONFIG_HOME): nowhere to record trust")
            }
            TrustError::Read(p, e) => write!(f, "{}: {e}", p.display()),
            TrustError::Shape(p, e) => write!(f, "{}: not a trust record ({e})", p.display()),
            TrustError::Write(p, e) => {
                write!(f, "could not record the trust: {}: {e}", p.display())
            }
        }
    }
}

impl std::error::Error for TrustError {}

/// The trust record (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Project files and the hash each was trusted with.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// For each project file (by the same key), the workspace files its commands run and the
    /// hash each was trusted with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub covered: BTreeMap<String, BTreeMap<String, String>>,
}

/// How a project file stands in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Trusted with these bytes; the covered files' hashes as trusted.
    Trusted(BTreeMap<String, String>),
    /// Not trusted: `changed` when it was trusted before with other bytes.
    Untrusted {
        /// It was trusted before.
        changed: bool,
    },
}

impl Record {
    /// Reads the record at `path` (empty when absent). Errors: unreadable, or not the record's
    /// shape.
    pub fn read(path: &Path) -> Result<Record, TrustError> {
        match crate::store::fsutil::read_regular(path, 16 << 20) {
            Ok(None) => Ok(Record::default()),
            Ok(Some(b)) => {
                serde_json::from_slice(&b).map_err(|e| TrustError::Shape(path.to_path_buf(), e))
            }
            Err(e) => Err(TrustError::Read(path.to_path_buf(), e)),
        }
    }

    /// Reads the record at `path`, empty when there is none or it cannot be read (nothing is
    /// trusted then: the safe reading for a run).
    pub fn read_or_empty(path: Option<&Path>) -> Record {
        path.and_then(|p| Record::read(p).ok()).unwrap_or_default()
    }

    /// Writes the record atomically (its folder made as needed).
    pub fn write(&self, path: &Path) -> Result<(), TrustError> {
        let fail = |e| TrustError::Write(path.to_path_buf(), e);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(std::io::Error::other)
            .map_err(fail)?
            + "\n";
        crate::store::fsutil::atomic_write(path, text.as_bytes()).map_err(fail)
    }

    /// How `project`, whose bytes are now `bytes`, stands (pure).
    pub fn standing(&self, project: &Path, bytes: &[u8]) -> Standing {
        let key = key_of(project);
        match self.files.get(&key) {
            Some(sha) if *sha == sha256_hex(bytes) => {
                Standing::Trusted(self.covered.get(&key).cloned().unwrap_or_default())
            }
            recorded => Standing::Untrusted {
                changed: recorded.is_some(),
            },
        }
    }

    /// Records `project` as trusted with hash `sha` and `covered` (pure). Whether anything
    /// changed (false: it was trusted so already).
    pub fn set(&mut self, project: &Path, sha: &str, covered: BTreeMap<String, String>) -> bool {
        let key = key_of(project);
        let same = self.files.get(&key).map(String::as_str) == Some(sha)
            && self.covered.get(&key).cloned().unwrap_or_default() == covered;
        self.files.insert(key.clone(), sha.to_string());
        if covered.is_empty() {
            self.covered.remove(&key);
        } else {
            self.covered.insert(key, covered);
        }
        !same
    }
}

/// What [`grant`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The project file's SHA-256.
    pub sha: String,
    /// It was trusted so already: nothing was written.
    pub already: bool,
}

/// The one verb (`tern hooks trust`, `tern mcp trust`): records `project` (whose bytes are
/// `bytes`) and the `covered` files' hashes in the record at `record`, unless it is trusted so
/// already.
///
/// Errors: no record path (no home folder), a record that cannot be read or written.
pub fn grant(
    record: Option<&Path>,
    project: &Path,
    bytes: &[u8],
    covered: BTreeMap<String, String>,
) -> Result<Granted, TrustError> {
    let path = record.ok_or(TrustError::NoHome)?;
    let mut r = Record::read(path)?;
    let sha = sha256_hex(bytes);
    let changed = r.set(project, &sha, covered);
    if changed {
        r.write(path)?;
    }
    Ok(Granted {
        sha,
        already: !changed,
    })
}

/// The record's path for a configuration folder (`~/.config/tern`); None without one.
pub fn record_path(config_dir: Option<&Path>) -> Option<PathBuf> {
    config_dir.map(|d| d.join(RECORD_FILE))
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file's bytes (None when it cannot be read as a plain file).
pub fn file_sha(path: &Path) -> Option<String> {
    crate::store::fsutil::read_regular(path, MAX_COVERED_BYTES)
        .ok()
        .flatten()
        .map(|b| sha256_hex(&b))
}

/// The key of a project file in the record: its absolute path, links in its folders resolved
/// (so `cd` through a link does not lose the trust).
pub fn key_of(project: &Path) -> String {
    let abs = match (project.parent(), project.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| project.to_path_buf()),
        _ => project.to_path_buf(),
    };
    abs.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_stands_trusted_only_with_the_bytes_it_was_trusted_with() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().join("hooks.json");
        let mut r = Record::default();
        assert_eq!(
            r.standing(&project, b"a"),
            Standing::Untrusted { changed: false }
        );
        let covered = BTreeMap::from([("/w/x.sh".to_string(), sha256_hex(b"x"))]);
        assert!(r.set(&project, &sha256_hex(b"a"), covered.clone()));
        assert!(
            !r.set(&project, &sha256_hex(b"a"), covered.clone()),
            "the same again"
        );
        assert_eq!(r.standing(&project, b"a"), Standing::Trusted(covered));
        assert_eq!(
            r.standing(&project, b"b"),
            Standing::Untrusted { changed: true }
        );
        assert!(r.set(&project, &sha256_hex(b"b"), BTreeMap::new()));
        assert!(r.covered.is_empty(), "no covered files: no entry");
    }

    #[test]
    fn the_record_keeps_its_shape_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cfg/tern").join(RECORD_FILE);
        assert_eq!(Record::read(&path).unwrap(), Record::default());
        let project = d.path().join(".mcp.json");
        let g = grant(Some(&path), &project, b"{}", BTreeMap::new()).unwrap();
        assert!(!g.already && g.sha.len() == 64);
        assert!(
            grant(Some(&path), &project, b"{}", BTreeMap::new())
                .unwrap()
                .already
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["files"][key_of(&project)], g.sha);
        assert!(v.get("covered").is_none());
        std::fs::write(&path, "[1]").unwrap();
        assert!(matches!(Record::read(&path), Err(TrustError::Shape(..))));
        assert!(Record::read_or_empty(Some(&path)).files.is_empty());
        assert!(matches!(
            grant(None, &project, b"{}", BTreeMap::new()),
            Err(TrustError::NoHome)
        ));
    }
}
