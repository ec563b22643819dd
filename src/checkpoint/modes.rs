//! Permission bits of the workspace's files, which a git tree does not hold (it keeps 644 or 755):
//! undo must put back a private file as private (`600`), a `640` as `640`, and a turn that only
//! ran `chmod` must be a turn that changed something (issue 34).
//!
//! A record ([`Modes`]) is plain data: the bits of a file with and without the owner's exec bit
//! that need no line (the *plain* bits: what a checkout makes under the umask of the process
//! that made the record), and one line for each file whose bits differ. Each checkpoint commit
//! names its record, stored as a blob (identical records are one object); the store keeps the
//! record of its index beside it ([`Tracked`]) and updates it from what changed, so a turn reads
//! the bits of the files git lists, not of the whole tree.
//!
//! Blob format (`tern-modes 1`): a header line `tern-modes 1 <plain> <plain exec>\n` (octal),
//! then `<octal bits> <path>\0` per listed file, paths in byte order.

use std::collections::{BTreeMap, BTreeSet};

/// The header's first words.
const MAGIC: &[u8] = b"tern-modes 1 ";

/// The permission bits kept: owner, group, others (no set-id or sticky bit is ever put back).
pub const BITS: u32 = 0o777;

/// A record of the permission bits of a tree's regular files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modes {
    /// The bits of an unlisted file without the owner's exec bit.
    plain: u32,
    /// The bits of an unlisted file with it.
    plain_exec: u32,
    /// Files whose bits are not the plain ones: path (workspace-relative bytes) → bits.
    listed: BTreeMap<Vec<u8>, u32>,
}

impl Modes {
    /// An empty record whose plain bits are what `umask` leaves of 666 and 777.
    pub fn new(umask: u32) -> Modes {
        Modes {
            plain: 0o666 & !umask & BITS,
            plain_exec: 0o777 & !umask & BITS,
            listed: BTreeMap::new(),
        }
    }

    /// The plain bits for a file whose owner may (`exec`) or may not execute it (git's test:
    /// the owner's exec bit makes a 755 entry).
    fn plain_for(&self, exec: bool) -> u32 {
        if exec { self.plain_exec } else { self.plain }
    }

    /// `path` is now a regular file with `bits` (Some), or not a recorded regular file (None:
    /// gone, a link, left out).
    pub fn note(&mut self, path: &[u8], bits: Option<u32>) {
        match bits.map(|b| b & BITS) {
            Some(b) if b != self.plain_for(b & 0o100 != 0) => {
                self.listed.insert(path.to_vec(), b);
            }
            _ => {
                self.listed.remove(path);
            }
        }
    }

    /// The bits of regular file `path`, whose owner exec bit (from its tree entry) is `exec`.
    pub fn bits(&self, path: &[u8], exec: bool) -> u32 {
        self.listed
            .get(path)
            .copied()
            .unwrap_or_else(|| self.plain_for(exec))
    }

    /// The files with a line of their own.
    pub fn listed(&self) -> impl Iterator<Item = &[u8]> {
        self.listed.keys().map(Vec::as_slice)
    }

    /// The same plain bits, no file listed.
    pub fn cleared(&self) -> Modes {
        Modes {
            listed: BTreeMap::new(),
            ..*self
        }
    }

    /// Whether `other` has the same plain bits (then files listed in neither agree).
    pub fn same_plain(&self, other: &Modes) -> bool {
        (self.plain, self.plain_exec) == (other.plain, other.plain_exec)
    }

    /// The record as blob bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend(format!("{:o} {:o}\n", self.plain, self.plain_exec).bytes());
        for (path, bits) in &self.listed {
            out.extend(format!("{bits:o} ").bytes());
            out.extend_from_slice(path);
            out.push(0);
        }
        out
    }

    /// A record from blob bytes. None when they are not one (a record that cannot be read is
    /// no record: the restore keeps the files' own bits).
    pub fn decode(bytes: &[u8]) -> Option<Modes> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let nl = rest.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&rest[..nl]).ok()?;
        let (a, b) = head.split_once(' ')?;
        let mut m = Modes {
            plain: octal(a)?,
            plain_exec: octal(b)?,
            listed: BTreeMap::new(),
        };
        let body = &rest[nl + 1..];
        if !body.is_empty() && body.last() != Some(&0) {
            return None;
        }
        for item in body.split(|b| *b == 0).filter(|s| !s.is_empty()) {
            let sp = item.iter().position(|b| *b == b' ')?;
            let bits = octal(std::str::from_utf8(&item[..sp]).ok()?)?;
            let path = &item[sp + 1..];
            if !plain_path(path) {
                return None;
            }
            m.listed.insert(path.to_vec(), bits);
        }
        Some(m)
    }
}

