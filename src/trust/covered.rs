//! What a hook's command runs from the workspace (issue 29): the files it names (a script under
//! `$CLAUDE_PROJECT_DIR`, `./lint.sh`, `python3 tools/check.py`) are covered by the hooks file's
//! trust and read-only inside the jail; a command that runs workspace code tern cannot name
//! (`npm run lint`, `make`: the code is in `package.json` or the `Makefile`, and what those
//! call) is said to "run code that commands can change", and the person chooses: trust it as
//! such, or run it inside the jail (`"jail": true` on the handler).
//!
//! Pure: a command and the workspace in, names out ([`scan`]); the caller looks at the files.

use std::path::{Path, PathBuf};

/// Programs whose code comes from the workspace's own configuration (a `package.json`'s
/// scripts, a `Makefile`, a build file), so tern cannot name the files they run.
const RUNNERS: [&str; 22] = [
    "npm",
    "npx",
    "yarn",
    "pnpm",
    "bun",
    "make",
    "just",
    "task",
    "cargo",
    "go",
    "mvn",
    "gradle",
    "./gradlew",
    "pytest",
    "tox",
    "nox",
    "rake",
    "bundle",
    "composer",
    "poetry",
    "uv",
    "deno",
];

/// Script extensions: a relative word with one of these names a file to run.
const SCRIPTS: [&str; 9] = ["sh", "bash", "py", "js", "mjs", "ts", "rb", "pl", "php"];

/// What one hook command runs from the workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Paths it names inside the workspace (absolute, not checked to exist).
    pub named: Vec<PathBuf>,
    /// Those of them it runs: a command's program, the script an interpreter at a command's
    /// start is given, or a file with a script's extension (a file it only writes or reads,
    /// `touch "$TERN_PROJECT_DIR/done"`, is named but not run).
    pub ran: Vec<PathBuf>,
    /// The runner it calls whose code tern cannot name (`npm`, `make`, …).
    pub opaque: Option<String>,
}

/// Whether the jail's commands can write `p` (a file a hook names): inside the workspace and not
/// in what the jail shows read-only or hides there — the state folder, tern's config, a home
/// folder the workspace holds (DESIGN §10). Such a hook runs workspace code.
pub fn commands_can_write(p: &Path, workspace: &Path) -> bool {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = var("HOME");
    let config = var("XDG_CONFIG_HOME")
        .or_else(|| home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("tern"));
    let shielded = [
        Some(workspace.join(".tern")),
        config,
        home.filter(|h| h.starts_with(workspace) && h != workspace),
    ];
    p.starts_with(workspace) && !shielded.iter().flatten().any(|s| p.starts_with(s))
}

impl Scan {
    /// Whether the command runs code the jail's commands can write: a file it runs lies where
    /// they can write ([`commands_can_write`]), or it calls a runner whose code tern cannot name.
    /// Such a hook or MCP server runs in a jail by default (issue 42).
    pub fn runs_workspace_code(&self, workspace: &Path) -> bool {
        self.opaque.is_some() || self.ran.iter().any(|p| commands_can_write(p, workspace))
    }
}

/// What `command` (run with `bash -c` in `workspace`, with `$CLAUDE_PROJECT_DIR` and
/// `$TERN_PROJECT_DIR` set to it) runs from the workspace: words that name a path there after
/// expanding those two variables (absolute inside the workspace, or relative with a `/` or a
/// script's extension), and a known script runner (`bash`, `python3`, `node`…) at a command's start.
pub fn scan(command: &str, workspace: &Path) -> Scan {
    let ws = workspace.display().to_string();
    const INTERPRETERS: [&str; 13] = [
        "sh", "bash", "zsh", "dash", "python", "python3", "node", "ruby", "perl", "php", "deno",
        "bun", "source",
    ];
    let mut out = Scan::default();
    let mut at_start = true;
    // The word before was an interpreter at a command's start: the next path is its script.
    let mut script_next = false;
    for word in words(command) {
        if matches!(word.as_str(), "|" | "||" | "&&" | ";" | "&" | "(" | ")") {
            at_start = true;
            script_next = false;
            continue;
        }
        let w = word
            .replace("${CLAUDE_PROJECT_DIR}", &ws)
            .replace("$CLAUDE_PROJECT_DIR", &ws)
            .replace("${TERN_PROJECT_DIR}", &ws)
            .replace("$TERN_PROJECT_DIR", &ws);
        let starts = at_start;
        // An assignment (`FOO=1 cmd`) keeps the command's start.
        at_start = at_start && w.contains('=') && !w.starts_with('=');
        let runs_script = std::mem::take(&mut script_next);
        if starts && INTERPRETERS.contains(&w.rsplit('/').next().unwrap_or("")) {
            script_next = true;
        }
        // An interpreter's options come before its script.
        if runs_script && w.starts_with('-') {
            script_next = true;
        }
        if starts && out.opaque.is_none() && RUNNERS.contains(&w.as_str()) {
            out.opaque = Some(w.clone());
        }
        if w.starts_with('-') || w.contains('=') || w.contains('$') {
            continue;
        }
        let p = Path::new(&w);
        let named = if p.is_absolute() {
            p.starts_with(workspace).then(|| p.to_path_buf())
        } else {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            (w.contains('/') || SCRIPTS.contains(&ext)).then(|| workspace.join(p))
        };
        if let Some(n) = named.map(|n| normal(&n))
            && n.starts_with(workspace)
        {
            let ext = n.extension().and_then(|e| e.to_str()).unwrap_or("");
            if (starts || runs_script || SCRIPTS.contains(&ext)) && !out.ran.contains(&n) {
                out.ran.push(n.clone());
            }
            if !out.named.contains(&n) {
                out.named.push(n);
            }
        }
    }
    out
}

