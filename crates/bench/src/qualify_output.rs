//! What one qualification writes in its output folder
//! ([`write_outputs`]): the evidence JSON, the report (`crate::report`), the
//! two plots (`crate::report_svg`) and, last, the entry the registry reads.

use crate::qualify::{OutputPaths, QualifyEvidence};
use headroom_policy::QualificationEntry;

/// Writes the evidence, entry, report and plots under `dir`; returns the entry.
pub fn write_outputs(
    dir: &std::path::Path,
    evidence: &QualifyEvidence,
    date: &str,
) -> anyhow::Result<(QualificationEntry, OutputPaths)> {
    use anyhow::Context;
    let paths = OutputPaths::for_id(&evidence.id);
    for sub in ["evidence", "plots"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("creating {}", dir.join(sub).display()))?;
    }
    let json = serde_json::to_string_pretty(evidence)? + "\n";
    let entry = QualificationEntry::new(
        evidence.id.clone(),
        date,
        evidence.prefill.hardware.clone(),
        evidence.layer,
        evidence.decision.result(),
        paths.evidence.clone(),
        json.as_bytes(),
    );
    let toml = entry
        .to_toml()
        .map_err(|e| anyhow::anyhow!("entry TOML: {e}"))?;
    // Everything is rendered before anything is written, and the entry (the
    // file the registry reads) is written last: a failure leaves no entry
    // without its evidence, report and plots.
    let ttft_plot = crate::report_svg::ttft_plot(&evidence.prefill);
    let transient_plot = crate::report_svg::transient_plot(&evidence.prefill);
    let report = crate::report::render(evidence, &entry, &paths)?;
    for (rel, text) in [
        (&paths.evidence, &json),
        (&paths.ttft_plot, &ttft_plot),
        (&paths.transient_plot, &transient_plot),
        (&paths.report, &report),
        (&paths.entry, &toml),
    ] {
        headroom_model::files::write_bytes(&dir.join(rel), &[], text.as_bytes())
            .with_context(|| format!("writing {rel}"))?;
    }
    Ok((entry, paths))
}
