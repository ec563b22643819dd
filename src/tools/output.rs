//! Tool output shaping: turns a command's raw byte stream into the bounded, valid UTF-8 text the
//! model reads.
//!
//! [`Shaper`] is fed chunks as they arrive ([`Shaper::push`]) and holds bounded memory whatever the
//! output size (case C04): the first `head_bytes` of cleaned text, a ring of the last `tail_bytes`,
//! one pending line, and up to `memory_bytes` of raw output (past that the raw output streams into
//! a spill file). Cleaning (cases C05–C07): terminal escape sequences are stripped, carriage-return
//! redraws collapse to each line's last state, invalid UTF-8 is replaced with U+FFFD and counted,
//! NUL bytes are shown as `\0`, other control bytes are dropped, and output that is mostly binary
//! is replaced by a one-line notice. Every cut lands on a character boundary (case C08).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A carriage return clears the pending line, so the line is held back until its newline; a line
/// longer than this is committed in pieces of this size (a later carriage return then only clears
/// the last piece).
const PENDING_LINE_BYTES: usize = 64 * 1024;

/// Output is binary when more than this percentage of its raw bytes are NULs, other control
/// bytes or invalid UTF-8. Random and compressed data score about 54 %, an ELF header over 80 %,
/// text with a few NULs (`find -print0`) far less.
const BINARY_PERCENT: u64 = 30;

/// Size limits of a [`Shaper`], in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Cleaned text kept from the start of the output.
    pub head_bytes: usize,
    /// Cleaned text kept from the end of the output. When the whole cleaned text fits in
    /// `head_bytes + tail_bytes` it is shown uncut.
    pub tail_bytes: usize,
    /// Raw output held in memory before it streams into a spill file.
    pub memory_bytes: usize,
    /// Largest spill file; raw output past it is not saved (the marker says so).
    pub spill_bytes: u64,
}

/// The shaped output of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    /// What the model reads of the output: the cleaned text; or its head, a one-line marker
    /// `[N bytes, M lines left out; full output: PATH]` and its tail; or
    /// `[binary output, N bytes, not shown; …]`. Empty when the command printed nothing (or only
    /// escape sequences). Always valid UTF-8, with no NUL or ESC character.
    pub text: String,
    /// Bracketed notes for the footer, e.g. `[3 invalid UTF-8 bytes replaced]`.
    pub notes: Vec<String>,
    /// Raw bytes pushed.
    pub raw_bytes: u64,
    /// Bytes of cleaned text (before cutting).
    pub text_bytes: u64,
    /// True when part of the output is not in `text` (cut, or binary).
    pub cut: bool,
    /// True when the output was judged binary and `text` is the notice.
    pub binary: bool,
    /// Invalid UTF-8 bytes replaced by U+FFFD (an incomplete sequence at the end counts too).
    pub replaced_bytes: u64,
    /// File holding the raw output, present exactly when `cut` is true and the file could be
    /// written.
    pub spill_path: Option<PathBuf>,
}

/// Where inside an escape sequence the stream is. ECMA-48 / xterm control sequences: CSI is
/// `ESC [ params intermediates final` (final byte 0x40–0x7E); OSC, DCS, SOS, PM and APC are
/// strings ended by BEL or ST (`ESC \`); other escapes are `ESC intermediates* final`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    Ground,
    Escape,
    Intermediate,
    Csi,
    Str,
}

/// Streaming output shaper with bounded memory. Feed it with [`push`](Self::push), end with
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct Shaper {
    limits: Limits,
    spill_dir: PathBuf,

    // Raw side: held in memory up to `limits.memory_bytes`, then streamed to the spill file.
    raw_mem: Vec<u8>,
    raw_total: u64,
    spill: Option<(File, PathBuf)>,
    spill_written: u64,
    spill_capped: bool,
    spill_error: Option<String>,
    // Bytes the open spill file may hold: `limits.spill_bytes`, less when the disk had less
    // free space (then `Some(free)`, for the note).
    spill_room: u64,
    spill_disk_free: Option<u64>,

    // Decoding: an incomplete UTF-8 sequence carried to the next chunk (at most 3 bytes).
    utf8_carry: Vec<u8>,
    scratch: Vec<u8>,
    replaced: u64,
    nuls: u64,
    dropped_controls: u64,

    // Cleaning.
    esc: Esc,
    cr_pending: bool,
    line: String,

    // Kept text.
    head: String,
    head_full: bool,
    tail: String,
    text_total: u64,
    newlines: u64,
}

