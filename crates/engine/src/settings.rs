//! The scheduler's settings ([`SchedulerSettings`]: prefill chunk, step
//! token budget, solo stripe — a number of tokens or `auto` — and the memory
//! budget of an `auto` stripe) with their defaults and checks. The engine
//! reads no environment: a caller builds these (the CLI from its flags,
//! `docs/configuration.md`). What `auto` resolves to on a given engine is
//! [`crate::stripe`]'s job.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest value any of the token settings may take (tokens).
pub const MAX_SETTING_TOKENS: usize = 1 << 20;

/// The fixed stripe: the solo stripe `auto` resolves to on the CPU (its
/// measured setting) and the floor of a memory-bound stripe on GPUs.
pub const FIXED_SOLO_STRIPE: usize = 2048;

/// Most prompt tokens an `auto` solo stripe resolves to (the engine's
/// context and the memory budget bound it further).
pub const SOLO_STRIPE_CAP: usize = 65_536;

/// The solo stripe asked for: `auto` (resolved per engine by
/// [`crate::stripe::resolve_solo_stripe`]: the whole remaining prompt on GPUs
/// within a cap and a memory budget, [`FIXED_SOLO_STRIPE`] on the CPU) or an
/// explicit number of tokens. Written `"auto"` or a number (JSON, flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SoloStripe {
    #[default]
    Auto,
    Tokens(usize),
}

impl SoloStripe {
    /// The explicit tokens (`None` for `auto`).
    pub fn tokens(&self) -> Option<usize> {
        match self {
            SoloStripe::Auto => None,
            SoloStripe::Tokens(n) => Some(*n),
        }
    }
}

impl std::fmt::Display for SoloStripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SoloStripe::Auto => f.write_str("auto"),
            SoloStripe::Tokens(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for SoloStripe {
    type Err = String;

    /// `auto` (any case) or a positive integer ≤ [`MAX_SETTING_TOKENS`].
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("auto") {
            return Ok(SoloStripe::Auto);
        }
        parse_tokens(text)
            .map(SoloStripe::Tokens)
            .map_err(|why| format!("{why} or `auto`"))
    }
}

impl From<usize> for SoloStripe {
    fn from(n: usize) -> Self {
        SoloStripe::Tokens(n)
    }
}

impl Serialize for SoloStripe {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SoloStripe::Auto => s.serialize_str("auto"),
            SoloStripe::Tokens(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for SoloStripe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => usize::try_from(n)
                .ok()
                .filter(|&n| n > 0 && n <= MAX_SETTING_TOKENS)
                .map(SoloStripe::Tokens)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "solo_stripe {n} must be in 1..={MAX_SETTING_TOKENS}"
                    ))
                }),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// How each engine step is filled (vLLM v1 style): decode tokens of running
/// sequences first, then prefill chunks, up to `step_tokens` rows per step;
/// a request alone in the engine takes up to its resolved solo stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerSettings {
    /// Most prompt tokens of one sequence per step when others share the engine.
    pub prefill_chunk: usize,
    /// Most rows (decode + prefill tokens of every sequence) in one step
    /// shared by several requests.
    pub step_tokens: usize,
    /// Most prompt tokens per step of a request alone in the engine (that
    /// step's whole budget): `auto` or tokens.
    pub solo_stripe: SoloStripe,
    /// Bytes of transients a solo step may use when the stripe is `auto`
    /// (`None`: the free device memory after weights and state).
    pub solo_stripe_budget_bytes: Option<u64>,
}

/// Rows of one shared step by default: measured on the H200 (W1: 8,192
/// rows gave +11 % output tok/s over 2,048, 16,384 no more and twice the ITL
/// tail; `docs/perf/serving.md`, 2026-12-02).
pub const DEFAULT_STEP_TOKENS: usize = 8192;
/// Prompt tokens of one sequence per shared step by default: 2,048 and
/// 8,192 gave the same W1 throughput on the H200; 2,048 is also the CPU's
/// measured solo stripe, which a solo step never goes below.
pub const DEFAULT_PREFILL_CHUNK: usize = 2048;

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            step_tokens: DEFAULT_STEP_TOKENS,
            solo_stripe: SoloStripe::Auto,
            solo_stripe_budget_bytes: None,
        }
    }
}

