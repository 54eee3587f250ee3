//! `headroom bench prefill`: TTFT of whole-model prefills per attention
//! setting (arm) and prompt length, written as `headroom.bench.prefill/1`
//! (`docs/bench-prefill.md`). Prompts run through the engine's scheduler
//! (`path = "engine"` in the JSON), under the scheduler settings and KV
//! backend users get (env `HEADROOM_*`, then the flags).

use crate::backend_select::{load_config, run_on_backend, LoadInfo, ModelJob, WeightsInit};
use crate::engine_args::EngineArgs;
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use headroom_bench::prefill::{self, Arm, PrefillConfig};
use headroom_bench::prefill_engine::{context_for, EngineBenchSettings, EnginePrefill};
use headroom_bench::prefill_schema::PrefillBenchFile;
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_model::Qwen35Model;
use headroom_policy::Registry;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub source: ModelSource,
    /// Backend: cpu | cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    /// Arms (comma-separated attention settings): fallback, fallback:N, fused, auto, auto:N.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fallback:128,fallback:512,fused,auto"
    )]
    pub arms: Vec<Arm>,
    /// Prompt lengths in tokens (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2048,8192,32768")]
    pub lengths: Vec<usize>,
    /// Unmeasured prefills per arm and length.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Measured prefills per arm and length.
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Seed of the prompt ids (length i uses seed + i).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Seed of a synthetic model's weights.
    #[arg(long, default_value_t = 0)]
    pub weights_seed: u64,
    /// Where synthetic weights are drawn (default: host on cpu, device on cuda).
    #[arg(long, value_enum)]
    pub weights_init: Option<WeightsInit>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Write the headroom.bench.prefill/1 JSON here.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

/// `synthetic:NAME` or `model:FOLDER-NAME` (no absolute paths in evidence).
pub fn source_label(s: &ModelSource) -> String {
    match (&s.synthetic, &s.model) {
        (Some(n), _) => format!("synthetic:{n}"),
        (_, Some(d)) => format!(
            "model:{}",
            d.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        _ => "unknown".into(),
    }
}

/// Runs the prefill bench on a built model, through the engine.
pub struct PrefillJob {
    pub cfg: PrefillConfig,
    pub registry: Registry,
    pub engine: EngineBenchSettings,
}

impl ModelJob for PrefillJob {
    type Output = PrefillBenchFile;
    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        _info: &LoadInfo,
    ) -> anyhow::Result<PrefillBenchFile> {
        let backend = model.backend().kind();
        let hardware = headroom_hardware::detect(backend)?;
        let mut target = EnginePrefill::new(model, self.engine)?;
        prefill::run(&self.cfg, &mut target, hardware, &self.registry)
    }
}

/// The registry the arms resolve against (built-in, `--qualifications`, env).
pub fn registry(g: &GlobalArgs) -> Registry {
    let extra: Vec<_> = g.qualifications.iter().cloned().collect();
    let r = Registry::load(&extra);
    for p in r.problems() {
        tracing::warn!("{p}");
    }
    r
}

/// One line per sample.
pub fn summary(f: &PrefillBenchFile) -> String {
    let mut s = format!(
        "{:<14} {:>8} {:>20} {:>12} {:>12} {:>14}\n",
        "arm", "length", "reported", "TTFT ms", "tok/s", "transient B"
    );
    for p in &f.samples {
        let routes: Vec<String> = p
            .attention
            .iter()
            .map(|g| match g.reported.query_block {
                Some(q) => format!("{}:{q}", g.reported.route),
                None => g.reported.route.to_string(),
            })
            .collect();
        s += &format!(
            "{:<14} {:>8} {:>20} {:>12.3} {:>12.0} {:>14}\n",
            p.arm,
            p.length,
            routes.join(","),
            p.ttft_ms.median,
            p.prefill_tokens_per_s,
            p.memory.attention_transient_peak_bytes
        );
    }
    s
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.json {
        crate::output::check_output_path("--json", path, &[])?;
    }
    let cfg = load_config(&a.source)?;
    let longest = a.lengths.iter().copied().max().unwrap_or(1);
    let engine = EngineBenchSettings {
        scheduler: a.engine.scheduler(None)?,
        kv_backend: a.engine.kv,
        max_context: context_for(longest),
    };
    let job = PrefillJob {
        cfg: PrefillConfig {
            arms: a.arms,
            lengths: a.lengths,
            warmup: a.warmup,
            iterations: a.iterations,
            seed: a.seed,
            model_source: source_label(&a.source),
        },
        registry: registry(g),
        engine,
    };
    let file = run_on_backend(
        a.backend,
        a.engine.backend(),
        &a.source,
        &cfg,
        a.weights_seed,
        a.weights_init,
        job,
    )?;
    print!("{}", summary(&file));
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&file)? + "\n";
        crate::output::write_file_atomically(path, text.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
