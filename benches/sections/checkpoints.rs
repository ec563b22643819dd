//! Section 10: checkpoints.

use super::*;

/// Files of the checkpoint workspace, changed files per turn, turns for the store size.
pub(super) const CP_FILES: usize = 10_000;
pub(super) const CP_CHANGED: usize = 10;
pub(super) const CP_TURNS: usize = 100;

/// A small pseudo-random generator (xorshift), so runs write the same kind of content.
pub(super) struct Xs(u64);
impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A source-like file of about 1–4 kB: lines of words, some varying.
pub(super) fn cp_file(rng: &mut Xs, n: usize) -> String {
    let lines = 20 + (rng.next() % 60) as usize;
    let mut s = String::new();
    for l in 0..lines {
        let _ = writeln!(
            s,
            "fn item_{n}_{l}(x: u64) -> u64 {{ x.wrapping_mul({}) ^ {} }}",
            rng.next() % 1000,
            rng.next() % 100_000
        );
    }
    s
}

pub(super) fn cp_path(ws: &Path, i: usize) -> std::path::PathBuf {
    ws.join(format!("src/m{:03}/f{:04}.rs", i / 100, i))
}

/// Writes `CP_CHANGED` files chosen at random with new content.
pub(super) fn cp_change(ws: &Path, rng: &mut Xs) -> R<()> {
    for _ in 0..CP_CHANGED {
        let i = (rng.next() % CP_FILES as u64) as usize;
        fs::write(cp_path(ws, i), cp_file(rng, i)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(super) fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                n += if m.is_dir() {
                    dir_bytes(&e.path())
                } else {
                    m.len()
                };
            }
        }
    }
    n
}

