//! `tern demo`: the bundled lesson. A replay provider plays scripted model answers while every
//! tool call runs for real in a fresh workspace and a real session folder is written; between
//! turns the lesson narrates and acts as the person (confirming the plan).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{Env, ProviderFlags};
use crate::launcher::{Launcher, Process, SessionRef};
use crate::output::{Human, Json};
use crate::provider::replay::{Replay, ScriptedAnswer};
use crate::runtime::{Config, Runtime, Surface};
use crate::store::{StateDir, files};

/// One step of the lesson.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Narration for the person.
    Say(String),
    /// A prompt the person types: runs one turn.
    Prompt(String),
    /// An operation the person runs (`plan_confirm`, `plan_cancel`, `plan_clear`, `undo`).
    Op(String),
    /// Show a session file (the locked-plan part of `system.txt`).
    Show(String),
    /// Show `tern status` for the session.
    Status(Option<()>),
    /// Show `tern stats` for the session.
    Stats(Option<()>),
}

/// The lesson file `prompts/demo/lesson.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Lesson {
    /// What happens, in order.
    pub steps: Vec<Step>,
    /// The scripted model answers, consumed by turn requests in order.
    pub answers: Vec<ScriptedAnswer>,
    /// The scripted summaries, consumed by compaction requests in order.
    pub summaries: Vec<String>,
}

/// The bundled lesson.
pub fn lesson() -> Result<Lesson, String> {
    serde_json::from_str(include_str!("../prompts/demo/lesson.json"))
        .map_err(|e| format!("the bundled lesson does not parse: {e}"))
}

/// Runs the demo in `workspace` (a fresh temporary folder when None, kept afterwards so the person
/// can look around). Returns the exit code.
pub fn run(process: &Process, workspace: Option<PathBuf>, json: bool) -> i32 {
    match run_inner(process, workspace, json) {
        Ok(code) => code,
        Err(e) => {
            crate::errln!("tern demo: {e}");
            1
        }
    }
}

fn run_inner(process: &Process, workspace: Option<PathBuf>, json: bool) -> Result<i32, String> {
    let lesson = lesson()?;
    let workspace = demo_workspace(workspace)?;
    let state = StateDir::at(&workspace, &workspace, None);
    let mut json_ui = Json;
    let mut human = Human::new();
    let ui: &mut dyn Surface = if json { &mut json_ui } else { &mut human };
    let say = |text: &str| {
        if !json {
            crate::outln!("\n── {text}");
        }
    };
    say(&format!("tern demo in {}", workspace.display()));

    let provider = Box::new(Replay::new(lesson.answers, lesson.summaries));
    let mut cfg = Config::new("demo-replay");
    cfg.base_url = "replay:prompts/demo/lesson.json".into();
    let launcher = Launcher::new(
        state,
        Env::default(),
        ProviderFlags::default(),
        cfg,
        process,
    )
    .with_provider(provider, "demo-replay");
    let mut rt = launcher
        .open(
            &SessionRef::New {
                title: "tern demo".into(),
            },
            ui,
        )
        .map_err(|e| e.to_string())?;
    for step in lesson.steps {
        if let Some(code) = play(step, &launcher, &mut rt, ui, json, &say)? {
            return Ok(code);
        }
    }
    let code = rt.finish(&Ok("demo complete".into()), ui);
    if !json {
        tour(&workspace, &rt.session().dir);
    }
    Ok(code)
}

