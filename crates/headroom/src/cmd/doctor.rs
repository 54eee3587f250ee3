//! `headroom doctor`: the hardware fingerprint, backend availability, the
//! qualification registry (matched / rejected / invalid, with reasons) and the
//! attention each distinct layer kind resolves to — as text, or as exactly one
//! JSON object with `--json` (to stdout, or to a file with `--json PATH`).
//!
//! `--backend cuda` on a machine without a usable GPU still reports (exit 0):
//! the CUDA line says why it is unavailable, a warning says so, and the layers
//! are resolved for the CPU.

use crate::attention_setup::{default_backend, AttentionSetup, LayerGroup};
use crate::global::GlobalArgs;
use crate::model_source::{ModelSource, OptionalModelSource};
use crate::{out, outln};
use anyhow::Context;
use headroom_core::{AttentionKind, BackendKind, LayerKind, Route};
use headroom_hardware::{cuda_availability, CudaDeviceInfo, HardwareFingerprint};
use headroom_model::ModelConfig;
use headroom_policy::{
    AttentionControl, ControlSource, Controls, RegistryRow, ResolutionSource, ResolvedAttention,
    RowStatus, ENV_EXECUTION, ENV_QUERY_BLOCK,
};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub source: OptionalModelSource,
    /// Print exactly one JSON object (to stdout, or to PATH when given).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<std::path::PathBuf>,
    /// The backend to fingerprint and resolve for (default: cuda when available, else cpu).
    #[arg(long, value_name = "cpu|cuda")]
    pub backend: Option<BackendKind>,
}

/// Availability of one backend.
#[derive(Debug, Serialize)]
pub struct BackendStatus {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<CudaDeviceInfo>,
}

#[derive(Debug, Serialize)]
pub struct Backends {
    pub cpu: BackendStatus,
    pub cuda: BackendStatus,
    /// Where each CUDA library came from: `SONAME: system library path`,
    /// `SONAME: pip wheel PATH` or `SONAME: not found (WHY)`.
    pub cuda_libraries: Vec<String>,
    /// The CUDA device's clock and power now (NVML), where CUDA is available.
    pub cuda_gpu_now: Option<GpuNow>,
    /// Why NVML could not say, where CUDA is available.
    pub cuda_gpu_now_unavailable: Option<String>,
}

/// The CUDA device's SM clock and power at `doctor`'s reading: the power
/// limit bounds what a long prefill runs at (docs/perf/serving.md, session 42).
#[derive(Debug, Serialize)]
pub struct GpuNow {
    pub sm_clock_mhz: u32,
    pub power_w: f64,
    pub power_limit_w: f64,
    /// The driver's clock event reasons (`nvmlClocksEventReasons` bits).
    pub clock_event_reasons: u64,
}

/// NVML's reading of CUDA device 0.
fn gpu_now() -> Result<GpuNow, String> {
    let nvml = headroom_hardware::Nvml::for_cuda_device0()?;
    let s = nvml.sample()?;
    Ok(GpuNow {
        sm_clock_mhz: s.sm_mhz,
        power_w: s.power_mw as f64 / 1e3,
        power_limit_w: nvml.power_limit_mw()? as f64 / 1e3,
        clock_event_reasons: s.reasons,
    })
}

#[derive(Debug, Serialize)]
pub struct ModelInfo {
    /// `synthetic:NAME` or the checkpoint folder.
    pub source: String,
    pub num_layers: usize,
    /// The weights' storage: the dtype (`bf16`), or `fp8 e4m3, 128x128 blocks (others bf16)`.
    pub weight_format: String,
    /// Bytes of the weights as stored (FP8 tensors one byte an element plus
    /// their block scales): about what the CUDA backend holds, FP8 staying
    /// FP8 on the device (gated attention's q_proj is split into bf16 q and
    /// gate; vectors are f32); the CPU dequantizes at load.
    pub weight_storage_bytes: u64,
}

/// [`ModelInfo::weight_format`] of `cfg`.
fn describe_weights(cfg: &ModelConfig) -> String {
    match cfg.weight_format {
        headroom_model::config::WeightFormat::Plain => cfg.dtype.to_string(),
        ref fp8 => format!("{} (others {})", fp8.describe(), cfg.dtype),
    }
}

