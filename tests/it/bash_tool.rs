//! The `bash` tool against real processes in temp folders (cases C01–C08 in
//! shared/cases/bash-tool.md, plus environment, ordering and no-terminal behaviour).
//!
//! Sleep durations are unique per test (`sleep 617`, …) so that tests running in parallel cannot
//! see each other's processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tern::cancel::CancelToken;
use tern::procs::ProcessGroups;
use tern::tools::bash::{self, BashOutcome, BashRequest};
use tern::tools::output::{Limits, Shaper};

/// A generous bound proving a call did not hang; never a speed claim.
const NO_HANG: Duration = Duration::from_secs(15);

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cwd(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn spill_dir(&self) -> PathBuf {
        self.dir.path().join("spill")
    }

    fn run(&self, command: &str, timeout_s: u64) -> BashOutcome {
        self.run_full(command, timeout_s, &[], &[], &CancelToken::new())
    }

    fn run_full(
        &self,
        command: &str,
        timeout_s: u64,
        env: &[(&str, std::ffi::OsString)],
        env_remove: &[&str],
        cancel: &CancelToken,
    ) -> BashOutcome {
        let cwd = self.cwd();
        let spill = self.spill_dir();
        let req = BashRequest {
            command,
            timeout: Duration::from_secs(timeout_s),
            cwd: &cwd,
            env,
            env_remove,
            pass_env: &[],
            spill_dir: &spill,
            groups: &ProcessGroups::new(),
            sandbox: None,
            jail: None,
            mcp: None,
            streams: false,
        };
        bash::run(&req, cancel).expect("bash starts")
    }
}

/// Live (non-zombie) processes whose command line contains `needle`.
fn live_processes(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if cmdline.contains(needle) && !zombie {
            found.push(pid);
        }
    }
    found
}

/// Waits (up to 3 s, for the kernel to finish the kills) until no live process matches.
fn assert_no_process_left(needle: &str) {
    for _ in 0..30 {
        if live_processes(needle).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("processes still running: {:?}", live_processes(needle));
}

fn pid_after(content: &str, tag: &str) -> i32 {
    let rest = &content[content.find(tag).expect("pid printed") + tag.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

fn kill(pid: i32) {
    // SAFETY: plain kill(2) on a pid this test started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
}

#[test]
fn c01_background_child_holding_pipe_returns_when_shell_exits() {
    let env = Env::new();
    let out = env.run("sleep 631 & echo started pid:$!", 60);
    let bg = pid_after(&out.content, "pid:");
    let still_running = alive(bg);
    kill(bg);

    assert!(out.duration < NO_HANG, "took {:?}", out.duration);
    assert!(out.content.starts_with("started pid:"), "{}", out.content);
    assert!(out.background_held_output);
    assert!(
        out.content.ends_with(
            "[a background process still holds the output; returned when the shell exited] [exit 0]"
        ),
        "{}",
        out.content
    );
    assert!(!out.timed_out && !out.interrupted);
    assert_eq!(out.exit_code, Some(0));
    // A normal exit leaves background children alone (a server may be started on purpose).
    assert!(still_running, "background sleep was killed");
}

#[test]
fn c01_background_server_with_redirected_output() {
    let env = Env::new();
    let out = env.run(
        // The case's own server when python3 is there; else a background job of the same kind
        // (output redirected, still running), so the test needs only bash.
        "if command -v python3 >/dev/null; then python3 -m http.server 0 --bind 127.0.0.1 >/dev/null 2>&1 & else sleep 617 >/dev/null 2>&1 & fi; echo pid:$!; sleep 1; echo up",
        60,
    );
    let server = pid_after(&out.content, "pid:");
    let still_running = alive(server);
    kill(server);

    assert!(out.duration < NO_HANG, "took {:?}", out.duration);
    assert!(out.content.ends_with("up\n[exit 0]"), "{}", out.content);
    assert!(!out.background_held_output);
    assert!(still_running, "server was killed");
}

#[test]
fn c02_stdin_is_dev_null() {
    let env = Env::new();
    let out = env.run("cat", 30);
    assert_eq!(out.content, "[no output] [exit 0]");
    assert!(!out.timed_out);

    let out = env.run("read x; echo got:$x", 30);
    assert_eq!(out.content, "got:\n[exit 0]");
    assert!(!out.timed_out);

    let out = env.run("readlink /proc/self/fd/0", 30);
    assert_eq!(out.content, "/dev/null\n[exit 0]");
}

#[test]
fn c03_timeout_kills_whole_tree_including_term_trappers() {
    let env = Env::new();
    let out = env.run(
        "echo before; sh -c 'trap \"\" TERM; sleep 617' & sleep 617",
        2,
    );
    assert!(out.timed_out && !out.interrupted);
    assert!(out.duration >= Duration::from_secs(2));
    assert!(out.duration < NO_HANG, "took {:?}", out.duration);
    assert!(out.content.starts_with("before\n"), "{}", out.content);
    assert!(
        out.content.contains(
            "[timed out after 2 s; process group killed] [killed by signal 15 (SIGTERM)]"
        ),
        "{}",
        out.content
    );
    assert_eq!(out.exit_code, None);
    assert_eq!(out.signal, Some(libc::SIGTERM));
    assert_no_process_left("sleep 617");
}

#[test]
fn c03_cancel_interrupts_and_kills_group() {
    let env = Env::new();
    let cancel = CancelToken::new();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            // Once the command runs (its `echo hi` is done), not after a fixed time.
            crate::support::procs::eventually(NO_HANG, || {
                !crate::support::procs::pids_running(&["sleep", "618"]).is_empty()
            });
            cancel.cancel();
        });
        env.run_full(
            "echo hi; sh -c 'trap \"\" TERM; sleep 618' & sleep 618",
            60,
            &[],
            &[],
            &cancel,
        )
    });
    assert!(out.interrupted && !out.timed_out);
    assert!(out.duration < NO_HANG, "took {:?}", out.duration);
    assert!(out.content.starts_with("hi\n"), "{}", out.content);
    assert!(
        out.content.contains("[interrupted by the user after ")
            && out.content.contains(" s; process group killed]"),
        "{}",
        out.content
    );
    assert_no_process_left("sleep 618");
}

