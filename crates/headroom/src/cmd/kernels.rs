//! `headroom kernels build|verify|check|time`: the CUDA kernel artifact gate
//! (NVRTC, no GPU needed) and, on a GPU, the correctness checks and a quick
//! timing of the attention kernels.

use crate::global::GlobalArgs;
use crate::outln;
use crate::shape_args::ShapeArgs;
use anyhow::{bail, Context};
use headroom_core::{Dtype, RouteRequest};
use headroom_cuda::{artifact, check, device::CudaDevice, kernels, timing};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum KernelsCommand {
    /// Compile every kernel through NVRTC and write the artifact + manifest.json.
    Build {
        /// Target architecture (a real `sm_XY[a]` target).
        #[arg(long, default_value = "sm_90a")]
        arch: String,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// Verify an artifact folder against the sources embedded in this binary.
    Verify {
        /// The folder `kernels build` wrote.
        dir: PathBuf,
    },
    /// Run the on-device correctness checks (needs a GPU); non-zero exit on any failure.
    Check {
        /// Write every result as JSON to PATH.
        #[arg(long, value_name = "PATH")]
        json: Option<PathBuf>,
        /// Run only cases whose description contains this text.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Time attention routes on the GPU (B=1) and print a table; `--json` writes the samples.
    Time(TimeArgs),
}

#[derive(clap::Args, Debug)]
pub struct TimeArgs {
    /// Query lengths (kv_len = length + history).
    #[arg(long, value_delimiter = ',', default_value = "8192,32768")]
    pub lengths: Vec<usize>,
    /// Storage dtypes (f16, bf16).
    #[arg(long, value_delimiter = ',', default_value = "bf16,f16")]
    pub dtypes: Vec<Dtype>,
    /// Routes: fused, composed:N.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fused,composed:128,composed:512"
    )]
    pub routes: Vec<RouteRequest>,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Untimed calls per configuration.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Timed calls per configuration (median reported).
    #[arg(long, alias = "iters", default_value_t = 10)]
    pub iterations: usize,
    /// Write every sample as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

pub fn run(c: KernelsCommand, _g: &GlobalArgs) -> anyhow::Result<()> {
    match c {
        KernelsCommand::Build { arch, out } => {
            let m = artifact::build(&out, &arch, kernels::SOURCES)
                .with_context(|| format!("building the kernel artifact for {arch}"))?;
            for k in &m.kernels {
                outln!(
                    "{:<18} {} {} entry points",
                    k.name,
                    k.output_file,
                    k.entry_points.len()
                )?;
            }
            outln!(
                "wrote {} (NVRTC {}, {arch})",
                out.join(artifact::MANIFEST).display(),
                m.nvrtc_version
            )
        }
        KernelsCommand::Verify { dir } => {
            let v = artifact::verify(&dir, kernels::SOURCES, &kernels::required_entry_points())?;
            outln!(
                "verified {}: {} kernels for {}, {} entry points, manifest sha256 {}",
                dir.display(),
                v.kernels,
                v.arch,
                v.entry_points.len(),
                v.manifest_sha256
            )
        }
        KernelsCommand::Check { json, filter } => run_check(json, filter),
        KernelsCommand::Time(a) => run_time(a),
    }
}

fn run_time(a: TimeArgs) -> anyhow::Result<()> {
    let TimeArgs {
        lengths,
        dtypes,
        routes,
        shape: dims,
        warmup,
        iterations: iters,
        json,
    } = a;
    if let Some(p) = &json {
        crate::output::check_output_path("--json", p, &[])?;
    }
    let shapes = lengths
        .iter()
        .map(|&len| dims.checked_shape(len))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dev = CudaDevice::open(0).context("CUDA backend unavailable")?;
    let imp = headroom_cuda::attention::fused_impl(&dev.arch).as_str();
    outln!(
        "device: {} ({} SMs, {}), fused kernel: {imp}",
        dev.name,
        dev.sm_count,
        dev.arch
    )?;
    outln!(
        "{:>7} {:>5} {:<13} {:>9} {:>8} {:>11}",
        "length",
        "dtype",
        "route",
        "ms",
        "TFLOP/s",
        "transient"
    )?;
    let mut rows = Vec::new();
    for (&len, &shape) in lengths.iter().zip(&shapes) {
        for &dtype in &dtypes {
            let inputs = timing::random_inputs(&dev, &shape, dtype, len as u64)?;
            for &route in &routes {
                let t = timing::time_prefill(&dev, &shape, dtype, route, &inputs, warmup, iters)
                    .with_context(|| format!("{route} {dtype} L={len}"))?;
                outln!(
                    "{len:>7} {:>5} {:<13} {:>9.3} {:>8.1} {:>8.1} MiB",
                    dtype.as_str(),
                    route.to_string(),
                    t.median_ms,
                    t.tflops,
                    t.report.transient_bytes as f64 / (1 << 20) as f64
                )?;
                rows.push(serde_json::json!({
                    "length": len, "history": dims.history, "dtype": dtype, "route": route.to_string(),
                    "q_heads": dims.q_heads, "kv_heads": dims.kv_heads, "head_dim": dims.head_dim,
                    "median_ms": t.median_ms, "times_ms": t.times_ms, "tflops": t.tflops,
                    "report": t.report, "device": dev.name, "arch": dev.arch, "fused_impl": imp,
                }));
            }
        }
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&rows)? + "\n";
        crate::output::write_file_atomically(&p, text.as_bytes())?;
    }
    Ok(())
}

fn describe(c: &check::CheckCase) -> String {
    format!(
        "{} {} d{} q{} kv{} h{}/{}{}",
        c.route,
        c.dtype,
        c.head_dim,
        c.q_len,
        c.kv_len,
        c.q_heads,
        c.kv_heads,
        c.nan_key.map(|j| format!(" nan@{j}")).unwrap_or_default()
    )
}

fn run_check(json: Option<PathBuf>, filter: Option<String>) -> anyhow::Result<()> {
    if let Some(p) = &json {
        crate::output::check_output_path("--json", p, &[])?;
    }
    let dev = CudaDevice::open(0).context("CUDA backend unavailable")?;
    outln!(
        "device: {} ({} SMs, {}), fused kernel: {}",
        dev.name,
        dev.sm_count,
        dev.arch,
        headroom_cuda::attention::fused_impl(&dev.arch).as_str()
    )?;
    let seed0: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut results = Vec::new();
    let mut failed = 0;
    for (n, case) in check::standard_cases().iter().enumerate() {
        let name = describe(case);
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let r = check::run_case(&dev, case, seed0.wrapping_add(n as u64 * 7919))
            .with_context(|| name.clone())?;
        outln!(
            "{} {:<44} rel_err {:.2e} (tol {:.0e}) rows {:>5} bad_nan_rows {}",
            if r.passed { "ok  " } else { "FAIL" },
            name,
            r.rel_err,
            r.tolerance,
            r.rows_compared,
            r.bad_nan_rows
        )?;
        failed += usize::from(!r.passed);
        results.push(r);
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&results)? + "\n";
        crate::output::write_file_atomically(&p, text.as_bytes())?;
    }
    outln!(
        "{} cases, {failed} failed (seed base {seed0})",
        results.len()
    )?;
    if failed > 0 {
        bail!("{failed} correctness case(s) failed");
    }
    Ok(())
}
