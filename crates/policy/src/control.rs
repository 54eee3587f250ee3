//! Attention controls: `HEADROOM_ATTN_EXECUTION` / `--attn-execution` and
//! `HEADROOM_ATTN_QUERY_BLOCK` / `--attn-query-block`.
//!
//! CLI flags take precedence over the environment and are parsed the same way.
//! Unset, the control is `auto`: it applies only measured evidence (a
//! qualification entry that matches this machine and layer) and resolves
//! exactly as `fallback` where there is none. A malformed value fails closed
//! (execution → `fallback`, query block → the built-in 128 even where a
//! qualification exists) and yields exactly one warning. Blank values count
//! as unset.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Environment variable of the attention control.
pub const ENV_EXECUTION: &str = "HEADROOM_ATTN_EXECUTION";
/// Environment variable of the composed query block.
pub const ENV_QUERY_BLOCK: &str = "HEADROOM_ATTN_QUERY_BLOCK";
/// Environment variable naming extra qualification folders (path-list syntax).
pub const ENV_QUALIFICATIONS: &str = "HEADROOM_QUALIFICATIONS";
/// The built-in composed query block.
pub const DEFAULT_QUERY_BLOCK: usize = 128;

/// What the user asks the attention policy to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AttentionControl {
    /// Composed attention everywhere (qualified query blocks still apply).
    Fallback,
    /// The fused kernel on every layer it supports.
    Fused,
    /// Fused only where a qualification entry measured it best; elsewhere
    /// exactly `fallback` (the default).
    #[default]
    Auto,
}

impl AttentionControl {
    pub fn as_str(self) -> &'static str {
        match self {
            AttentionControl::Fallback => "fallback",
            AttentionControl::Fused => "fused",
            AttentionControl::Auto => "auto",
        }
    }

    /// Trimmed, case-insensitive.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fallback" => Some(AttentionControl::Fallback),
            "fused" => Some(AttentionControl::Fused),
            "auto" => Some(AttentionControl::Auto),
            _ => None,
        }
    }
}

impl fmt::Display for AttentionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a control value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlSource {
    Cli,
    Env,
    /// Nothing was set, or what was set was malformed.
    Default,
}

impl fmt::Display for ControlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ControlSource::Cli => "cli",
            ControlSource::Env => "env",
            ControlSource::Default => "default",
        })
    }
}

/// The query-block override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum QueryBlockControl {
    /// No override: the qualified or default block applies.
    Unset,
    /// A valid override (0 = one block of all rows).
    Set { value: usize, source: ControlSource },
    /// A malformed override: the built-in default applies, qualifications ignored.
    Invalid { raw: String, source: ControlSource },
}

/// The parsed attention controls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controls {
    pub execution: AttentionControl,
    pub execution_source: ControlSource,
    pub query_block: QueryBlockControl,
}

impl Default for Controls {
    fn default() -> Self {
        Controls {
            execution: AttentionControl::Auto,
            execution_source: ControlSource::Default,
            query_block: QueryBlockControl::Unset,
        }
    }
}

/// The value in effect and its source: the CLI when given, else the environment.
fn pick(
    cli: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
) -> Option<(String, ControlSource)> {
    let blank_to_none = |s: String| (!s.trim().is_empty()).then_some(s);
    cli.map(str::to_string)
        .and_then(blank_to_none)
        .map(|v| (v, ControlSource::Cli))
        .or_else(|| {
            env(var)
                .and_then(blank_to_none)
                .map(|v| (v, ControlSource::Env))
        })
}

fn describe(source: ControlSource, var: &str, flag: &str) -> String {
    match source {
        ControlSource::Cli => format!("--{flag}"),
        _ => var.to_string(),
    }
}

/// Parses a query block: an integer >= 0.
pub fn parse_query_block(s: &str) -> Result<usize, String> {
    let t = s.trim();
    match t.parse::<i128>() {
        Ok(n) if n < 0 => Err(format!("`{t}` is negative")),
        Ok(n) => usize::try_from(n).map_err(|_| format!("`{t}` is too large")),
        Err(_) => Err(format!("`{t}` is not an integer")),
    }
}

impl Controls {
    /// Builds the controls from CLI values (precedence) and an environment lookup.
    /// Returns one warning per malformed value in effect.
    pub fn from_sources(
        cli_execution: Option<&str>,
        cli_query_block: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Controls, Vec<String>) {
        let mut warnings = Vec::new();
        let mut controls = Controls::default();

        if let Some((raw, source)) = pick(cli_execution, env, ENV_EXECUTION) {
            match AttentionControl::parse(&raw) {
                Some(c) => {
                    controls.execution = c;
                    controls.execution_source = source;
                }
                None => {
                    // Fails closed: a value the user got wrong applies no evidence.
                    controls.execution = AttentionControl::Fallback;
                    warnings.push(format!(
                        "{} = `{}` is not fallback, fused or auto; using fallback",
                        describe(source, ENV_EXECUTION, "attn-execution"),
                        raw.trim()
                    ))
                }
            }
        }

        if let Some((raw, source)) = pick(cli_query_block, env, ENV_QUERY_BLOCK) {
            controls.query_block = match parse_query_block(&raw) {
                Ok(value) => QueryBlockControl::Set { value, source },
                Err(why) => {
                    warnings.push(format!(
                        "{} {why} (expected an integer >= 0); using the built-in query block {DEFAULT_QUERY_BLOCK}",
                        describe(source, ENV_QUERY_BLOCK, "attn-query-block"),
                    ));
                    QueryBlockControl::Invalid {
                        raw: raw.trim().to_string(),
                        source,
                    }
                }
            };
        }
        (controls, warnings)
    }

