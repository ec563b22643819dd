//! The provider set up once (issue 21): `tern setup` by flags, the config file laid under the
//! environment and the flags (config < environment < flags), `tern status` naming where each
//! value came from, and a key file others can read refused. (The interactive `tern setup` is
//! driven in tmux: tmux.rs.)

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::cli::{Ws, run, tern_clean};
use crate::support::{FakeServer, Wire, script};

fn config_path(ws: &Ws) -> PathBuf {
    ws.home().join(".config/tern/config.json")
}

/// `tern ARGS` in `ws` with only PATH and HOME (no provider in the environment).
fn tern(ws: &Ws, args: &[&str]) -> std::process::Command {
    let mut c = tern_clean(&ws.home());
    c.current_dir(ws.path()).args(args);
    c
}

fn setup_by_flags(ws: &Ws, fake: &FakeServer, extra: &[&str]) -> crate::support::cli::Out {
    std::fs::create_dir_all(ws.home()).unwrap();
    let base = fake.openai_base();
    let mut args = vec![
        "setup",
        "--provider",
        "openai",
        "--base-url",
        &base,
        "--model",
        "cfg-model",
        "--yes",
    ];
    args.extend_from_slice(extra);
    run(tern(ws, &args), "")
}

#[test]
fn setup_by_flags_tests_the_server_and_writes_a_private_file_every_command_uses() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![script::text(w, "OK"), script::text(w, "hello")]);
    let out = setup_by_flags(&ws, &fake, &["--api-key", "sk-cfg-key-123456"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    // One tiny test request, with the key and the model.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].json()["model"], "cfg-model");
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-cfg-key-123456")
    );
    let path = config_path(&ws);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{path:?}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["provider"], "openai");
    assert_eq!(file["model"], "cfg-model");
    assert_eq!(file["api_key"], "sk-cfg-key-123456");
    // No temp file left beside it.
    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["config.json"]);
    // `tern exec` with nothing in the environment talks to the configured server.
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let reqs = fake.requests();
    assert_eq!(reqs[1].json()["model"], "cfg-model");
    assert_eq!(
        reqs[1].header("authorization"),
        Some("Bearer sk-cfg-key-123456")
    );
    // The key is in no file tern wrote.
    for e in walk(&ws.path().join(".tern")) {
        let text = std::fs::read_to_string(&e).unwrap_or_default();
        assert!(!text.contains("sk-cfg-key-123456"), "{e:?}");
    }
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_failing_test_request_writes_nothing() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![crate::support::Reply::status(
        401,
        r#"{"error": {"message": "bad key"}}"#,
    )]);
    let out = setup_by_flags(&ws, &fake, &["--api-key", "sk-wrong-000000"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("nothing was written"), "{out:?}");
    assert!(!out.stderr.contains("sk-wrong-000000"), "{out:?}");
    assert!(!config_path(&ws).exists());
}

#[test]
fn config_then_environment_then_flags() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::text(w, "a"),
        script::text(w, "b"),
        script::text(w, "c"),
    ]);
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        json!({"base_url": fake.openai_base(), "model": "cfg-model", "max_output_tokens": 333,
               "temperature": 0.25})
        .to_string(),
    )
    .unwrap();
    // The config alone.
    let out = run(tern(&ws, &["exec", "one"]), "");
    assert_eq!(out.code, Some(0), "{out:?}");
    // The environment over it.
    let mut c = tern(&ws, &["exec", "two"]);
    c.env("TERN_MODEL", "env-model")
        .env("TERN_TEMPERATURE", "0.5");
    assert_eq!(run(c, "").code, Some(0));
    // A flag over both.
    let mut c = tern(
        &ws,
        &[
            "exec",
            "--model",
            "flag-model",
            "--max-output-tokens",
            "444",
            "three",
        ],
    );
    c.env("TERN_MODEL", "env-model");
    assert_eq!(run(c, "").code, Some(0));
    let reqs: Vec<Value> = fake.requests().iter().map(|r| r.json()).collect();
    assert_eq!(reqs[0]["model"], "cfg-model");
    assert_eq!(reqs[0]["max_tokens"], 333);
    assert_eq!(reqs[0]["temperature"], 0.25);
    assert_eq!(reqs[1]["model"], "env-model");
    assert_eq!(reqs[1]["temperature"], 0.5);
    assert_eq!(reqs[2]["model"], "flag-model");
    assert_eq!(reqs[2]["max_tokens"], 444);
    // `tern status` says where each value came from.
    let mut c = tern(&ws, &["status"]);
    c.env("TERN_MODEL", "env-model");
    let out = run(c, "");
    let line = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {out:?}"))
            .to_string()
    };
    assert!(line("model").contains("environment TERN_MODEL"), "{out:?}");
    assert!(line("base_url").contains("config "), "{out:?}");
    assert!(line("max_output_tokens").contains("333"), "{out:?}");
    assert!(line("approval").contains("default"), "{out:?}");
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        json!({"base_url": fake.openai_base(), "api_key": "sk-shared-999999"}).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("chmod 600"), "{out:?}");
    assert!(!out.stderr.contains("sk-shared-999999"), "{out:?}");
    assert!(fake.requests().is_empty());
    // A project's config may hold no key at all.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        ws.path().join(".tern/config.json"),
        json!({"api_key_command": "echo sk-project"}).to_string(),
    )
    .unwrap();
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("reads keys only from"), "{out:?}");
}

