//! Settings read from the environment where no flag gave them (config < environment < flags):
//! each function takes the flag's value and the environment snapshot and returns the setting,
//! or a usage error that names the variable. A variable set but blank or not UTF-8 is an
//! error, never a silent default: someone who set `TERN_SANDBOX` meant a mode.

use std::path::PathBuf;

use clap::ValueEnum;

use super::{ConfigError, Env, Var};
use crate::policy::{Approval, DiskFloor, Mode};
use crate::sandbox::jail::Reach;

/// `key` when set to text that is not blank; None when unset. Errors: set but blank or not
/// UTF-8 (`expected` says what to give, `default` what unsetting it gives).
pub fn set_var(
    env: &Env,
    key: &str,
    expected: &str,
    default: &str,
) -> Result<Option<String>, ConfigError> {
    match env.var(key) {
        Var::Unset => Ok(None),
        Var::Text(v) if v.trim().is_empty() => Err(ConfigError::Invalid(format!(
            "{key} is set but empty: give {expected}, or unset {key} to use {default}"
        ))),
        Var::Text(v) => Ok(Some(v)),
        Var::NotUtf8 => Err(ConfigError::Invalid(format!(
            "{key} is not UTF-8 text: give {expected}, or unset {key} to use {default}"
        ))),
    }
}

/// The checkpoint store's limits: `TERN_CHECKPOINTS` (`on`/`1`/`true`/`yes` or
/// `off`/`0`/`false`/`no`), `TERN_CHECKPOINT_MAX_FILE` and `TERN_CHECKPOINT_BUDGET` (whole
/// bytes), each over [`crate::checkpoint::Limits::default`]. Errors: a value that is none of
/// these, naming the variable (a typo must not leave checkpoints on, or a budget unset).
pub fn checkpoints(env: &Env) -> Result<crate::checkpoint::Limits, ConfigError> {
    let mut l = crate::checkpoint::Limits::default();
    let switch = "on or off";
    if let Some(v) = set_var(env, "TERN_CHECKPOINTS", switch, "on")? {
        l.enabled = match v.trim().to_ascii_lowercase().as_str() {
            "on" | "1" | "true" | "yes" => true,
            "off" | "0" | "false" | "no" => false,
            _ => {
                return Err(ConfigError::Invalid(format!(
                    "TERN_CHECKPOINTS={v:?}: expected {switch}"
                )));
            }
        };
    }
    let bytes = |key: &str, default: &str| -> Result<Option<u64>, ConfigError> {
        let expected = "a whole number of bytes";
        set_var(env, key, expected, default)?
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| ConfigError::Invalid(format!("{key}={v:?}: expected {expected}")))
            })
            .transpose()
    };
    if let Some(n) = bytes("TERN_CHECKPOINT_MAX_FILE", "10000000")? {
        l.max_file_bytes = n;
    }
    if let Some(n) = bytes("TERN_CHECKPOINT_BUDGET", "the automatic budget")? {
        l.budget_bytes = Some(n);
    }
    Ok(l)
}

/// `--approval`, else `TERN_APPROVAL` (ask, auto or never), else `default`.
pub fn approval(
    flag: Option<Approval>,
    env: &Env,
    default: Approval,
) -> Result<Approval, ConfigError> {
    if let Some(a) = flag {
        return Ok(a);
    }
    let name = default
        .to_possible_value()
        .map_or_else(|| "the default".to_string(), |v| v.get_name().to_string());
    match set_var(env, "TERN_APPROVAL", "ask, auto or never", &name)? {
        Some(v) => Approval::from_str(v.trim(), true).map_err(|_| {
            ConfigError::Invalid(format!("TERN_APPROVAL={v:?}: expected ask, auto or never"))
        }),
        None => Ok(default),
    }
}

/// `--sandbox`, else `TERN_SANDBOX`, else workspace-write.
pub fn sandbox(flag: Option<Mode>, env: &Env) -> Result<Mode, ConfigError> {
    if let Some(m) = flag {
        return Ok(m);
    }
    let expected = "read-only, workspace-write or danger-full-access";
    match set_var(env, "TERN_SANDBOX", expected, "workspace-write")? {
        Some(v) => Mode::from_str(v.trim(), true)
            .map_err(|_| ConfigError::Invalid(format!("TERN_SANDBOX={v:?}: expected {expected}"))),
        None => Ok(Mode::default()),
    }
}