/// A workspace-relative path as git lists it: not empty, not absolute, no empty, `.` or `..`
/// part. A record naming anything else is no record (a restore sets the bits of the files it
/// names: never of a file outside the workspace).
pub fn plain_path(path: &[u8]) -> bool {
    !path.is_empty()
        && path
            .split(|b| *b == b'/')
            .all(|part| !part.is_empty() && part != b"." && part != b"..")
}

/// Bits from octal text (at most [`BITS`]).
fn octal(s: &str) -> Option<u32> {
    u32::from_str_radix(s, 8).ok().filter(|b| *b <= BITS)
}

/// The files whose bits differ between records `a` and `b` of two trees, with their bits in
/// each: a file listed in one and not the other has the plain bits there (the exec bit is the
/// listed one's: a file whose exec bit changed is a change of the trees themselves). When the
/// plain bits differ, files listed in neither may differ too; they are not named.
pub fn differ(a: &Modes, b: &Modes) -> Vec<(Vec<u8>, u32, u32)> {
    let paths: BTreeSet<&Vec<u8>> = a.listed.keys().chain(b.listed.keys()).collect();
    paths
        .into_iter()
        .filter_map(|p| {
            let exec = a.listed.get(p).or(b.listed.get(p)).copied()? & 0o100 != 0;
            let (x, y) = (a.bits(p, exec), b.bits(p, exec));
            (x != y).then(|| (p.clone(), x, y))
        })
        .collect()
}

/// The files of `now` (path, bits as they are) whose bits are not what `wanted` records, with
/// the bits to give them. The owner's exec bit of a file as it is says which plain bits apply:
/// after a checkout it is its tree entry's.
pub fn plan(wanted: &Modes, now: &[(Vec<u8>, u32)]) -> Vec<(Vec<u8>, u32)> {
    now.iter()
        .filter_map(|(path, bits)| {
            let want = wanted.bits(path, bits & 0o100 != 0);
            (bits & BITS != want).then(|| (path.clone(), want))
        })
        .collect()
}

/// The umask of this process (`/proc/self/status`, Linux 4.7+), else the usual 022. Read, not
/// set: `umask(2)` would change it for every thread.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// The record of the store's index as the store keeps it (`<git dir>/tern-modes`): which index
/// it belongs to, the commit its record is stored as (when written), the files whose change of bits git may
/// not see, and the record.
///
/// Why *racy* files: git notices a `chmod` through the change time it keeps for each index
/// entry, in whole seconds; a file whose entry was written in the same second as a later
/// `chmod` looks unchanged. So a file whose change time is within a second of a snapshot is read
/// again at the next one, whether git lists it or not.
///
/// Format: `tern-modes-state 1 <index stamp> <record or ->\n`, the racy paths each ending in
/// `\0`, an empty one (`\0`) ending them, then the record's blob bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// The index it describes (`index_stamp`); a record of another index is not believed.
    pub stamp: String,
    /// The record `modes` is stored as (`Store::write_record`), once written.
    pub record: Option<String>,
    /// Files to read again at the next snapshot.
    pub racy: BTreeSet<Vec<u8>>,
    /// The record.
    pub modes: Modes,
}

const STATE_MAGIC: &str = "tern-modes-state 1 ";

