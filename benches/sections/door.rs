//! Section 15: the door (issue 42): what applying a command's layer costs, side by side with the
//! bind walls (`--no-layer`, the construction before the door) in the same build.

use super::*;

/// Runs per arm and scenario (rotated, so load drifts hit both arms alike).
const DOOR_RUNS: usize = 5;

/// One scenario: its name, the workspace made before the run, and the command.
struct Scenario {
    name: &'static str,
    files: usize,
    command: &'static str,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "a small change (one line appended to one of 200 files)",
        files: 200,
        command: "echo more >> src/f0007.txt",
    },
    Scenario {
        name: "1,000 new files",
        files: 200,
        command: "mkdir -p new && for i in $(seq 1000); do echo $i > new/f$i; done",
    },
    Scenario {
        name: "a 100 MB file rewritten",
        files: 200,
        command: "head -c 100000000 /dev/zero > big.bin && head -c 100000000 /dev/zero | tr '\\0' 'a' > big.bin",
    },
    Scenario {
        name: "first command of a turn in a 10,000-file workspace (`true`)",
        files: 10_000,
        command: "true",
    },
];

/// A workspace of `n` small files under `src/` in `base/ws`.
fn door_workspace(base: &Path, n: usize) -> R<()> {
    let src = base.join("ws/src");
    fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    for i in 0..n {
        fs::write(src.join(format!("f{i:04}.txt")), format!("line {i}\n"))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One measured session: the command, then a final answer; tern's own CPU and everything under
/// it (bash, the jail, the checkpoint's git), in ms, and the wall time.
fn door_run(command: &str, files: usize, layer: bool) -> R<(f64, f64, f64)> {
    let server = FakeServer::start(vec![bash_call("c0", command), final_answer()]);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    door_workspace(tmp.path(), files)?;
    let mut args = exec_args(2, "Run the command.");
    if !layer {
        args.insert(1, "--no-layer".into());
    }
    let mut cmd = tern_command(&server, tmp.path(), TERN, &args)?;
    let m = measure(&mut cmd, Some(&server))?;
    let s = finish_session(tmp, m, server.requests(), 2)?;
    Ok((s.m.own_ms(), s.m.total_us as f64 / 1000.0, ms(s.m.wall)))
}

/// Runs per build and arm of the first-command comparison.
const FIRST_RUNS: usize = 7;

/// One session of `program` in a fresh workspace of `files` files: with `command`, a `true`
/// then an answer (2 requests); without, an answer alone (1 request). Everything's CPU (tern
/// and what runs under it) and the wall time, in ms.
fn first_run(program: &str, files: usize, command: bool) -> R<(f64, f64)> {
    let script = if command {
        vec![bash_call("c0", "true"), final_answer()]
    } else {
        vec![final_answer()]
    };
    let requests = script.len();
    let server = FakeServer::start(script);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    if files > 0 {
        door_workspace(tmp.path(), files)?;
    }
    let args = exec_args(requests, "Run the command.");
    let mut cmd = tern_command(&server, tmp.path(), program, &args)?;
    let m = measure(&mut cmd, Some(&server))?;
    let s = finish_session(tmp, m, server.requests(), requests)?;
    Ok((s.m.total_us as f64 / 1000.0, ms(s.m.wall)))
}

/// The first command of a turn, this build (the door's record is the checkpoint) against
/// `before` (the build before: the door, and a snapshot of the workspace before the turn's
/// first command), in an empty and a 10,000-file workspace. A command's cost is the session
/// with the command less the session without one (same build, same workspace size), medians
/// of runs in rotation.
pub(super) fn bench_first_command(before: &str) -> R<String> {
    let mut md = String::from(
        "### The first command of a turn: the checkpoint from the door's record (issue 42, part 2)\n\n",
    );
    md.push_str(&format!(
        "Each build runs `tern exec` {FIRST_RUNS} times per arm in rotation, in a fresh workspace: one `true` then an answer, and an answer alone. The first command's cost is the difference of the medians (CPU of tern and everything under it: bash, the jail's init, the checkpoint's git). **before**: `{before}` (the door, and a git snapshot of the workspace before the turn's first command); **now**: this build (the door's record is the checkpoint: nothing is scanned before the command).\n\n"
    ));
    md.push_str("| workspace | first command, before (CPU ms) | first command, now (CPU ms) | now / before | session with the command, before / now (CPU ms) | wall with the command, before / now (ms) |\n|---|---|---|---|---|---|\n");
    for (name, files) in [("empty", 0usize), ("10,000 files", 10_000)] {
        let (mut b_cmd, mut n_cmd, mut b_none, mut n_none) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..FIRST_RUNS {
            b_cmd.push(first_run(before, files, true)?);
            n_cmd.push(first_run(TERN, files, true)?);
            b_none.push(first_run(before, files, false)?);
            n_none.push(first_run(TERN, files, false)?);
        }
        let cpu = |v: &[(f64, f64)]| median(&v.iter().map(|t| t.0).collect::<Vec<_>>());
        let wall = |v: &[(f64, f64)]| median(&v.iter().map(|t| t.1).collect::<Vec<_>>());
        let b = cpu(&b_cmd) - cpu(&b_none);
        let n = cpu(&n_cmd) - cpu(&n_none);
        md.push_str(&format!(
            "| {name} | {b:.1} | {n:.1} | **{:.2}×** | {:.1} / {:.1} | {:.0} / {:.0} |\n",
            n / b.max(0.001),
            cpu(&b_cmd),
            cpu(&n_cmd),
            wall(&b_cmd),
            wall(&n_cmd),
        ));
    }
    md.push('\n');
    Ok(md)
}

/// The section's Markdown.
pub(super) fn bench_door() -> R<String> {
    let mut md = String::from("## 15. The door: applying a command's layer\n\n");
    md.push_str(&format!(
        "Each scenario is a 2-request `tern exec` (the command, then an answer) in a fresh workspace, run {DOOR_RUNS} times per arm in rotation: **the door** (the default: the command writes a layer, tern applies it to the workspace after the command) and **the bind walls** (`--no-layer`: the command writes the workspace directly, git's folders shown as shadows, the construction before issue 42), in this build. \"tern\" is tern's own CPU (the door runs in it); \"all\" adds everything under it (bash, the jail's init, the checkpoint's git). Medians in ms.\n\n"
    ));
    md.push_str("| scenario | tern, door | tern, bind walls | ratio | all, door | all, bind walls | wall, door | wall, bind walls |\n|---|---|---|---|---|---|---|---|\n");
    for sc in &SCENARIOS {
        let (mut door, mut walls) = (Vec::new(), Vec::new());
        for _ in 0..DOOR_RUNS {
            door.push(door_run(sc.command, sc.files, true)?);
            walls.push(door_run(sc.command, sc.files, false)?);
        }
        let col = |v: &[(f64, f64, f64)], k: usize| {
            median(&v.iter().map(|t| [t.0, t.1, t.2][k]).collect::<Vec<_>>())
        };
        let (d0, w0) = (col(&door, 0), col(&walls, 0));
        md.push_str(&format!(
            "| {} | **{d0:.1}** | {w0:.1} | {:.2}× | {:.1} | {:.1} | {:.0} | {:.0} |\n",
            sc.name,
            d0 / w0.max(0.001),
            col(&door, 1),
            col(&walls, 1),
            col(&door, 2),
            col(&walls, 2),
        ));
    }
    md.push_str("\nThe door's own work is a walk of the layer's upper folder and a copy of what changed (a new file and a rename per changed file), in tern's process: every file a command writes is written twice, once in the layer and once by the door (a copy; on XFS and btrfs `copy_file_range` shares the blocks instead). On this machine's ext4 most of the door's CPU for 1,000 new files is the kernel's inode allocation (`perf`: `ext4_create` → `find_inode_bit` → `recently_deleted`), which the command itself pays once more in the layer (the same 1,000 creations from Python, in a fresh folder of this file system, took 130 to 1,150 ms of CPU from one folder to the next). Sharing the layer's inode with the workspace (a hard link) would halve it, but would let a command write the workspace in place without the door, so the door copies. The door also records each change for undo (issue 42, part 2): the file it replaces is hard-linked into the session's record before the rename (no copy), and one JSON line is appended per change. The bind walls arm still takes a git snapshot before the turn's first command (the checkpoint where no door records), the door arm none: the last row is mostly that difference.\n\n");
    if let Ok(before) = std::env::var(super::BASELINE_ENV) {
        md.push_str(&bench_first_command(&before)?);
    }
    Ok(md)
}