impl SchedulerSettings {
    /// Checks each token value is in `1..=MAX_SETTING_TOKENS` and a budget is positive.
    pub fn validate(&self) -> Result<(), String> {
        let solo = self.solo_stripe.tokens().unwrap_or(1);
        for (name, v) in [
            ("prefill_chunk", self.prefill_chunk),
            ("step_tokens", self.step_tokens),
            ("solo_stripe", solo),
        ] {
            if v == 0 || v > MAX_SETTING_TOKENS {
                return Err(format!("{name} = {v} must be in 1..={MAX_SETTING_TOKENS}"));
            }
        }
        if let Some(b) = self.solo_stripe_budget_bytes {
            if b == 0 || b > MAX_BUDGET_MIB << 20 {
                return Err(format!(
                    "solo_stripe_budget_bytes {b} must be in 1..={}",
                    MAX_BUDGET_MIB << 20
                ));
            }
        }
        Ok(())
    }

    /// The most prompt tokens one sequence can take in one step, given the
    /// resolved solo stripe (`solo_tokens`, see [`crate::stripe`]): a
    /// request alone takes up to its stripe (never less than the prefill
    /// chunk) — that step's whole budget; shared steps take the prefill
    /// chunk within `step_tokens`.
    pub fn max_chunk(&self, solo: bool, solo_tokens: usize) -> usize {
        if solo {
            solo_tokens.max(self.prefill_chunk)
        } else {
            self.prefill_chunk.min(self.step_tokens)
        }
    }

    /// The rows of one step: the solo stripe's chunk alone, else `step_tokens`.
    pub fn step_rows(&self, solo: bool, solo_tokens: usize) -> usize {
        if solo {
            self.max_chunk(true, solo_tokens)
        } else {
            self.step_tokens
        }
    }

    /// The rows of the larger of a solo step (at `solo_tokens`) and a shared step.
    pub fn largest_step_rows(&self, solo_tokens: usize) -> usize {
        self.step_rows(true, solo_tokens)
            .max(self.step_rows(false, solo_tokens))
    }
}

/// Largest budget of an `auto` solo stripe, in MiB (16 TiB).
pub const MAX_BUDGET_MIB: u64 = 1 << 24;

impl std::fmt::Display for SchedulerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "prefill_chunk {} step_tokens {} solo_stripe {}",
            self.prefill_chunk, self.step_tokens, self.solo_stripe
        )?;
        if let (SoloStripe::Auto, Some(b)) = (self.solo_stripe, self.solo_stripe_budget_bytes) {
            write!(f, " (budget {} MiB)", b >> 20)?;
        }
        Ok(())
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

/// Snapshot slots the prefix cache keeps by default (each one sequence's
/// GDN state of every layer).
pub const DEFAULT_PREFIX_STATE_SLOTS: usize = 16;

/// Tokens between the snapshots the prefix cache takes inside a long prompt
/// by default (besides those at the end of its last full block and where it
/// branches off a cached prefix): none, as each one ends a prefill chunk.
pub const DEFAULT_PREFIX_INTERVAL: usize = 0;

/// The most of the memory left after the step's transient that the prefix
/// cache's snapshot slots take when `--prefix-cache-state-slots` is not
/// given, as a fraction (numerator, denominator). On an H200 serving the
/// 35B-A3B in bf16 (~56 GiB left) it allows far more than the default 16
/// slots (~1 GiB), so nothing changes there; on an 80 GB H100 serving the
/// bf16 form (a few GiB left after the stripe's share, 60 MiB a slot) it
/// keeps a few instead of 16 (4 in session 29), and the rest goes to running
/// sequences and KV (docs/perf/serving.md, session 29, measured: 2 snapshots
/// still cached 98 % of a 4,096-token prefix shared by 256 requests).
pub const SNAPSHOT_SHARE: (u64, u64) = (1, 16);