/// Layers of one kind, what they resolved to and, for full attention, why.
#[derive(Debug, Serialize)]
pub struct DoctorLayer {
    #[serde(flatten)]
    pub group: LayerGroup,
    /// Why the route was chosen, in words (`None` for linear-attention layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Everything `doctor` reports; serialized as the `--json` object.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub hardware: HardwareFingerprint,
    pub backends: Backends,
    pub model: ModelInfo,
    /// The parsed attention controls (after fail-closed handling).
    pub controls: Controls,
    pub layers: Vec<DoctorLayer>,
    /// Whether the entries built into the binary were loaded
    /// (`false` under `HEADROOM_BUILTIN_QUALIFICATIONS=off`).
    pub builtin_qualifications: bool,
    pub registry: Vec<RegistryRow>,
    pub warnings: Vec<String>,
}

fn load_model(source: &ModelSource) -> anyhow::Result<(String, ModelConfig)> {
    match (&source.synthetic, &source.model) {
        (Some(name), _) => Ok((
            format!("synthetic:{name}"),
            ModelConfig::synthetic(name).with_context(|| format!("synthetic model `{name}`"))?,
        )),
        (None, Some(dir)) => Ok((
            dir.display().to_string(),
            ModelConfig::from_dir(dir)
                .with_context(|| format!("model folder {}", dir.display()))?,
        )),
        (None, None) => anyhow::bail!("name a model with --synthetic NAME or --model DIR"),
    }
}

/// Builds the report (no printing).
pub fn report(args: &Args, g: &GlobalArgs) -> anyhow::Result<DoctorReport> {
    let (source, config) = load_model(&args.source.or_default())?;
    let kinds = config.layer_kinds();
    let cuda = cuda_availability();
    let mut backend = args.backend.unwrap_or_else(default_backend);
    let mut unavailable = None;
    if let (BackendKind::Cuda, Err(why)) = (backend, &cuda) {
        unavailable = Some(format!(
            "backend cuda was asked for but is unavailable ({why}); resolved for the cpu backend instead"
        ));
        backend = BackendKind::Cpu;
    }
    let mut setup = AttentionSetup::new(g, backend, &kinds)?;
    setup.warnings.extend(unavailable);
    let (cuda_gpu_now, cuda_gpu_now_unavailable) = match &cuda {
        Ok(_) => match gpu_now() {
            Ok(now) => (Some(now), None),
            Err(why) => (None, Some(why)),
        },
        Err(_) => (None, None),
    };
    Ok(DoctorReport {
        builtin_qualifications: setup.registry.builtin_loaded(),
        registry: setup.registry.rows(&setup.fingerprint, &kinds),
        layers: setup
            .groups(&kinds)
            .into_iter()
            .map(|group| DoctorLayer {
                why: (group.kind.attention == AttentionKind::Full).then(|| {
                    let rows = setup.registry.rows(&setup.fingerprint, &[group.kind]);
                    describe_why(&group.attention, &rows)
                }),
                group,
            })
            .collect(),
        hardware: setup.fingerprint,
        backends: Backends {
            cpu: BackendStatus {
                available: true,
                reason: None,
                device: None,
            },
            cuda: BackendStatus {
                available: cuda.is_ok(),
                reason: cuda.as_ref().err().cloned(),
                device: cuda.ok(),
            },
            cuda_libraries: headroom_hardware::wheels::origins()
                .iter()
                .map(|o| crate::output::escape_controls(&o.to_string()))
                .collect(),
            cuda_gpu_now,
            cuda_gpu_now_unavailable: cuda_gpu_now_unavailable
                .map(|why| crate::output::escape_controls(&why)),
        },
        model: ModelInfo {
            source: crate::output::escape_controls(&source),
            num_layers: kinds.len(),
            weight_format: describe_weights(&config),
            weight_storage_bytes: headroom_model::weights::expected_storage_bytes(&config),
        },
        controls: setup.controls,
        warnings: setup.warnings,
    })
}

pub fn run(args: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    if let Some(path) = args.json.as_ref().filter(|p| p.as_os_str() != "-") {
        crate::output::check_output_path("--json", path, &[])?;
    }
    let report = report(&args, g)?;
    match &args.json {
        Some(path) if path.as_os_str() != "-" => {
            let text = serde_json::to_string_pretty(&report)? + "\n";
            crate::output::write_file_atomically(path, text.as_bytes())?;
            eprintln!("wrote {}", path.display());
            Ok(())
        }
        Some(_) => outln!("{}", serde_json::to_string_pretty(&report)?),
        None => out!("{}", render_text(&report)),
    }
}

/// A layer kind in words: a linear-attention (Gated DeltaNet) layer has key
/// and value heads, a full-attention layer query and KV heads.
pub fn describe_kind(k: &LayerKind) -> String {
    match k.attention {
        AttentionKind::Full => format!(
            "full attention, head_dim {}, {} query heads / {} KV heads, {}",
            k.head_dim, k.q_heads, k.kv_heads, k.dtype
        ),
        _ => format!(
            "linear attention (Gated DeltaNet), head_dim {}, {} key heads / {} value heads, {}",
            k.head_dim, k.q_heads, k.kv_heads, k.dtype
        ),
    }
}

