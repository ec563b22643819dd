//! The strategy kept by `update_plan` (`strategy.json`): conversation only, never a second
//! progress list and never in the work-state block (DESIGN.md §6). Pure.

use super::DomainError;
use serde_json::{Map, Value};

use super::ledger::MAX_CONTENT_CHARS;

/// At most this many characters per text field (title, objective, …).
pub const MAX_STRATEGY_TEXT_CHARS: usize = 2000;
/// At most this many entries per list field (constraints, risks, steps); each entry at most
/// [`MAX_CONTENT_CHARS`].
pub const MAX_STRATEGY_LIST: usize = 50;

const STRATEGY_TEXT: [&str; 4] = ["title", "objective", "approach", "verification"];
const STRATEGY_LISTS: [&str; 3] = ["constraints", "risks", "steps"];

/// Validates an `update_plan` call: `{title?, objective?, approach?, verification?: string,
/// constraints?, risks?, steps?: [string]}`.
///
/// Returns the normalized strategy to keep (an object holding only the non-empty fields, strings
/// trimmed, empty entries dropped; it replaces the previous strategy) and a short ack. Errors name
/// every bad field: not an object, unknown fields, wrong types, text over
/// [`MAX_STRATEGY_TEXT_CHARS`], lists over [`MAX_STRATEGY_LIST`] entries or entries over
/// [`MAX_CONTENT_CHARS`], nothing given. Strategy is never a progress list (DESIGN.md §6).
pub fn apply_strategy(args: &Value) -> Result<(Value, String), DomainError> {
    let Value::Object(m) = args else {
        return Err(DomainError::Invalid(format!(
            "update_plan: the arguments must be a JSON object, got {}.",
            super::json_kind(args)
        )));
    };
    let mut problems = Vec::new();
    let mut unknown: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !STRATEGY_TEXT.contains(k) && !STRATEGY_LISTS.contains(k))
        .collect();
    unknown.sort_unstable();
    if !unknown.is_empty() {
        problems.push(format!(
            "unknown field(s) {}; the fields are title, objective, approach, constraints, risks, \
             verification, steps (progress belongs in work_update)",
            unknown.join(", ")
        ));
    }
    let mut out = Map::new();
    for field in STRATEGY_TEXT {
        match m.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                let t = s.trim();
                if t.chars().count() > MAX_STRATEGY_TEXT_CHARS {
                    problems.push(format!(
                        "{field} is longer than {MAX_STRATEGY_TEXT_CHARS} characters"
                    ));
                } else if !t.is_empty() {
                    out.insert(field.into(), Value::String(t.into()));
                }
            }
            Some(other) => problems.push(format!(
                "{field} must be a string, got {}",
                super::json_kind(other)
            )),
        }
    }
    for field in STRATEGY_LISTS {
        match m.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                if a.len() > MAX_STRATEGY_LIST {
                    problems.push(format!(
                        "{field} has {} entries, at most {MAX_STRATEGY_LIST}",
                        a.len()
                    ));
                    continue;
                }
                let mut kept = Vec::new();
                for (i, v) in a.iter().enumerate() {
                    match v {
                        Value::String(s) if s.trim().chars().count() > MAX_CONTENT_CHARS => {
                            problems.push(format!(
                                "{field}[{i}] is longer than {MAX_CONTENT_CHARS} characters"
                            ))
                        }
                        Value::String(s) if !s.trim().is_empty() => {
                            kept.push(Value::String(s.trim().into()))
                        }
                        Value::String(_) => {}
                        other => problems.push(format!(
                            "{field}[{i}] must be a string, got {}",
                            super::json_kind(other)
                        )),
                    }
                }
                if !kept.is_empty() {
                    out.insert(field.into(), Value::Array(kept));
                }
            }
            Some(other) => problems.push(format!(
                "{field} must be an array of strings, got {}",
                super::json_kind(other)
            )),
        }
    }
    if problems.is_empty() && out.is_empty() {
        problems.push(
            "nothing to record: give at least one of title, objective, approach, constraints, \
             risks, verification, steps"
                .into(),
        );
    }
    if !problems.is_empty() {
        return Err(DomainError::Invalid(format!(
            "update_plan rejected; the strategy is unchanged:\n- {}",
            problems.join("\n- ")
        )));
    }
    let fields: Vec<&str> = out.keys().map(String::as_str).collect();
    let ack = format!("Strategy saved ({}).", fields.join(", "));
    Ok((Value::Object(out), ack))
}
