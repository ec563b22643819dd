//! The To-do tools as the model sees them: `work_update` (the one progress tool), its hidden
//! legacy aliases, and the strategy-only `update_plan`. Their rules live in [`crate::domain`].

use serde_json::json;

use super::ToolSpec;
use crate::domain::ledger::Ledger;
use crate::domain::ledger::{
    LEGACY_ALIASES, MAX_CONTENT_CHARS, MAX_ITEMS, UPDATE_PLAN, WORK_UPDATE,
};

/// The advertised `work_update` tool: `{todos: [{id?, content, status}], goal?: {objective,
/// token_budget?}}`. Description from `prompts/tools/work_update.md` with the caps filled in.
pub fn work_update_spec() -> ToolSpec {
    ToolSpec {
        name: WORK_UPDATE,
        description: include_str!("../../prompts/tools/work_update.md")
            .trim_end()
            .replace("{MAX_ITEMS}", &MAX_ITEMS.to_string())
            .replace("{MAX_CONTENT_CHARS}", &MAX_CONTENT_CHARS.to_string()),
        parameters: json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {
                                "type": "string",
                                "enum": ["pending", "in_progress", "completed", "cancelled"]
                            }
                        },
                        "required": ["content", "status"]
                    }
                },
                "goal": {
                    "type": "object",
                    "properties": {
                        "objective": {"type": "string"},
                        "token_budget": {"type": "integer"}
                    }
                }
            },
            "required": ["todos"]
        }),
    }
}

/// The advertised `update_plan` tool: strategy only, all fields optional. Description from
/// `prompts/tools/update_plan.md`.
pub fn update_plan_spec() -> ToolSpec {
    let text = json!({"type": "string"});
    let list = json!({"type": "array", "items": {"type": "string"}});
    ToolSpec {
        name: UPDATE_PLAN,
        description: include_str!("../../prompts/tools/update_plan.md")
            .trim_end()
            .to_string(),
        parameters: json!({
            "type": "object",
            "properties": {
                "title": text,
                "objective": text,
                "approach": text,
                "constraints": list,
                "risks": list,
                "verification": text,
                "steps": list
            }
        }),
    }
}

/// True for the names [`crate::domain::ledger::apply`] dispatches: `work_update` and the
/// [`LEGACY_ALIASES`].
/// (`update_plan` is not one: it goes to [`crate::domain::strategy::apply_strategy`].)
pub fn is_work_tool(name: &str) -> bool {
    name == WORK_UPDATE || LEGACY_ALIASES.contains(&name)
}

/// The hidden legacy `todo_list`: the rendered To-do body (the same bytes as the work-state
/// block's), or a note when the To-do is empty. Reads only.
pub fn todo_list(ledger: &Ledger) -> String {
    crate::render::work_state::body(ledger).unwrap_or_else(|| "The To-do is empty.".into())
}
