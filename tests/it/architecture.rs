//! The shape of the code, checked: data flows one way (surface → launcher → runtime →
//! provider/tools → store), so no source file imports, directly or through others, a file that
//! imports it back, and no surface imports another surface.
//!
//! The graph is read from the source text: every `crate::a::b` path (also inside `use crate::{…}`
//! groups) and every `super::x` path names the longest module it reaches. A module's own
//! declarations of its children (`mod turn;`, `pub use turn::X`) are the module tree, not a
//! dependency, and are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The surfaces: each reaches the runtime through the launcher, never through another surface.
const SURFACES: &[&str] = &["exec", "repl", "cli", "demo", "acp", "setup"];

/// Module path of a source file: `src/runtime/turn.rs` → `runtime::turn`, `src/runtime/mod.rs`
/// → `runtime`, `src/lib.rs` → `` (the crate root).
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts.join("::")
}

fn sources() -> BTreeMap<String, String> {
    let src = Path::new(ROOT).join("src");
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&src).expect("under src").to_path_buf();
                if rel == Path::new("main.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).expect("read");
                out.insert(module_of(&rel), strip_tests_and_comments(&text));
            }
        }
    }
    out
}

/// The text without `#[cfg(test)]` modules and comment lines: tests may reach anywhere, and a doc
/// link is not an import.
fn strip_tests_and_comments(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path written after `crate::` or `super::` (groups expanded one level).
fn paths_in(module: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for (needle, base) in [("crate::", String::new()), ("super::", parent(module))] {
        let mut from = 0;
        while let Some(at) = text[from..].find(needle) {
            let start = from + at + needle.len();
            from = start;
            // Not part of a longer word (`tern::crate` never occurs, `self::super` neither).
            if at > 0 && text[..from - needle.len()].ends_with(|c: char| c.is_ascii_alphanumeric())
            {
                continue;
            }
            let rest = &text[start..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let item: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                    if !item.is_empty() {
                        out.push(join(&base, &item));
                    }
                }
                continue;
            }
            let path: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            out.push(join(&base, path.trim_end_matches(':')));
        }
    }
    out
}

fn parent(module: &str) -> String {
    match module.rsplit_once("::") {
        Some((p, _)) => p.to_string(),
        None => String::new(),
    }
}

fn join(base: &str, path: &str) -> String {
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (_, true) => base.to_string(),
        _ => format!("{base}::{path}"),
    }
}

/// The longest known module a path reaches (None for the crate root alone).
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut p = path.to_string();
    loop {
        if modules.contains(&p) && !p.is_empty() {
            return Some(p);
        }
        match p.rsplit_once("::") {
            Some((head, _)) => p = head.to_string(),
            None => return None,
        }
    }
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = sources();
    let modules: BTreeSet<String> = src.keys().cloned().collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &src {
        let edges = g.entry(m.clone()).or_default();
        for p in paths_in(m, text) {
            if let Some(to) = resolve(&p, &modules)
                && to != *m
                // A parent naming its own child is the module tree.
                && !to.starts_with(&format!("{m}::"))
                && !m.is_empty()
            {
                edges.insert(to);
            }
        }
    }
    g
}