/// `--state-dir`, else `TERN_STATE_DIR`, else None (the workspace's `.tern/`). Errors also: a
/// state folder named that exists and is not a folder (`/dev/null`).
pub fn state_dir(flag: Option<PathBuf>, env: &Env) -> Result<Option<PathBuf>, ConfigError> {
    let (dir, from) = match flag {
        Some(d) => (d, "--state-dir"),
        None => match set_var(env, "TERN_STATE_DIR", "a folder", "<workspace>/.tern")? {
            Some(d) => (PathBuf::from(d), "TERN_STATE_DIR"),
            None => return Ok(None),
        },
    };
    if let Ok(m) = std::fs::metadata(&dir)
        && !m.is_dir()
    {
        return Err(ConfigError::Invalid(format!(
            "{} (from {from}) exists and is not a folder: give a folder for tern's state",
            dir.display()
        )));
    }
    Ok(Some(dir))
}

/// The reach flags as given on the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReachFlags<'a> {
    /// `--add-dir`.
    pub add_dir: &'a [PathBuf],
    /// `--read-dir`.
    pub read_dir: &'a [PathBuf],
    /// `--env`.
    pub env: &'a [String],
    /// `--no-jail`.
    pub no_jail: bool,
    /// `--no-layer`.
    pub no_layer: bool,
}

/// `--add-dir`, `--read-dir`, `--env`, `--no-jail`, `--no-layer` and their variables
/// (`TERN_ADD_DIRS`, `TERN_READ_DIRS` separated by `:`, `TERN_ENV` by `,`, `TERN_NO_JAIL`,
/// `TERN_NO_LAYER`): folders must exist
/// (made absolute and canonical, never `/`), names must be passable.
pub fn reach(flags: ReachFlags<'_>, env: &Env) -> Result<Reach, ConfigError> {
    let dirs = |flag: &str, given: &[PathBuf], var: &str| -> Result<Vec<PathBuf>, ConfigError> {
        // Each folder with where it came from, so an error names the flag or the variable.
        let mut all: Vec<(PathBuf, &str)> = given.iter().map(|d| (d.clone(), flag)).collect();
        if let Some(v) = set_var(env, var, "folders separated by ':'", "none")? {
            all.extend(
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .map(|d| (d, var)),
            );
        }
        let home = env.get("HOME").and_then(|h| std::fs::canonicalize(h).ok());
        let runtime = env
            .get("XDG_RUNTIME_DIR")
            .and_then(|r| std::fs::canonicalize(r).ok());
        all.iter()
            .map(|(d, flag)| match std::fs::canonicalize(d) {
                Ok(c) if c.parent().is_none() => Err(ConfigError::Invalid(format!(
                    "{flag} {}: the whole file system; pass --sandbox danger-full-access for that",
                    d.display()
                ))),
                // A writable (or shown) root must not expose other programs' sockets nor the
                // home folder's start-up files (issue 29).
                Ok(c) if let Some(why) =
                    crate::policy::wide_root(&c, home.as_deref(), runtime.as_deref()) =>
                {
                    Err(ConfigError::Invalid(format!(
                        "{flag} {}: {why}; give a folder of your own inside it instead (e.g. mkdir {} and pass {flag} {})",
                        d.display(),
                        c.join("tern-work").display(),
                        c.join("tern-work").display()
                    )))
                }
                Ok(c) if c.is_dir() => Ok(c),
                Ok(_) => Err(ConfigError::Invalid(format!("{flag} {}: not a folder", d.display()))),
                Err(e) => Err(ConfigError::Invalid(format!("{flag} {}: {e}", d.display()))),
            })
            .collect()
    };
    let mut pass_env = flags.env.to_vec();
    for n in &pass_env {
        crate::tools::bash::check_pass_env(n, "--env")?;
    }
    if let Some(v) = set_var(env, "TERN_ENV", "variable names separated by ','", "none")? {
        for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            crate::tools::bash::check_pass_env(n, "TERN_ENV")?;
            pass_env.push(n.to_string());
        }
    }
    let switch = |name: &str, what: &str| -> Result<bool, ConfigError> {
        match set_var(env, name, "1 or 0", what)? {
            Some(v) => match v.trim() {
                "1" | "true" | "yes" => Ok(true),
                "0" | "false" | "no" => Ok(false),
                other => Err(ConfigError::Invalid(format!(
                    "{name}={other:?}: expected 1 or 0"
                ))),
            },
            None => Ok(false),
        }
    };
    let no_jail = flags.no_jail || switch("TERN_NO_JAIL", "the jail")?;
    let no_layer = flags.no_layer || switch("TERN_NO_LAYER", "the workspace's layer")?;
    Ok(Reach {
        no_jail,
        no_layer,
        add_dirs: dirs("--add-dir", flags.add_dir, "TERN_ADD_DIRS")?,
        read_dirs: dirs("--read-dir", flags.read_dir, "TERN_READ_DIRS")?,
        pass_env,
    })
}