impl Shaper {
    /// A shaper whose spill file, if one is needed, is created in `spill_dir` (created on demand)
    /// under a unique name `out-XXXXXX.log`.
    pub fn new(spill_dir: &Path, limits: Limits) -> Self {
        Shaper {
            limits,
            spill_dir: spill_dir.to_path_buf(),
            raw_mem: Vec::new(),
            raw_total: 0,
            spill: None,
            spill_written: 0,
            spill_capped: false,
            spill_error: None,
            spill_room: limits.spill_bytes,
            spill_disk_free: None,
            utf8_carry: Vec::new(),
            scratch: Vec::new(),
            replaced: 0,
            nuls: 0,
            dropped_controls: 0,
            esc: Esc::Ground,
            cr_pending: false,
            line: String::new(),
            head: String::new(),
            head_full: false,
            tail: String::new(),
            text_total: 0,
            newlines: 0,
        }
    }

    /// Bytes currently allocated by the shaper's buffers (capacities, not lengths). Stays below
    /// `head_bytes + 3 * tail_bytes + memory_bytes + 64 KiB + 2 * largest chunk` whatever the
    /// total output; tests use it to prove memory is bounded (case C04).
    pub fn buffered_bytes(&self) -> usize {
        self.raw_mem.capacity()
            + self.utf8_carry.capacity()
            + self.scratch.capacity()
            + self.line.capacity()
            + self.head.capacity()
            + self.tail.capacity()
    }