/// A path from `from` back to itself, if any.
fn cycle_through(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in g.get(&node).into_iter().flatten() {
            if next == from {
                let mut p = path.clone();
                p.push(next.clone());
                return Some(p);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn no_import_circle_between_source_files() {
    let g = graph();
    assert!(g.len() > 30, "the scan finds the modules: {:?}", g.keys());
    assert!(
        g["runtime::turn"].contains("runtime"),
        "the scan sees super:: paths: {:?}",
        g["runtime::turn"]
    );
    // A child using its parent (`super::Runtime`) while the parent only declares it is fine; the
    // parent using the child's items through `crate::` paths would make a circle and is caught.
    let circles: Vec<Vec<String>> = g.keys().filter_map(|m| cycle_through(&g, m)).collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

/// The graph between top-level modules (`runtime::turn` → `store::session` is `runtime` →
/// `store`): a room may use lower rooms, never one that uses it back (issue 28).
fn top_level_graph() -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, edges) in graph() {
        let from = top(&m);
        let out = g.entry(from.clone()).or_default();
        for to in edges {
            let to = top(&to);
            if to != from {
                out.insert(to);
            }
        }
    }
    g
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let g = top_level_graph();
    assert!(
        g.get("runtime").is_some_and(|e| e.contains("store")),
        "the scan sees the top-level edges: {g:?}"
    );
    let circles: Vec<Vec<String>> = g.keys().filter_map(|m| cycle_through(&g, m)).collect();
    assert!(circles.is_empty(), "module circles: {circles:#?}");
}

/// The circle check itself: it finds a circle through modules that no single file closes.
#[test]
fn the_module_circle_check_sees_a_circle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    assert_eq!(cycle_through(&g, "a").map(|p| p.len()), Some(4));
    assert_eq!(cycle_through(&g, "d"), None);
}

#[test]
fn no_surface_imports_another_surface() {
    let g = graph();
    for s in SURFACES {
        let Some(edges) = g.get(*s) else { continue };
        let bad: Vec<&String> = edges
            .iter()
            .filter(|to| {
                SURFACES
                    .iter()
                    .any(|o| o != s && (to == o || to.starts_with(&format!("{o}::"))))
            })
            .collect();
        assert!(bad.is_empty(), "{s} imports {bad:?}");
    }
}

#[test]
fn the_library_writes_no_diagnostics_of_its_own() {
    // Only surfaces (and the shared human output) print; the library emits `warning` events.
    let printing = ["errln!", "eprintln!", "outln!", "println!", "out!("];
    for (m, text) in sources() {
        let surface = SURFACES
            .iter()
            .any(|s| m == *s || m.starts_with(&format!("{s}::")));
        if surface || m == "output" || m.is_empty() {
            continue;
        }
        for p in printing {
            assert!(
                !text.contains(p),
                "{m} prints ({p}): emit a warning event instead"
            );
        }
    }
}

/// Every test that skips itself (or a part) says so through `support::skipped`, which logs it
/// for `.ci/run` to count and to fail on a skip CI must not have (issue 18): a bare
/// print of SKIPPED passes as `ok` unseen.
#[test]
fn every_skip_goes_through_the_skip_log() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut bare = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("support/mod.rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, l) in text.lines().enumerate() {
                    if l.contains("println!(\"SKIPPED") {
                        bare.push(format!("{}:{}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(bare.is_empty(), "skips not logged: {bare:?}");
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(
        ci.contains("TERN_SKIPPED_LOG=") && ci.contains("^ci-required"),
        ".ci/run counts the skips and fails on a required one"
    );
}

/// The files that render events and statuses for people and clients (issue 18, Structure).
const RENDERERS: &[&str] = &[
    "render",
    "render::sidebar",
    "render::work_state",
    "status",
    "stats",
    "output",
    "repl",
    "exec",
    "ops",
    "acp::updates",
    "acp::surface",
    "acp::session",
    "acp::bridge",
    "hooks",
];

/// The enums a renderer must match variant by variant: a `_ =>` arm over one of them would
/// swallow a variant added later.
const MATCHED_WHOLE: &[&str] = &[
    "Event::",
    "Ending::",
    "Status::",
    "Wire::",
    "Trigger::",
    "HookEvent::",
    "HookDecision::",
    "Purpose::",
    "CompactTrigger::",
    "BoundaryKind::",
    "Finish::",
    "PlanState::",
];

/// `text` with string and char literals blanked (same length), so braces inside them do not
/// count.
fn blank_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A raw string: r"…" or r#"…"#.
                let mut hashes = 0;
                let mut j = i;
                while j > 0 && b[j - 1] == b'#' {
                    hashes += 1;
                    j -= 1;
                }
                let raw = j > 0 && b[j - 1] == b'r';
                let mut k = i + 1;
                while k < b.len() {
                    if !raw && b[k] == b'\\' {
                        k += 2;
                        continue;
                    }
                    if b[k] == b'"' && b[k + 1..].iter().take(hashes).all(|c| *c == b'#') {
                        break;
                    }
                    k += 1;
                }
                for c in out.iter_mut().take(k.min(b.len())).skip(i + 1) {
                    *c = b' ';
                }
                i = k + 1 + if raw { hashes } else { 0 };
            }
            b'\'' => {
                // A char literal ('x', '\n', '{'), not a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|c| *c == b'\'')
                        .map(|p| i + 2 + p)
                } else {
                    let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 1 + ch)
                };
                match end {
                    Some(e) => {
                        for c in out.iter_mut().take(e).skip(i + 1) {
                            *c = b' ';
                        }
                        i = e + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The arms' patterns of every `match` in `code` (literals blanked), each match as a list.
fn match_arms(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut all = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("match ") {
        let at = from + p;
        from = at + 6;
        let word_start = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        if !word_start {
            continue;
        }
        // The body opens at the first `{` outside parentheses after the scrutinee.
        let mut depth = 0i32;
        let mut open = None;
        for (k, c) in b.iter().enumerate().skip(from) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    open = Some(k);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut arms = Vec::new();
        let mut k = open + 1;
        let mut seg = k;
        let mut depth = 0i32;
        while k < b.len() {
            match b[k] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' => depth -= 1,
                b'}' if depth == 0 => break,
                b'}' => depth -= 1,
                b'=' if depth == 0 && b.get(k + 1) == Some(&b'>') => {
                    arms.push(code[seg..k].trim().to_string());
                    // Skip the arm's expression: a block, or up to the next top-level comma.
                    k += 2;
                    while k < b.len() && b[k].is_ascii_whitespace() {
                        k += 1;
                    }
                    let block = b.get(k) == Some(&b'{');
                    let mut d = 0i32;
                    while k < b.len() {
                        match b[k] {
                            b'(' | b'[' | b'{' => d += 1,
                            b')' | b']' => d -= 1,
                            b'}' if d == 0 => break,
                            b'}' => {
                                d -= 1;
                                if block && d == 0 {
                                    k += 1;
                                    break;
                                }
                            }
                            b',' if d == 0 => break,
                            _ => {}
                        }
                        k += 1;
                    }
                    while k < b.len() && b[k].is_ascii_whitespace() {
                        k += 1;
                    }
                    if b.get(k) == Some(&b',') {
                        k += 1;
                    }
                    seg = k;
                    continue;
                }
                _ => {}
            }
            k += 1;
        }
        all.push(arms);
    }
    all
}

/// Renderers match every variant of the event and status enums (issue 18, Structure): no
/// `_ =>` arm in a match over one of them, so a new variant is a compile error there, never a
/// silently dropped line.
#[test]
fn renderers_match_every_variant() {
    let srcs = sources();
    let mut found = Vec::new();
    for m in RENDERERS {
        let text = srcs
            .get(*m)
            .unwrap_or_else(|| panic!("renderer {m} not found"));
        for arms in match_arms(&blank_literals(text)) {
            let over = arms
                .iter()
                .any(|a| MATCHED_WHOLE.iter().any(|e| a.contains(e)));
            if over && arms.iter().any(|a| a == "_") {
                found.push(format!("{m}: {}", arms.join(" | ")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`_ =>` over an event or status enum:\n{}",
        found.join("\n")
    );
}

/// The scanner itself: it finds a catch-all over an enum, and not one over strings.
#[test]
fn the_catch_all_scanner_sees_what_it_should() {
    let code = r#"fn f(e: &Event, s: &str) -> u8 {
        let x = match e {
            Event::A { .. } => { if s == "}" { 1 } else { 2 } }
            Event::B(c) if *c == '{' => 3,
            _ => 0,
        };
        match s { "a" => 1, _ => x }
    }"#;
    let arms = match_arms(&blank_literals(code));
    assert_eq!(arms.len(), 2, "{arms:?}");
    assert_eq!(arms[0].len(), 3, "{arms:?}");
    assert_eq!(arms[0][2], "_");
    assert!(arms[0][1].starts_with("Event::B"));
    assert_eq!(arms[1], ["\"a\"", "_"].map(|s| s.replace('a', " ")));
}

/// The fields of `struct NAME { … }` in `text` (the declaration's top level only), in order.
fn struct_fields(text: &str, name: &str) -> Option<Vec<String>> {
    let start = text.find(&format!("struct {name} {{"))?;
    let body = &text[start..];
    let open = body.find('{')?;
    let mut depth = 0i32;
    let mut fields = Vec::new();
    let mut line = String::new();
    let mut prev = ' ';
    for c in body[open..].chars() {
        match c {
            '{' | '(' | '<' | '[' => depth += 1,
            // `->` is no closing bracket.
            '>' if prev == '-' => {}
            '}' | ')' | '>' | ']' => depth -= 1,
            _ => {}
        }
        prev = c;
        if depth == 0 {
            break;
        }
        if c == '\n' && depth == 1 {
            let l = line.trim();
            // `name: Type,` at the struct's own level (depth 1), never a comment or attribute.
            if !l.starts_with("//") && !l.starts_with('#') {
                let l = l
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ")
                    .trim_start_matches("pub ");
                if let Some((ident, _)) = l.split_once(':')
                    && !ident.is_empty()
                    && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    fields.push(ident.to_string());
                }
            }
            line.clear();
        } else {
            line.push(c);
        }
    }
    Some(fields)
}

/// The values the runtime holds stay few (DESIGN §1, "One room, one door": `Runtime` keeps at
/// most 12 private fields; a room's value at most 8). A capability that needs state is a room
/// of its own, entered through one door, not one more field of a value that already holds
/// several (issue 39: what no test guarded slid from 12 to 13 within hours).
#[test]
fn the_runtime_and_the_rooms_hold_few_fields() {
    let limits: &[(&str, &str, usize)] = &[
        ("src/runtime/mod.rs", "Runtime", 12),
        ("src/commands/mod.rs", "Commands", 8),
    ];
    for (file, name, max) in limits {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).expect("read");
        let fields = struct_fields(&text, name).unwrap_or_else(|| panic!("no struct {name}"));
        assert!(
            fields.len() >= 3,
            "the scan reads {name}'s fields: {fields:?}"
        );
        assert!(
            fields.len() <= *max,
            "{name} ({file}) has {} fields, at most {max} (DESIGN §1, one room one door): \
             the ones past the limit are {:?}; give the capability a room of its own instead",
            fields.len(),
            &fields[*max..]
        );
    }
}

/// The field scan itself: nested types and comments are not fields.
#[test]
fn the_field_scan_counts_what_it_should() {
    let code = "pub struct S {\n    /// a: doc\n    a: Vec<(u8, u8)>,\n    pub b: Option<Box<dyn Fn(u8) -> u8>>,\n    // c: comment\n    #[allow(x)]\n    pub(crate) d: std::collections::BTreeMap<String,\n        u8>,\n}\nstruct T { z: u8 }\n";
    assert_eq!(struct_fields(code, "S").unwrap(), ["a", "b", "d"]);
}

/// The crate's top-level modules: `src/NAME.rs` and `src/NAME/mod.rs` (not `main`, `lib`).
fn modules_on_disk() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(Path::new(ROOT).join("src"))
        .expect("src")
        .flatten()
    {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() && p.join("mod.rs").is_file() {
            out.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs")
            && stem != "main"
            && stem != "lib"
        {
            out.insert(stem.to_string());
        }
    }
    out
}

/// The module map cannot go stale: `lib.rs` declares exactly the modules on disk, and
/// docs/architecture.md's "Modules" list names each of them once (issue 39).
#[test]
fn the_module_map_matches_the_modules_on_disk() {
    let disk = modules_on_disk();
    assert!(
        disk.contains("runtime") && disk.contains("store"),
        "{disk:?}"
    );
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).expect("lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    assert_eq!(declared, disk, "lib.rs's `pub mod` list and src/");
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).expect("doc");
    let section = doc
        .split("\n## Modules\n")
        .nth(1)
        .expect("docs/architecture.md has a \"## Modules\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let listed: Vec<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(|m| m.trim_end_matches('/').to_string())
        .collect();
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(set.len(), listed.len(), "a module listed twice: {listed:?}");
    let missing: Vec<&String> = disk.difference(&set).collect();
    let stale: Vec<&String> = set.difference(&disk).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's module list: missing {missing:?}, no such module {stale:?}"
    );
}

/// Rooms that sit below others in the module graph stay there (issue 39): the commands room
/// runs commands and knows nothing of the MCP servers or the hooks that use it (a command is
/// handed the descriptor it inherits; a hook in the jail is one more command).
#[test]
fn the_commands_room_sits_below_mcp_and_hooks() {
    let g = top_level_graph();
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(n) = stack.pop() {
            for next in g.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    for (lower, upper) in [("commands", "mcp"), ("commands", "hooks")] {
        assert!(
            !reach(lower).contains(upper),
            "{lower} reaches {upper}: {:?}",
            g.get(lower)
        );
    }
    assert!(
        reach("runtime").contains("commands"),
        "the scan sees the runtime's rooms"
    );
}

/// Long functions stay few (issue 39): clippy's `too_many_lines` (over 100 lines, Cargo.toml's
/// `[lints]`, clippy.toml) fails `.ci/run`, and the crate may excuse at most five functions,
/// each with `#[expect(…, reason = "…")]` (an `expect` that no longer fires is itself a
/// warning, so an excuse cannot outlive its function's length). Never `allow` in the crate.
#[test]
fn long_functions_are_few_and_say_why() {
    let cargo = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        cargo.contains("[lints.clippy]") && cargo.contains("too_many_lines = \"warn\""),
        "Cargo.toml's [lints.clippy] turns too_many_lines on"
    );
    let clippy = std::fs::read_to_string(Path::new(ROOT).join("clippy.toml")).unwrap_or_default();
    assert!(
        clippy.contains("too-many-lines-threshold = 100"),
        "{clippy}"
    );
    let mut excused = Vec::new();
    for (m, text) in sources() {
        assert!(
            !text.contains("allow(clippy::too_many_lines"),
            "{m}: excuse a long function with #[expect(…, reason)], never allow"
        );
        let mut rest = text.as_str();
        while let Some(at) = rest.find("clippy::too_many_lines") {
            let after = &rest[at..];
            let attr = &after[..after.find(")]").unwrap_or(after.len())];
            assert!(
                attr.contains("reason = \""),
                "{m}: an excuse without a reason"
            );
            excused.push(m.clone());
            rest = &after[1..];
        }
    }
    assert!(
        excused.len() <= 5,
        "{} long functions excused (at most 5): {excused:?}",
        excused.len()
    );
}
