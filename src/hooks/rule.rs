//! A handler's `if` (Claude Code ≥ 2.1.85): a permission rule that narrows when the handler runs
//! beyond its group's matcher, e.g. `"if": "Bash(rm *)"` for a guard of `rm` alone.
//!
//! Pure: the rule's text in, a [`Rule`] out ([`Rule::parse`]), then a tool call's name and
//! input in, "applies" out ([`Rule::applies`]). Forms: `Bash` and `Bash(*)` (every command),
//! `Bash(PREFIX *)` and the older `Bash(PREFIX:*)` (a command that is PREFIX or starts with
//! PREFIX and a space), `Bash(PREFIX*)` (starts with PREFIX), `Bash(EXACT)`; a tool name alone
//! (`mcp__github__list_issues`, `work_update`) matches that tool. A rule for a tool tern does
//! not have (`Edit(*.rs)`) never matches: said once at load. A compound command (`ls && rm -rf
//! x`) is checked part by part, so a guard of `rm` is not stepped around with `&&`.

use super::HookError;

/// A parsed `if`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Bash commands matching the pattern.
    Bash(Pattern),
    /// The tool of this name (any input).
    Tool(String),
    /// A tool tern does not have, with a note for the person.
    Never(String),
}

/// What a `Bash(…)` rule asks of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Every command.
    Any,
    /// The command, or one that starts with it and a space.
    Word(String),
    /// Any command that starts with it.
    Prefix(String),
    /// Exactly this command.
    Exact(String),
}

/// tern's tools by the names hooks see them (`Bash` for bash; MCP tools are `mcp__SERVER__TOOL`).
pub const TOOL_NAMES: [&str; 8] = [
    "Bash",
    "plan_draft",
    "plan_confirm",
    "plan_cancel",
    "plan_clear",
    "work_update",
    "update_plan",
    "agent",
];

impl Rule {
    /// Parses an `if`. Errors: an empty rule or unbalanced parentheses (the entry is invalid).
    pub fn parse(text: &str) -> Result<Rule, HookError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(HookError::Entry("an empty rule".into()));
        }
        let Some(open) = t.find('(') else {
            if t.contains(')') {
                return Err(HookError::Entry(format!("{t:?}: unbalanced parentheses")));
            }
            return Ok(if t == "Bash" {
                Rule::Bash(Pattern::Any)
            } else if TOOL_NAMES.contains(&t) || t.starts_with("mcp__") {
                Rule::Tool(t.to_string())
            } else {
                Rule::Never(format!("{t:?} names a tool tern does not have"))
            });
        };
        let Some(inner) = t[open + 1..].strip_suffix(')') else {
            return Err(HookError::Entry(format!("{t:?}: unbalanced parentheses")));
        };
        let tool = t[..open].trim();
        if tool != "Bash" {
            return Ok(Rule::Never(format!(
                "{t:?}: tern matches arguments of Bash commands only ({tool} is not a tool of tern's, or takes no pattern)"
            )));
        }
        let p = inner.trim();
        Ok(Rule::Bash(if p.is_empty() || p == "*" {
            Pattern::Any
        } else if let Some(w) = p.strip_suffix(" *").or_else(|| p.strip_suffix(":*")) {
            Pattern::Word(w.trim_end().to_string())
        } else if let Some(w) = p.strip_suffix('*') {
            Pattern::Prefix(w.to_string())
        } else {
            Pattern::Exact(p.to_string())
        }))
    }

    /// Whether a call of `tool` (Claude's name: `Bash`, `mcp__…`, tern's others) with bash
    /// `command` (None for other tools) is one the rule names.
    pub fn applies(&self, tool: &str, command: Option<&str>) -> bool {
        match self {
            Rule::Never(_) => false,
            Rule::Tool(name) => name == tool,
            Rule::Bash(p) => {
                if tool != "Bash" {
                    return false;
                }
                let Some(cmd) = command else { return false };
                parts(cmd).iter().any(|part| p.matches(part))
            }
        }
    }
}

impl Pattern {
    fn matches(&self, cmd: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Word(w) => cmd == w || cmd.starts_with(&format!("{w} ")),
            Pattern::Prefix(w) => cmd.starts_with(w.as_str()),
            Pattern::Exact(e) => cmd == e,
        }
    }
}

/// The simple commands of a command line: split at `&&`, `||`, `;`, `|`, `&` and newlines,
/// each trimmed, leading `VAR=value` words and a leading `sudo`/`env`/`command` dropped. Quotes
/// are not parsed: a split inside one only makes a guard fire more often, never less.
fn parts(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in cmd.split(['\n', ';', '|', '&']) {
        let mut words: Vec<&str> = piece.split_whitespace().collect();
        while let Some(first) = words.first() {
            let assignment = first.contains('=') && !first.starts_with('=');
            if assignment || matches!(*first, "sudo" | "env" | "command" | "exec" | "(" | "{") {
                words.remove(0);
            } else {
                break;
            }
        }
        if !words.is_empty() {
            out.push(words.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse() {
        assert_eq!(
            Rule::parse("Bash(rm *)").unwrap(),
            Rule::Bash(Pattern::Word("rm".into()))
        );
        assert_eq!(
            Rule::parse("Bash(npm run test:*)").unwrap(),
            Rule::Bash(Pattern::Word("npm run test".into()))
        );
        assert_eq!(
            Rule::parse("Bash(git*)").unwrap(),
            Rule::Bash(Pattern::Prefix("git".into()))
        );
        assert_eq!(
            Rule::parse("Bash(make check)").unwrap(),
            Rule::Bash(Pattern::Exact("make check".into()))
        );
        assert_eq!(Rule::parse("Bash").unwrap(), Rule::Bash(Pattern::Any));
        assert_eq!(Rule::parse("Bash(*)").unwrap(), Rule::Bash(Pattern::Any));
        assert_eq!(
            Rule::parse("mcp__gh__list").unwrap(),
            Rule::Tool("mcp__gh__list".into())
        );
        assert!(matches!(Rule::parse("Edit(*.rs)").unwrap(), Rule::Never(_)));
        assert!(matches!(Rule::parse("Write").unwrap(), Rule::Never(_)));
        assert!(Rule::parse("").is_err() && Rule::parse("Bash(rm *").is_err());
    }

    #[test]
    fn a_guard_of_rm_fires_on_rm_alone_and_inside_compounds() {
        let r = Rule::parse("Bash(rm *)").unwrap();
        assert!(r.applies("Bash", Some("rm -rf build")));
        assert!(r.applies("Bash", Some("rm")));
        assert!(r.applies("Bash", Some("ls && rm -rf x")));
        assert!(r.applies("Bash", Some("cd a; sudo rm x")));
        assert!(r.applies("Bash", Some("FOO=1 rm x")));
        assert!(!r.applies("Bash", Some("ls -la")));
        assert!(!r.applies("Bash", Some("rmdir x")));
        assert!(!r.applies("Bash", Some("echo rm")));
        assert!(!r.applies("work_update", None));
        let t = Rule::parse("mcp__gh__list").unwrap();
        assert!(t.applies("mcp__gh__list", None) && !t.applies("mcp__gh__other", None));
        assert!(!Rule::parse("Edit(*)").unwrap().applies("Bash", Some("x")));
    }
}
