//! The byte budget of the fixed prefix: every byte of the tool schemas and the system prompt is
//! sent (and billed, cached or not) on every request, so the default set stays within 3,000
//! bytes, the `agent` tool included.

use tern::runtime::system;
use tern::sandbox::Mode;

/// Tools (as serialized: name, description, schema) + the system prompt of a session in the
/// default sandbox mode and a project without `AGENTS.md`.
pub const BUDGET_BYTES: usize = 3000;

#[test]
fn the_fixed_prefix_fits_its_byte_budget() {
    let tools = tern::tools::specs();
    let tools_bytes = serde_json::to_string(&tools)
        .expect("tools serialize")
        .len();
    let d = tempfile::tempdir().expect("tempdir");
    let sys = system::base(d.path(), &system::sandbox_lines(Mode::default(), false));
    let total = tools_bytes + sys.len();
    let per_tool: Vec<String> = tools
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t.name,
                serde_json::to_string(t).map_or(0, |s| s.len())
            )
        })
        .collect();
    assert!(
        total <= BUDGET_BYTES,
        "tools {tools_bytes} + system {} = {total} bytes > {BUDGET_BYTES}: {per_tool:?}",
        sys.len()
    );
    assert!(
        tools.iter().any(|t| t.name == "agent"),
        "the agent tool is inside the budget"
    );
    // One or two sentences each; parameter descriptions, where there are any, are short.
    for t in &tools {
        let sentences = t.description.matches(". ").count() + 1;
        assert!(sentences <= 2, "{}: {sentences} sentences", t.name);
    }
}

/// No example a model could copy into an argument or run verbatim: no JSON call, no command
/// in backticks, no `echo … >` line in the system prompt or a tool description.
#[test]
fn no_copyable_examples_in_the_prefix() {
    let d = tempfile::tempdir().expect("tempdir");
    let sys = system::base(d.path(), &system::sandbox_lines(Mode::default(), false));
    let mut texts = vec![("system".to_string(), sys)];
    texts.extend(
        tern::tools::specs()
            .into_iter()
            .map(|t| (t.name.to_string(), t.description)),
    );
    for (name, text) in texts {
        for bad in ["{\"", "`", "echo ", "Example", "e.g."] {
            assert!(!text.contains(bad), "{name} holds {bad:?}: {text}");
        }
    }
}