    /// [`Controls::from_sources`] with the process environment. A control
    /// variable whose value is not UTF-8 is ignored with a warning naming it.
    pub fn from_env_and_cli(
        cli_execution: Option<&str>,
        cli_query_block: Option<&str>,
    ) -> (Controls, Vec<String>) {
        let mut warnings =
            non_utf8_warnings(&[ENV_EXECUTION, ENV_QUERY_BLOCK], &|k| std::env::var_os(k));
        let (controls, more) =
            Controls::from_sources(cli_execution, cli_query_block, &|k| std::env::var(k).ok());
        warnings.extend(more);
        (controls, warnings)
    }
}

/// One warning per variable of `vars` whose value is set but not UTF-8.
pub fn non_utf8_warnings(
    vars: &[&str],
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<String> {
    vars.iter()
        .filter_map(|var| {
            let value = env(var)?;
            value.to_str().is_none().then(|| {
                format!(
                    "{var} is not valid UTF-8 (`{}`); ignored",
                    crate::entry::escape_controls(&value.to_string_lossy())
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_variables_warn_by_name() {
        use std::os::unix::ffi::OsStringExt;
        let env = |k: &str| {
            (k == ENV_QUERY_BLOCK).then(|| std::ffi::OsString::from_vec(vec![b'6', 0xff, b'4']))
        };
        let w = non_utf8_warnings(&[ENV_EXECUTION, ENV_QUERY_BLOCK], &env);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(ENV_QUERY_BLOCK) && w[0].contains("UTF-8"),
            "{w:?}"
        );
    }

    #[test]
    fn missing_everything_is_auto_unset() {
        let (c, w) = Controls::from_sources(None, None, &env_of(&[]));
        assert_eq!(c, Controls::default());
        assert_eq!(c.execution, AttentionControl::Auto);
        assert_eq!(c.execution_source, ControlSource::Default);
        assert!(w.is_empty());
    }

    #[test]
    fn execution_is_trimmed_and_case_insensitive() {
        for (raw, want) in [
            (" FUSED ", AttentionControl::Fused),
            ("Auto", AttentionControl::Auto),
            ("fallback\n", AttentionControl::Fallback),
        ] {
            let (c, w) = Controls::from_sources(Some(raw), None, &env_of(&[]));
            assert_eq!(
                (c.execution, c.execution_source),
                (want, ControlSource::Cli)
            );
            assert!(w.is_empty());
        }
    }

    #[test]
    fn bad_execution_falls_back_with_one_warning() {
        let (c, w) = Controls::from_sources(None, None, &env_of(&[(ENV_EXECUTION, "turbo")]));
        assert_eq!(c.execution, AttentionControl::Fallback);
        assert_eq!(c.execution_source, ControlSource::Default);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(ENV_EXECUTION) && w[0].contains("turbo"),
            "{w:?}"
        );
    }

    #[test]
    fn cli_beats_env_with_same_parsing() {
        let env = env_of(&[(ENV_EXECUTION, "fused"), (ENV_QUERY_BLOCK, "64")]);
        let (c, w) = Controls::from_sources(Some("auto"), Some("256"), &env);
        assert_eq!(c.execution, AttentionControl::Auto);
        assert_eq!(c.execution_source, ControlSource::Cli);
        assert_eq!(
            c.query_block,
            QueryBlockControl::Set {
                value: 256,
                source: ControlSource::Cli
            }
        );
        assert!(w.is_empty());
        // The env applies when the CLI is silent.
        let (c, _) = Controls::from_sources(None, None, &env);
        assert_eq!(c.execution, AttentionControl::Fused);
        assert_eq!(
            c.query_block,
            QueryBlockControl::Set {
                value: 64,
                source: ControlSource::Env
            }
        );
        // A malformed CLI value is in effect (fails closed), not the env's.
        let (c, w) = Controls::from_sources(Some("bogus"), Some("-1"), &env);
        assert_eq!(c.execution, AttentionControl::Fallback);
        assert!(matches!(
            c.query_block,
            QueryBlockControl::Invalid {
                source: ControlSource::Cli,
                ..
            }
        ));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("--attn-execution") && w[1].contains("--attn-query-block"));
    }

    #[test]
    fn query_block_parsing() {
        assert_eq!(parse_query_block(" 0 "), Ok(0));
        assert_eq!(parse_query_block("512"), Ok(512));
        assert!(parse_query_block("-1").unwrap_err().contains("negative"));
        assert!(parse_query_block("12.5")
            .unwrap_err()
            .contains("not an integer"));
        assert!(parse_query_block("invalid").is_err());
        assert!(parse_query_block("99999999999999999999999999").is_err());
    }

    #[test]
    fn blank_values_count_as_unset() {
        let env = env_of(&[(ENV_EXECUTION, "  "), (ENV_QUERY_BLOCK, "")]);
        let (c, w) = Controls::from_sources(None, None, &env);
        assert_eq!(c, Controls::default());
        assert!(w.is_empty());
    }
}
