//! `headroom qualify`: measure this machine and write registry entries
//! (`docs/qualify.md`). Per distinct full-attention layer shape: the
//! attention bench over composed qL ∈ {128, 256, 512, 1024, whole} and fused;
//! the leaders confirmed through `bench prefill`'s engine target (the
//! scheduler users run); the prefill file validated;
//! the decision rule applied; entry TOML + evidence JSON + report + plots
//! written to `--out`. Finally the written folder is loaded with the strict
//! registry loader and resolved on this machine: the command fails unless
//! the policy picks each new entry.

use crate::backend_select::{
    load_config, run_on_backend, BackendSettings, LoadInfo, ModelJob, WeightsInit,
};
use crate::cmd::bench_prefill::source_label;
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use anyhow::{bail, ensure, Context};
use headroom_bench::attention::{self, AttentionBenchConfig};
use headroom_bench::backends::backend_for;
use headroom_bench::prefill::{self, Arm, PrefillConfig};
use headroom_bench::prefill_engine::{EngineBenchSettings, EnginePrefill};
use headroom_bench::qualify::{
    affordable, candidate_routes, decide, entry_id, leaders, QualifyEvidence, EVIDENCE_SCHEMA,
};
use headroom_bench::qualify_output::write_outputs;
use headroom_bench::validate::{validate_files, ValidateOptions};
use headroom_core::fused_capability::fused_support;
use headroom_core::ops::Backend;
use headroom_core::{AttentionKind, BackendKind, LayerKind};
use headroom_model::Qwen35Model;
use headroom_policy::{resolve, AttentionControl, Controls, Registry, ResolutionSource};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub source: ModelSource,
    /// Backend: cpu | cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    /// Prompt lengths in tokens (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2048,8192,32768")]
    pub lengths: Vec<usize>,
    /// Measured runs per arm and length (at least 3).
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Unmeasured runs per arm and length.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Attention transient memory a winner may use, MiB.
    #[arg(long, default_value_t = 4096)]
    pub transient_budget_mib: u64,
    /// Seed of a synthetic model's weights.
    #[arg(long, default_value_t = 0)]
    pub weights_seed: u64,
    /// Where synthetic weights are drawn (default: host on cpu, device on cuda).
    #[arg(long, value_enum)]
    pub weights_init: Option<WeightsInit>,
    /// Entry date (YYYY-MM-DD; default today, UTC).
    #[arg(long)]
    pub date: Option<String>,
    /// Output folder (entries, evidence/, plots/, reports).
    #[arg(long)]
    pub out: PathBuf,
    /// List what would run, run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Distinct full-attention layer shapes, in order of first appearance.
pub fn full_kinds(kinds: &[LayerKind]) -> Vec<LayerKind> {
    let mut out: Vec<LayerKind> = Vec::new();
    for k in kinds {
        if k.attention == AttentionKind::Full && !out.contains(k) {
            out.push(*k);
        }
    }
    out
}

struct QualifyJob {
    a: Args,
    date: String,
    label: String,
}

impl ModelJob for QualifyJob {
    type Output = Vec<String>;
    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        _info: &LoadInfo,
    ) -> anyhow::Result<Vec<String>> {
        let a = &self.a;
        let backend = model.backend().kind();
        let hardware = headroom_hardware::detect(backend)?;
        let kinds = model.config().layer_kinds();
        let full = full_kinds(&kinds);
        ensure!(
            !full.is_empty(),
            "the model has no full-attention layer to qualify"
        );
        let budget = a.transient_budget_mib.saturating_mul(1 << 20);
        // 1. The attention bench per shape.
        let mut benches = Vec::new();
        let mut arms: Vec<Arm> = Vec::new();
        for k in &full {
            let longest = a.lengths.iter().copied().max().unwrap_or(0);
            let routes = affordable(
                candidate_routes(fused_support(backend, k).is_ok()),
                k.q_heads,
                longest,
                budget,
            );
            let cfg = AttentionBenchConfig {
                head_dim: k.head_dim,
                q_heads: k.q_heads,
                kv_heads: k.kv_heads,
                dtype: k.dtype,
                lengths: a.lengths.clone(),
                history: 0,
                routes: routes.clone(),
                iterations: a.iterations,
                warmup: a.warmup,
                seed: 0x4845_4144,
            };
            eprintln!("attention bench: {k}");
            let mut be = backend_for(backend)?;
            let file = attention::run(&cfg, be.as_mut(), hardware.clone())?;
            for arm in leaders(&file, &routes, budget) {
                if !arms.contains(&arm) {
                    arms.push(arm);
                }
            }
            benches.push((*k, file));
        }
        // 2. The leaders through the prefill bench.
        let arm_names: Vec<String> = arms.iter().map(Arm::to_string).collect();
        eprintln!("prefill bench: arms {}", arm_names.join(","));
        let cfg = PrefillConfig {
            arms,
            lengths: a.lengths.clone(),
            warmup: a.warmup,
            iterations: a.iterations,
            seed: 7,
            model_source: self.label.clone(),
        };
        let longest = a.lengths.iter().copied().max().unwrap_or(1);
        let engine = EngineBenchSettings {
            scheduler: crate::engine_args::scheduler_settings(Default::default())?,
            ..EngineBenchSettings::for_longest(longest)
        };
        let mut target = EnginePrefill::new(model, engine)?;
        let pf = prefill::run(&cfg, &mut target, hardware.clone(), &Registry::default())?;
        // 3. Validate what was measured.
        let bytes = serde_json::to_vec(&pf)?;
        let (_, violations) = validate_files(
            &[("prefill".into(), bytes)],
            ValidateOptions { min_iterations: 3 },
        );
        if !violations.is_empty() {
            bail!(
                "the prefill evidence failed validation:\n  {}",
                violations.join("\n  ")
            );
        }
        // 4. Decide and write, per shape.
        let decision = decide(&pf, budget);
        let mut ids = Vec::new();
        for (k, att) in benches {
            let id = entry_id(&hardware, &k, &decision.result());
            let ev = QualifyEvidence {
                schema: EVIDENCE_SCHEMA.into(),
                id: id.clone(),
                layer: k,
                attention: att,
                prefill: pf.clone(),
                decision: decision.clone(),
            };
            let (_, paths) = write_outputs(&a.out, &ev, &self.date)?;
            println!(
                "{id}: {} -> {} ({}, {})",
                k,
                match decision.query_block {
                    Some(q) => format!("composed qL {q}"),
                    None => "fused".into(),
                },
                paths.entry,
                paths.report
            );
            ids.push(id);
        }
        // 5. The strict loader must accept them and resolve() must pick them here.
        check_picked(&a.out, &hardware, &kinds, &ids)?;
        Ok(ids)
    }
}