/// `auto (source: default)` / `fused (source: flag --attn-execution)` /
/// `fallback (source: env HEADROOM_ATTN_EXECUTION)`.
pub fn describe_control(control: AttentionControl, source: ControlSource) -> String {
    let from = match source {
        ControlSource::Default => "default".to_string(),
        ControlSource::Env => format!("env {ENV_EXECUTION}"),
        ControlSource::Cli => "flag --attn-execution".to_string(),
    };
    format!("{control} (source: {from})")
}

/// The route a layer resolved to, in words.
fn describe_route(a: &ResolvedAttention) -> String {
    match (a.route, a.query_block) {
        (Route::Composed, Some(0)) => "composed attention, one query block".into(),
        (Route::Composed, Some(qb)) => format!("composed attention, query block {qb}"),
        (Route::Fused, _) => "fused attention".into(),
        (Route::None, _) => "no softmax attention (the Gated DeltaNet recurrence)".into(),
        (route, None) => format!("{route} attention"),
    }
}

/// Why a full-attention layer runs what it runs: the qualification entry that
/// decided, the flag or variable that set it, or (by default) why no entry
/// applies: the first field in which each entry differs from this machine
/// and layer (`rows`: the registry checked against this layer kind alone).
fn describe_why(a: &ResolvedAttention, rows: &[RegistryRow]) -> String {
    let mut why = match (a.source, a.route) {
        (ResolutionSource::Qualified, _) => format!(
            "qualified by entry {}",
            a.qualification_id.as_deref().unwrap_or("?")
        ),
        (ResolutionSource::Cli, Route::Fused) => "set by the flag --attn-execution".into(),
        (ResolutionSource::Cli, _) => "query block set by the flag --attn-query-block".into(),
        (ResolutionSource::Env, Route::Fused) => format!("set by env {ENV_EXECUTION}"),
        (ResolutionSource::Env, _) => format!("query block set by env {ENV_QUERY_BLOCK}"),
        (ResolutionSource::Default, _) => {
            let rejected: Vec<String> = rows
                .iter()
                .filter(|r| r.status == RowStatus::Rejected)
                .map(|r| {
                    format!(
                        "{}: {}",
                        r.id.as_deref().unwrap_or(&r.file),
                        r.reason.as_deref().unwrap_or("differs")
                    )
                })
                .collect();
            let matched = rows.iter().any(|r| r.status == RowStatus::Matched);
            match (matched, rejected.as_slice()) {
                (true, _) => "built-in default".into(),
                (false, []) => "built-in default: no qualification entry is loaded".into(),
                (false, all) => format!(
                    "built-in default: no qualification entry matches ({})",
                    all.join("; ")
                ),
            }
        }
    };
    if let Some(reason) = &a.reason {
        why.push_str(&format!("; {reason}"));
    }
    why
}

/// The human-readable report.
pub fn render_text(r: &DoctorReport) -> String {
    let mut out = String::new();
    render_hardware(&mut out, r);
    render_backends(&mut out, r);
    render_layers(&mut out, r);
    render_registry(&mut out, r);
    if !r.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

/// The fingerprint, one field a line.
fn render_hardware(out: &mut String, r: &DoctorReport) {
    let _ = writeln!(out, "Hardware fingerprint");
    let hw = &r.hardware;
    let fields: [(&str, Option<String>); 10] = [
        ("backend", Some(hw.backend.to_string())),
        ("machine_model", Some(hw.machine_model.clone())),
        ("cpu_brand", Some(hw.cpu_brand.clone())),
        ("cpu_cores", Some(hw.cpu_cores.to_string())),
        ("memory_gib", Some(hw.memory_gib.to_string())),
        ("device_name", hw.device_name.clone()),
        (
            "device_compute_units",
            hw.device_compute_units.map(|v| v.to_string()),
        ),
        (
            "device_memory_gib",
            hw.device_memory_gib.map(|v| v.to_string()),
        ),
        ("compute_capability", hw.compute_capability.clone()),
        ("driver_version", hw.driver_version.clone()),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            let _ = writeln!(out, "  {k:<22} {v}");
        }
    }
}

