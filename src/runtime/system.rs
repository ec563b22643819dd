//! The system prompt: `prompts/system.md`, the sandbox line (one short stable sentence per mode),
//! then the project's `AGENTS.md`, then the locked plan.
//! No time, session id, absolute path or random value goes in (case C18), so every session of a
//! project starts with the same bytes and shares the provider's prefix cache.

use std::path::Path;

/// Largest `AGENTS.md` taken into the prompt, in bytes; the rest is cut with a note.
pub const MAX_AGENTS_MD_BYTES: usize = 32 * 1024;

const OPEN_PLAN: &str = "\n\n<locked_plan>\n";
const CLOSE_PLAN: &str = "\n</locked_plan>\n";

const SYSTEM_MD: &str = include_str!("../../prompts/system.md");

/// The sandbox lines of the system prompt for `mode` (and `--no-network`), each ending in a
/// newline: the same bytes for every session in that mode, so caching across sessions holds.
pub fn sandbox_lines(mode: crate::sandbox::Mode, no_network: bool) -> String {
    let mut s = format!("{}\n", mode.prompt_line());
    if no_network {
        s.push_str(crate::sandbox::NO_NETWORK_PROMPT_LINE);
        s.push('\n');
    }
    s
}

/// The system prompt without a plan: the bundled instructions, the sandbox lines, and the
/// workspace's `AGENTS.md` (read now; the result is pinned in `system.txt` so later edits do not
/// move the prefix).
pub fn base(workspace: &Path, sandbox: &str) -> String {
    let mut s = SYSTEM_MD.trim_end().to_string();
    s.push('\n');
    s.push_str(sandbox);
    if let Some(bytes) = read_agents_md(workspace) {
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if !text.is_empty() {
            s.push_str("\n<project_instructions source=\"AGENTS.md\">\n");
            s.push_str(cut(text, MAX_AGENTS_MD_BYTES));
            if text.len() > MAX_AGENTS_MD_BYTES {
                s.push_str("\n[AGENTS.md cut here: longer than 32 KiB]");
            }
            s.push_str("\n</project_instructions>\n");
        }
    }
    s
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
        let known = crate::sandbox::Mode::ALL
            .iter()
            .any(|m| m.prompt_line() == l)
            || l == crate::sandbox::NO_NETWORK_PROMPT_LINE
            || l == crate::sandbox::LEGACY_NO_NETWORK_PROMPT_LINE;
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

/// The workspace's `AGENTS.md`: a regular file inside the workspace (a link may point only
/// within it: a cloned repository must not send `/etc/…` or a key file to the provider), read up
/// to one byte past the cap (a FIFO or a huge file must not hang or fill memory).
fn read_agents_md(workspace: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let path = workspace.join("AGENTS.md");
    let real = path.canonicalize().ok()?;
    let root = workspace.canonicalize().ok()?;
    if !real.starts_with(&root) || !std::fs::metadata(&real).ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&real)
        .ok()?
        .take(MAX_AGENTS_MD_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
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

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
        use crate::sandbox::Mode;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("AGENTS.md"), "Use tabs.").unwrap();
        let ww = sandbox_lines(Mode::WorkspaceWrite, false);
        let ro = sandbox_lines(Mode::ReadOnly, true);
        let s = with_plan(&base(d.path(), &ww), Some("1. x"));
        assert_eq!(sandbox_of(&s), ww);
        let t = with_sandbox(&s, &ro);
        assert_eq!(sandbox_of(&t), ro);
        assert!(t.contains("Use tabs.") && t.contains("<locked_plan>"));
        assert_eq!(with_sandbox(&t, &ww), s);
        assert_eq!(with_sandbox("something else", &ww), "something else");
    }

    #[test]
    fn cut_on_char_boundary() {
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("abc", 5), "abc");
    }
}
