//! The system prompt: `prompts/system.md`, the sandbox line (one short stable sentence per mode),
//! then the person's instruction files (`AGENTS.md`, see [`Lookup`]), then the locked plan.
//! No time, session id, absolute path or random value goes in (case C18), so every session of a
//! project starts with the same bytes and shares the provider's prefix cache.

use std::path::{Path, PathBuf};

/// Largest instructions taken into the prompt, in bytes, per file and for all files together;
/// the rest is cut with a note.
pub const MAX_AGENTS_MD_BYTES: usize = 32 * 1024;

/// The instruction file of a folder.
pub const AGENTS_MD: &str = "AGENTS.md";
/// Beside an `AGENTS.md`, replaces it (as Codex CLI reads them).
pub const AGENTS_OVERRIDE_MD: &str = "AGENTS.override.md";
/// Read in a folder with neither `AGENTS.md` nor `AGENTS.override.md` (Claude Code's file), so
/// a repository that has only it gets its instructions.
pub const CLAUDE_MD: &str = "CLAUDE.md";
/// How the user's global file is named in the prompt, wherever `$XDG_CONFIG_HOME` puts it: a
/// fixed label keeps the bytes the same on every machine.
pub const GLOBAL_LABEL: &str = "~/.config/tern/AGENTS.md";
/// The global override's label (beside the global file, it replaces it, as Codex CLI's
/// `~/.codex/AGENTS.override.md` does).
pub const GLOBAL_OVERRIDE_LABEL: &str = "~/.config/tern/AGENTS.override.md";

const OPEN_PLAN: &str = "\n\n<locked_plan>\n";
const CLOSE_PLAN: &str = "\n</locked_plan>\n";
const OPEN_INSTRUCTIONS: &str = "\n<project_instructions source=\"";
const CLOSE_INSTRUCTIONS: &str = "\n</project_instructions>\n";

const SYSTEM_MD: &str = include_str!("../../prompts/system.md");

/// The sandbox lines of the system prompt for `mode` (and `--no-network`), then the MCP line
/// naming `mcp`'s servers (none without servers; at most [`crate::mcp::PROMPT_LINE_MAX`]
/// bytes), each ending in a newline: the same bytes for every session in that mode with those
/// servers, so caching across sessions holds.
pub fn sandbox_lines(mode: crate::policy::Mode, no_network: bool, mcp: &[String]) -> String {
    let mut s = format!("{}\n", mode.prompt_line());
    if no_network {
        s.push_str(crate::sandbox::NO_NETWORK_PROMPT_LINE);
        s.push('\n');
    }
    if let Some(line) = crate::mcp::prompt_line(mcp) {
        s.push_str(&line);
    }
    s
}

/// The MCP line of sandbox lines (see [`sandbox_lines`]); empty when they have none.
pub fn mcp_of(lines: &str) -> &str {
    match lines.find(MCP_LINE_START) {
        Some(i) if i == 0 || lines[..i].ends_with('\n') => &lines[i..],
        _ => "",
    }
}

/// How the MCP line starts.
const MCP_LINE_START: &str = "MCP servers: ";

/// Where the person's instruction files are looked up, as Codex CLI does: the user's global
/// file, then every folder from the workspace root (the git root, unless a `.tern/` sits
/// elsewhere) down to the folder tern was started in, more specific files last. In each folder
/// `AGENTS.override.md` replaces `AGENTS.md`, and `CLAUDE.md` is read where neither is; the
/// global `AGENTS.override.md` replaces the global `AGENTS.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The workspace root: where the walk starts, and what no file (or the link it is) may leave.
    pub workspace: PathBuf,
    /// The folder tern was started in; outside the workspace, only the root is read.
    pub here: PathBuf,
    /// The user's global file (`$XDG_CONFIG_HOME/tern/AGENTS.md`, else
    /// `~/.config/tern/AGENTS.md`); None: not looked for.
    pub global: Option<PathBuf>,
}

impl Lookup {
    /// The workspace root's file only (no global file, no subfolder).
    pub fn at(workspace: &Path) -> Lookup {
        Lookup {
            workspace: workspace.to_path_buf(),
            here: workspace.to_path_buf(),
            global: None,
        }
    }

    /// The folders read, root first: the workspace, then each folder down to `here` (where
    /// `AGENTS.md` and the project's skill folders are looked for).
    pub fn folders(&self) -> Vec<PathBuf> {
        let mut v = vec![self.workspace.clone()];
        if let Ok(rest) = self.here.strip_prefix(&self.workspace) {
            let mut at = self.workspace.clone();
            for c in rest.components() {
                if !matches!(c, std::path::Component::Normal(_)) {
                    break;
                }
                at.push(c);
                v.push(at.clone());
            }
        }
        v
    }

