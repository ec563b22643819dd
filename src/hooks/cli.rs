//! `tern hooks` (what is configured, from which file, and whether the project's file is trusted)
//! and `tern hooks trust` (record the project file's SHA-256 so its hooks run; any later change
//! needs trust again).

use serde_json::json;

use super::{Files, Hooks, Trust, key_of};

/// `tern hooks [--json]`: exit 0.
pub fn list(files: &Files, json: bool) -> i32 {
    let hooks = files.load();
    if json {
        crate::output::print_json_line(&to_json(files, &hooks));
    } else {
        crate::outln!("{}", crate::render::safe(&render(files, &hooks)));
    }
    0
}

/// The listing as one JSON object: `{files: [{path, source, exists, trusted}], hooks: [{event,
/// matcher, command, timeout_s, source}], notes: [..]}`.
pub fn to_json(files: &Files, hooks: &Hooks) -> serde_json::Value {
    let mut rows = Vec::new();
    if let Some(u) = &files.user {
        rows.push(json!({"path": u, "source": "user", "exists": u.exists(), "trusted": true}));
    }
    rows.push(
        json!({"path": files.project, "source": "project", "exists": files.project.exists(),
        "trusted": files.project.exists() && hooks.untrusted.is_none()}),
    );
    let list: Vec<_> = hooks
        .listing()
        .into_iter()
        .map(|(e, m, h)| {
            json!({"event": e.as_str(), "matcher": m, "command": h.command,
                   "timeout_s": h.timeout.as_secs_f64(), "source": h.source})
        })
        .collect();
    json!({"files": rows, "hooks": list, "notes": hooks.notes})
}

/// The listing as text.
pub fn render(files: &Files, hooks: &Hooks) -> String {
    let mut out = String::new();
    if let Some(u) = &files.user {
        let state = if u.exists() {
            "trusted (yours)"
        } else {
            "absent"
        };
        out.push_str(&format!("{}: {state}\n", u.display()));
    }
    let p = &files.project;
    let state = match (&hooks.untrusted, p.exists()) {
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
    if list.is_empty() {
        out.push_str("no hooks run here\n");
    }
    for (e, m, h) in list {
        let src = match h.source {
            super::Source::User => "user",
            super::Source::Project => "project",
        };
        out.push_str(&format!(
            "{:<16} {:<12} {}  (timeout {} s, {src})\n",
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

/// `tern hooks trust`: records the project file's hash. Exit 0 (also when already trusted), 1
/// when there is no project file, no home folder, or the record cannot be written.
pub fn trust(files: &Files) -> i32 {
    let hooks = files.load();
    let Some(record) = &files.trust else {
        crate::errln!("tern: no home folder (HOME / XDG_CONFIG_HOME): nowhere to record trust");
        return 1;
    };
    let Some(u) = &hooks.untrusted else {
        if files.project.exists() {
            crate::outln!("{} is trusted already", files.project.display());
            return 0;
        }
        crate::errln!(
            "tern: {} does not exist: nothing to trust",
            files.project.display()
        );
        return 1;
    };
    let mut t = match Trust::read(record) {
        Ok(t) => t,
        Err(e) => {
            crate::errln!("tern: {e}");
            return 1;
        }
    };
    t.files.insert(key_of(&u.path), u.sha256.clone());
    if let Err(e) = t.write(record) {
        crate::errln!("tern: could not record the trust: {e}");
        return 1;
    }
    crate::outln!(
        "trusted {} (sha256 {}); any change to it needs `tern hooks trust` again",
        u.path.display(),
        u.sha256
    );
    0
}