    /// Feeds the next chunk of raw output. Escape sequences, UTF-8 characters and CRLF pairs may
    /// be split across chunks anywhere.
    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.keep_raw(bytes);
        if self.utf8_carry.is_empty() {
            self.decode(bytes);
        } else {
            // Join the carried partial character with this chunk; the copy is one chunk at most.
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            buf.append(&mut self.utf8_carry);
            buf.extend_from_slice(bytes);
            self.decode(&buf);
            self.scratch = buf;
        }
    }

    /// Ends the stream and returns what the model reads. Writes or removes the spill file so
    /// that it exists exactly when something was left out.
    pub fn finish(mut self) -> Shaped {
        if !self.utf8_carry.is_empty() {
            self.replaced += self.utf8_carry.len() as u64;
            self.utf8_carry.clear();
            self.text("\u{FFFD}");
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.commit(&line);
        }

        let suspicious = self.replaced + self.nuls + self.dropped_controls;
        let binary = self.raw_total > 0 && suspicious * 100 > self.raw_total * BINARY_PERCENT;
        let parts = self.cut_parts();
        let cut = binary || parts.dropped_bytes > 0;
        let spill_path = self.settle_spill(cut);
        let saved = self.saved_note(spill_path.as_deref());

        let text = if binary {
            format!(
                "[binary output, {} bytes, not shown; {saved}]",
                self.raw_total
            )
        } else if parts.dropped_bytes > 0 {
            let mut text = parts.head;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            // A cut inside one long line leaves out no whole line: "0 lines" would say nothing
            // was cut.
            text.push_str(&if parts.dropped_lines == 0 {
                format!(
                    "[{} bytes of a long line left out; {saved}]\n",
                    parts.dropped_bytes
                )
            } else {
                format!(
                    "[{} bytes, {} lines left out; {saved}]\n",
                    parts.dropped_bytes, parts.dropped_lines
                )
            });
            text.push_str(&parts.tail);
            text
        } else {
            parts.head + &parts.tail
        };

        let mut notes = Vec::new();
        if !binary {
            if self.replaced > 0 {
                notes.push(format!("[{} invalid UTF-8 bytes replaced]", self.replaced));
            }
            if self.nuls > 0 {
                notes.push(format!("[{} NUL bytes shown as \\0]", self.nuls));
            }
        }

        Shaped {
            text,
            notes,
            raw_bytes: self.raw_total,
            text_bytes: self.text_total,
            cut,
            binary,
            replaced_bytes: self.replaced,
            spill_path,
        }
    }

    fn keep_raw(&mut self, bytes: &[u8]) {
        self.raw_total += bytes.len() as u64;
        if self.spill.is_none() && self.spill_error.is_none() {
            if self.raw_mem.len() + bytes.len() <= self.limits.memory_bytes {
                self.raw_mem.extend_from_slice(bytes);
                return;
            }
            self.open_spill();
        }
        self.write_spill(bytes);
    }

    fn open_spill(&mut self) {
        crate::store::fsutil::fault::point("spill", &self.spill_dir);
        // Never through a link: a command may have swapped `spill/` (or a folder above it) for
        // one; the output is then not saved, and the note says why.
        let opened = crate::store::fsutil::create_unique(&self.spill_dir, "out-", ".log");
        match opened {
            Ok((file, path)) => {
                // tern's own spill must never fill the disk its state is written to: it takes
                // at most what leaves a margin of the free space.
                if let Ok(free) = fs2::available_space(&path) {
                    let room = spill_room_for(free);
                    if room < self.limits.spill_bytes {
                        self.spill_room = room;
                        self.spill_disk_free = Some(free);
                    }
                }
                self.spill = Some((file, path));
                let mem = std::mem::take(&mut self.raw_mem);
                self.write_spill(&mem);
            }
            Err(e) => {
                self.spill_error = Some(e.to_string());
                self.raw_mem = Vec::new();
            }
        }
    }

    fn write_spill(&mut self, bytes: &[u8]) {
        let Some((file, _)) = self.spill.as_mut() else {
            return;
        };
        let room = self.spill_room.saturating_sub(self.spill_written);
        let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if n < bytes.len() {
            self.spill_capped = true;
        }
        if n == 0 {
            return;
        }
        match file.write_all(&bytes[..n]) {
            Ok(()) => self.spill_written += n as u64,
            Err(e) => {
                let path = self.spill.take().map(|(_, p)| p);
                self.spill_error = Some(match path {
                    // The disk filled while the spill was written (something else took the
                    // space left): the partial file goes, so tern's own state can still be
                    // written, and the note says where it was.
                    Some(p) if e.raw_os_error() == Some(libc::ENOSPC) => {
                        let removed = crate::store::fsutil::remove_file(&p).is_ok();
                        format!(
                            "saving it filled the disk ({e}) after {} bytes in {}{}",
                            self.spill_written,
                            p.display(),
                            if removed {
                                "; that file was removed to free the space"
                            } else {
                                ""
                            }
                        )
                    }
                    Some(p) => format!("{}: {e}", p.display()),
                    None => e.to_string(),
                });
            }
        }
    }

    /// Keeps the spill file only when something was left out; writes it from memory if the raw
    /// output never outgrew `memory_bytes`.
    fn settle_spill(&mut self, cut: bool) -> Option<PathBuf> {
        if !cut {
            if let Some((file, path)) = self.spill.take() {
                drop(file);
                // A leftover file only wastes disk space; nothing points to it.
                let _ = crate::store::fsutil::remove_file(&path);
            }
            return None;
        }
        if self.spill.is_none() && self.spill_error.is_none() {
            self.open_spill();
        }
        // Dropping the file closes it; it is read back within the session, so no fsync.
        self.spill.take().map(|(_, path)| path)
    }

    fn saved_note(&self, path: Option<&Path>) -> String {
        match (path, &self.spill_error) {
            (Some(p), _) if self.spill_capped => match self.spill_disk_free {
                Some(free) => format!(
                    "full output (first {} bytes only: the disk had {free} bytes free): {}",
                    self.spill_room,
                    p.display()
                ),
                None => format!(
                    "full output (first {} bytes only): {}",
                    self.limits.spill_bytes,
                    p.display()
                ),
            },
            (Some(p), _) => format!("full output: {}", p.display()),
            (None, Some(e)) => format!("full output not saved: {e}"),
            (None, None) => "full output not saved".to_string(),
        }
    }

    fn decode(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.text(chunk.valid());
            let bad = chunk.invalid();
            if bad.is_empty() {
                continue;
            }
            // The last invalid run may be a character cut by the chunk boundary: carry it when
            // it is a valid prefix (from_utf8 reports no error length for an incomplete end).
            let incomplete = chunks.peek().is_none()
                && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none());
            if incomplete {
                self.utf8_carry.extend_from_slice(bad);
            } else {
                self.replaced += bad.len() as u64;
                self.text("\u{FFFD}");
            }
        }
    }

    /// Cleans decoded text: escape sequences, CR redraws, backspaces and control characters.
    fn text(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if self.esc != Esc::Ground {
                // Escape sequences are ASCII; a non-ASCII character aborts one and is text.
                let b = bytes[i];
                if b.is_ascii() && self.escape_byte(b) {
                    i += 1;
                    continue;
                }
                self.esc = Esc::Ground;
                continue;
            }
            let run = bytes[i..]
                .iter()
                .position(|&b| b < 0x20 || b == 0x7f)
                .unwrap_or(bytes.len() - i);
            if run > 0 {
                // Control bytes are ASCII, so `i` and `i + run` are character boundaries.
                self.plain(&s[i..i + run]);
                i += run;
                continue;
            }
            match bytes[i] {
                b'\n' => {
                    self.cr_pending = false;
                    self.line.push('\n');
                    self.newlines += 1;
                    let line = std::mem::take(&mut self.line);
                    self.commit(&line);
                    self.line = line;
                    self.line.clear();
                }
                b'\r' => self.cr_pending = true,
                0x1b => self.esc = Esc::Escape,
                b'\t' => self.plain("\t"),
                0x08 => {
                    if !self.cr_pending {
                        self.line.pop();
                    }
                }
                0 => {
                    self.nuls += 1;
                    self.plain("\\0");
                }
                _ => self.dropped_controls += 1,
            }
            i += 1;
        }
    }

    /// Advances the escape state by one ASCII byte; false when the byte ends the sequence
    /// without being part of it (it is then processed as text).
    fn escape_byte(&mut self, b: u8) -> bool {
        self.esc = match (self.esc, b) {
            (_, b'\n') => return false,
            (Esc::Str, 0x07) => Esc::Ground,
            (Esc::Str, 0x1b) => Esc::Escape,
            (Esc::Str, _) => Esc::Str,
            (_, 0x1b) => Esc::Escape,
            (_, 0x00..=0x1f) => return false,
            (Esc::Escape, b'[') => Esc::Csi,
            (Esc::Escape, b']' | b'P' | b'X' | b'^' | b'_') => Esc::Str,
            (Esc::Escape | Esc::Intermediate, 0x20..=0x2f) => Esc::Intermediate,
            (Esc::Escape | Esc::Intermediate, _) => Esc::Ground,
            (Esc::Csi, 0x40..=0x7e) => Esc::Ground,
            (Esc::Csi, _) => Esc::Csi,
            (Esc::Ground, _) => return false,
        };
        true
    }

    fn plain(&mut self, mut s: &str) {
        if self.cr_pending {
            self.cr_pending = false;
            self.line.clear();
        }
        // Commit at fixed points of the line so the result does not depend on chunking.
        loop {
            let room = PENDING_LINE_BYTES - self.line.len();
            if s.len() <= room {
                self.line.push_str(s);
                return;
            }
            let cut = floor_boundary(s, room);
            self.line.push_str(&s[..cut]);
            s = &s[cut..];
            let line = std::mem::take(&mut self.line);
            self.commit(&line);
            self.line = line;
            self.line.clear();
        }
    }

    /// Adds finished text to the head, then to the tail ring.
    fn commit(&mut self, mut s: &str) {
        self.text_total += s.len() as u64;
        if !self.head_full {
            let room = self.limits.head_bytes - self.head.len();
            if s.len() <= room {
                self.head.push_str(s);
                return;
            }
            let cut = floor_boundary(s, room);
            self.head.push_str(&s[..cut]);
            self.head_full = true;
            s = &s[cut..];
        }
        let cap = self.limits.tail_bytes;
        if s.len() >= cap {
            self.tail.clear();
            self.tail.push_str(&s[ceil_boundary(s, s.len() - cap)..]);
        } else {
            self.tail.push_str(s);
            if self.tail.len() > 2 * cap {
                let cut = ceil_boundary(&self.tail, self.tail.len() - cap);
                self.tail.drain(..cut);
            }
        }
    }

    /// Splits the kept text into head and tail with the dropped middle counted. Cuts prefer a
    /// line boundary when one lies in the half of the head (or tail) next to the cut.
    fn cut_parts(&mut self) -> Parts {
        let mut head = std::mem::take(&mut self.head);
        let mut tail = std::mem::take(&mut self.tail);
        let kept = (head.len() + tail.len()) as u64;
        let fits = self.text_total <= (self.limits.head_bytes + self.limits.tail_bytes) as u64;
        if kept == self.text_total && fits {
            return Parts {
                head,
                tail,
                dropped_bytes: 0,
                dropped_lines: 0,
            };
        }
        if tail.len() > self.limits.tail_bytes {
            let cut = ceil_boundary(&tail, tail.len() - self.limits.tail_bytes);
            tail.drain(..cut);
        }
        if let Some(end) = head.rfind('\n').map(|nl| nl + 1)
            && end >= head.len() / 2
        {
            head.truncate(end);
        }
        if let Some(start) = tail.find('\n').map(|nl| nl + 1)
            && start <= tail.len() / 2
        {
            tail.drain(..start);
        }
        let kept_lines = count_newlines(&head) + count_newlines(&tail);
        Parts {
            dropped_bytes: self.text_total - (head.len() + tail.len()) as u64,
            dropped_lines: self.newlines - kept_lines,
            head,
            tail,
        }
    }
}