/// `p` with `.` and `..` taken out (lexically).
fn normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The words of a shell command line: split at unquoted blanks and at `|`, `&`, `;`, `(`,
/// `)`, with single and double quotes removed (enough to find the files a hook names; never
/// run).
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = command.chars().peekable();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            out.push(std::mem::take(cur));
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (None, c) if c.is_whitespace() => flush(&mut cur, &mut out),
            (None, '|' | '&' | ';' | '(' | ')') => {
                flush(&mut cur, &mut out);
                let mut op = c.to_string();
                if matches!(c, '|' | '&') && chars.peek() == Some(&c) {
                    op.push(c);
                    chars.next();
                }
                out.push(op);
            }
            (None, c) => cur.push(c),
        }
    }
    flush(&mut cur, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> &'static Path {
        Path::new("/w")
    }

    #[test]
    fn project_dir_scripts_and_relative_scripts_are_named() {
        let s = scan("\"$CLAUDE_PROJECT_DIR\"/scripts/guard.sh --strict", ws());
        assert_eq!(s.named, [PathBuf::from("/w/scripts/guard.sh")]);
        assert_eq!(s.opaque, None);
        let s = scan("python3 tools/check.py && ./lint.sh | tee out", ws());
        assert_eq!(
            s.named,
            [
                PathBuf::from("/w/tools/check.py"),
                PathBuf::from("/w/lint.sh")
            ]
        );
        let s = scan("bash ${TERN_PROJECT_DIR}/a/../b.sh", ws());
        assert_eq!(s.named, [PathBuf::from("/w/b.sh")]);
    }

    #[test]
    fn what_a_command_runs_is_told_from_what_it_only_writes() {
        let s = scan(
            "touch \"$TERN_PROJECT_DIR/done\"; tern steer x > \"$TERN_PROJECT_DIR\"/log/out",
            ws(),
        );
        assert_eq!(s.named.len(), 2, "{s:?}");
        assert!(s.ran.is_empty(), "{s:?}");
        let s = scan(
            "python3 -u tools/srv; ./bin/tool --x; sh -e \"$CLAUDE_PROJECT_DIR\"/hook",
            ws(),
        );
        assert_eq!(
            s.ran,
            [
                PathBuf::from("/w/tools/srv"),
                PathBuf::from("/w/bin/tool"),
                PathBuf::from("/w/hook")
            ]
        );
        // A script's extension runs wherever it stands (`xargs bash x.sh`, `exec x.py`).
        let s = scan("env FOO=1 exec helpers/x.py", ws());
        assert_eq!(s.ran, [PathBuf::from("/w/helpers/x.py")]);
    }

    #[test]
    fn paths_outside_the_workspace_and_plain_words_are_not_named() {
        let s = scan(
            "/usr/local/bin/guard --dir /w2 echo hello ../escape.sh",
            ws(),
        );
        assert!(s.named.is_empty(), "{s:?}");
        let s = scan("jq -r '.tool_input.command' | grep -q 'rm -rf'", ws());
        assert!(s.named.is_empty(), "{s:?}");
    }

    #[test]
    fn runners_of_workspace_code_are_opaque_at_a_commands_start_only() {
        assert_eq!(scan("npm run lint", ws()).opaque.as_deref(), Some("npm"));
        assert_eq!(
            scan("cd \"$CLAUDE_PROJECT_DIR\" && CI=1 make check", ws())
                .opaque
                .as_deref(),
            Some("make")
        );
        assert_eq!(scan("echo make npm", ws()).opaque, None);
    }

    #[test]
    fn words_respect_quotes_and_operators() {
        assert_eq!(
            words("a 'b c' \"d\\\"e\"|f&&g;h"),
            ["a", "b c", "d\"e", "|", "f", "&&", "g", ";", "h"]
        );
    }
}