#[test]
fn c04_enormous_output_head_tail_marker_and_spill() {
    let env = Env::new();
    let out = env.run("seq 1 3000000", 120);
    let expected_bytes: u64 = (1..=3_000_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum();
    assert_eq!(out.output_bytes, expected_bytes);
    assert!(
        out.content.starts_with("1\n2\n3\n"),
        "{}",
        &out.content[..50]
    );
    assert!(out.content.ends_with("2999999\n3000000\n[exit 0]"));
    assert!(
        out.content.len() <= bash::OUTPUT_CAP_BYTES + 300,
        "{} bytes",
        out.content.len()
    );

    let spill = out.spill_path.clone().expect("spill file");
    assert!(spill.starts_with(env.spill_dir()));
    let marker = out
        .content
        .lines()
        .find(|l| l.starts_with('['))
        .expect("marker line");
    assert!(
        marker.contains("lines left out; full output: ")
            && marker.contains(&spill.display().to_string()),
        "{marker}"
    );
    // The counts add up: kept lines + left-out lines = 3 000 000.
    let left: u64 = marker
        .split(", ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let kept = out.content.lines().filter(|l| !l.starts_with('[')).count() as u64;
    assert_eq!(left + kept, 3_000_000, "{marker}");

    let data = std::fs::read(&spill).unwrap();
    assert_eq!(data.len() as u64, expected_bytes);
    assert!(data.starts_with(b"1\n2\n"));
    assert!(data.ends_with(b"2999999\n3000000\n"));
}

#[test]
fn c04_shaper_memory_stays_bounded_over_200_mb() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        head_bytes: bash::OUTPUT_CAP_BYTES / 2,
        tail_bytes: bash::OUTPUT_CAP_BYTES / 2,
        memory_bytes: bash::RAW_MEMORY_BYTES,
        spill_bytes: bash::SPILL_CAP_BYTES,
    };
    let mut shaper = Shaper::new(dir.path(), limits);
    let chunk: Vec<u8> = (0..)
        .flat_map(|i| format!("line {i:06} {}\n", "x".repeat(i % 120)).into_bytes())
        .take(64 * 1024)
        .collect();
    let total: u64 = 200 * 1024 * 1024;
    let mut pushed = 0u64;
    let mut peak = 0;
    while pushed < total {
        shaper.push(&chunk);
        pushed += chunk.len() as u64;
        peak = peak.max(shaper.buffered_bytes());
    }
    // Head, a tail ring of up to 3× its size, the raw memory buffer, one pending line and one
    // chunk of scratch: about 250 KiB, whatever the total.
    assert!(peak <= 512 * 1024, "peak {peak} bytes");
    let out = shaper.finish();
    assert_eq!(out.raw_bytes, pushed);
    let spill = out.spill_path.expect("spill file");
    assert_eq!(
        std::fs::metadata(&spill).unwrap().len(),
        bash::SPILL_CAP_BYTES
    );
    assert!(
        out.text.contains(&format!(
            "full output (first {} bytes only): ",
            bash::SPILL_CAP_BYTES
        )),
        "{}",
        out.text
    );
}