struct Parts {
    head: String,
    tail: String,
    dropped_bytes: u64,
    dropped_lines: u64,
}

fn count_newlines(s: &str) -> u64 {
    s.bytes().filter(|&b| b == b'\n').count() as u64
}

/// The largest character boundary of `s` at or below `i` (`i` may exceed `s.len()`).
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest character boundary of `s` at or above `i` (`i` may exceed `s.len()`).
fn ceil_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Free space a spill file always leaves on its disk: half of what is free, at most 64 MiB, so
/// tern's own state (the conversation, events, `meta.json`) can still be written.
pub const SPILL_DISK_MARGIN: u64 = 64 << 20;

/// Bytes a spill file may take of `free` bytes of free space (see [`SPILL_DISK_MARGIN`]).
pub fn spill_room_for(free: u64) -> u64 {
    free - (free / 2).min(SPILL_DISK_MARGIN)
}

/// Keeps the spill files of a session within `budget` bytes: the oldest go first (by
/// modification time), the newest always stays. Returns the names removed. A file that cannot be
/// removed is left (the next call tries again). Nothing is listed or removed through a link: a
/// `spill/` swapped for one is left alone (see [`crate::store::dirfd`]).
pub fn enforce_spill_budget(dir: &Path, budget: u64) -> Vec<String> {
    let Ok(listed) = crate::store::fsutil::list_files(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = listed
        .into_iter()
        .map(|(name, len, modified)| (modified, len, dir.join(name)))
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    let mut removed = Vec::new();
    let keep_last = files.len().saturating_sub(1);
    for (_, len, path) in files.into_iter().take(keep_last) {
        if total <= budget {
            break;
        }
        crate::store::fsutil::fault::point("remove", &path);
        if crate::store::fsutil::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
            removed.push(
                path.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            );
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(head: usize, tail: usize) -> Limits {
        Limits {
            head_bytes: head,
            tail_bytes: tail,
            memory_bytes: 64,
            spill_bytes: 1 << 20,
        }
    }

    /// Shapes `bytes` in one push; the returned folder holds the spill file, if any.
    fn shape_in(bytes: &[u8], lim: Limits) -> (Shaped, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Shaper::new(dir.path(), lim);
        s.push(bytes);
        (s.finish(), dir)
    }

    fn shape(bytes: &[u8], lim: Limits) -> Shaped {
        let (out, _dir) = shape_in(bytes, lim);
        out
    }

    #[test]
    fn plain_text_passes_through() {
        let out = shape(b"hello\nworld\n", limits(100, 100));
        assert_eq!(out.text, "hello\nworld\n");
        assert!(!out.cut && out.notes.is_empty() && out.spill_path.is_none());
    }

    #[test]
    fn escapes_stripped_and_cr_redraws_collapse() {
        let out = shape(
            b"\x1b[1;31mFAIL\x1b[0m\n\x1b[2K\r10%\r100%\n\x1b]0;title\x07ok\x1b(Bz\r\n",
            limits(100, 100),
        );
        assert_eq!(out.text, "FAIL\n100%\nokz\n");
    }

    #[test]
    fn trailing_cr_keeps_line_and_backspace_overstrikes() {
        assert_eq!(shape(b"abc\r", limits(100, 100)).text, "abc");
        assert_eq!(shape(b"_\x08X\n", limits(100, 100)).text, "X\n");
    }

    #[test]
    fn invalid_utf8_counted() {
        let out = shape(b"ok \xff\xfe \xc3\x28 end\n", limits(100, 100));
        assert_eq!(out.text, "ok \u{FFFD}\u{FFFD} \u{FFFD}( end\n");
        assert_eq!(out.replaced_bytes, 3);
        assert_eq!(out.notes, vec!["[3 invalid UTF-8 bytes replaced]"]);
    }

    #[test]
    fn truncated_char_at_end_is_replaced() {
        let out = shape(
            "hello world 中".as_bytes().split_last().unwrap().1,
            limits(100, 100),
        );
        assert_eq!(out.text, "hello world \u{FFFD}");
        assert_eq!(out.replaced_bytes, 2);
    }

    #[test]
    fn mostly_binary_is_not_shown() {
        let (out, _dir) = shape_in(&[0u8, 1, 2, 3, 0xff, b'a'], limits(100, 100));
        assert!(out.binary && out.cut);
        assert!(
            out.text
                .starts_with("[binary output, 6 bytes, not shown; full output: ")
        );
        let path = out.spill_path.unwrap();
        assert_eq!(std::fs::read(path).unwrap(), [0u8, 1, 2, 3, 0xff, b'a']);
    }

    #[test]
    fn a_cut_inside_one_long_line_says_so() {
        // One 184 KB line (issue 18): never "0 lines left out".
        let input = "x".repeat(184 * 1024);
        let (out, _dir) = shape_in(input.as_bytes(), limits(100, 100));
        assert!(out.cut);
        assert!(!out.text.contains("0 lines left out"), "{}", out.text);
        assert!(
            out.text
                .contains(" bytes of a long line left out; full output: "),
            "{}",
            out.text
        );
    }

    #[test]
    fn cut_prefers_line_boundaries_and_counts() {
        let input: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
        let (out, _dir) = shape_in(input.as_bytes(), limits(50, 50));
        // 9-byte lines: the head keeps 5 whole lines, the tail 5.
        assert!(
            out.text
                .starts_with("line 000\nline 001\nline 002\nline 003\nline 004\n[")
        );
        assert!(
            out.text
                .ends_with("]\nline 095\nline 096\nline 097\nline 098\nline 099\n")
        );
        assert!(
            out.text
                .contains("[810 bytes, 90 lines left out; full output: ")
        );
        let spill = std::fs::read_to_string(out.spill_path.unwrap()).unwrap();
        assert_eq!(spill, input);
    }

    #[test]
    fn no_spill_file_when_nothing_cut_even_after_spilling() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Shaper::new(dir.path(), limits(100, 100));
        for _ in 0..100 {
            s.push(b"\x1b[0m\x1b[0m"); // 800 raw bytes, past memory_bytes, no text
        }
        let out = s.finish();
        assert_eq!(out.text, "");
        assert!(out.spill_path.is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn unterminated_osc_stops_at_newline() {
        assert_eq!(
            shape(b"\x1b]0;title\nnext\n", limits(100, 100)).text,
            "\nnext\n"
        );
    }

    #[test]
    fn long_line_result_does_not_depend_on_chunking() {
        let mut input = "x".repeat(3 * PENDING_LINE_BYTES + 5).into_bytes();
        input.extend_from_slice(b"\rshort\n");
        let (whole, _d1) = shape_in(&input, limits(100, 100));
        for step in [1000, 4099, PENDING_LINE_BYTES - 1, PENDING_LINE_BYTES + 7] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = Shaper::new(dir.path(), limits(100, 100));
            for part in input.chunks(step) {
                s.push(part);
            }
            let split = s.finish();
            let strip = |o: &Shaped| {
                o.text
                    .replace(&o.spill_path.as_ref().unwrap().display().to_string(), "")
            };
            assert_eq!(strip(&whole), strip(&split), "step {step}");
        }
        // The carriage return clears only the uncommitted last piece of the long line.
        assert_eq!(
            whole.text_bytes,
            (3 * PENDING_LINE_BYTES + "short\n".len()) as u64
        );
        assert!(whole.text.ends_with("xshort\n"), "{}", whole.text);
    }

    /// Splits the text of a cut result around its marker (the inputs hold no `[`).
    fn head_tail(text: &str) -> (&str, &str) {
        let start = text.find('[').unwrap();
        let end = start + text[start..].find("]\n").unwrap() + 2;
        (&text[..start], &text[end..])
    }

    const CHARS: [&str; 4] = ["x", "é", "中", "😀"];

    proptest! {
        /// Case C08: a 1- to 4-byte character at every offset around the head and tail cuts.
        #[test]
        fn cuts_land_on_char_boundaries(
            head_cap in 0usize..40,
            tail_cap in 0usize..40,
            before in 0usize..100,
            after in 0usize..100,
            which in 0usize..4,
            fill in prop::sample::select(vec!["a", "中", "a\n", "😀"]),
            chunk in 1usize..17,
        ) {
            let c = CHARS[which];
            let input = format!("{}{c}{}", fill.repeat(before / fill.len()), fill.repeat(after / fill.len()));
            let dir = tempfile::tempdir().unwrap();
            let mut s = Shaper::new(dir.path(), limits(head_cap, tail_cap));
            for part in input.as_bytes().chunks(chunk) {
                s.push(part);
            }
            let out = s.finish();
            prop_assert_eq!(out.replaced_bytes, 0);
            prop_assert!(!out.text.contains(char::REPLACEMENT_CHARACTER), "replacement in {:?}", out.text);
            if out.cut {
                let (head, tail) = head_tail(&out.text);
                // The head is a prefix of the input within its cap, plus a newline before the
                // marker when it was cut mid-line.
                let head_ok = |h: &str| h.len() <= head_cap && input.starts_with(h);
                prop_assert!(
                    head_ok(head) || head.strip_suffix('\n').is_some_and(head_ok),
                    "head {:?} of {:?}", head, input
                );
                prop_assert!(tail.len() <= tail_cap);
                prop_assert!(input.ends_with(tail), "tail {:?} of {:?}", tail, input);
                prop_assert!(out.spill_path.is_some());
            } else {
                prop_assert!(input.len() <= head_cap + tail_cap);
                prop_assert_eq!(&out.text, &input);
            }
        }

        /// Pushing the same bytes split anywhere gives the same result as one push.
        #[test]
        fn chunking_does_not_change_result(
            parts in prop::collection::vec(
                prop::sample::select(vec![
                    &b"abc"[..], b"\n", b"\r", b"\r\n", b"\x1b[31m", b"\x1b]0;t\x07", b"\x1b(B",
                    "中".as_bytes(), "😀".as_bytes(), b"\xff", b"\xc3", b"\0", b"\x08", b"\x01",
                    b"\t", b"line of text\n",
                ]),
                0..60,
            ),
            cuts in prop::collection::vec(0usize..400, 0..8),
            small in any::<bool>(),
        ) {
            let input: Vec<u8> = parts.concat();
            let lim = if small { limits(16, 16) } else { limits(1000, 1000) };
            let (whole, _dir1) = shape_in(&input, lim);

            let dir = tempfile::tempdir().unwrap();
            let mut s = Shaper::new(dir.path(), lim);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
            cuts.sort_unstable();
            let mut from = 0;
            for c in cuts.into_iter().chain([input.len()]) {
                s.push(&input[from..c]);
                from = c;
            }
            let split = s.finish();

            let norm = |o: &Shaped| match &o.spill_path {
                Some(p) => o.text.replace(&p.display().to_string(), "SPILL"),
                None => o.text.clone(),
            };
            prop_assert_eq!(norm(&whole), norm(&split));
            prop_assert_eq!(&whole.notes, &split.notes);
            prop_assert_eq!(whole.cut, split.cut);
            prop_assert_eq!(whole.text_bytes, split.text_bytes);
            prop_assert!(!split.text.contains('\0') && !split.text.contains('\x1b'));
            if let (Some(a), Some(b)) = (&whole.spill_path, &split.spill_path) {
                prop_assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
                prop_assert_eq!(std::fs::read(b).unwrap(), input);
            }
        }
    }
}
