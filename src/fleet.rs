//! The Fleet: the roster of members a sub-agent can be (DESIGN.md §9). A member has a stable id,
//! a unique role, and either an exact provider + model route or none (the parent's route). The
//! Fleet only selects — by id, then by role — and never substitutes: an unknown member, or one
//! whose route cannot run here, is an error naming the members. What a member may do is decided
//! after selection, by the runtime (authority only narrows).
//!
//! Files: `.tern/fleet.json` (the project's) over `~/.config/tern/fleet.json` (the user's): a
//! project member replaces a user member of the same id. Both are
//! `{"members": [{id, role, provider?, model?, base_url?, sandbox?, approval?, max_turns?,
//! wall_time_s?, token_budget?, instructions?}]}`; unknown fields are refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{Env, ProviderChoice, ProviderFlags, ProviderKind};
use crate::policy::Approval;
use crate::policy::Mode;

/// One member of the Fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Stable identity: `[a-z0-9_-]`, unique.
    pub id: String,
    /// What it is for (`explore`, `review`, `implement`…), unique: selection by role cannot
    /// depend on order.
    pub role: String,
    /// The wire format of its own route; with `model` (both or neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// The model of its own route; with `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The server of its own route (default: the provider's usual one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The widest sandbox it may have (the parent's is never widened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Mode>,
    /// The widest approval it may have (never > ask > … : `never` narrowest, `auto` widest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Its turn budget (model requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Its wall-time budget in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_s: Option<u64>,
    /// Its token budget (input + output tokens over its requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Instructions placed in its first message, before the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    #[serde(default)]
    members: Vec<Member>,
}

/// The members, validated, with where each came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fleet {
    /// In file order (user members first, then the project's).
    pub members: Vec<Member>,
    /// The files read.
    pub sources: Vec<PathBuf>,
}

