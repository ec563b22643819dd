//! Section 3: start-up time and binary size.

use super::*;

pub(super) fn bench_startup() -> R<String> {
    let mut ms = Vec::with_capacity(VERSION_RUNS);
    let mut version = String::new();
    for i in 0..VERSION_RUNS {
        let t = Instant::now();
        let out = Command::new(TERN)
            .arg("--version")
            .env_clear()
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if !out.status.success() {
            return Err(format!("tern --version failed: {:?}", out.status));
        }
        if i == 0 {
            version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
    }
    let size = fs::metadata(TERN).map_err(|e| e.to_string())?.len();
    let file_kind = Command::new("file")
        .arg("-b")
        .arg(TERN)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let stripped = if s.contains("not stripped") {
                "not stripped (symbols kept; debuginfo stripped by the release profile's default)"
            } else {
                "stripped"
            };
            stripped.to_string()
        })
        .unwrap_or_else(|| "unknown".into());
    let mut md = String::new();
    md.push_str("## 3. Start-up time and binary size\n\n");
    md.push_str("| measure | value |\n|---|---|\n");
    let _ = writeln!(
        md,
        "| `tern --version` wall time, median ({VERSION_RUNS} runs) | **{:.2} ms** |",
        median(&ms)
    );
    let _ = writeln!(md, "| p90 | **{:.2} ms** |", percentile(&ms, 90.0));
    let _ = writeln!(
        md,
        "| min / max | {:.2} ms / {:.2} ms |",
        percentile(&ms, 0.0),
        percentile(&ms, 100.0)
    );
    let _ = writeln!(
        md,
        "| release binary size | **{:.2} MB** ({size} bytes), {file_kind} |",
        size as f64 / 1e6
    );
    let _ = writeln!(md, "| version printed | `{version}` |");
    md.push_str(
        "\nHow measured: wall clock from `spawn` to the end of `wait` of `tern --version` with an \
         empty environment, stdout captured through a pipe, run back to back; the first run is \
         included (the binary is in the page cache after the build). Size is the file size of \
         target/release/tern as `cargo bench` builds it (bench profile = release).\n\n",
    );
    Ok(md)
}
