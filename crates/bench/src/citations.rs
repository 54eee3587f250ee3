//! Source citations for the qualification report: each behavioural claim
//! names an anchor (a symbol or a line of code) and the file that implements
//! it; [`cite_all`] finds the anchor's line in the source compiled into this
//! binary, so the report's `file:line` is the current source's.
//! `crates/bench/tests/qualify_citations.rs` checks every cited line of the
//! checkout holds its anchor.

/// One claim and where its implementation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub text: &'static str,
    /// Repository-relative path.
    pub file: &'static str,
    /// A string the implementing line contains.
    pub anchor: &'static str,
}

/// A claim with its resolved line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    pub claim: Claim,
    pub line: usize,
}

/// Files the claims cite, embedded at build time.
const SOURCES: &[(&str, &str)] = &[
    (
        "crates/policy/src/resolve.rs",
        include_str!("../../policy/src/resolve.rs"),
    ),
    (
        "crates/policy/src/matcher.rs",
        include_str!("../../policy/src/matcher.rs"),
    ),
    (
        "crates/policy/src/entry.rs",
        include_str!("../../policy/src/entry.rs"),
    ),
    ("crates/bench/src/prefill.rs", include_str!("prefill.rs")),
    (
        "crates/bench/src/prefill_reports.rs",
        include_str!("prefill_reports.rs"),
    ),
    (
        "crates/bench/src/prefill_engine.rs",
        include_str!("prefill_engine.rs"),
    ),
    (
        "crates/engine/src/core.rs",
        include_str!("../../engine/src/core.rs"),
    ),
    (
        "crates/engine/src/sequence.rs",
        include_str!("../../engine/src/sequence.rs"),
    ),
    ("crates/bench/src/validate.rs", include_str!("validate.rs")),
    ("crates/bench/src/qualify.rs", include_str!("qualify.rs")),
    (
        "crates/bench/src/attention.rs",
        include_str!("attention.rs"),
    ),
];

/// The report's claims.
pub const CLAIMS: &[Claim] = &[
    Claim {
        text: "Each sample's route and query block are read back from the attention calls' reports, not copied from the request",
        file: "crates/bench/src/prefill_reports.rs",
        anchor: "pub fn layer_routes_from_reports",
    },
    Claim {
        text: "A run whose attention calls report different routes for one layer fails",
        file: "crates/bench/src/prefill_reports.rs",
        anchor: "calls reported {first:?} and {other:?}",
    },
    Claim {
        text: "Prompts run through the engine's scheduler: each arm's routes are set on the engine while it is idle",
        file: "crates/engine/src/core.rs",
        anchor: "pub fn set_attention",
    },
    Claim {
        text: "The engine path takes the routes from the attention reports of the request's calls (its finished event)",
        file: "crates/bench/src/prefill_engine.rs",
        anchor: "} => finished = Some((usage, attention)),",
    },
    Claim {
        text: "TTFT is the engine's own measure, from submission to the first drawn token",
        file: "crates/engine/src/sequence.rs",
        anchor: "self.ttft_ms = Some(self.submitted.elapsed()",
    },
    Claim {
        text: "The validator fails a sample whose reported route is not its arm's",
        file: "crates/bench/src/validate.rs",
        anchor: "pub fn check_policy",
    },
    Claim {
        text: "The decision rule is applied to the validated prefill file",
        file: "crates/bench/src/qualify.rs",
        anchor: "pub fn decide",
    },
    Claim {
        text: "The attention bench records the route and transient bytes the backend reported",
        file: "crates/bench/src/attention.rs",
        anchor: "transient_bytes: report.transient_bytes",
    },
    Claim {
        text: "`auto` runs fused only where a matching entry qualified fused",
        file: "crates/policy/src/resolve.rs",
        anchor: "AttentionControl::Auto =>",
    },
    Claim {
        text: "A matching composed entry sets the query block with source `qualified`",
        file: "crates/policy/src/resolve.rs",
        anchor: "(*qb, ResolutionSource::Qualified, Some(id.to_string()))",
    },
    Claim {
        text: "An entry matches only this exact hardware and layer shape",
        file: "crates/policy/src/matcher.rs",
        anchor: "pub fn matches",
    },
    Claim {
        text: "The entry is bound to its evidence by SHA-256, checked when loaded",
        file: "crates/policy/src/entry.rs",
        anchor: "pub fn sha256_hex",
    },
];

/// Every claim with its line; an error names a claim whose anchor is gone.
pub fn cite_all() -> Result<Vec<Citation>, String> {
    CLAIMS.iter().map(|c| cite(*c)).collect()
}

fn cite(claim: Claim) -> Result<Citation, String> {
    let text = SOURCES
        .iter()
        .find(|(f, _)| *f == claim.file)
        .map(|(_, t)| *t)
        .ok_or_else(|| format!("{} is not an embedded source", claim.file))?;
    let line = text
        .lines()
        .position(|l| l.contains(claim.anchor))
        .ok_or_else(|| format!("{}: anchor `{}` not found", claim.file, claim.anchor))?;
    Ok(Citation {
        claim,
        line: line + 1,
    })
}
