//! `tern hooks` (what is configured, from which file, and whether the project's file is trusted)
//! and `tern hooks trust` (record the project file's SHA-256 so its hooks run; any later change
//! needs trust again).

use super::HookError;
use serde_json::json;

use super::{Files, Hooks};

/// `tern hooks [--json]`: what the surface prints (one JSON line with `json`).
pub fn list(files: &Files, json: bool) -> String {
    let hooks = files.load();
    if json {
        to_json(files, &hooks).to_string()
    } else {
        crate::render::safe(&render(files, &hooks)).into_owned()
    }
}

/// The listing as one JSON object: `{files: [{path, source, exists, readable, trusted}], hooks: [{event,
/// matcher, command, timeout_s, source}], notes: [..], errors: [..]}` (`errors`: invalid
/// entries; while there are any no session starts).
pub fn to_json(files: &Files, hooks: &Hooks) -> serde_json::Value {
    let mut rows = Vec::new();
    let readable = |p: &std::path::Path| p.exists() && !hooks.unreadable.iter().any(|u| u == p);
    if let Some(u) = &files.user {
        rows.push(json!({"path": u, "source": "user", "exists": u.exists(),
        "readable": readable(u), "trusted": readable(u)}));
    }
    let p = &files.project;
    rows.push(json!({"path": p, "source": "project", "exists": p.exists(),
        "readable": readable(p), "trusted": readable(p) && hooks.untrusted.is_none()}));
    let list: Vec<_> = hooks
        .listing()
        .into_iter()
        .map(|(e, m, h)| {
            json!({"event": e.as_str(), "matcher": m, "command": h.command,
                   "timeout_s": h.timeout.as_secs_f64(), "source": h.source,
                   "if": h.cond_text, "async": h.background, "jail": h.jail})
        })
        .collect();
    json!({"files": rows, "hooks": list, "notes": hooks.notes, "errors": hooks.errors})
}

/// The listing as text.
pub fn render(files: &Files, hooks: &Hooks) -> String {
    let mut out = String::new();
    // A file that cannot be read is neither trusted nor trustable (its error is listed below).
    const UNREADABLE: &str = "UNREADABLE: its hooks do not run (see below)";
    let unreadable = |p: &std::path::Path| hooks.unreadable.iter().any(|u| u == p);
    if let Some(u) = &files.user {
        let state = if unreadable(u) {
            UNREADABLE
        } else if u.exists() {
            "trusted (yours)"
        } else {
            "absent"
        };
        out.push_str(&format!("{}: {state}\n", u.display()));
    }
    let p = &files.project;
    let state = match (&hooks.untrusted, p.exists()) {
        _ if unreadable(p) => UNREADABLE.to_string(),
        (_, false) => "absent".to_string(),
        (None, true) => "trusted".to_string(),
        (Some(u), true) => format!(
            "NOT TRUSTED{}: its hooks do not run (tern hooks trust)",
            if u.changed {
                " (changed since trusted)"
            } else {
                ""
            }
        ),
    };
    out.push_str(&format!("{}: {state}\n", p.display()));
    let list = hooks.listing();
    if !hooks.errors.is_empty() {
        out.push_str("INVALID: no session starts until these are fixed:\n");
        for e in &hooks.errors {
            out.push_str(&format!("  {e}\n"));
        }
    }
    if list.is_empty() {
        out.push_str("no hooks run here\n");
        if let (false, Some(n)) = (p.exists(), claude_settings_hooks(&files.workspace)) {
            out.push_str(&format!(
                "note: .claude/settings.json here has {n} hook event(s) (Claude Code's); tern reads the same format from {}: copy it there (`cp .claude/settings.json {}`), read it, then `tern hooks trust`\n",
                files.project.display(),
                files.project.display()
            ));
        }
    }
    for (e, m, h) in list {
        let src = match h.source {
            super::Source::User => "user",
            super::Source::Project => "project",
        };
        let mut extra = String::new();
        if let Some(c) = &h.cond_text {
            extra.push_str(&format!(", if {c}"));
        }
        if h.background {
            extra.push_str(", async");
        }
        if h.jail {
            extra.push_str(", in the jail");
        }
        out.push_str(&format!(
            "{:<16} {:<12} {}  (timeout {} s, {src}{extra})\n",
            e.as_str(),
            m,
            h.command.replace('\n', " "),
            h.timeout.as_secs_f64()
        ));
    }
    for n in &hooks.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.trim_end().to_string()
}