    /// The files found, in prompt order: `(label, bytes up to one past the cap)`. The label is
    /// the path relative to the workspace (`pkg/AGENTS.md`), or [`GLOBAL_LABEL`].
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(g) = &self.global {
            let over = g.with_file_name(AGENTS_OVERRIDE_MD);
            // The override, readable or not, stands in for the global file.
            if std::fs::symlink_metadata(&over).is_ok() {
                if let Some(bytes) = read_capped(&over, None) {
                    out.push((GLOBAL_OVERRIDE_LABEL.to_string(), bytes));
                }
            } else if let Some(bytes) = read_capped(g, None) {
                out.push((GLOBAL_LABEL.to_string(), bytes));
            }
        }
        for dir in self.folders() {
            for name in [AGENTS_OVERRIDE_MD, AGENTS_MD, CLAUDE_MD] {
                let path = dir.join(name);
                if std::fs::symlink_metadata(&path).is_err() {
                    continue;
                }
                if let Some(bytes) = read_capped(&path, Some(&self.workspace)) {
                    let rel = path.strip_prefix(&self.workspace).unwrap_or(&path);
                    out.push((rel.to_string_lossy().into_owned(), bytes));
                }
                // An override there, readable or not, stands in for the folder's AGENTS.md.
                break;
            }
        }
        out
    }
}

/// The `<project_instructions>` sections for `lookup`'s files (empty when there are none, so
/// the prompt does not grow by a byte): each file trimmed and cut at [`MAX_AGENTS_MD_BYTES`],
/// and all of them together at the same bound (the later files are cut, then left out).
pub fn instructions(lookup: &Lookup) -> String {
    let mut s = String::new();
    let mut left = MAX_AGENTS_MD_BYTES;
    for (label, bytes) in lookup.files() {
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() || left == 0 {
            continue;
        }
        let take = crate::text::cut(text, MAX_AGENTS_MD_BYTES.min(left));
        left -= take.len();
        s.push_str(OPEN_INSTRUCTIONS);
        s.push_str(&attribute(&label));
        s.push_str("\">\n");
        s.push_str(take);
        if take.len() < text.len() {
            if text.len() > MAX_AGENTS_MD_BYTES {
                s.push_str(&format!("\n[{label} cut here: longer than 32 KiB]"));
            } else {
                s.push_str(&format!(
                    "\n[{label} cut here: the instruction files together are longer than 32 KiB]"
                ));
            }
        }
        s.push_str(CLOSE_INSTRUCTIONS);
    }
    s
}

/// `label` safe inside a double-quoted attribute.
fn attribute(label: &str) -> String {
    label
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace(['\n', '\r'], " ")
}

/// The instruction files a pinned system prompt carries: `(label, text as sent)`, in order.
pub fn pinned_instructions(system: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = strip_plan(system);
    while let Some(i) = rest.find(OPEN_INSTRUCTIONS) {
        let after = &rest[i + OPEN_INSTRUCTIONS.len()..];
        let Some(q) = after.find("\">\n") else { break };
        let label = after[..q]
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&amp;", "&");
        let body = &after[q + 3..];
        let Some(end) = body.find(CLOSE_INSTRUCTIONS) else {
            break;
        };
        out.push((label, body[..end].to_string()));
        rest = &body[end + CLOSE_INSTRUCTIONS.len()..];
    }
    out
}

/// Whether the workspace file behind a pinned `label` reads differently now (edited, removed):
/// the session keeps what it pinned, a new session reads the new text. The global file is not
/// checked (None).
pub fn instruction_changed(workspace: &Path, label: &str, pinned: &str) -> Option<bool> {
    if label == GLOBAL_LABEL || label == GLOBAL_OVERRIDE_LABEL {
        return None;
    }
    let now = read_capped(&workspace.join(label), Some(workspace));
    let Some(now) = now else { return Some(true) };
    let now = String::from_utf8_lossy(&now);
    let now = crate::text::cut(now.trim(), MAX_AGENTS_MD_BYTES);
    // A cut file is unchanged while it still starts with what was sent.
    Some(match pinned.rfind(&format!("\n[{label} cut here: ")) {
        Some(i) => !now.starts_with(&pinned[..i]),
        None => now != pinned,
    })
}

/// The system prompt without a plan: the bundled instructions, the sandbox lines, and the
/// workspace root's `AGENTS.md` (read now; the result is pinned in `system.txt` so later edits
/// do not move the prefix). See [`base_from`] for the whole lookup.
pub fn base(workspace: &Path, sandbox: &str) -> String {
    base_from(&Lookup::at(workspace), sandbox, "")
}