/// The user's Fleet file: `$XDG_CONFIG_HOME/tern/fleet.json`, else `~/.config/tern/fleet.json`,
/// from `env` (the launcher's snapshot, so an in-process runtime never reads the developer's own
/// file). None when neither variable is set.
pub fn user_file(env: &crate::config::Env) -> Option<PathBuf> {
    let base = env
        .get("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("tern").join("fleet.json"))
}

/// Why the Fleet cannot be used or a member cannot be chosen or run (DESIGN §9: an unknown or
/// unrunnable member is an error, never a substitute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetError {
    /// A Fleet file cannot be read or holds what tern refuses (the line names the file).
    File(String),
    /// No member has that id or role.
    Unknown(String),
    /// The member names a provider route tern cannot use.
    Route(String),
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::File(why) | FleetError::Unknown(why) | FleetError::Route(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for FleetError {}

/// A check's line about a file's members (the caller names the file).
impl From<String> for FleetError {
    fn from(why: String) -> FleetError {
        FleetError::File(why)
    }
}

/// The line, for a tool result or a receipt.
impl From<FleetError> for String {
    fn from(e: FleetError) -> String {
        e.to_string()
    }
}

impl Fleet {
    /// Reads the user's file, then the project's (`<state root>/fleet.json`), and validates the
    /// result. Missing files are an empty Fleet. Errors name the file: JSON that does not parse,
    /// an unknown field, a member with a provider but no model (or the reverse), an id twice in
    /// one file, duplicate roles, a bad id.
    pub fn load(state_root: &Path, user: Option<&Path>) -> Result<Fleet, FleetError> {
        let mut fleet = Fleet::default();
        for path in user
            .into_iter()
            .chain([state_root.join("fleet.json").as_path()])
        {
            let Some(members) = read(path, path.starts_with(state_root))? else {
                continue;
            };
            // Each file on its own first, so an error names the file it is in; an id twice in
            // one file is refused here (across files, the project's replaces the user's).
            let file = Fleet {
                members,
                sources: vec![path.to_path_buf()],
            };
            file.validate()
                .map_err(|e| FleetError::File(format!("{}: {e}", path.display())))?;
            fleet.sources.push(path.to_path_buf());
            for m in file.members {
                match fleet.members.iter_mut().find(|x| x.id == m.id) {
                    Some(x) => *x = m,
                    None => fleet.members.push(m),
                }
            }
        }
        // What only the merge can break: two files giving one role to different ids.
        fleet.validate().map_err(|e| {
            let files: Vec<String> = fleet
                .sources
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            format!("{}: {e}", files.join(" + "))
        })?;
        Ok(fleet)
    }

    fn validate(&self) -> Result<(), String> {
        for (i, m) in self.members.iter().enumerate() {
            if m.id.is_empty()
                || !m
                    .id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            {
                return Err(format!(
                    "fleet member id {:?}: use lowercase letters, digits, - and _",
                    m.id
                ));
            }
            if self.members[..i].iter().any(|o| o.id == m.id) {
                return Err(format!(
                    "fleet member id {:?} appears twice: ids must be unique",
                    m.id
                ));
            }
            if m.role.trim().is_empty() {
                return Err(format!("fleet member {}: the role is empty", m.id));
            }
            if m.provider.is_some() != m.model.is_some() {
                return Err(format!(
                    "fleet member {}: name both provider and model (an exact route) or neither (the parent's route)",
                    m.id
                ));
            }
            if m.base_url.is_some() && m.provider.is_none() {
                return Err(format!(
                    "fleet member {}: base_url needs provider and model",
                    m.id
                ));
            }
            for (field, zero) in [
                ("max_turns", m.max_turns == Some(0)),
                ("wall_time_s", m.wall_time_s == Some(0)),
                ("token_budget", m.token_budget == Some(0)),
            ] {
                if zero {
                    return Err(format!(
                        "fleet member {}: {field} is 0, so it could never run; give at least 1 or leave it out",
                        m.id
                    ));
                }
            }
            if let Some(other) = self.members[..i].iter().find(|o| o.role == m.role) {
                return Err(format!(
                    "fleet members {} and {} share the role {:?}: roles must be unique, so selection never depends on order",
                    other.id, m.id, m.role
                ));
            }
        }
        Ok(())
    }

    /// The member `name` selects: the member with that id, else the one with that role. Errors
    /// (never a substitute): no such member, listing the members.
    pub fn select(&self, name: &str) -> Result<&Member, FleetError> {
        self.members
            .iter()
            .find(|m| m.id == name)
            .or_else(|| self.members.iter().find(|m| m.role == name))
            .ok_or_else(|| {
                FleetError::Unknown(format!(
                    "there is no fleet member {name:?}; the members are: {}",
                    self.listing()
                ))
            })
    }

    /// `id (role)` of every member, or "none (no fleet.json)".
    pub fn listing(&self) -> String {
        if self.members.is_empty() {
            return "none (no fleet.json: call agent without member)".to_string();
        }
        self.members
            .iter()
            .map(|m| format!("{} ({})", m.id, m.role))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One Fleet file's members; None when it is absent. `in_state` says the file is in the state
/// folder, so an error from a file in the way of that folder says so.
fn read(path: &Path, in_state: bool) -> Result<Option<Vec<Member>>, FleetError> {
    // Not blocking on a FIFO; a Fleet file is small, 1 MiB is far past any real one.
    let text = match crate::store::fsutil::read_regular(path, 1 << 20).and_then(|b| {
        b.map(|b| String::from_utf8(b).map_err(|_| std::io::Error::other("not valid UTF-8")))
            .transpose()
    }) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) if in_state => {
            return Err(FleetError::File(
                crate::store::fsutil::with_path(e, path).to_string(),
            ));
        }
        Err(e) => return Err(FleetError::File(format!("{}: {e}", path.display()))),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| FleetError::File(format!("{}: {e}", path.display())))?;
    // serde reads a struct from an array too (its fields in order): a Fleet file is an object.
    if !value.is_object() {
        return Err(FleetError::File(format!(
            "{}: a Fleet file is a JSON object, {{\"members\": [...]}}, not {}",
            path.display(),
            match value {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Null => "null",
                serde_json::Value::Object(_) => "an object",
            }
        )));
    }
    let f: FleetFile = serde_json::from_value(value)
        .map_err(|e| FleetError::File(format!("{}: {e}", path.display())))?;
    Ok(Some(f.members))
}

impl Member {
    /// The member's own route, resolved from this environment without a model call; None runs
    /// on the parent's route. A key goes only to its provider's server: the member's `base_url`
    /// must be the one that provider's variables name (or its default), else the route runs
    /// without the key. Errors: the route cannot run here (no key where one is needed, a bad
    /// URL).
    pub fn route(&self, env: &Env) -> Result<Option<ProviderChoice>, FleetError> {
        let (Some(kind), Some(model)) = (self.provider, self.model.clone()) else {
            return Ok(None);
        };
        let flags = ProviderFlags {
            provider: Some(kind),
            base_url: self.base_url.clone(),
            model: Some(model),
        };
        let (key_var, url_var) = match kind {
            ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                ("OPENAI_API_KEY", "OPENAI_BASE_URL")
            }
            ProviderKind::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        };
        let env_url = env.get(url_var);
        let keyed = match (&self.base_url, &env_url) {
            (None, _) => true,
            (Some(m), Some(e)) => same_url(m, e),
            (Some(m), None) => {
                let default = match kind {
                    ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                        "https://api.openai.com/v1"
                    }
                    ProviderKind::Anthropic => "https://api.anthropic.com",
                };
                same_url(m, default)
            }
        };
        let get = |k: &str| {
            if (k == key_var && !keyed) || k == "TERN_MODEL" {
                return crate::config::Var::Unset;
            }
            env.var(k)
        };
        // The member's own values are named as its fields, not as flags.
        let named = |k: &str| match k {
            "--base-url" => "its base_url".to_string(),
            "--model" => "its model".to_string(),
            other => env.source_of(other),
        };
        crate::config::resolve_named(&flags, &get, &named)
            .map(Some)
            .map_err(|e| {
                FleetError::Route(format!(
                    "fleet member {}: {}",
                    self.id,
                    e.to_string().lines().next().unwrap_or("")
                ))
            })
    }
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim()
        .trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim().trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn project_over_user_unknown_fields_and_duplicates_refused() {
        let d = tempfile::tempdir().unwrap();
        let user = write(
            d.path(),
            "user.json",
            r#"{"members": [{"id": "rev", "role": "review", "sandbox": "read-only"},
                            {"id": "exp", "role": "explore"}]}"#,
        );
        std::fs::write(
            d.path().join("fleet.json"),
            r#"{"members": [{"id": "rev", "role": "review", "approval": "never"}]}"#,
        )
        .unwrap();
        let f = Fleet::load(d.path(), Some(&user)).unwrap();
        assert_eq!(f.members.len(), 2);
        assert_eq!(f.select("review").unwrap().approval, Some(Approval::Never));
        assert_eq!(
            f.select("rev").unwrap().sandbox,
            None,
            "the project's wins whole"
        );
        assert_eq!(f.select("explore").unwrap().id, "exp");
        // An unknown member is its own kind of error: never a substitute (DESIGN §9).
        assert!(matches!(f.select("nobody"), Err(FleetError::Unknown(_))));
        let e = f.select("nobody").unwrap_err().to_string();
        assert!(
            e.contains("rev (review)") && e.contains("exp (explore)"),
            "{e}"
        );

        // A role given to two ids by two files: the error names both files.
        std::fs::write(
            d.path().join("fleet.json"),
            r#"{"members": [{"id": "other", "role": "explore"}]}"#,
        )
        .unwrap();
        let e = Fleet::load(d.path(), Some(&user)).unwrap_err().to_string();
        assert!(
            e.contains("user.json + ") && e.contains("fleet.json:") && e.contains("explore"),
            "{e}"
        );

        for bad in [
            r#"{"members": [{"id": "a", "role": "r", "colour": "red"}]}"#,
            r#"{"members": [{"id": "a", "role": "r"}, {"id": "b", "role": "r"}]}"#,
            r#"{"members": [{"id": "a", "role": "r", "model": "m"}]}"#,
            r#"{"members": [{"id": "A b", "role": "r"}]}"#,
            r#"{"members": [{"id": "a", "role": "r", "base_url": "http://x"}]}"#,
            r#"{"members": [{"id": "a", "role": "r1"}, {"id": "a", "role": "r2"}]}"#,
            r#"{"memberz": []}"#,
            "not json",
        ] {
            std::fs::write(d.path().join("fleet.json"), bad).unwrap();
            let e = Fleet::load(d.path(), None).unwrap_err().to_string();
            assert!(
                e.contains("fleet.json"),
                "{bad}: the error names the file: {e}"
            );
        }
    }

    #[test]
    fn a_key_goes_only_to_its_providers_server() {
        let env = Env::of(&[
            ("OPENAI_API_KEY", "sk-member-test-0001"),
            ("TERN_MODEL", "x"),
        ]);
        let m = |base: Option<&str>| Member {
            id: "m".into(),
            role: "r".into(),
            provider: Some(ProviderKind::Openai),
            model: Some("gpt".into()),
            base_url: base.map(str::to_string),
            sandbox: None,
            approval: None,
            max_turns: None,
            wall_time_s: None,
            token_budget: None,
            instructions: None,
        };
        let r = m(None).route(&env).unwrap().unwrap();
        assert_eq!(r.api_key.as_deref(), Some("sk-member-test-0001"));
        assert_eq!(
            r.model, "gpt",
            "TERN_MODEL never overrides a member's model"
        );
        let r = m(Some("http://127.0.0.1:9/v1"))
            .route(&env)
            .unwrap()
            .unwrap();
        assert_eq!(r.api_key, None, "another server never gets the key");
        // Anthropic without its own key cannot run here: an error, not a substitute.
        let mut a = m(None);
        a.provider = Some(ProviderKind::Anthropic);
        assert!(a.route(&env).is_err());
    }
}