/// Loads `dir` alone and checks `auto` resolves every full layer to one of `ids`.
fn check_picked(
    dir: &std::path::Path,
    hw: &headroom_hardware::HardwareFingerprint,
    kinds: &[LayerKind],
    ids: &[String],
) -> anyhow::Result<()> {
    let reg = Registry::from_dirs(&[dir.to_path_buf()]);
    for e in reg.entries() {
        if let Err(why) = &e.entry {
            bail!("the written entry {} is invalid: {why}", e.file);
        }
    }
    let controls = Controls {
        execution: AttentionControl::Auto,
        ..Controls::default()
    };
    for k in full_kinds(kinds) {
        let r = resolve(hw, &k, &controls, &reg);
        ensure!(
            r.source == ResolutionSource::Qualified
                && r.qualification_id
                    .as_ref()
                    .is_some_and(|id| ids.contains(id)),
            "resolve() on this machine did not pick the new entry for {k}: it resolved {} \
             (entry {})",
            r.route,
            r.qualification_id.as_deref().unwrap_or("none")
        );
    }
    Ok(())
}

/// Checks the attention bench of every shape as it will run (lengths,
/// iterations, memory), so a bad argument fails before the first measurement.
fn check_bench_configs(a: &Args, full: &[LayerKind]) -> anyhow::Result<()> {
    let available = headroom_hardware::available_memory_bytes();
    let longest = a.lengths.iter().copied().max().unwrap_or(0);
    let budget = a.transient_budget_mib.saturating_mul(1 << 20);
    for k in full {
        let routes = affordable(
            candidate_routes(fused_support(a.backend, k).is_ok()),
            k.q_heads,
            longest,
            budget,
        );
        AttentionBenchConfig {
            head_dim: k.head_dim,
            q_heads: k.q_heads,
            kv_heads: k.kv_heads,
            dtype: k.dtype,
            lengths: a.lengths.clone(),
            history: 0,
            routes,
            iterations: a.iterations,
            warmup: a.warmup,
            seed: 0,
        }
        .validate_with_memory(available)
        .with_context(|| format!("the attention bench for {k}"))?;
    }
    Ok(())
}

/// Today's date (UTC) as YYYY-MM-DD.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn run(a: Args, _g: &GlobalArgs) -> anyhow::Result<()> {
    ensure!(
        a.iterations >= 3,
        "--iterations must be at least 3 (the validator's minimum)"
    );
    ensure!(
        !a.lengths.is_empty() && a.lengths.iter().all(|&l| l >= 1),
        "bad --lengths"
    );
    // Every argument is checked before anything is measured or written.
    if let Some(d) = &a.date {
        headroom_policy::check_date(d).map_err(|e| anyhow::anyhow!("--date: {e}"))?;
    }
    if let Ok(m) = std::fs::symlink_metadata(&a.out) {
        ensure!(
            m.is_dir(),
            "--out {}: exists and is {}; give a folder",
            a.out.display(),
            headroom_model::files::kind_of(&m)
        );
    }
    let cfg = load_config(&a.source)?;
    let full = full_kinds(&cfg.layer_kinds());
    check_bench_configs(&a, &full)?;
    if a.dry_run {
        println!("qualify on {} for {}:", a.backend, source_label(&a.source));
        for k in &full {
            let longest = a.lengths.iter().copied().max().unwrap_or(0);
            let budget = a.transient_budget_mib.saturating_mul(1 << 20);
            let routes: Vec<String> = affordable(
                candidate_routes(fused_support(a.backend, k).is_ok()),
                k.q_heads,
                longest,
                budget,
            )
            .iter()
            .map(ToString::to_string)
            .collect();
            println!(
                "  attention bench {k}: routes {} at lengths {}",
                routes.join(","),
                a.lengths
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        println!(
            "  prefill bench: fallback:128, the two fastest other composed blocks{}, {} warm-up + {} runs each",
            if full.iter().any(|k| fused_support(a.backend, k).is_ok()) { ", fused" } else { "" },
            a.warmup,
            a.iterations
        );
        println!(
            "  writes to {}: <id>.toml, evidence/<id>.json, <id>.md, plots/<id>-*.svg",
            a.out.display()
        );
        return Ok(());
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let job = QualifyJob {
        date: a.date.clone().unwrap_or_else(today),
        label: source_label(&a.source),
        a,
    };
    let (backend, source, seed, init) = (
        job.a.backend,
        job.a.source.clone(),
        job.a.weights_seed,
        job.a.weights_init,
    );
    let ids = run_on_backend(
        backend,
        BackendSettings::default(),
        &source,
        &cfg,
        seed,
        init,
        job,
    )?;
    eprintln!("qualified: {}", ids.join(", "));
    Ok(())
}