/// The system prompt without a plan, with the instruction files of `lookup` and the skills'
/// `catalog` (`crate::skills::catalog`; empty: none, no bytes) between the sandbox lines and
/// the instructions.
pub fn base_from(lookup: &Lookup, sandbox: &str, catalog: &str) -> String {
    let mut s = SYSTEM_MD.trim_end().to_string();
    s.push('\n');
    s.push_str(sandbox);
    s.push_str(catalog);
    s.push_str(&instructions(lookup));
    s
}

/// `system` with its skills catalog replaced by `catalog` (PlanConfirm, PlanClear: a deliberate
/// boundary, the only place a skill added mid-session reaches the prompt). Unchanged when it
/// was not made by this build's bundled prompt.
pub fn with_skills(system: &str, catalog: &str) -> String {
    let head = format!("{}\n", SYSTEM_MD.trim_end());
    if !system.starts_with(head.as_str()) {
        return system.to_string();
    }
    let at = head.len() + sandbox_of(system).len();
    let old = crate::skills::section_len(&system[at..]);
    format!("{}{catalog}{}", &system[..at], &system[at + old..])
}

/// The skills catalog pinned in `system`: how many skills it lists and its bytes ((0, 0):
/// none).
pub fn pinned_skills(system: &str) -> (usize, usize) {
    let head = format!("{}\n", SYSTEM_MD.trim_end());
    if !system.starts_with(head.as_str()) {
        return (0, 0);
    }
    let at = head.len() + sandbox_of(system).len();
    let section = &system[at..at + crate::skills::section_len(&system[at..])];
    (crate::skills::listed_in(section), section.len())
}

/// The sandbox lines a pinned system prompt carries (empty when it has none, or was not made by
/// this build's bundled prompt).
pub fn sandbox_of(system: &str) -> &str {
    let head = format!("{}\n", SYSTEM_MD.trim_end());
    let Some(rest) = system.strip_prefix(head.as_str()) else {
        return "";
    };
    let mut end = 0;
    for line in rest.split_inclusive('\n') {
        let l = line.trim_end();
        let known = crate::policy::Mode::ALL
            .iter()
            .any(|m| m.prompt_line() == l)
            || l == crate::sandbox::NO_NETWORK_PROMPT_LINE
            || l == crate::sandbox::LEGACY_NO_NETWORK_PROMPT_LINE
            || l.starts_with(MCP_LINE_START);
        if !known {
            break;
        }
        end += line.len();
    }
    &rest[..end]
}

/// `system` with its sandbox lines replaced by `sandbox` (a declared boundary: the session's
/// sandbox changed). Unchanged when it was not made by this build's bundled prompt.
pub fn with_sandbox(system: &str, sandbox: &str) -> String {
    let head = format!("{}\n", SYSTEM_MD.trim_end());
    let Some(rest) = system.strip_prefix(head.as_str()) else {
        return system.to_string();
    };
    let old = sandbox_of(system);
    format!("{head}{sandbox}{}", &rest[old.len()..])
}

/// An instruction file: a regular file (a FIFO must not hang), read up to one byte past the cap
/// (a huge file must not fill memory). Inside `within` when given: the file, links resolved, must
/// lie in it (a cloned repository must not send `/etc/…` or a key file to the provider).
fn read_capped(path: &Path, within: Option<&Path>) -> Option<Vec<u8>> {
    let real = path.canonicalize().ok()?;
    if let Some(root) = within
        && !real.starts_with(root.canonicalize().ok()?)
    {
        return None;
    }
    crate::store::fsutil::read_regular(&real, MAX_AGENTS_MD_BYTES as u64 + 1)
        .ok()
        .flatten()
}

/// `base` with the locked plan appended as the last section (or `base` itself when None).
pub fn with_plan(base: &str, plan: Option<&str>) -> String {
    match plan {
        None => base.to_string(),
        Some(p) => format!("{base}{OPEN_PLAN}{}{CLOSE_PLAN}", p.trim_end()),
    }
}

/// Recovers the base from a pinned system prompt that carries `plan` (the exact locked text from
/// `plan.json`). Falls back to the whole prompt when it does not end with that plan section.
pub fn without_plan<'a>(system: &'a str, plan: Option<&str>) -> &'a str {
    let Some(p) = plan else { return system };
    let section = format!("{OPEN_PLAN}{}{CLOSE_PLAN}", p.trim_end());
    system.strip_suffix(section.as_str()).unwrap_or(system)
}

