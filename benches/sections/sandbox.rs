//! Section 6: the sandbox's cost per bash call (issue 10).

use super::*;

/// Interleaved calls per path in the sandbox section.
pub(super) const SANDBOX_CALLS: usize = 200;

/// In a fresh process: times SANDBOX_CALLS round trips of `bash -c true` through
/// `tern::tools::bash::run` without a sandbox and with one (workspace-write: `sandbox::prepare`,
/// the call and dropping the `Prepared`, as each real call pays), interleaved; `prepare` alone;
/// and the state-folder guard (`Snapshot::take` before, `changes` after) over a session folder
/// of typical sizes. Prints the lists (ms) as one JSON line. Args: scratch folder.
pub(super) fn sandbox_child(args: &[String]) -> R<()> {
    use tern::sandbox::{self, Mode, Policy, Snapshot};
    let [dir] = args else {
        return Err("usage: --sandbox-child DIR".into());
    };
    let dir = Path::new(dir);
    let ws = dir.join("ws");
    let session = ws.join(".tern/sessions/20260101-000000-abcd");
    fs::create_dir_all(&session).map_err(|e| e.to_string())?;
    let spill = dir.join("spill");
    let cancel = tern::cancel::CancelToken::new();
    let groups = tern::procs::ProcessGroups::new();
    let files: [(&str, usize); 6] = [
        ("system.txt", 8_000),
        ("plan.md", 2_000),
        ("plan.json", 3_000),
        ("ledger.json", 2_000),
        ("meta.json", 500),
        ("conversation.jsonl", 400_000),
    ];
    let protected: Vec<_> = files.iter().map(|(n, _)| session.join(n)).collect();
    for ((_, size), path) in files.iter().zip(&protected) {
        fs::write(path, "x".repeat(*size)).map_err(|e| e.to_string())?;
    }
    // As the runtime does: one private TMPDIR, given to every call and emptied after it.
    let folder = sandbox::TempFolder::new().map_err(|e| e.to_string())?;
    let policy = Policy {
        mode: Mode::WorkspaceWrite,
        workspace: ws.clone(),
        no_network: false,
        network_in_namespace: false,
        add_dirs: Vec::new(),
        draft_file: Some(session.join("plan.draft.md")),
        tmpdir: Some(folder.path().to_path_buf()),
    };
    // A folder of its own per call (tern before: a mkdir and an rmdir each time).
    let own_folder = Policy {
        tmpdir: None,
        ..policy.clone()
    };
    let run = |sb: Option<&sandbox::Prepared>| -> R<()> {
        let req = tern::tools::bash::BashRequest {
            command: "true",
            timeout: Duration::from_secs(60),
            cwd: &ws,
            env: &[],
            env_remove: &[],
            pass_env: &[],
            spill_dir: &spill,
            groups: &groups,
            sandbox: sb,
            jail: None,
            mcp: None,
            streams: false,
        };
        let out = tern::tools::bash::run(&req, &cancel)?;
        if out.exit_code != Some(0) {
            return Err(format!("bash tool: {}", out.content));
        }
        Ok(())
    };
    let (mut plain, mut boxed, mut prep, mut prep_own, mut take, mut check) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    for i in 0..SANDBOX_CALLS {
        // ABBA order, so neither path always runs right after the other.
        for first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if first {
                run(None)?;
                plain.push(ms(t));
            } else {
                let p = sandbox::prepare(&policy).map_err(|e| e.to_string())?;
                run(Some(&p))?;
                drop(p);
                folder.clear().map_err(|e| e.to_string())?;
                boxed.push(ms(t));
            }
        }

        let t = Instant::now();
        let p = sandbox::prepare(&policy).map_err(|e| e.to_string())?;
        drop(p);
        folder.clear().map_err(|e| e.to_string())?;
        prep.push(ms(t));

        let t = Instant::now();
        let p = sandbox::prepare(&own_folder).map_err(|e| e.to_string())?;
        drop(p);
        prep_own.push(ms(t));

        let t = Instant::now();
        let snap = Snapshot::take(&protected);
        take.push(ms(t));
        let t = Instant::now();
        let changes = snap.changes();
        check.push(ms(t));
        if !changes.is_empty() {
            return Err(format!("guard saw changes: {changes:?}"));
        }
    }
    println!(
        "{}",
        json!({
            "plain_ms": plain, "sandboxed_ms": boxed, "prepare_ms": prep,
            "prepare_own_ms": prep_own, "take_ms": take, "changes_ms": check,
            "abi": sandbox::landlock_abi().ok(),
            "guard_bytes": files.iter().map(|(_, n)| n).sum::<usize>(),
        })
    );
    Ok(())
}