/// The fewest snapshot slots sized from memory (when the ceiling allows):
/// a hold-back (`crate::core::hold`) pins one snapshot and is made only while
/// another slot stays unpinned, so with one slot a burst sharing a prefix
/// would compute it once per request.
pub const SNAPSHOT_MIN: usize = 2;

/// How many prefix-cache snapshot slots to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotSlots {
    /// Exactly this many (`--prefix-cache-state-slots N`, or none when the
    /// prefix cache is off or the KV is contiguous).
    Fixed(usize),
    /// At most [`SNAPSHOT_SHARE`] of the memory left after the step's
    /// transient, at least [`SNAPSHOT_MIN`], at most `most`.
    FromMemory { most: usize },
}

impl SnapshotSlots {
    /// The slot count with `after_transient` bytes left (`None`: unbounded)
    /// and `slot_bytes` a slot.
    pub fn resolve(self, after_transient: Option<u64>, slot_bytes: u64) -> usize {
        match (self, after_transient) {
            (SnapshotSlots::Fixed(n), _) => n,
            (SnapshotSlots::FromMemory { most }, None) => most,
            (SnapshotSlots::FromMemory { most }, Some(left)) => {
                let by_share = (left / SNAPSHOT_SHARE.1)
                    .saturating_mul(SNAPSHOT_SHARE.0)
                    .checked_div(slot_bytes)
                    .unwrap_or(u64::MAX);
                usize::try_from(by_share)
                    .unwrap_or(usize::MAX)
                    .max(SNAPSHOT_MIN)
                    .min(most)
            }
        }
    }
}

/// Prefix caching (paged KV only; `crate::prefix`, `crate::snapshots`):
/// whether it runs, how many GDN state snapshots it keeps and how far apart
/// it takes them inside a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefixCacheSettings {
    pub enabled: bool,
    /// Spare state slots holding snapshots (`--prefix-cache-state-slots`):
    /// exactly this many, or with `state_slots_from_memory` at most this
    /// many within the memory share of [`SNAPSHOT_SHARE`].
    pub state_slots: usize,
    /// Whether `state_slots` is a ceiling sized from memory (the default)
    /// rather than a count given by the operator.
    pub state_slots_from_memory: bool,
    /// A snapshot every this many tokens of a sequence (rounded down to
    /// whole KV blocks; 0: only at prompt ends and finishes).
    pub interval_tokens: usize,
}

impl Default for PrefixCacheSettings {
    fn default() -> Self {
        PrefixCacheSettings {
            enabled: true,
            state_slots: DEFAULT_PREFIX_STATE_SLOTS,
            state_slots_from_memory: true,
            interval_tokens: DEFAULT_PREFIX_INTERVAL,
        }
    }
}

impl PrefixCacheSettings {
    /// Caching turned off (`--no-prefix-cache`).
    pub fn off() -> Self {
        PrefixCacheSettings {
            enabled: false,
            state_slots: 0,
            state_slots_from_memory: false,
            interval_tokens: 0,
        }
    }

    /// The snapshot interval in tokens, whole KV blocks (`None`: none).
    pub fn interval(&self) -> Option<usize> {
        let b = crate::kv::KV_BLOCK_ROWS;
        Some(self.interval_tokens / b * b).filter(|&t| t > 0)
    }