/// The system prompt without whatever `<locked_plan>` sections it ends with (however many a crash
/// or an older build left): the base a plan is added to. The plan section always comes after the
/// project instructions, so a `<locked_plan>` quoted inside `AGENTS.md` is never taken for one.
pub fn strip_plan(system: &str) -> &str {
    let from = system
        .rfind("</project_instructions>\n")
        .map_or(0, |i| i + "</project_instructions>\n".len());
    match system[from..].find(OPEN_PLAN) {
        Some(i) => &system[..from + i],
        None => system,
    }
}

/// How many `<locked_plan>` sections a system prompt carries after its project instructions.
pub fn plan_sections(system: &str) -> usize {
    let from = system
        .rfind("</project_instructions>\n")
        .map_or(0, |i| i + "</project_instructions>\n".len());
    system[from..].matches(OPEN_PLAN).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trips() {
        let b = "base\n";
        let s = with_plan(b, Some("1. do it\n"));
        assert!(s.contains("<locked_plan>\n1. do it\n</locked_plan>"));
        assert_eq!(without_plan(&s, Some("1. do it\n")), b);
        assert_eq!(with_plan(b, None), b);
    }

    #[test]
    fn agents_md_only_as_a_regular_file_inside_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let outside = d.path().join("secret.txt");
        std::fs::write(&outside, "TOP SECRET").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("AGENTS.md")).unwrap();
        assert!(!base(&ws, "").contains("TOP SECRET"));
        std::fs::remove_file(ws.join("AGENTS.md")).unwrap();
        let fifo = std::ffi::CString::new(ws.join("AGENTS.md").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(
            !base(&ws, "").contains("project_instructions"),
            "a FIFO would block"
        );
        std::fs::remove_file(ws.join("AGENTS.md")).unwrap();
        std::fs::write(ws.join("real.md"), "Use tabs.").unwrap();
        std::os::unix::fs::symlink("real.md", ws.join("AGENTS.md")).unwrap();
        assert!(
            base(&ws, "").contains("Use tabs."),
            "a link inside the workspace is fine"
        );
    }

    #[test]
    fn strip_plan_removes_every_section_but_not_a_quoted_one() {
        let base = "base\n\n<project_instructions source=\"AGENTS.md\">\nsay \n\n<locked_plan>\n in docs\n</project_instructions>\n";
        let one = with_plan(base, Some("a"));
        let two = with_plan(&one, Some("b"));
        assert_eq!(strip_plan(&one), base);
        assert_eq!(strip_plan(&two), base);
        assert_eq!(plan_sections(&two), 2);
        assert_eq!(plan_sections(base), 0);
        assert_eq!(strip_plan("plain\n"), "plain\n");
    }

    #[test]
    fn the_sandbox_lines_are_found_and_replaced() {
        use crate::policy::Mode;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("AGENTS.md"), "Use tabs.").unwrap();
        let ww = sandbox_lines(Mode::WorkspaceWrite, false, &[]);
        let ro = sandbox_lines(Mode::ReadOnly, true, &[]);
        let s = with_plan(&base(d.path(), &ww), Some("1. x"));
        assert_eq!(sandbox_of(&s), ww);
        let t = with_sandbox(&s, &ro);
        assert_eq!(sandbox_of(&t), ro);
        assert!(t.contains("Use tabs.") && t.contains("<locked_plan>"));
        assert_eq!(with_sandbox(&t, &ww), s);
        assert_eq!(with_sandbox("something else", &ww), "something else");
    }

    /// A workspace `ws/` with `ws/a/b/`, and a global file beside it.
    fn tree() -> (tempfile::TempDir, Lookup) {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::create_dir_all(d.path().join("cfg")).unwrap();
        let lookup = Lookup {
            here: ws.join("a/b"),
            workspace: ws,
            global: Some(d.path().join("cfg/AGENTS.md")),
        };
        (d, lookup)
    }

    #[test]
    fn global_then_root_down_to_here_each_marked_by_its_workspace_path() {
        let (d, l) = tree();
        std::fs::write(d.path().join("cfg/AGENTS.md"), "Global rule.").unwrap();
        std::fs::write(l.workspace.join("AGENTS.md"), "Root rule.").unwrap();
        std::fs::write(l.workspace.join("a/b/AGENTS.md"), "Leaf rule.").unwrap();
        // A sibling's file is not on the way down.
        std::fs::create_dir(l.workspace.join("c")).unwrap();
        std::fs::write(l.workspace.join("c/AGENTS.md"), "Sibling rule.").unwrap();
        let s = instructions(&l);
        assert_eq!(
            s,
            "\n<project_instructions source=\"~/.config/tern/AGENTS.md\">\nGlobal rule.\n</project_instructions>\n\
             \n<project_instructions source=\"AGENTS.md\">\nRoot rule.\n</project_instructions>\n\
             \n<project_instructions source=\"a/b/AGENTS.md\">\nLeaf rule.\n</project_instructions>\n"
        );
        assert!(
            !s.contains(&*d.path().to_string_lossy()),
            "no absolute path"
        );
        let labels: Vec<String> =
            pinned_instructions(&with_plan(&base_from(&l, "", ""), Some("p")))
                .into_iter()
                .map(|(l, _)| l)
                .collect();
        assert_eq!(labels, [GLOBAL_LABEL, "AGENTS.md", "a/b/AGENTS.md"]);
        // A folder with only CLAUDE.md gives it; the global override replaces the global file.
        std::fs::write(l.workspace.join("a/CLAUDE.md"), "claude's").unwrap();
        std::fs::write(
            d.path().join("cfg").join(AGENTS_OVERRIDE_MD),
            "mine, overridden",
        )
        .unwrap();
        let labels: Vec<String> = l.files().into_iter().map(|(l, _)| l).collect();
        assert_eq!(
            labels,
            [
                GLOBAL_OVERRIDE_LABEL,
                "AGENTS.md",
                "a/CLAUDE.md",
                "a/b/AGENTS.md"
            ]
        );
        // Beside an AGENTS.md, CLAUDE.md is not read.
        std::fs::write(l.workspace.join("CLAUDE.md"), "not this").unwrap();
        assert!(!l.files().iter().any(|(l, _)| l == "CLAUDE.md"));
        std::fs::remove_file(d.path().join("cfg").join(AGENTS_OVERRIDE_MD)).unwrap();
        // Outside the workspace, `here` adds nothing.
        let away = Lookup {
            here: d.path().join("cfg"),
            ..l.clone()
        };
        assert!(!instructions(&away).contains("Leaf rule."));
    }

    #[test]
    fn an_override_replaces_the_agents_md_beside_it() {
        let (_d, l) = tree();
        std::fs::write(l.workspace.join("AGENTS.md"), "Root rule.").unwrap();
        std::fs::write(l.workspace.join("a/AGENTS.md"), "Old a rule.").unwrap();
        std::fs::write(l.workspace.join("a/AGENTS.override.md"), "New a rule.").unwrap();
        let s = instructions(&l);
        assert!(s.contains("Root rule.") && s.contains("New a rule."), "{s}");
        assert!(!s.contains("Old a rule."));
        assert!(s.contains("source=\"a/AGENTS.override.md\""));
    }

    #[test]
    fn no_files_add_no_byte_and_links_out_are_refused() {
        let (d, l) = tree();
        assert_eq!(instructions(&l), "");
        assert_eq!(
            base_from(&l, "x\n", ""),
            format!("{}\nx\n", SYSTEM_MD.trim_end())
        );
        let secret = d.path().join("secret.txt");
        std::fs::write(&secret, "TOP SECRET").unwrap();
        std::os::unix::fs::symlink(&secret, l.workspace.join("a/AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(&secret, l.workspace.join("AGENTS.override.md")).unwrap();
        assert_eq!(instructions(&l), "", "neither link is followed out");
    }

    #[test]
    fn the_total_keeps_the_one_file_bound() {
        let (_d, l) = tree();
        std::fs::write(
            l.workspace.join("AGENTS.md"),
            "r".repeat(MAX_AGENTS_MD_BYTES - 10),
        )
        .unwrap();
        std::fs::write(l.workspace.join("a/AGENTS.md"), "s".repeat(100)).unwrap();
        std::fs::write(l.workspace.join("a/b/AGENTS.md"), "t".repeat(100)).unwrap();
        let s = instructions(&l);
        let body: usize = pinned_instructions(&s)
            .iter()
            .map(|(_, t)| t.split("\n[").next().unwrap_or("").len())
            .sum();
        assert_eq!(body, MAX_AGENTS_MD_BYTES);
        assert!(s.contains("[a/AGENTS.md cut here: the instruction files together"));
        assert!(!s.contains("ttt"), "nothing is left after the bound");
        assert_eq!(
            instruction_changed(&l.workspace, "a/AGENTS.md", &pinned_instructions(&s)[1].1),
            Some(false)
        );
        std::fs::write(l.workspace.join("AGENTS.md"), "edited").unwrap();
        assert_eq!(
            instruction_changed(&l.workspace, "AGENTS.md", &pinned_instructions(&s)[0].1),
            Some(true)
        );
    }
}