/// How many hook events the workspace's `.claude/settings.json` configures (None: no such file,
/// or none there): what a repository set up for Claude Code already has.
fn claude_settings_hooks(workspace: &std::path::Path) -> Option<usize> {
    let p = workspace.join(".claude/settings.json");
    let bytes = crate::store::fsutil::read_regular(&p, 1 << 20).ok()??;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let n = v.get("hooks")?.as_object()?.len();
    (n > 0).then_some(n)
}

/// `tern hooks trust`: records the project file's hash and the hashes of the workspace files
/// its hooks name (a script under `$CLAUDE_PROJECT_DIR`); returns the receipt, which names the
/// hooks that run workspace code tern cannot name (`npm run lint`, `make`) and how to run them
/// inside the jail instead. Errors (exit 1): no project file, no home folder, a record that
/// cannot be read or written.
pub fn trust(files: &Files) -> Result<String, HookError> {
    let hooks = files.load();
    if hooks.unreadable.contains(&files.project) {
        let why = hooks
            .errors
            .iter()
            .find(|e| e.starts_with(&files.project.display().to_string()))
            .cloned()
            .unwrap_or_else(|| format!("{} cannot be read", files.project.display()));
        return Err(HookError::Trust(format!(
            "{why}: nothing to trust (fix or remove the file)"
        )));
    }
    let Some(bytes) = std::fs::read(&files.project).ok() else {
        return Err(HookError::Trust(format!(
            "{} does not exist: nothing to trust",
            files.project.display()
        )));
    };
    // The hooks as they are now, covered files hashed as they are now.
    let mut now = Hooks::default();
    now.add_bytes(&files.project, &bytes, super::Source::Project);
    now.cover(&files.workspace, super::Source::Project, None);
    let covered: std::collections::BTreeMap<String, String> = now
        .listing()
        .into_iter()
        .flat_map(|(_, _, h)| h.covered.clone())
        .filter_map(|(p, sha)| Some((p.display().to_string(), sha?)))
        .collect();
    let granted = crate::trust::grant(
        files.trust.as_deref(),
        &files.project,
        &bytes,
        covered.clone(),
    )
    .map_err(|e| HookError::Trust(e.to_string()))?;
    let sha = granted.sha;
    if granted.already && hooks.untrusted.is_none() {
        return Ok(format!("{} is trusted already", files.project.display()));
    }
    let mut receipt = format!(
        "trusted {} (sha256 {sha}); any change to it needs `tern hooks trust` again. Its hooks:",
        files.project.display()
    );
    for (e, m, h) in now.listing() {
        receipt.push_str(&format!("\n  {} {m}: {}", e.as_str(), h.command));
    }
    // What `tern hooks` calls invalid, said now: no session starts until it is fixed.
    if !now.errors.is_empty() {
        receipt.push_str("\nINVALID: no session starts until these are fixed:");
        for e in &now.errors {
            receipt.push_str(&format!("\n  {e}"));
        }
    }
    if !covered.is_empty() {
        receipt.push_str("\nThe files they name are covered by this trust (read-only to commands; a change stops the hook until trusted again):");
        for p in covered.keys() {
            receipt.push_str(&format!("\n  {p}"));
        }
    }
    for (e, _, h) in now.listing() {
        let workspace_code = !h.covered.is_empty() || h.opaque.is_some();
        if workspace_code && h.jail {
            receipt.push_str(&format!(
                "\nNote: the {} hook `{}` runs code the workspace holds, so it runs inside the jail with the model's authority (what a command rewrote gains nothing more); \"jail\": false runs it outside as you, with whatever a command wrote into those files since you read them.",
                e.as_str(),
                h.command
            ));
        } else if let (Some(r), false) = (&h.opaque, h.jail) {
            receipt.push_str(&format!(
                "\nNote: the {} hook `{}` runs code that commands can change ({r} runs what the workspace's own files say, which tern cannot name) outside the jail, as you (\"jail\": false): it is trusted as such.",
                e.as_str(),
                h.command
            ));
        }
    }
    Ok(crate::render::safe(&receipt).into_owned())
}
