//! The qualification report (Markdown): the decision, every measured number
//! linked to the JSON field it came from (`evidence.json#/json/pointer`), the
//! plots, and a `file:line` citation for every behavioural claim
//! ([`crate::citations`]).

use crate::citations::cite_all;
use crate::qualify::{OutputPaths, QualifyEvidence};
use headroom_policy::QualificationEntry;
use std::fmt::Write;

/// A number linked to its field in the evidence.
fn num(paths: &OutputPaths, pointer: &str, text: String) -> String {
    format!("[{text}]({}#{pointer})", paths.evidence)
}

/// Renders the report; fails when a citation anchor is missing from the source.
pub fn render(
    ev: &QualifyEvidence,
    entry: &QualificationEntry,
    paths: &OutputPaths,
) -> anyhow::Result<String> {
    let mut s = String::new();
    header(&mut s, ev);
    result(&mut s, ev, entry, paths);
    prefill_table(&mut s, ev, paths);
    attention_table(&mut s, ev, paths);
    citations(&mut s)?;
    Ok(s)
}

/// The title, the machine and layer, the build.
fn header(s: &mut String, ev: &QualifyEvidence) {
    let hw = &ev.prefill.hardware;
    let l = &ev.layer;
    let _ = writeln!(s, "# Qualification `{}`\n", ev.id);
    let _ = writeln!(
        s,
        "Machine: backend `{}`, `{}`, {} cores, {} GiB{}. Layer: full attention, head_dim {}, {} query / {} KV heads, {}.\n",
        hw.backend,
        hw.cpu_brand,
        hw.cpu_cores,
        hw.memory_gib,
        hw.device_name
            .as_ref()
            .map(|d| format!(", device `{d}`"))
            .unwrap_or_default(),
        l.head_dim,
        l.q_heads,
        l.kv_heads,
        l.dtype
    );
    let b = &ev.prefill.build;
    let _ = writeln!(
        s,
        "Build: headroom {} at `{}`, kernel sources SHA-256 `{}`. Model `{}`; prefill path `{}`; {} warm-up and {} measured runs per arm.\n",
        b.version, b.git_commit, b.kernel_artifact_sha256, ev.prefill.model.source, ev.prefill.path,
        ev.prefill.warmup, ev.prefill.iterations
    );
}

/// The decided route, the entry and every candidate's verdict.
fn result(s: &mut String, ev: &QualifyEvidence, entry: &QualificationEntry, paths: &OutputPaths) {
    let result = match (ev.decision.route, ev.decision.query_block) {
        (headroom_core::Route::Fused, _) => "route **fused**".to_string(),
        (_, q) => format!("route **composed**, query block **{}**", q.unwrap_or(128)),
    };
    let _ = writeln!(
        s,
        "## Result\n\n{result} ([decision]({}#/decision)). Entry: [`{}`]({}), evidence SHA-256 `{}`.\n",
        paths.evidence, paths.entry, paths.entry, entry.evidence.sha256
    );
    let _ = writeln!(s, "Rule: {}\n", ev.decision.rule);
    let _ = writeln!(s, "| candidate | qualifies | why |\n|---|---|---|");
    for (i, v) in ev.decision.verdicts.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | [{}]({}#/decision/verdicts/{i}/qualifies) | {} |",
            v.arm,
            if v.qualifies { "yes" } else { "no" },
            paths.evidence,
            v.reasons.join("<br>")
        );
    }
}

/// The whole-model prefill samples, each number linked to its evidence.
fn prefill_table(s: &mut String, ev: &QualifyEvidence, paths: &OutputPaths) {
    let _ = writeln!(s, "\n## Prefill (TTFT, submission to first token)\n");
    let _ = writeln!(
        s,
        "| arm | length | route/qL reported | median TTFT ms | min | max | tokens/s | transient peak B | backend peak B |\n|---|---|---|---|---|---|---|---|---|"
    );
    for (i, p) in ev.prefill.samples.iter().enumerate() {
        let base = format!("/prefill/samples/{i}");
        let routes: Vec<String> = p
            .attention
            .iter()
            .map(|g| match g.reported.query_block {
                Some(q) => format!("{}:{q}", g.reported.route),
                None => g.reported.route.to_string(),
            })
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | [{}]({}#{base}/attention) | {} | {} | {} | {} | {} | {} |",
            p.arm,
            p.length,
            routes.join(", "),
            paths.evidence,
            num(
                paths,
                &format!("{base}/ttft_ms/median"),
                format!("{:.3}", p.ttft_ms.median)
            ),
            num(
                paths,
                &format!("{base}/ttft_ms/min"),
                format!("{:.3}", p.ttft_ms.min)
            ),
            num(
                paths,
                &format!("{base}/ttft_ms/max"),
                format!("{:.3}", p.ttft_ms.max)
            ),
            num(
                paths,
                &format!("{base}/prefill_tokens_per_s"),
                format!("{:.0}", p.prefill_tokens_per_s)
            ),
            num(
                paths,
                &format!("{base}/memory/attention_transient_peak_bytes"),
                p.memory.attention_transient_peak_bytes.to_string()
            ),
            num(
                paths,
                &format!("{base}/memory/backend_peak_bytes"),
                p.memory.backend_peak_bytes.to_string()
            ),
        );
    }
    let _ = writeln!(
        s,
        "\n![TTFT against prompt length]({})\n\n![Attention transient peak against prompt length]({})\n",
        paths.ttft_plot, paths.transient_plot
    );
}

/// The attention bench samples of this layer shape.
fn attention_table(s: &mut String, ev: &QualifyEvidence, paths: &OutputPaths) {
    let _ = writeln!(s, "## Attention bench (this layer shape alone)\n");
    let _ = writeln!(
        s,
        "| route | qL reported | length | median ms | GFLOP/s | transient B | rel. error |\n|---|---|---|---|---|---|---|"
    );
    for (i, a) in ev.attention.samples.iter().enumerate() {
        let base = format!("/attention/samples/{i}");
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            a.route,
            a.query_block
                .map(|q| q.to_string())
                .unwrap_or_else(|| "-".into()),
            a.length,
            num(
                paths,
                &format!("{base}/median_ms"),
                format!("{:.3}", a.median_ms)
            ),
            num(paths, &format!("{base}/gflops"), format!("{:.1}", a.gflops)),
            num(
                paths,
                &format!("{base}/transient_bytes"),
                a.transient_bytes.to_string()
            ),
            num(
                paths,
                &format!("{base}/rel_err"),
                a.rel_err
                    .map(|e| format!("{e:.2e}"))
                    .unwrap_or_else(|| "NaN".into())
            ),
        );
    }
}

/// Where in the source each measurement claim is implemented.
fn citations(s: &mut String) -> anyhow::Result<()> {
    let _ = writeln!(s, "\n## How this was measured (source citations)\n");
    for c in cite_all().map_err(|e| anyhow::anyhow!("citation: {e}"))? {
        let _ = writeln!(
            s,
            "* {} — `{}:{}` (`{}`)",
            c.claim.text, c.claim.file, c.line, c.claim.anchor
        );
    }
    Ok(())
}