/// Each backend's availability and where the CUDA libraries came from.
fn render_backends(out: &mut String, r: &DoctorReport) {
    let _ = writeln!(out, "\nBackends");
    for (name, b) in [("cpu", &r.backends.cpu), ("cuda", &r.backends.cuda)] {
        match (&b.reason, &b.device) {
            (_, Some(d)) => {
                let _ = writeln!(
                    out,
                    "  {name:<5} available: {} ({} SMs, {} GiB, sm {}, driver {}, {} device(s))",
                    d.name,
                    d.compute_units,
                    d.memory_gib,
                    d.compute_capability,
                    d.driver_version,
                    d.device_count
                );
            }
            (Some(why), None) => {
                let _ = writeln!(out, "  {name:<5} unavailable: {why}");
            }
            (None, None) => {
                let _ = writeln!(out, "  {name:<5} available");
            }
        }
    }
    for lib in &r.backends.cuda_libraries {
        let _ = writeln!(out, "  library {lib}");
    }
    if let Some(g) = &r.backends.cuda_gpu_now {
        let _ = writeln!(
            out,
            "  gpu now SM {} MHz, {:.0} W of a {:.0} W power limit (NVML; clock event reasons {:#x})",
            g.sm_clock_mhz, g.power_w, g.power_limit_w, g.clock_event_reasons
        );
    }
    if let Some(why) = &r.backends.cuda_gpu_now_unavailable {
        let _ = writeln!(out, "  gpu now unknown: {why}");
    }
}

/// The model, the attention control and each layer kind's route and why.
fn render_layers(out: &mut String, r: &DoctorReport) {
    let _ = writeln!(
        out,
        "\nModel {} ({} layers, weights {}, {:.2} GiB as stored), \
         resolved for backend {}",
        r.model.source,
        r.model.num_layers,
        r.model.weight_format,
        crate::describe::gib(r.model.weight_storage_bytes),
        r.hardware.backend
    );
    if let Some(first) = r.layers.first() {
        let a = &first.group.attention;
        let _ = writeln!(
            out,
            "  attention control: {}",
            describe_control(a.control_requested, a.control_source)
        );
    }
    for l in &r.layers {
        let g = &l.group;
        let _ = writeln!(
            out,
            "  {}: {}",
            crate::describe::layers(&g.layer_indices),
            describe_kind(&g.kind)
        );
        let _ = write!(out, "    -> {}", describe_route(&g.attention));
        match &l.why {
            Some(why) => {
                let _ = writeln!(out, ": {why}");
            }
            None => out.push('\n'),
        }
    }
}

/// Every qualification entry: matched, rejected (first differing field) or invalid.
fn render_registry(out: &mut String, r: &DoctorReport) {
    let _ = writeln!(
        out,
        "\nQualification registry ({} entries{})",
        r.registry.len(),
        if r.builtin_qualifications {
            ""
        } else {
            "; built-in entries off: HEADROOM_BUILTIN_QUALIFICATIONS"
        }
    );
    for row in &r.registry {
        let status = match row.status {
            RowStatus::Matched => "matched",
            RowStatus::Rejected => "rejected",
            RowStatus::Invalid => "invalid",
        };
        let id = row.id.as_deref().unwrap_or("?");
        let _ = write!(out, "  {status:<8} {id}  {}", row.file);
        if let Some(reason) = &row.reason {
            let _ = write!(out, "\n           {reason}");
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_report_shows_groups_routes_and_warnings() {
        let args = Args {
            source: OptionalModelSource::default(),
            json: None,
            backend: Some(BackendKind::Cpu),
        };
        let g = GlobalArgs {
            attn_execution: Some("fallback".into()),
            attn_query_block: Some("256".into()),
            qualifications: Some(std::path::PathBuf::from("no/such/registry/folder")),
            log: None,
        };
        let r = report(&args, &g).unwrap();
        assert_eq!(r.hardware.backend, BackendKind::Cpu);
        let text = render_text(&r);
        assert!(
            text.contains("layer 3: full attention, head_dim 256"),
            "{text}"
        );
        assert!(
            text.contains("layers 0-2: linear attention (Gated DeltaNet)"),
            "{text}"
        );
        assert!(text.contains("key heads / "), "{text}");
        assert!(!text.contains("q heads"), "{text}");
        assert!(
            text.contains(
                "-> composed attention, query block 256: query block set by the flag --attn-query-block"
            ),
            "{text}"
        );
        assert!(
            text.contains("attention control: fallback (source: flag --attn-execution)"),
            "{text}"
        );
        assert!(text.contains(" layers, weights "), "{text}");
        let fp8 = ModelConfig::synthetic("tiny-d64-fp8").unwrap();
        assert_eq!(
            describe_weights(&fp8),
            "fp8 e4m3, 128x128 blocks (others f32)"
        );
        // The missing folder is a warning, printed once.
        assert_eq!(text.matches("no/such/registry/folder").count(), 1, "{text}");
    }
}