/// After the README's two commands `tern` is not on the PATH yet: the demo's hints then name
/// the binary that runs; once a `tern` is on the PATH, they say `tern`.
#[test]
fn demo_hints_say_tern_only_when_it_is_on_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let demo = |path: &std::ffi::OsStr, n: u32| {
        let mut c = std::process::Command::new(crate::support::cli::TERN);
        c.env_clear()
            .env("PATH", path)
            .env("HOME", tmp.path())
            .args(["demo", "--workspace"])
            .arg(tmp.path().join(format!("ws{n}")));
        let out = crate::support::cli::output(c);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let system = std::env::var_os("PATH").unwrap_or_default();
    // `bin` first, holding no tern: the full path.
    let mut paths = vec![bin.clone()];
    paths.extend(std::env::split_paths(&system).filter(|p| !p.join("tern").exists()));
    let without = std::env::join_paths(&paths).unwrap();
    let text = demo(&without, 1);
    let full = format!("{} status", crate::support::cli::TERN);
    assert!(text.contains(&full), "{text}");
    assert!(!text.contains("&& tern status"), "{text}");
    // A tern on the PATH: `tern status`.
    std::os::unix::fs::symlink(crate::support::cli::TERN, bin.join("tern")).unwrap();
    let text = demo(&without, 2);
    assert!(text.contains("&& tern status && tern stats"), "{text}");
    assert!(!text.contains(&full), "{text}");
}

/// `/model NAME` in the REPL: the next request goes to NAME, recorded as a declared boundary,
/// and `/model` alone names it.
#[test]
fn the_repl_switches_the_model_with_slash_model() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![script::text(w, "a"), script::text(w, "b")]);
    let mut cmd = ws.tern(&fake);
    cmd.args(["chat", "--approval", "auto"]);
    let out = run(cmd, "first\n/model bigger-model\n/model\nsecond\n/quit\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("model: m → bigger-model; the next request goes to bigger-model"),
        "{out:?}"
    );
    assert!(all.contains("model: bigger-model\n"), "{out:?}");
    let reqs = fake.requests();
    assert_eq!(reqs[0].json()["model"], "m");
    assert_eq!(reqs[1].json()["model"], "bigger-model");
    let events = crate::support::files::jsonl(&ws.current_dir().join("events.jsonl"));
    assert!(
        events.iter().any(|e| e["type"] == "boundary"
            && e["kind"] == "model_switch"
            && e["to"] == "openai/bigger-model"),
        "{events:#?}"
    );
    let meta = crate::support::files::read_json(&ws.current_dir().join("meta.json"));
    assert_eq!(meta["model"], "bigger-model");
}

/// An editor may run the terminal auth method as its agent command plus the method's args
/// (`tern acp setup`): that is `tern setup` too.
#[test]
fn tern_acp_setup_is_tern_setup() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "OK")]);
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        json!({"base_url": fake.openai_base(), "model": "saved-model"}).to_string(),
    )
    .unwrap();
    // No terminal: nothing is asked; the saved values are tested and written back.
    let out = run(tern(&ws, &["acp", "setup"]), "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(fake.requests()[0].json()["model"], "saved-model");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// The key `tern setup` saved is out of the commands' reach: the jail hides ~/.config/tern.
#[test]
fn the_sandbox_cannot_read_the_configs_key() {
    let ws = Ws::new();
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        script::text(w, "OK"),
        script::bash(
            w,
            "k1",
            "cat \"$HOME/.config/tern/config.json\"; echo rc=$?",
        ),
        script::text(w, "done"),
    ]);
    let out = setup_by_flags(&ws, &fake, &["--api-key", "sk-saved-key-777777"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut c = tern(&ws, &["exec", "read the config"]);
    c.env("HOME", ws.home());
    let out = run(c, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let body = fake.requests()[2].body_str();
    assert!(body.contains("rc="), "{body}");
    assert!(!body.contains("rc=0"), "the command read the file: {body}");
    assert!(!body.contains("sk-saved-key-777777"), "{body}");
}

/// An `api_key_command` that hangs (a password manager waiting on a prompt no one sees) must not
/// hang tern: past `api_key_command_timeout` its process group is killed, what it started in
/// the background included, and tern stops with exit 2 naming the file and the setting.
#[test]
fn a_hanging_key_command_is_killed_with_its_group() {
    let ws = Ws::new();
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let pids = ws.path().join("key-pids");
    let cmd = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > '{}'; echo $$ >> '{}'; wait",
        pids.display(),
        pids.display()
    );
    std::fs::write(
        &path,
        json!({"base_url": "http://127.0.0.1:9/v1", "api_key_command": cmd,
               "api_key_command_timeout": 1})
        .to_string(),
    )
    .unwrap();
    let out = crate::support::cli::run_within(
        tern(&ws, &["exec", "hi"]),
        Some(""),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains(&path.display().to_string())
            && out.stderr.contains("\"api_key_command\"")
            && out.stderr.contains("did not finish within 1 s"),
        "{out:?}"
    );
    // The shell and its background sleep are gone (dead, or a zombie no one reaped yet).
    let text = std::fs::read_to_string(&pids).unwrap();
    for pid in text.split_whitespace() {
        let gone = crate::support::procs::eventually(std::time::Duration::from_secs(10), || {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => true,
                Ok(s) => s
                    .rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            }
        });
        assert!(gone, "process {pid} of the key command still runs");
    }
    // A timeout out of range is refused, naming the setting.
    std::fs::write(
        &path,
        json!({"api_key_command": "echo k", "api_key_command_timeout": 0}).to_string(),
    )
    .unwrap();
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("api_key_command_timeout"), "{out:?}");
}

