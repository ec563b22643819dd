//! The meaning of a hook's answer, as a pure function of what it did (Claude Code's hooks
//! reference, "Exit code output" and "JSON output"): `(event, how it ended, stdout, stderr) ->
//! decision`. Exit 0 may print a JSON object on stdout (`continue`/`stopReason`,
//! `decision`/`reason`, `systemMessage`, `hookSpecificOutput` with `permissionDecision`
//! allow/deny/ask and its reason, `updatedInput`, `additionalContext`); plain stdout counts as
//! context for `UserPromptSubmit` and `SessionStart` only. Exit 2 blocks, with stderr as the
//! message. Any other code, a timeout, or a hook that cannot start is a warning to the person;
//! the work goes on. The runtime's door (`runtime::hooks`) applies the combined [`Verdict`].

use serde_json::{Map, Value};

use super::HookEvent;
use super::run::Ran;
use crate::event::HookDecision;

/// A PreToolUse hook's `permissionDecision` that lets the call go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// No approval question (an `--approval never` session still refuses).
    Allow,
    /// Ask the person, whatever the approval policy.
    Ask,
}

/// The combined answer of the hooks of one event.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Exit 2 (stderr) and `decision: block` reasons.
    pub block: Vec<String>,
    /// `permissionDecision: deny` reasons.
    pub deny: Vec<String>,
    /// The strongest of allow / ask (deny is above).
    pub permission: Option<Permission>,
    /// `additionalContext`, and plain stdout where it counts.
    pub context: Vec<String>,
    /// `continue: false`, with `stopReason`.
    pub stop: Option<String>,
    /// `updatedInput` of a PreToolUse hook (the last one given).
    pub updated_input: Option<Value>,
}

/// Reads one hook's answer into `v`; returns its decision and the message worth showing.
pub fn read_answer(
    event: HookEvent,
    ran: &Ran,
    timeout: std::time::Duration,
    v: &mut Verdict,
) -> (HookDecision, Option<String>) {
    if let Some(e) = &ran.spawn_error {
        return (HookDecision::Error, Some(e.clone()));
    }
    if ran.timed_out {
        return (
            HookDecision::Error,
            Some(format!(
                "timed out after {} s; its process group was killed",
                timeout.as_secs_f64()
            )),
        );
    }
    if ran.interrupted {
        return (
            HookDecision::Error,
            Some("interrupted; its process group was killed".into()),
        );
    }
    match ran.exit_code {
        Some(2) => {
            let msg = ran.stderr.trim().to_string();
            v.block.push(msg.clone());
            (HookDecision::Block, Some(msg))
        }
        Some(0) => read_json_answer(event, &ran.stdout, v),
        code => {
            let err = ran.stderr.trim();
            let msg = match code {
                Some(c) => format!("exited {c} (not a block: the work goes on)"),
                None => "ended without an exit code".into(),
            };
            (
                HookDecision::Error,
                Some(if err.is_empty() {
                    msg
                } else {
                    format!("{msg}: {err}")
                }),
            )
        }
    }
}