/// Plays one step of the lesson. Some(exit code): a turn failed and the demo ends with it.
fn play(
    step: Step,
    launcher: &Launcher,
    rt: &mut Runtime,
    ui: &mut dyn Surface,
    json: bool,
    say: &dyn Fn(&str),
) -> Result<Option<i32>, String> {
    match step {
        Step::Say(text) => say(&text),
        Step::Prompt(p) => {
            if !json {
                crate::outln!("\n> {p}");
            }
            if let Err(e) = rt.run_turn(&p, ui) {
                let code = rt.finish(&Err(e.clone()), ui);
                if !json {
                    crate::errln!("tern demo: {e}");
                }
                return Ok(Some(code));
            }
        }
        Step::Op(op) => {
            if !json {
                match op.strip_prefix("plan_") {
                    Some(p) => crate::outln!("\n$ tern plan {p}"),
                    None => crate::outln!("\n$ tern {op}"),
                }
            }
            let r = match op.as_str() {
                "plan_confirm" => rt.plan_confirm(None, ui),
                "plan_cancel" => crate::runtime::plan::cancel(rt.session(), None, ui),
                "plan_clear" => rt.plan_clear(None, ui),
                // The verb as the person runs it (the op table's undo, on this runtime).
                "undo" => {
                    let mut target = crate::ops::Target {
                        launcher,
                        runtime: Some(rt),
                        session: None,
                        wait: false,
                    };
                    let op = crate::ops::get(crate::op_id::OpId::Undo);
                    let r = crate::ops::run(op, None, &mut target, ui);
                    if r.ok {
                        Ok(r.detail)
                    } else {
                        return Err(r.detail);
                    }
                }
                other => return Err(format!("unknown lesson op {other:?}")),
            };
            match r {
                Ok(m) if !json => crate::outln!("{m}"),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Step::Show(name) if !json => show(rt, &name),
        Step::Status(_) if !json => {
            crate::outln!("\n$ {} status", tern_command());
            crate::out!("{}", crate::status::render_text(rt.session(), None));
        }
        Step::Stats(_) if !json => {
            crate::outln!("\n$ {} stats", tern_command());
            let reqs = crate::stats::requests(rt.session()).map_err(|e| e.to_string())?;
            crate::out!("{}", crate::stats::render(&rt.session().id, &reqs));
        }
        _ => {}
    }
    Ok(None)
}

/// The demo's workspace: the folder given (new or empty: the lesson writes files there), else a
/// fresh temporary folder, kept afterwards.
fn demo_workspace(workspace: Option<PathBuf>) -> Result<PathBuf, String> {
    let workspace = match workspace {
        Some(w) => {
            // The lesson writes files in its workspace: a folder with anything in it is refused,
            // so no file of the person's is overwritten.
            if std::fs::read_dir(&w).is_ok_and(|mut d| d.next().is_some()) {
                return Err(format!(
                    "{} is not empty; the demo writes its files there: give a new or empty folder",
                    w.display()
                ));
            }
            std::fs::create_dir_all(&w).map_err(|e| format!("{}: {e}", w.display()))?;
            w.canonicalize()
                .map_err(|e| format!("{}: {e}", w.display()))?
        }
        None => tempfile::Builder::new()
            .prefix("tern-demo-")
            .tempdir()
            .map_err(|e| format!("could not create a temporary workspace: {e}"))?
            .keep(),
    };
    if !workspace.is_dir() {
        return Err(format!("{} is not a folder", workspace.display()));
    }
    Ok(workspace)
}

/// Prints the locked-plan section of a session file (the whole file when there is none).
fn show(rt: &Runtime, name: &str) {
    let text = rt
        .session()
        .read_text(name)
        .ok()
        .flatten()
        .unwrap_or_default();
    let part = match text.rfind("\n<locked_plan>\n") {
        Some(i) => &text[i + 1..],
        None => &text,
    };
    crate::outln!(
        "\n$ tail {name}   # the plan is now part of the system prompt\n{}",
        part.trim_end()
    );
}

/// How the hints name tern: `tern` when a `tern` is on the PATH, else the full path of the
/// binary that runs (after `cargo run`, before `cargo install`, `tern` would not be found).
fn tern_command() -> String {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join("tern"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    if on_path {
        return "tern".into();
    }
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "tern".into())
}

fn tour(workspace: &Path, session: &Path) {
    let (ws, s) = (workspace.display(), session.display());
    let tern = tern_command();
    let tips = [
        ("the files the model made", format!("ls {ws}")),
        (
            "the history, one message a line",
            format!("cat {s}/{}", files::CONVERSATION),
        ),
        (
            "every event, as `tern exec --json` prints them",
            format!("head {s}/{}", files::EVENTS),
        ),
        (
            "the history before each compaction, the cleared plan",
            format!("ls {s}/archive"),
        ),
        (
            "the sidebar and the cache figures",
            format!("cd {ws} && {tern} status && {tern} stats"),
        ),
    ];
    crate::outln!("\n── Look around:");
    for (what, cmd) in tips {
        crate::outln!("   # {what}\n   {cmd}");
    }
}