/// CPU time so far of this process and its reaped children (the git runs), user + system, ms.
pub(super) fn cpu_ms() -> f64 {
    let of = |who| {
        // SAFETY: getrusage fills the struct we own; on error it stays zeroed.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

/// Times `f`: (wall ms, CPU ms of this process and the git it ran).
pub(super) fn timed<T>(f: impl FnOnce() -> R<T>) -> R<(T, f64, f64)> {
    let (c, t) = (cpu_ms(), Instant::now());
    let v = f()?;
    Ok((v, ms(t.elapsed()), cpu_ms() - c))
}

/// The checkpoint store in-process (the library's `Store`, what a turn runs): a 10,000-file
/// workspace, its first checkpoint, warm checkpoints with 10 changed files, an unchanged one,
/// undo of 10 files, the store's size after 100 turns, and what a turn without a command costs.
pub(super) fn bench_checkpoints() -> R<(String, String)> {
    use tern::checkpoint::{Limits, Store};
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws = dir.path().join("ws");
    let mut rng = Xs(0x9e37_79b9_7f4a_7c15);
    for i in 0..CP_FILES {
        let p = cp_path(&ws, i);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        fs::write(&p, cp_file(&mut rng, i)).map_err(|e| e.to_string())?;
    }
    fs::write(ws.join(".gitignore"), "target/\n").map_err(|e| e.to_string())?;
    let ws_bytes = dir_bytes(&ws);
    let state = ws.join(".tern");
    fs::create_dir_all(&state).map_err(|e| e.to_string())?;
    let limits = Limits::default();
    let store = Store::open(&state, &ws, limits).map_err(|e| e.to_string())?;
    let session = "20261201-000000-bench";
    let mut turn = 1u32;
    let rec = |turn: u32| store.record_turn(session, turn).map_err(|e| e.to_string());
    let (_, first, first_cpu) = timed(|| rec(turn))?;

    // Warm: each turn changes 10 files, then the next turn's checkpoint is taken.
    let (mut warm, mut warm_cpu) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        cp_change(&ws, &mut rng)?;
        turn += 1;
        let ((new, _), w, c) = timed(|| rec(turn))?;
        warm.push(w);
        warm_cpu.push(c);
        if !new {
            return Err("a changed workspace made no new checkpoint".into());
        }
    }
    let (mut same, mut same_cpu) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        turn += 1;
        let (_, w, c) = timed(|| rec(turn))?;
        same.push(w);
        same_cpu.push(c);
    }
    // The remembered checkpoint (issue 31): the same turns with and without it, interleaved,
    // in this workspace and in a small one (what a `tern exec` of §1 checkpoints). Without
    // it a turn asks git for the refs and the tree, as the build before did.
    let forget = |git: &Path| {
        let _ = fs::remove_file(git.join("tern-latest"));
    };
    let mut memory = Vec::new();
    {
        let small = dir.path().join("small");
        for i in 0..20 {
            fs::create_dir_all(small.join("src")).map_err(|e| e.to_string())?;
            fs::write(small.join(format!("src/f{i}.rs")), cp_file(&mut rng, i))
                .map_err(|e| e.to_string())?;
        }
        let small_state = small.join(".tern");
        fs::create_dir_all(&small_state).map_err(|e| e.to_string())?;
        let small_store = Store::open(&small_state, &small, limits).map_err(|e| e.to_string())?;
        let mut t = 1u32;
        small_store
            .record_turn(session, t)
            .map_err(|e| e.to_string())?;
        for (label, big, change) in [
            ("10,000 files, nothing changed", true, false),
            ("10,000 files, 10 changed", true, true),
            ("20 files, nothing changed", false, false),
            ("20 files, 1 changed", false, true),
        ] {
            let (st, w): (&Store, &Path) = if big {
                (&store, &ws)
            } else {
                (&small_store, &small)
            };
            let (mut with, mut without) = (Vec::new(), Vec::new());
            for round in 0..20 {
                for remembered in [round % 2 == 0, round % 2 != 0] {
                    if change {
                        if big {
                            cp_change(w, &mut rng)?;
                        } else {
                            fs::write(w.join("src/f0.rs"), cp_file(&mut rng, round))
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    if !remembered {
                        forget(&st.folder().join("git"));
                    }
                    let counter = if big { &mut turn } else { &mut t };
                    *counter += 1;
                    let n = *counter;
                    let (_, _, c) =
                        timed(|| st.record_turn(session, n).map_err(|e| e.to_string()))?;
                    if remembered {
                        with.push(c)
                    } else {
                        without.push(c)
                    }
                }
            }
            memory.push((label, median(&with), median(&without)));
        }
        // A fresh session's first checkpoint in a new workspace (what each `tern exec` of §1
        // pays): the store created, then its first checkpoint. Without the memory: a
        // `tern-latest` that says nothing, so the turn asks git as the build before did.
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for round in 0..20 {
            for remembered in [round % 2 == 0, round % 2 != 0] {
                let w = dir.path().join(format!("fresh-{round}-{remembered}"));
                let st = w.join(".tern");
                fs::create_dir_all(&st).map_err(|e| e.to_string())?;
                let (_, _, c) = timed(|| {
                    let store = Store::open(&st, &w, limits).map_err(|e| e.to_string())?;
                    if !remembered {
                        fs::write(store.folder().join("git").join("tern-latest"), "")
                            .map_err(|e| e.to_string())?;
                    }
                    store.record_turn(session, 1).map_err(|e| e.to_string())
                })?;
                if remembered {
                    with.push(c)
                } else {
                    without.push(c)
                }
            }
        }
        memory.push((
            "a new store, empty workspace: its creation and first checkpoint",
            median(&with),
            median(&without),
        ));
    }
    // Permission bits (issue 34): the listing a checkpoint starts with, the build before's
    // (one `ls-files -t -m -d -o`) against this one's (`diff-files` and `ls-files -o` at once:
    // a chmod moves the change time), interleaved on the same index.
    let listing = {
        let git_dir = store.folder().join("git");
        let git = |args: &[&str]| {
            let mut c = Command::new("git");
            c.env("GIT_DIR", &git_dir)
                .env("GIT_WORK_TREE", &ws)
                .env("GIT_INDEX_FILE", git_dir.join("index"))
                .args(["-c", "core.bare=false"])
                .args(args)
                .current_dir(&ws)
                .stdout(std::process::Stdio::null());
            c
        };
        let (mut before, mut now) = (Vec::new(), Vec::new());
        for round in 0..40 {
            for old in [round % 2 == 0, round % 2 != 0] {
                let (_, w, c) = timed(|| {
                    if old {
                        git(&[
                            "ls-files",
                            "-z",
                            "-t",
                            "-m",
                            "-d",
                            "-o",
                            "--exclude-standard",
                        ])
                        .status()
                        .map_err(|e| e.to_string())?;
                    } else {
                        let mut d = git(&["diff-files", "-z", "--name-only"])
                            .spawn()
                            .map_err(|e| e.to_string())?;
                        git(&["ls-files", "-z", "-o", "--exclude-standard"])
                            .status()
                            .map_err(|e| e.to_string())?;
                        d.wait().map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })?;
                if old { &mut before } else { &mut now }.push((w, c));
            }
        }
        let pick = |v: &[(f64, f64)], cpu: bool| {
            median(
                &v.iter()
                    .map(|p| if cpu { p.1 } else { p.0 })
                    .collect::<Vec<_>>(),
            )
        };
        (
            pick(&before, false),
            pick(&before, true),
            pick(&now, false),
            pick(&now, true),
        )
    };
    // Undo of 10 files: a turn changes 10, undo puts them back; redo in between so each undo
    // starts from the same kind of state.
    let (mut undo, mut undo_cpu, mut redo, mut redo_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        turn += 1;
        rec(turn)?;
        cp_change(&ws, &mut rng)?;
        let (r, w, c) = timed(|| {
            store
                .undo(session, 1, None, false)
                .map_err(|e| e.to_string())
        })?;
        undo.push(w);
        undo_cpu.push(c);
        if r.changes.is_empty() {
            return Err("undo changed nothing".into());
        }
        let (_, w, c) = timed(|| store.redo().map_err(|e| e.to_string()))?;
        redo.push(w);
        redo_cpu.push(c);
    }
    // The store after 100 turns of 10 changed files each (the turns above count).
    while (turn as usize) < CP_TURNS + 1 {
        cp_change(&ws, &mut rng)?;
        turn += 1;
        store
            .record_turn(session, turn)
            .map_err(|e| e.to_string())?;
    }
    let store_bytes = dir_bytes(&store.folder().join("git"));

    // A turn without a command: the door writes turns.jsonl's line and takes no checkpoint.
    let sdir = state.join("sessions").join(session);
    fs::create_dir_all(&sdir).map_err(|e| e.to_string())?;
    let s = tern::store::Session::at(session, sdir);
    let (mut no_cmd, mut no_cmd_cpu) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let (_, w, c) = timed(|| tern::checkpoint::turns::start(&s, 0).map_err(|e| e.to_string()))?;
        no_cmd.push(w);
        no_cmd_cpu.push(c);
    }

    let (wm, w90, wc) = (median(&warm), percentile(&warm, 90.0), median(&warm_cpu));
    let (um, uc) = (median(&undo), median(&undo_cpu));
    let mut md = String::new();
    md.push_str("## 10. Checkpoints: cost per turn, undo, store size\n\n");
    let _ = writeln!(
        md,
        "In-process, the library's `checkpoint::Store` (what a turn runs before its first command): a \
         workspace of {CP_FILES} source-like files ({}) in 100 folders, on this machine's temporary \
         folder; the store in its `.tern/checkpoints/git`; {}. Each warm turn first rewrites \
         {CP_CHANGED} files chosen at random, then times `record_turn` (list changed files, update the \
         store's index, write the tree, commit, one ref transaction). Undo: a checkpoint, then \
         {CP_CHANGED} files changed, then `undo` timed (snapshot of the state now, ref transaction, \
         `read-tree -u`), then `redo` timed.\n",
        tern::checkpoint::size_text(ws_bytes),
        Command::new("git")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    );
    md.push_str(
        "| measure | wall median | wall p90 | CPU median (tern + git) | goal |\n|---|---|---|---|---|\n",
    );
    let row = |md: &mut String, name: &str, v: &[f64], c: &[f64], goal: &str| {
        let _ = writeln!(
            md,
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {goal} |",
            median(v),
            percentile(v, 90.0),
            median(c)
        );
    };
    row(
        &mut md,
        "first checkpoint (cold: every file hashed, then packed)",
        &[first],
        &[first_cpu],
        "",
    );
    row(
        &mut md,
        "checkpoint, 10 files changed (warm, 30 turns)",
        &warm,
        &warm_cpu,
        "< 50 ms",
    );
    row(
        &mut md,
        "checkpoint, nothing changed (10 turns)",
        &same,
        &same_cpu,
        "",
    );
    row(
        &mut md,
        "undo of 10 files (10 runs)",
        &undo,
        &undo_cpu,
        "< 100 ms",
    );
    row(&mut md, "redo of 10 files (10 runs)", &redo, &redo_cpu, "");
    row(
        &mut md,
        "a turn without a command (turns.jsonl line only, 20 runs)",
        &no_cmd,
        &no_cmd_cpu,
        "0 ms of checkpoint",
    );
    md.push_str(
        "\nA turn's checkpoint remembers the last one (`tern-latest`: its commit, its tree and the \
         index it was written from), so the next turn reads the refs from their loose files \
         instead of running `for-each-ref`, and runs no `update-index` or `write-tree` when \
         nothing changed. The same turns with and without that memory (the file removed before \
         the turn: what the build before did), alternating, 20 each, CPU of tern and git:\n\n\
         | workspace, turn | with (median) | without (median) | with / without |\n|---|---|---|---|\n",
    );
    for (label, with, without) in &memory {
        let _ = writeln!(
            md,
            "| {label} | {with:.1} ms | {without:.1} ms | **{:.2}×** |",
            with / without.max(0.001)
        );
    }
    let _ = writeln!(
        md,
        "\nStore size after {CP_TURNS} turns of {CP_CHANGED} changed files each: **{}** on disk (the first \
         checkpoint packed, later ones loose objects, zlib; the workspace itself is {}). A turn without a command runs no git at all: \
         its cost is the `turns.jsonl` line in the table (a small append under the session lock), \
         which forks need.\n",
        tern::checkpoint::size_text(store_bytes),
        tern::checkpoint::size_text(ws_bytes)
    );
    let (lw0, lc0, lw1, lc1) = listing;
    let _ = writeln!(
        md,
        "### Permission bits (issue 34)\n\n\
         Undo puts back permission bits, so a checkpoint also lists the files whose change time \
         moved (`git diff-files`, beside `git ls-files -o`: two git processes where one ran \
         before, run at once) and names a record of bits (written only when one changed). The \
         listing step alone, the build before's against this one's, interleaved, 40 each, on this \
         workspace's index:\n\n\
         | listing | wall (median) | CPU (median, tern + git) |\n|---|---|---|\n\
         | before: `ls-files -t -m -d -o` | {lw0:.1} ms | {lc0:.1} ms |\n\
         | now: `diff-files` and `ls-files -o` at once | {lw1:.1} ms | {lc1:.1} ms |\n\
         | now / before | **{:.2}×** | **{:.2}×** |\n",
        lw1 / lw0.max(0.001),
        lc1 / lc0.max(0.001)
    );
    md.push_str(CHECKPOINT_BITS_SIDE_BY_SIDE);
    let goal = goal_row(
        "checkpoint under 50 ms warm (10 of 10,000 files changed), undo of 10 files under 100 ms (§9)",
        &format!(
            "checkpoint median {wm:.1} ms wall, {wc:.1} ms CPU (p90 {w90:.1} ms); undo median {um:.1} ms wall, {uc:.1} ms CPU; store {} after {CP_TURNS} turns",
            tern::checkpoint::size_text(store_bytes)
        ),
        wm < 50.0 && um < 100.0,
    );
    Ok((md, goal))
}

/// The whole section run side by side with the build before permission bits (f3839d8), by hand
/// (two builds cannot run in one bench): `--checkpoints-only` of each, alternating, two runs
/// each, 2026-12-04.
const CHECKPOINT_BITS_SIDE_BY_SIDE: &str = "The whole section, this build and f3839d8 (the commit before), alternating, two runs each
(2026-12-04; medians of each run; this shared 2-core machine moves ±20 % between runs):

| measure | before (wall; CPU) | now (wall; CPU) | now / before, wall · CPU |
|---|---|---|---|
| checkpoint, nothing changed | 39.4, 39.8; 39.0, 39.6 ms | 32.2, 31.7; 48.0, 47.6 ms | **0.81× · 1.22×** |
| checkpoint, 10 files changed | 84.7, 104.6; 82.6, 101.1 ms | 66.5, 75.3; 79.9, 85.0 ms | 0.75× · 0.90× |
| undo of 10 files | 201.5, 205.1; 198.8, 202.7 ms | 161.5, 169.1; 192.1, 194.3 ms | 0.81× · 0.96× |
| redo of 10 files | 154.2, 156.7; 154.7, 153.6 ms | 133.3, 120.6; 164.5, 147.8 ms | 0.82× · 1.01× |
| a new store, empty workspace: creation and first checkpoint (CPU) | 36.4, 40.4 ms | 50.6, 58.8 ms | 1.42× |

A turn waits less and the machine works about 5 ms more per checkpoint of 10,000 files (the
second process reads the index again). A new store pays once for its first record (three git
runs: blob, tree, commit); that row was measured before a new store stopped asking git for its
absent index (one run fewer): the memory table above has this build's (\"with\").
A turn whose files kept their bits writes no record.
";