/// `TERN_DISK_FLOOR`: the free space a command must leave (`2G`, `500M`, `64k`, a number of
/// bytes; `0` or `off`: none); unset: [`DiskFloor::Auto`].
pub fn disk_floor(env: &Env) -> Result<DiskFloor, ConfigError> {
    let expected = "a size such as 2G, 500M or 0";
    let Some(v) = set_var(env, "TERN_DISK_FLOOR", expected, "the automatic floor")? else {
        return Ok(DiskFloor::Auto);
    };
    let s = v.trim().to_ascii_lowercase();
    if s == "0" || s == "off" {
        return Ok(DiskFloor::Off);
    }
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], s[i..].trim_end_matches(['b', 'i'])),
        None => (s.as_str(), ""),
    };
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(ConfigError::Invalid(format!(
                "TERN_DISK_FLOOR={v:?}: expected {expected}"
            )));
        }
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .map(|b| {
            if b == 0 {
                DiskFloor::Off
            } else {
                DiskFloor::Bytes(b)
            }
        })
        .ok_or_else(|| ConfigError::Invalid(format!("TERN_DISK_FLOOR={v:?}: expected {expected}")))
}

/// `--temperature`'s text: a number from 0 to 2.
pub fn temperature_text(s: &str) -> Result<f64, ConfigError> {
    let t: f64 = s
        .trim()
        .parse()
        .map_err(|_| ConfigError::Invalid(format!("{s:?} is not a number")))?;
    if (0.0..=2.0).contains(&t) {
        Ok(t)
    } else {
        Err(ConfigError::Invalid(format!("{t} is not between 0 and 2")))
    }
}

/// The output cap from `TERN_MAX_OUTPUT_TOKENS` where no flag gave one (16 to 1,000,000).
pub fn max_output_tokens(flag: Option<u32>, env: &Env) -> Result<Option<u32>, ConfigError> {
    if flag.is_some() {
        return Ok(flag);
    }
    let Some(v) = set_var(env, "TERN_MAX_OUTPUT_TOKENS", "a number of tokens", "8192")? else {
        return Ok(None);
    };
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (16..=1_000_000).contains(n))
        .map(Some)
        .ok_or_else(|| {
            ConfigError::Invalid(format!(
                "TERN_MAX_OUTPUT_TOKENS={v:?}: expected a number from 16 to 1000000"
            ))
        })
}

/// The reasoning effort from `TERN_REASONING_EFFORT` where no flag gave one (None: unset, the
/// model's default, nothing sent).
pub fn reasoning_effort(
    flag: Option<crate::provider::reasoning::Effort>,
    env: &Env,
) -> Result<Option<crate::provider::reasoning::Effort>, ConfigError> {
    use crate::provider::reasoning::Effort;
    if flag.is_some() {
        return Ok(flag);
    }
    let expected = "none, minimal, low, medium, high or max";
    let Some(v) = set_var(env, "TERN_REASONING_EFFORT", expected, "unset")? else {
        return Ok(None);
    };
    Effort::from_str(v.trim(), true).map(Some).map_err(|_| {
        ConfigError::Invalid(format!("TERN_REASONING_EFFORT={v:?}: expected {expected}"))
    })
}