/// The JSON (or plain) stdout of a hook that exited 0.
pub fn read_json_answer(
    event: HookEvent,
    stdout: &str,
    v: &mut Verdict,
) -> (HookDecision, Option<String>) {
    let text = stdout.trim();
    let parsed = text
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten();
    let Some(obj) = parsed.as_ref().and_then(Value::as_object) else {
        if matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
            && !text.is_empty()
        {
            v.context.push(text.to_string());
        }
        return (HookDecision::None, None);
    };
    let s = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let mut shown = s(obj, "systemMessage");
    if obj.get("continue") == Some(&Value::Bool(false)) {
        let reason = s(obj, "stopReason").unwrap_or_else(|| "(no stopReason)".into());
        v.stop = Some(reason.clone());
        return (HookDecision::Stop, Some(reason));
    }
    let specific = obj.get("hookSpecificOutput").and_then(Value::as_object);
    if let Some(c) = specific.and_then(|h| s(h, "additionalContext")) {
        v.context.push(c);
    }
    let reason = s(obj, "reason");
    let mut decision = HookDecision::None;
    if event == HookEvent::PreToolUse {
        let why = specific
            .and_then(|h| s(h, "permissionDecisionReason"))
            .or(reason.clone());
        // `decision: approve | block` is the older spelling of allow / deny.
        let chosen = specific
            .and_then(|h| s(h, "permissionDecision"))
            .or_else(|| match s(obj, "decision").as_deref() {
                Some("approve") => Some("allow".into()),
                Some("block") => Some("deny".into()),
                _ => None,
            });
        if let Some(input) = specific.and_then(|h| h.get("updatedInput")) {
            v.updated_input = Some(input.clone());
        }
        match chosen.as_deref() {
            Some("deny") => {
                v.deny
                    .push(why.clone().unwrap_or_else(|| "(no reason given)".into()));
                decision = HookDecision::Deny;
            }
            Some("ask") => {
                v.permission = Some(Permission::Ask);
                decision = HookDecision::Ask;
            }
            Some("allow") => {
                if v.permission.is_none() {
                    v.permission = Some(Permission::Allow);
                }
                decision = HookDecision::Allow;
            }
            _ => {}
        }
        shown = shown.or(why);
    } else if s(obj, "decision").as_deref() == Some("block") {
        let why = reason.unwrap_or_else(|| "(no reason given)".into());
        v.block.push(why.clone());
        return (HookDecision::Block, Some(why));
    }
    (decision, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ran(code: Option<i32>, stdout: &str, stderr: &str) -> Ran {
        Ran {
            exit_code: code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            timed_out: false,
            interrupted: false,
            spawn_error: None,
            duration: Duration::ZERO,
        }
    }

    fn read(event: HookEvent, r: &Ran) -> (HookDecision, Option<String>, Verdict) {
        let mut v = Verdict::default();
        let (d, m) = read_answer(event, r, Duration::from_secs(5), &mut v);
        (d, m, v)
    }

    #[test]
    fn exit_2_blocks_with_stderr_and_other_codes_only_warn() {
        let (d, m, v) = read(HookEvent::PreToolUse, &ran(Some(2), "ignored", " no rm \n"));
        assert_eq!(d, HookDecision::Block);
        assert_eq!(m.as_deref(), Some("no rm"));
        assert_eq!(v.block, ["no rm"]);
        let (d, m, v) = read(HookEvent::PreToolUse, &ran(Some(1), "", "oops"));
        assert_eq!(d, HookDecision::Error);
        assert_eq!(
            m.as_deref(),
            Some("exited 1 (not a block: the work goes on): oops")
        );
        assert!(v.block.is_empty() && v.deny.is_empty());
        let timed = Ran {
            timed_out: true,
            ..ran(None, "", "")
        };
        let (d, m, _) = read(HookEvent::Stop, &timed);
        assert_eq!(d, HookDecision::Error);
        assert!(m.unwrap().starts_with("timed out after 5 s"));
    }

    #[test]
    fn a_pre_tool_use_json_answer_decides_permission_and_input() {
        let deny = r#"{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"not here"}}"#;
        let (d, m, v) = read(HookEvent::PreToolUse, &ran(Some(0), deny, ""));
        assert_eq!((d, m.as_deref()), (HookDecision::Deny, Some("not here")));
        assert_eq!(v.deny, ["not here"]);
        let ask = r#"{"hookSpecificOutput":{"permissionDecision":"ask","updatedInput":{"command":"ls"},"additionalContext":"fyi"}}"#;
        let (d, _, v) = read(HookEvent::PreToolUse, &ran(Some(0), ask, ""));
        assert_eq!(d, HookDecision::Ask);
        assert_eq!(v.permission, Some(Permission::Ask));
        assert_eq!(v.updated_input, Some(serde_json::json!({"command": "ls"})));
        assert_eq!(v.context, ["fyi"]);
        // The older spelling: decision approve / block.
        let (d, _, v) = read(
            HookEvent::PreToolUse,
            &ran(Some(0), r#"{"decision":"approve"}"#, ""),
        );
        assert_eq!(
            (d, v.permission),
            (HookDecision::Allow, Some(Permission::Allow))
        );
        let (d, _, v) = read(
            HookEvent::PreToolUse,
            &ran(Some(0), r#"{"decision":"block","reason":"r"}"#, ""),
        );
        assert_eq!(
            (d, v.deny.clone()),
            (HookDecision::Deny, vec!["r".to_string()])
        );
    }

    #[test]
    fn continue_false_stops_and_block_blocks_other_events() {
        let (d, m, v) = read(
            HookEvent::PostToolUse,
            &ran(Some(0), r#"{"continue":false,"stopReason":"enough"}"#, ""),
        );
        assert_eq!((d, m.as_deref()), (HookDecision::Stop, Some("enough")));
        assert_eq!(v.stop.as_deref(), Some("enough"));
        let (d, m, v) = read(
            HookEvent::Stop,
            &ran(Some(0), r#"{"decision":"block","reason":"tests fail"}"#, ""),
        );
        assert_eq!((d, m.as_deref()), (HookDecision::Block, Some("tests fail")));
        assert_eq!(v.block, ["tests fail"]);
        let (d, m, _) = read(
            HookEvent::PostToolUse,
            &ran(Some(0), r#"{"systemMessage":"note"}"#, ""),
        );
        assert_eq!((d, m.as_deref()), (HookDecision::None, Some("note")));
    }

    #[test]
    fn plain_or_invalid_json_stdout_is_context_only_where_claude_reads_it() {
        for out in ["plain words", "{not json"] {
            let (d, _, v) = read(HookEvent::UserPromptSubmit, &ran(Some(0), out, ""));
            assert_eq!(d, HookDecision::None);
            assert_eq!(v.context, [out]);
            let (d, _, v) = read(HookEvent::PreToolUse, &ran(Some(0), out, ""));
            assert_eq!(d, HookDecision::None);
            assert!(v.context.is_empty() && v.deny.is_empty() && v.permission.is_none());
        }
        let (_, _, v) = read(HookEvent::SessionStart, &ran(Some(0), "  \n", ""));
        assert!(v.context.is_empty());
    }
}