impl Tracked {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!(
            "{STATE_MAGIC}{} {}\n",
            self.stamp,
            self.record.as_deref().unwrap_or("-")
        )
        .into_bytes();
        for p in &self.racy {
            out.extend_from_slice(p);
            out.push(0);
        }
        out.push(0);
        out.extend(self.modes.encode());
        out
    }

    /// From the file's bytes; None when they are not one (the store reads every file again).
    pub fn decode(bytes: &[u8]) -> Option<Tracked> {
        let nl = bytes.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&bytes[..nl])
            .ok()?
            .strip_prefix(STATE_MAGIC)?;
        let (stamp, record) = head.split_once(' ')?;
        if stamp.is_empty() || record.is_empty() || record.contains(' ') {
            return None;
        }
        let mut rest = &bytes[nl + 1..];
        let mut racy = BTreeSet::new();
        loop {
            let end = rest.iter().position(|b| *b == 0)?;
            let (p, after) = (&rest[..end], &rest[end + 1..]);
            rest = after;
            if p.is_empty() {
                break;
            }
            if !plain_path(p) {
                return None;
            }
            racy.insert(p.to_vec());
        }
        Some(Tracked {
            stamp: stamp.to_string(),
            record: (record != "-").then(|| record.to_string()),
            racy,
            modes: Modes::decode(rest)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_files_need_no_line_and_others_get_one() {
        let mut m = Modes::new(0o022);
        m.note(b"a.txt", Some(0o100644));
        m.note(b"run.sh", Some(0o755));
        m.note(b".env", Some(0o600));
        m.note(b"shared", Some(0o640));
        m.note(b"open.sh", Some(0o777));
        assert_eq!(
            m.listed().collect::<Vec<_>>(),
            [&b".env"[..], b"open.sh", b"shared"]
        );
        assert_eq!(m.bits(b"a.txt", false), 0o644);
        assert_eq!(m.bits(b"run.sh", true), 0o755);
        assert_eq!(m.bits(b".env", false), 0o600);
        // Back to plain bits, or not a regular file any more: no line.
        m.note(b".env", Some(0o644));
        m.note(b"shared", None);
        assert_eq!(m.listed().collect::<Vec<_>>(), [&b"open.sh"[..]]);
        // Set-id and sticky bits are never kept.
        m.note(b"suid", Some(0o4755));
        assert_eq!(m.listed().count(), 1);
        // Another umask, other plain bits.
        let mut g = Modes::new(0o002);
        g.note(b"a.txt", Some(0o664));
        g.note(b"b.txt", Some(0o644));
        assert_eq!(g.listed().collect::<Vec<_>>(), [&b"b.txt"[..]]);
    }

    #[test]
    fn a_record_round_trips_and_bad_bytes_are_no_record() {
        let mut m = Modes::new(0o022);
        m.note(b"dir/with space/f", Some(0o600));
        m.note("é\n".as_bytes(), Some(0o640));
        let bytes = m.encode();
        assert_eq!(Modes::decode(&bytes), Some(m.clone()));
        assert_eq!(Modes::new(0o022).encode(), b"tern-modes 1 644 755\n");
        for bad in [
            &b""[..],
            b"tern-modes 2 644 755\n",
            b"tern-modes 1 644\n",
            b"tern-modes 1 644 755\n600 f",
            b"tern-modes 1 644 755\n9 f\0",
            b"tern-modes 1 644 755\n1000 f\0",
            b"tern-modes 1 644 755\n600 \0",
            b"tern-modes 1 644 755\nf\0",
            b"tern-modes 1 644 755\n600 /etc/passwd\0",
            b"tern-modes 1 644 755\n600 ../out\0",
            b"tern-modes 1 644 755\n600 a/../../out\0",
            b"tern-modes 1 644 755\n600 a//b\0",
            b"tern-modes 1 644 755\n600 ./a\0",
        ] {
            assert_eq!(Modes::decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn records_differ_where_a_file_bits_differ() {
        let mut a = Modes::new(0o022);
        a.note(b"secret", Some(0o600));
        a.note(b"both", Some(0o640));
        a.note(b"tool", Some(0o700));
        let mut b = Modes::new(0o022);
        b.note(b"both", Some(0o640));
        b.note(b"open", Some(0o666));
        b.note(b"tool", Some(0o750));
        assert_eq!(
            differ(&a, &b),
            [
                (b"open".to_vec(), 0o644, 0o666),
                (b"secret".to_vec(), 0o600, 0o644),
                (b"tool".to_vec(), 0o700, 0o750),
            ]
        );
        assert!(differ(&a, &a).is_empty());
    }

    #[test]
    fn a_restore_plans_the_bits_its_record_names() {
        let mut w = Modes::new(0o022);
        w.note(b".env", Some(0o600));
        w.note(b"shared", Some(0o640));
        let now = [
            (b".env".to_vec(), 0o644),   // rewritten by the checkout
            (b"shared".to_vec(), 0o640), // already right
            (b"tool".to_vec(), 0o700),   // the turn made it private; the record has it plain
            (b"a.txt".to_vec(), 0o666),  // the turn opened it to all
            (b"run.sh".to_vec(), 0o755),
        ];
        assert_eq!(
            plan(&w, &now),
            [
                (b".env".to_vec(), 0o600),
                (b"tool".to_vec(), 0o755),
                (b"a.txt".to_vec(), 0o644)
            ]
        );
    }

    #[test]
    fn the_tracked_record_round_trips_and_bad_bytes_are_none() {
        let mut modes = Modes::new(0o022);
        modes.note(b"k", Some(0o600));
        let t = Tracked {
            stamp: "12:345:6.7".into(),
            record: Some("ab".repeat(20)),
            racy: [b"a".to_vec(), b"b/c\nd".to_vec()].into_iter().collect(),
            modes,
        };
        assert_eq!(Tracked::decode(&t.encode()), Some(t.clone()));
        let none = Tracked {
            record: None,
            racy: BTreeSet::new(),
            ..t.clone()
        };
        assert_eq!(Tracked::decode(&none.encode()), Some(none));
        for bad in [
            &b""[..],
            b"tern-modes-state 1 s b\n",
            b"tern-modes-state 1 s\n\0tern-modes 1 644 755\n",
            b"other 1 s b\n\0tern-modes 1 644 755\n",
            b"tern-modes-state 1 s b\na\0",
            b"tern-modes-state 1 s b\n/etc/passwd\0\0tern-modes 1 644 755\n",
        ] {
            assert_eq!(
                Tracked::decode(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_umask_is_read() {
        assert!(umask() <= 0o777);
    }
}