pub(super) fn bench_sandbox() -> R<String> {
    let mut md = String::from(
        "## 6. Sandbox: cost per bash call

",
    );
    let abi = match tern::sandbox::landlock_abi() {
        Ok(n) => n,
        Err(why) => {
            let _ = writeln!(md, "Skipped: no Landlock on this machine ({why}).\n");
            return Ok(md);
        }
    };
    let v = child_figures("--sandbox-child")?;
    let list = |k: &str| floats(&v, k);
    let row = |md: &mut String, name: &str, l: &[f64]| {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms |",
            median(l),
            percentile(l, 90.0)
        );
    };
    let (plain, boxed) = (list("plain_ms"), list("sandboxed_ms"));
    let _ = writeln!(
        md,
        "Round trip of `bash -c true` through `tools::bash::run`, {SANDBOX_CALLS} calls each, \
         interleaved (alternating which goes first) in one fresh process, Landlock ABI {abi}:\n\n| path | median | p90 |\n|---|---|---|"
    );
    row(&mut md, "no sandbox (`sandbox: None`)", &plain);
    row(
        &mut md,
        "workspace-write: `sandbox::prepare` + call + drop + `TempFolder::clear`",
        &boxed,
    );
    let _ = writeln!(
        md,
        "| difference of medians (the sandbox's cost per call) | **{:.3} ms** | |",
        median(&boxed) - median(&plain)
    );
    row(
        &mut md,
        "`sandbox::prepare` + drop + `TempFolder::clear` alone (the runtime's way)",
        &list("prepare_ms"),
    );
    row(
        &mut md,
        "`sandbox::prepare` + drop with a temp folder of its own (mkdir + rmdir per call)",
        &list("prepare_own_ms"),
    );
    let kb = v["guard_bytes"].as_u64().unwrap_or(0) as f64 / 1000.0;
    row(
        &mut md,
        &format!("guard: `Snapshot::take` of 6 state files ({kb:.0} kB, all copied)"),
        &list("take_ms"),
    );
    row(
        &mut md,
        "guard: `Snapshot::changes` (6 `lstat`)",
        &list("changes_ms"),
    );
    md.push_str(
        "\nHow measured: this bench binary re-runs itself as a fresh process (`--sandbox-child`) \
         and times each path with `Instant` around the call. The sandboxed path includes the \
         per-call preparation (probe, Landlock ruleset with the workspace, the private `TMPDIR` \
         folder, /dev/null and the draft file) and emptying that folder after the call (the \
         folder is made once, as the runtime makes it once per session run; the last row but \
         two shows what making and removing one per call cost, on this machine's `/tmp`); the child \
         then applies it with `prctl` + `landlock_restrict_self` before exec. The difference of \
         medians is what a call pays; `prepare` + drop timed alone can read higher, because \
         there the kernel frees the unused ruleset at once (under strace the `close` of the \
         ruleset descriptor is its slowest step), which a real call overlaps. The guard rows \
         are a separate cost the runtime adds around each call: `take` reads the small files \
         (here a 400 kB conversation is under the 1 MiB copy limit, so it is copied too), \
         `changes` is one `lstat` per file.\n\n",
    );
    Ok(md)
}
