//! The scheduler's three numbers ([`SchedulerSettings`]: prefill chunk, step
//! token budget, solo stripe) with their defaults, and reading them from the
//! `HEADROOM_PREFILL_CHUNK`, `HEADROOM_STEP_TOKENS` and `HEADROOM_SOLO_STRIPE`
//! environment variables with fail-closed parsing: a malformed value keeps
//! the default and yields one warning.

use serde::{Deserialize, Serialize};

/// Largest value any of the three settings may take (tokens).
pub const MAX_SETTING_TOKENS: usize = 1 << 20;

pub const ENV_PREFILL_CHUNK: &str = "HEADROOM_PREFILL_CHUNK";
pub const ENV_STEP_TOKENS: &str = "HEADROOM_STEP_TOKENS";
pub const ENV_SOLO_STRIPE: &str = "HEADROOM_SOLO_STRIPE";

/// How each engine step is filled (vLLM v1 style): decode tokens of running
/// sequences first, then prefill chunks, up to `step_tokens` rows per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerSettings {
    /// Most prompt tokens of one sequence per step when others share the engine.
    pub prefill_chunk: usize,
    /// Most rows (decode + prefill tokens of every sequence) in one step.
    pub step_tokens: usize,
    /// Most prompt tokens per step of a request alone in the engine.
    pub solo_stripe: usize,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 2048,
            solo_stripe: 2048,
        }
    }
}

impl SchedulerSettings {
    /// The settings from the process environment (unset: default), with
    /// one warning per malformed variable (its value is ignored).
    pub fn from_env() -> (SchedulerSettings, Vec<String>) {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// As [`Self::from_env`] over any variable lookup (tests).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> (SchedulerSettings, Vec<String>) {
        let mut s = SchedulerSettings::default();
        let mut warnings = Vec::new();
        for (name, field) in [
            (ENV_PREFILL_CHUNK, &mut s.prefill_chunk),
            (ENV_STEP_TOKENS, &mut s.step_tokens),
            (ENV_SOLO_STRIPE, &mut s.solo_stripe),
        ] {
            let Some(raw) = lookup(name) else { continue };
            match raw.to_str().map(parse_tokens) {
                Some(Ok(v)) => *field = v,
                Some(Err(why)) => warnings.push(format!(
                    "{name}={:?} ignored ({why}); using the default {}",
                    raw.to_string_lossy(),
                    *field
                )),
                None => warnings.push(format!(
                    "{name} is not valid UTF-8; ignored, using the default {}",
                    *field
                )),
            }
        }
        (s, warnings)
    }

    /// Checks each value is in `1..=MAX_SETTING_TOKENS`.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("prefill_chunk", self.prefill_chunk),
            ("step_tokens", self.step_tokens),
            ("solo_stripe", self.solo_stripe),
        ] {
            if v == 0 || v > MAX_SETTING_TOKENS {
                return Err(format!("{name} = {v} must be in 1..={MAX_SETTING_TOKENS}"));
            }
        }
        Ok(())
    }

    /// The most prompt tokens one sequence can take in one step.
    pub fn max_chunk(&self, solo: bool) -> usize {
        let cap = if solo {
            self.solo_stripe.max(self.prefill_chunk)
        } else {
            self.prefill_chunk
        };
        cap.min(self.step_tokens)
    }
}

impl std::fmt::Display for SchedulerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "prefill_chunk {} step_tokens {} solo_stripe {}",
            self.prefill_chunk, self.step_tokens, self.solo_stripe
        )
    }
}

/// A positive integer of tokens, at most [`MAX_SETTING_TOKENS`].
pub fn parse_tokens(text: &str) -> Result<usize, String> {
    let v: usize = text
        .trim()
        .parse()
        .map_err(|_| "not a positive integer".to_string())?;
    if v == 0 || v > MAX_SETTING_TOKENS {
        return Err(format!("must be in 1..={MAX_SETTING_TOKENS}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn with(vars: &[(&str, &str)]) -> (SchedulerSettings, Vec<String>) {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        SchedulerSettings::from_lookup(|n| map.get(n).cloned())
    }

    #[test]
    fn defaults_are_512_2048_2048() {
        let (s, w) = with(&[]);
        assert_eq!(s, SchedulerSettings::default());
        assert_eq!((s.prefill_chunk, s.step_tokens, s.solo_stripe), (512, 2048, 2048));
        assert!(w.is_empty());
        let parsed: SchedulerSettings = serde_json::from_str(r#"{"step_tokens": 99}"#).unwrap();
        assert_eq!((parsed.prefill_chunk, parsed.step_tokens), (512, 99));
    }

    #[test]
    fn env_values_are_read_and_malformed_ones_fail_closed_with_one_warning() {
        let (s, w) = with(&[
            (ENV_PREFILL_CHUNK, " 37 "),
            (ENV_STEP_TOKENS, "lots"),
            (ENV_SOLO_STRIPE, "0"),
        ]);
        assert_eq!(s.prefill_chunk, 37);
        assert_eq!(s.step_tokens, 2048);
        assert_eq!(s.solo_stripe, 2048);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains(ENV_STEP_TOKENS) && w[0].contains("2048"));
        let (s, w) = with(&[(ENV_STEP_TOKENS, "99999999999999999999999")]);
        assert_eq!((s.step_tokens, w.len()), (2048, 1));
    }

    #[test]
    fn max_chunk_follows_solo_and_budget() {
        let s = SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 1000,
            solo_stripe: 2048,
        };
        assert_eq!(s.max_chunk(false), 512);
        assert_eq!(s.max_chunk(true), 1000);
        assert!(s.validate().is_ok());
        assert!(SchedulerSettings { step_tokens: 0, ..s }.validate().is_err());
    }
}