    /// Snapshot slots an engine makes: none when off or without paged KV.
    pub fn snapshot_slots(&self, paged: bool) -> SnapshotSlots {
        match (self.enabled && paged, self.state_slots_from_memory) {
            (false, _) => SnapshotSlots::Fixed(0),
            (true, true) => SnapshotSlots::FromMemory {
                most: self.state_slots,
            },
            (true, false) => SnapshotSlots::Fixed(self.state_slots),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_2048_8192_auto_without_a_budget() {
        let s = SchedulerSettings::default();
        assert_eq!(
            (s.prefill_chunk, s.step_tokens, s.solo_stripe),
            (2048, 8192, SoloStripe::Auto)
        );
        assert_eq!(s.solo_stripe_budget_bytes, None);
        assert_eq!(
            s.to_string(),
            "prefill_chunk 2048 step_tokens 8192 solo_stripe auto"
        );
        let parsed: SchedulerSettings = serde_json::from_str(r#"{"step_tokens": 99}"#).unwrap();
        assert_eq!((parsed.prefill_chunk, parsed.step_tokens), (2048, 99));
        assert_eq!(parsed.solo_stripe, SoloStripe::Auto);
    }

    #[test]
    fn the_solo_stripe_reads_and_writes_auto_or_tokens() {
        for (text, want) in [
            ("auto", SoloStripe::Auto),
            (" AUTO ", SoloStripe::Auto),
            ("4096", SoloStripe::Tokens(4096)),
        ] {
            assert_eq!(text.parse::<SoloStripe>().unwrap(), want);
        }
        for bad in ["0", "-3", "lots", "1048577"] {
            assert!(bad.parse::<SoloStripe>().is_err(), "{bad}");
        }
        let s = SchedulerSettings {
            solo_stripe: SoloStripe::Tokens(8192),
            ..SchedulerSettings::default()
        };
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["solo_stripe"], 8192);
        assert_eq!(
            serde_json::to_value(SchedulerSettings::default()).unwrap()["solo_stripe"],
            "auto"
        );
        let back: SchedulerSettings = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<SchedulerSettings>(r#"{"solo_stripe": 0}"#).is_err());
        assert!(serde_json::from_str::<SchedulerSettings>(r#"{"solo_stripe": "x"}"#).is_err());
    }

    #[test]
    fn max_chunk_follows_solo_and_budget() {
        let s = SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 1000,
            ..SchedulerSettings::default()
        };
        assert_eq!(s.max_chunk(false, 2048), 512);
        assert_eq!(s.max_chunk(true, 2048), 2048, "a solo step is its stripe");
        assert_eq!(s.max_chunk(true, 100), 512, "never below the prefill chunk");
        assert_eq!(
            (s.step_rows(false, 2048), s.step_rows(true, 4096)),
            (1000, 4096)
        );
        assert!(s.validate().is_ok());
        assert!(SchedulerSettings {
            step_tokens: 0,
            ..s
        }
        .validate()
        .is_err());
        assert!(SchedulerSettings {
            solo_stripe: SoloStripe::Tokens(0),
            ..s
        }
        .validate()
        .is_err());
        for bad in [0, (MAX_BUDGET_MIB << 20) + 1] {
            assert!(SchedulerSettings {
                solo_stripe_budget_bytes: Some(bad),
                ..s
            }
            .validate()
            .is_err());
        }
        let budget = SchedulerSettings {
            solo_stripe_budget_bytes: Some(3 << 30),
            ..s
        };
        assert!(budget.validate().is_ok());
        assert!(budget
            .to_string()
            .ends_with("solo_stripe auto (budget 3072 MiB)"));
    }

    #[test]
    fn snapshot_slots_are_a_memory_ceiling_by_default_and_exact_when_given() {
        let d = PrefixCacheSettings::default();
        assert_eq!(
            d.snapshot_slots(true),
            SnapshotSlots::FromMemory {
                most: DEFAULT_PREFIX_STATE_SLOTS
            }
        );
        assert_eq!(d.snapshot_slots(false), SnapshotSlots::Fixed(0));
        let given = PrefixCacheSettings {
            state_slots: 5,
            state_slots_from_memory: false,
            ..d
        };
        assert_eq!(given.snapshot_slots(true), SnapshotSlots::Fixed(5));
        assert_eq!(
            PrefixCacheSettings::off().snapshot_slots(true),
            SnapshotSlots::Fixed(0)
        );
    }
}