/// An invalid base URL is a usage error (exit 2) at start, whatever is wrong in it (the
/// authority too: `http://[::1` used to pass the check and fail at the first request, exit 1);
/// and errors name where the value really came from: the flag, or the config file's setting
/// (as `tern status` shows it), never a variable that was not set.
#[test]
fn bad_settings_are_usage_errors_naming_their_real_source() {
    let ws = Ws::new();
    for bad in [
        "http://[::1",
        "http://[::1/v1",
        "http://[nope]:8080/v1",
        "http://127.0.0.1:99999/v1",
        "http://exa mple.com/v1",
        "http:///v1",
        "http://host:port/v1",
    ] {
        let out = run(tern(&ws, &["exec", "--base-url", bad, "hi"]), "");
        assert_eq!(out.code, Some(2), "{bad}: {out:?}");
        assert!(out.stderr.contains("--base-url"), "{bad}: {out:?}");
    }
    // A valid one still passes.
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "fine")]);
    let base = fake.openai_base();
    let out = run(tern(&ws, &["exec", "--base-url", &base, "hi"]), "");
    assert_eq!(out.code, Some(0), "{out:?}");
    // From the config file: the file and the setting are named, not OPENAI_BASE_URL.
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, json!({"base_url": "http://[::1"}).to_string()).unwrap();
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    let named = format!("\"base_url\" in {}", path.display());
    assert!(out.stderr.contains(&named), "{out:?}");
    assert!(!out.stderr.contains("OPENAI_BASE_URL"), "{out:?}");
    // A key that cannot go in a header, from the file: the file's setting is named.
    std::fs::write(
        &path,
        json!({"base_url": "http://127.0.0.1:9/v1", "api_key": "sk with spaces"}).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(tern(&ws, &["exec", "hi"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    let named = format!("\"api_key\" in {}", path.display());
    assert!(out.stderr.contains(&named), "{out:?}");
    assert!(!out.stderr.contains("OPENAI_API_KEY"), "{out:?}");
    // The same key from the environment: the variable is named.
    let mut c = tern(&ws, &["exec", "hi"]);
    c.env("OPENAI_API_KEY", "sk with spaces");
    let out = run(c, "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("OPENAI_API_KEY holds"), "{out:?}");
    // Folders and variable names from the environment are blamed on the variable, not a flag.
    for (var, value) in [
        ("TERN_ADD_DIRS", "/nonexistent-tern-dir"),
        ("TERN_READ_DIRS", "/nonexistent-tern-dir"),
        ("TERN_ENV", "OPENAI_API_KEY"),
    ] {
        let mut c = tern(&ws, &["exec", "--base-url", &base, "hi"]);
        c.env(var, value);
        let out = run(c, "");
        assert_eq!(out.code, Some(2), "{var}: {out:?}");
        assert!(
            out.stderr.contains(&format!("tern: {var} ")),
            "{var}: {out:?}"
        );
    }
}

/// Issue 30, item 7: bad usage of any setting, flag or variable, is exit 2 with the setting
/// named, before the model is asked (the fake server would record a request).
#[test]
fn bad_usage_of_any_setting_exits_2_naming_it() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![]);
    let base = fake.openai_base();
    let flags: &[(&[&str], &str)] = &[
        (&["--max-turns", "0"], "--max-turns"),
        (&["--approval", "x"], "--approval"),
        (&["--sandbox", "x"], "--sandbox"),
        (&["--add-dir", "/nonexistent-tern"], "--add-dir"),
        (&["--env", "BAD=1"], "--env"),
        (&["--model", ""], "--model"),
        (&["--context-window", "5"], "--context-window"),
        (&["--temperature", "nan"], "--temperature"),
        (&["--agent-depth", "99"], "--agent-depth"),
        (&["--goal", " "], "--goal"),
        (&["--goal-attempts", "0"], "--goal-attempts"),
        (&["--cd", "/nonexistent-tern"], "--cd"),
        (&["--max-wall-time", "x"], "--max-wall-time"),
        (&["--resume", "nope"], "nope"),
    ];
    for (args, named) in flags {
        let mut all = vec!["exec"];
        all.extend_from_slice(args);
        all.push("hi");
        let mut c = tern(&ws, &all);
        c.env("OPENAI_BASE_URL", &base).env("TERN_MODEL", "m");
        let out = run(c, "");
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(named), "{args:?}: {out:?}");
    }
    let vars = [
        ("TERN_SANDBOX", "x"),
        ("TERN_APPROVAL", "x"),
        ("TERN_NO_JAIL", "maybe"),
        ("TERN_DISK_FLOOR", "lots"),
        ("TERN_CHECKPOINTS", "maybe"),
        ("TERN_CHECKPOINT_MAX_FILE", "10M"),
        ("TERN_CHECKPOINT_BUDGET", "-1"),
        ("TERN_MAX_OUTPUT_TOKENS", "x"),
        ("TERN_TEMPERATURE", "x"),
        ("TERN_ADD_DIRS", "/nonexistent-tern"),
        ("TERN_ENV", "a b"),
        ("OPENAI_BASE_URL", "not a url"),
    ];
    for (k, v) in vars {
        let mut c = tern(&ws, &["exec", "hi"]);
        c.env("OPENAI_BASE_URL", &base)
            .env("TERN_MODEL", "m")
            .env(k, v);
        let out = run(c, "");
        assert_eq!(out.code, Some(2), "{k}={v}: {out:?}");
        assert!(out.stderr.contains(k), "{k}={v}: {out:?}");
    }
    assert!(fake.requests().is_empty(), "the model was asked");
}

/// Issue 34: status tells the truth. On a fresh workspace `tern status` shows the settings a run
/// would use (no session needed), flags included; in a REPL started with `--model`,
/// `--approval` and `--sandbox`, `/status` shows those values as coming from flags.
#[test]
fn status_shows_every_setting_with_its_source_flags_included() {
    let ws = Ws::new();
    let mut cmd = tern(
        &ws,
        &["status", "--model", "m-flag", "--sandbox", "read-only"],
    );
    cmd.env("TERN_MODEL", "m-env");
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert!(out.stdout.contains("no session yet"), "{}", out.stdout);
    assert_eq!(line(&out.stdout, "model "), "model m-flag flag");
    assert_eq!(line(&out.stdout, "sandbox "), "sandbox read-only flag");
    // A REPL started with flags: /status names them.
    let fake = FakeServer::start(vec![script::text(Wire::OpenAi, "hi")]);
    let mut cmd = tern(
        &ws,
        &[
            "--model",
            "m-repl",
            "--approval",
            "auto",
            "--sandbox",
            "read-only",
        ],
    );
    cmd.env("OPENAI_BASE_URL", fake.openai_base())
        .env("TERN_MODEL", "m-env");
    let out = run(cmd, "hello\n/status\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        line(&out.stdout, "model "),
        "model m-repl flag",
        "{}",
        out.stdout
    );
    assert_eq!(line(&out.stdout, "approval "), "approval auto flag");
    assert_eq!(line(&out.stdout, "sandbox "), "sandbox read-only flag");
}

/// Issue 46: a config file over 1 MiB is named (it was cut and misread: "EOF while parsing …
/// column 1048576"), and a link to a config that does not exist is named, not taken for no
/// config; the no-provider message names `tern setup`.
#[test]
fn a_huge_config_and_a_dangling_link_are_named_and_no_provider_names_setup() {
    let ws = Ws::new();
    let path = config_path(&ws);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let out = run(tern(&ws, &["exec", "go"]), "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("tern setup"), "{}", out.stderr);
    let big = format!("{{\"model\": \"m\", \"x\": \"{}\"}}", "a".repeat(1 << 20));
    std::fs::write(&path, big).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(tern(&ws, &["status"]), "");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("larger than 1 MiB"), "{}", out.stderr);
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(ws.path().join("nowhere.json"), &path).unwrap();
    let out = run(tern(&ws, &["status"]), "");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("which does not exist") && out.stderr.contains("nowhere.json"),
        "{}",
        out.stderr
    );
}
