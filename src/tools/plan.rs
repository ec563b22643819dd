//! The plan tools as the model sees them: `plan_draft`, `plan_confirm`, `plan_cancel`,
//! `plan_clear`. The lifecycle they drive is [`crate::domain::plan`].

use serde_json::json;

use super::ToolSpec;

/// The plan tools, in their fixed order after `bash`.
pub fn specs() -> Vec<ToolSpec> {
    // No arguments: the smallest schema every provider takes (Anthropic needs an object type).
    let empty = json!({"type": "object"});
    vec![
        ToolSpec {
            name: "plan_draft",
            description: include_str!("../../prompts/tools/plan_draft.md")
                .trim()
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"content": {"type": "string"}},
                "required": ["content"]
            }),
        },
        ToolSpec {
            name: "plan_confirm",
            description: include_str!("../../prompts/tools/plan_confirm.md")
                .trim()
                .into(),
            parameters: empty.clone(),
        },
        ToolSpec {
            name: "plan_cancel",
            description: include_str!("../../prompts/tools/plan_cancel.md")
                .trim()
                .into(),
            parameters: empty.clone(),
        },
        ToolSpec {
            name: "plan_clear",
            description: include_str!("../../prompts/tools/plan_clear.md")
                .trim()
                .into(),
            parameters: empty,
        },
    ]
}