#[test]
fn c05_escapes_stripped_and_redraws_collapsed() {
    let env = Env::new();
    let out = env.run(
        r"printf '\033[1;31mFAIL\033[0m\n\033[2K\r10%%\r100%%\n'",
        30,
    );
    assert_eq!(out.content, "FAIL\n100%\n[exit 0]");

    let out = env.run(
        r#"echo "$NO_COLOR $TERM $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT""#,
        30,
    );
    assert_eq!(out.content, "1 dumb cat cat 0\n[exit 0]");
}

#[test]
fn c06_invalid_utf8_replaced_and_counted() {
    let env = Env::new();
    let out = env.run(r"printf 'ok \xff\xfe \xc3\x28 end\n'", 30);
    assert_eq!(
        out.content,
        "ok \u{FFFD}\u{FFFD} \u{FFFD}( end\n[3 invalid UTF-8 bytes replaced] [exit 0]"
    );
    // What goes into history round-trips as JSON.
    let line = serde_json::to_string(&json!({"content": out.content})).unwrap();
    let back: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(back["content"], out.content.as_str());
}

#[test]
fn c06_binary_output_not_shown() {
    let env = Env::new();
    let out = env.run("head -c 2048 /bin/ls", 30);
    assert!(
        out.content
            .starts_with("[binary output, 2048 bytes, not shown; full output: "),
        "{}",
        out.content
    );
    assert!(out.content.ends_with("]\n[exit 0]"), "{}", out.content);
    let spill = out.spill_path.expect("spill file");
    let ls = std::fs::read("/bin/ls").unwrap();
    assert_eq!(std::fs::read(spill).unwrap(), ls[..2048]);
}

#[test]
fn c07_nul_in_arguments_is_an_error() {
    let err = bash::parse_args(&json!({"command": "echo a\u{0000}b"})).unwrap_err();
    // Bad arguments: the call did not run (the model reads why and may retry).
    assert!(
        matches!(err, tern::tools::ToolError::Arguments(_)),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("command contains a NUL byte"), "{err}");
}

#[test]
fn c07_nul_in_output_shown_visibly_or_as_binary() {
    let env = Env::new();
    let out = env.run(r"printf 'a\0b\0c'", 30);
    assert!(!out.content.contains('\0'));
    // Two NULs in five bytes: mostly binary.
    assert!(
        out.content
            .starts_with("[binary output, 5 bytes, not shown; "),
        "{}",
        out.content
    );

    let out = env.run(r"printf 'one\0two\0three four five six\n'", 30);
    assert_eq!(
        out.content,
        "one\\0two\\0three four five six\n[2 NUL bytes shown as \\0] [exit 0]"
    );
}

