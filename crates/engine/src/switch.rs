//! A setting that is `auto`, `on` or `off` ([`AutoSwitch`]: the step
//! overlap, CUDA graphs) and what one resolved to on an engine, with why
//! ([`Resolution`]). `auto` picks what was measured to pay; each setting's
//! module says where that is (`crate::overlap`, `crate::graphs`).

use serde::{Deserialize, Serialize};

/// A setting's value as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoSwitch {
    /// What was measured to pay (the setting's module says where).
    #[default]
    Auto,
    On,
    Off,
}

impl std::fmt::Display for AutoSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AutoSwitch::Auto => "auto",
            AutoSwitch::On => "on",
            AutoSwitch::Off => "off",
        })
    }
}

impl std::str::FromStr for AutoSwitch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(AutoSwitch::Auto),
            "on" => Ok(AutoSwitch::On),
            "off" => Ok(AutoSwitch::Off),
            other => Err(format!("{other:?}: expected auto, on or off")),
        }
    }
}

/// What a setting resolved to on an engine, with why (the default: an
/// unnamed `auto` that is off, for stand-in statistics before an engine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Resolution {
    /// The setting's name in messages ("step overlap", "CUDA graphs").
    #[serde(skip)]
    pub setting: &'static str,
    pub requested: AutoSwitch,
    pub on: bool,
    pub why: String,
}

impl std::fmt::Display for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({}: {})",
            self.setting,
            if self.on { "on" } else { "off" },
            self.requested,
            self.why
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_prints_its_three_values() {
        for v in [AutoSwitch::Auto, AutoSwitch::On, AutoSwitch::Off] {
            assert_eq!(v.to_string().parse::<AutoSwitch>(), Ok(v));
        }
        let err = "yes".parse::<AutoSwitch>().unwrap_err();
        assert!(
            err.contains("\"yes\"") && err.contains("auto, on or off"),
            "{err}"
        );
    }

    #[test]
    fn a_resolution_prints_its_setting_state_request_and_why() {
        let r = Resolution {
            setting: "step overlap",
            requested: AutoSwitch::Auto,
            on: false,
            why: "not measured".into(),
        };
        assert_eq!(r.to_string(), "step overlap off (auto: not measured)");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"requested": "auto", "on": false, "why": "not measured"})
        );
    }
}