/// The reasoning replay rule from `TERN_REASONING_REPLAY` (None: the provider host's rule).
pub fn reasoning_replay(
    env: &Env,
) -> Result<Option<crate::provider::reasoning::Replay>, ConfigError> {
    use crate::provider::reasoning::Replay;
    let expected = "required, beneficial, forbidden or unknown";
    let Some(v) = set_var(env, "TERN_REASONING_REPLAY", expected, "unset")? else {
        return Ok(None);
    };
    Replay::from_str(v.trim(), true).map(Some).map_err(|_| {
        ConfigError::Invalid(format!("TERN_REASONING_REPLAY={v:?}: expected {expected}"))
    })
}

/// The temperature from `TERN_TEMPERATURE` where no flag gave one.
pub fn temperature(flag: Option<f64>, env: &Env) -> Result<Option<f64>, ConfigError> {
    if flag.is_some() {
        return Ok(flag);
    }
    let Some(v) = set_var(
        env,
        "TERN_TEMPERATURE",
        "a number from 0 to 2",
        "the server's",
    )?
    else {
        return Ok(None);
    };
    temperature_text(v.trim())
        .map(Some)
        .map_err(|e| ConfigError::Invalid(format!("TERN_TEMPERATURE={v:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_but_blank_variable_is_an_error_naming_it() {
        let env = Env::of(&[("TERN_SANDBOX", "  ")]);
        let e = sandbox(None, &env).unwrap_err().to_string();
        assert!(e.starts_with("TERN_SANDBOX is set but empty"), "{e}");
        assert_eq!(sandbox(Some(Mode::ReadOnly), &env), Ok(Mode::ReadOnly));
        let env = Env::of(&[("TERN_APPROVAL", "sometimes")]);
        assert!(approval(None, &env, Approval::Ask).is_err());
        assert_eq!(
            approval(None, &Env::default(), Approval::Ask),
            Ok(Approval::Ask)
        );
    }

    #[test]
    fn the_disk_floor_takes_sizes() {
        let f = |v: &str| disk_floor(&Env::of(&[("TERN_DISK_FLOOR", v)]));
        assert_eq!(f("2G"), Ok(DiskFloor::Bytes(2 << 30)));
        assert_eq!(f("500MiB"), Ok(DiskFloor::Bytes(500 << 20)));
        assert_eq!(f("4096"), Ok(DiskFloor::Bytes(4096)));
        assert_eq!(f("off"), Ok(DiskFloor::Off));
        assert_eq!(f("0"), Ok(DiskFloor::Off));
        assert!(f("lots").is_err());
        assert!(f("").is_err());
        assert_eq!(disk_floor(&Env::default()), Ok(DiskFloor::Auto));
    }

    #[test]
    fn checkpoint_settings_refuse_what_they_do_not_understand() {
        let c = |k: &str, v: &str| checkpoints(&Env::of(&[(k, v)]));
        assert!(c("TERN_CHECKPOINTS", "off").is_ok_and(|l| !l.enabled));
        assert!(c("TERN_CHECKPOINTS", "ON").is_ok_and(|l| l.enabled));
        assert!(
            c("TERN_CHECKPOINTS", "maybe")
                .unwrap_err()
                .to_string()
                .contains("TERN_CHECKPOINTS")
        );
        assert!(
            c("TERN_CHECKPOINTS", " ")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert_eq!(
            c("TERN_CHECKPOINT_MAX_FILE", "5").map(|l| l.max_file_bytes),
            Ok(5)
        );
        assert!(
            c("TERN_CHECKPOINT_MAX_FILE", "5M")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        assert_eq!(
            c("TERN_CHECKPOINT_BUDGET", "9").map(|l| l.budget_bytes),
            Ok(Some(9))
        );
        assert!(c("TERN_CHECKPOINT_BUDGET", "-1").is_err());
        assert_eq!(
            checkpoints(&Env::default()),
            Ok(crate::checkpoint::Limits::default())
        );
    }

    #[test]
    fn output_settings_come_from_the_flag_before_the_variable() {
        let env = Env::of(&[("TERN_MAX_OUTPUT_TOKENS", "99"), ("TERN_TEMPERATURE", "3")]);
        assert_eq!(max_output_tokens(None, &env), Ok(Some(99)));
        assert_eq!(max_output_tokens(Some(500), &env), Ok(Some(500)));
        assert!(
            temperature(None, &env)
                .unwrap_err()
                .to_string()
                .contains("not between 0 and 2")
        );
        assert_eq!(temperature(Some(0.5), &env), Ok(Some(0.5)));
    }
}