/// Splits `head\n[marker]\ntail\n[exit 0]` content into head and tail lines.
fn head_and_tail(content: &str) -> (&str, &str) {
    let lines: Vec<&str> = content.split('\n').collect();
    assert_eq!(lines.len(), 4, "{content}");
    assert!(
        lines[1].starts_with('[') && lines[1].contains("left out"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[3], "[exit 0]");
    (lines[0], lines[2])
}

#[test]
fn c08_cut_inside_three_byte_characters() {
    let env = Env::new();
    // `python3 -c "print('中'*40000)"` in the case; the same bytes from bash alone.
    let out = env.run(r#"printf '中%.0s' $(seq 40000); echo"#, 60);
    assert!(out.spill_path.is_some());
    let (head, tail) = head_and_tail(&out.content);
    for part in [head, tail] {
        assert!(!part.is_empty() && part.len() <= bash::OUTPUT_CAP_BYTES / 2);
        assert!(part.chars().all(|c| c == '中'), "{part}");
    }
}

#[test]
fn c08_cut_near_four_byte_characters() {
    let env = Env::new();
    // `python3 -c "print('a'*29999+'😀'*10)"` in the case; the same bytes from bash alone.
    let out = env.run(
        r#"printf 'a%.0s' $(seq 29999); printf '😀%.0s' $(seq 10); echo"#,
        60,
    );
    let (head, tail) = head_and_tail(&out.content);
    assert!(head.len() <= bash::OUTPUT_CAP_BYTES / 2 && head.chars().all(|c| c == 'a'));
    assert!(tail.len() <= bash::OUTPUT_CAP_BYTES / 2);
    assert!(tail.ends_with(&"😀".repeat(10)), "{tail}");
    assert!(tail.chars().all(|c| c == 'a' || c == '😀'));
    assert!(!out.content.contains('\u{FFFD}'));
}

#[test]
fn stdout_and_stderr_interleave_in_order() {
    let env = Env::new();
    let out = env.run(
        "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done",
        30,
    );
    let want: String = (1..=5).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(out.content, format!("{want}[exit 0]"));
}

/// Asked for (a PostToolUse hook reads them), stdout and stderr come apart too, each bounded;
/// the model's text still holds both.
#[test]
fn stdout_and_stderr_apart_when_asked() {
    let env = Env::new();
    let (cwd, spill) = (env.cwd(), env.spill_dir());
    let run = |command: &str| {
        let req = BashRequest {
            command,
            timeout: Duration::from_secs(30),
            cwd: &cwd,
            env: &[],
            env_remove: &[],
            pass_env: &[],
            spill_dir: &spill,
            groups: &ProcessGroups::new(),
            sandbox: None,
            jail: None,
            mcp: None,
            streams: true,
        };
        bash::run(&req, &CancelToken::new()).expect("bash starts")
    };
    let out = run("for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 4");
    let s = out.streams.expect("streams");
    assert_eq!(s.stdout, "out1\nout2\nout3\n");
    assert_eq!(s.stderr, "err1\nerr2\nerr3\n");
    assert_eq!(out.exit_code, Some(4));
    let mut lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.pop(), Some("[exit 4]"));
    lines.sort_unstable();
    assert_eq!(lines, ["err1", "err2", "err3", "out1", "out2", "out3"]);
    // Each stream is kept up to its bound, and says it was cut.
    let out = run("head -c 200000 /dev/zero | tr '\\0' a; echo; echo small >&2");
    let s = out.streams.expect("streams");
    assert!(
        s.stdout.starts_with(&"a".repeat(1000)),
        "{}",
        &s.stdout[..50]
    );
    assert!(
        s.stdout
            .ends_with(&format!("\n[cut at {} bytes]", bash::STREAM_BYTES)),
        "{}",
        &s.stdout[s.stdout.len() - 60..]
    );
    assert_eq!(s.stderr, "small\n");
    // Not asked for: none.
    assert!(env.run("echo x", 30).streams.is_none());
}

#[test]
fn environment_added_fixed_and_removed() {
    let env = Env::new();
    // Any variable this test process inherited (bash sets PWD, SHLVL and _ itself).
    let (inherited, _) = std::env::vars()
        .filter(|(k, _)| !["PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(&k.as_str()))
        .find(|(k, _)| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .expect("some inherited variable");
    let added = vec![
        ("TERN_T_ADDED", "yes".into()),
        ("TERN_T_BOTH", "no".into()),
        ("TERM", "dumb-override".into()),
    ];
    let removed = ["TERN_T_BOTH", inherited.as_str()];
    let out = env.run_full(
        &format!(
            "echo $TERN_T_ADDED $TERM; printenv TERN_T_BOTH; echo rc=$?; printenv {inherited}; echo rc=$?"
        ),
        30,
        &added,
        &removed,
        &CancelToken::new(),
    );
    assert_eq!(out.content, "yes dumb-override\nrc=1\nrc=1\n[exit 0]");
}

#[test]
fn own_session_and_no_terminal() {
    let env = Env::new();
    let out = env.run(
        r#"read -r _ _ _ _ pgrp sid _ < /proc/$$/stat; [ "$pgrp" = $$ ] && [ "$sid" = $$ ] && echo own-session"#,
        30,
    );
    assert_eq!(out.content, "own-session\n[exit 0]");

    // Password prompts read /dev/tty; without a controlling terminal that fails at once.
    let out = env.run("read -r pw < /dev/tty; echo rc=$?", 30);
    assert!(!out.timed_out);
    assert!(out.content.contains("rc=1"), "{}", out.content);

    // A real password prompt, where python3 is installed (it is not needed elsewhere).
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok()
    {
        let out = env.run(
            r#"python3 -c 'import getpass; getpass.getpass("password: ")'; echo rc=$?"#,
            30,
        );
        assert!(!out.timed_out);
        assert!(out.duration < NO_HANG);
        assert!(out.content.contains("rc=1"), "{}", out.content);
    }
}

#[test]
fn git_commit_without_message_fails_fast() {
    let env = Env::new();
    let home = env.cwd().join("home");
    std::fs::create_dir(&home).unwrap();
    let vars: Vec<(&str, std::ffi::OsString)> = [
        ("HOME", home.to_str().unwrap()),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
    ]
    .iter()
    .map(|(k, v)| (*k, v.into()))
    .collect();
    let out = env.run_full(
        "git init -q repo && cd repo && echo hi > f && git add f && git commit; echo rc=$?",
        30,
        &vars,
        &[],
        &CancelToken::new(),
    );
    assert!(!out.timed_out);
    assert!(out.duration < NO_HANG);
    assert!(
        out.content.contains("no editor here: pass the text inline"),
        "{}",
        out.content
    );
    assert!(out.content.contains("rc=1"), "{}", out.content);
}

#[test]
fn exit_codes_and_signals_reported() {
    let env = Env::new();
    let out = env.run("echo x; exit 3", 30);
    assert_eq!(out.content, "x\n[exit 3]");
    assert_eq!(out.exit_code, Some(3));

    let out = env.run("kill -9 $$", 30);
    assert_eq!(out.content, "[no output] [killed by signal 9 (SIGKILL)]");
    assert_eq!((out.exit_code, out.signal), (None, Some(9)));
}

#[test]
fn runs_in_cwd_and_reports_spawn_errors() {
    let env = Env::new();
    let out = env.run("pwd", 30);
    assert_eq!(out.content, format!("{}\n[exit 0]", env.cwd().display()));
    assert!(out.spill_path.is_none());
    assert!(
        !env.spill_dir().exists(),
        "no spill folder when nothing was cut"
    );

    let missing = env.cwd().join("missing");
    let req = BashRequest {
        command: "true",
        timeout: Duration::from_secs(5),
        cwd: &missing,
        env: &[],
        env_remove: &[],
        pass_env: &[],
        spill_dir: Path::new("/nonexistent"),
        groups: &ProcessGroups::new(),
        sandbox: None,
        jail: None,
        mcp: None,
        streams: false,
    };
    let err = bash::run(&req, &CancelToken::new()).unwrap_err();
    assert!(matches!(err, tern::tools::ToolError::Failed(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("could not start bash"), "{err}");
}
