//! What a command ran, in words for the one "ran" line each command prints on
//! stderr: the attention route per layer kind, the KV cache, the memory
//! budget, layer index lists and profile part names. Never Rust debug
//! formatting: these strings are read by people.

use headroom_core::{AttentionKind, LayerKind, RouteRequest};
use headroom_engine::KvResolution;
use headroom_model::AttentionPlan;
use headroom_policy::{AttentionControl, ControlSource, Controls, ResolvedAttention};

/// `[0, 1, 2, 4, 7, 8]` → `0-2, 4, 7-8`.
pub fn fmt_indices(indices: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

/// `layer 3` / `layers 0-2, 4`.
pub fn layers(indices: &[usize]) -> String {
    let noun = if indices.len() == 1 {
        "layer"
    } else {
        "layers"
    };
    format!("{noun} {}", fmt_indices(indices))
}

/// `composed attention (query block 128)` / `fused attention`.
pub fn route(r: &RouteRequest) -> String {
    match r {
        RouteRequest::Composed { query_block: 0 } => "composed attention (one query block)".into(),
        RouteRequest::Composed { query_block } => {
            format!("composed attention (query block {query_block})")
        }
        RouteRequest::Fused => "fused attention".into(),
    }
}

/// The attention each layer kind runs: `composed attention (query block 128)
/// on layer 3; Gated DeltaNet linear attention on layers 0-2`.
pub fn attention(plan: &AttentionPlan, kinds: &[LayerKind]) -> String {
    // (what, layer indices) in order of first appearance.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let what = match kind.attention {
            AttentionKind::Full => match plan.route(i) {
                Ok(r) => route(&r),
                Err(_) => "no attention route".into(),
            },
            _ => "Gated DeltaNet linear attention".into(),
        };
        match groups.iter_mut().find(|(w, _)| *w == what) {
            Some((_, l)) => l.push(i),
            None => groups.push((what, vec![i])),
        }
    }
    groups
        .iter()
        .map(|(what, l)| format!("{what} on {}", layers(l)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the routes are what they are: the control with its source, and the
/// qualification entries that decided any layer, e.g. `control auto (default),
/// qualified by cuda-nvidia-h200-132sm-d256-h16kv2-bf16-fused`.
pub fn attention_why(controls: &Controls, layers: &[ResolvedAttention]) -> String {
    let source = match controls.execution_source {
        ControlSource::Cli => "flag",
        ControlSource::Env => "environment",
        ControlSource::Default => "default",
    };
    let mut ids: Vec<&str> = layers
        .iter()
        .filter_map(|r| r.qualification_id.as_deref())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let control = format!("control {} ({source})", controls.execution);
    if ids.is_empty() && controls.execution == AttentionControl::Auto {
        // Where auto found no measurement, say how to make one.
        format!(
            "{control}, no qualification entry applies: the composed route until \
             `headroom qualify` measures this machine (docs/qualify.md)"
        )
    } else if ids.is_empty() {
        format!("{control}, no qualification entry applies")
    } else {
        format!("{control}, qualified by {}", ids.join(", "))
    }
}

/// `what (why)`, or `what` alone where the reason is not known.
pub fn with_why(what: String, why: Option<String>) -> String {
    match why {
        Some(why) => format!("{what} ({why})"),
        None => what,
    }
}

/// `contiguous KV cache` / `paged KV cache (blocks of 64 rows)`, with why it
/// differs from what was asked.
pub fn kv(kv: &KvResolution) -> String {
    let mut s = match kv.resolved {
        headroom_engine::KvBackendKind::Paged => {
            format!("paged KV cache (blocks of {} rows)", kv.block_rows)
        }
        headroom_engine::KvBackendKind::Contiguous => "contiguous KV cache".into(),
    };
    if kv.requested != kv.resolved {
        s.push_str(&format!(" ({} asked for)", kv.requested));
    }
    if let Some(r) = &kv.reason {
        s.push_str(&format!(": {r}"));
    }
    s
}

/// `memory budget 1.5 GiB` / `no memory budget`.
pub fn budget(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("memory budget {}", size(b)),
        None => "no memory budget".into(),
    }
}

/// Bytes in GiB (2^30), for printing.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// `812 MiB` / `1.50 GiB`.
pub fn size(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1u64 << 30 {
        format!("{:.2} GiB", gib(bytes))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

/// A profile part in words (`gdn rule`), from its serialized name.
pub fn part<T: serde::Serialize>(part: &T) -> String {
    match serde_json::to_value(part) {
        Ok(serde_json::Value::String(s)) => s.replace('_', " "),
        _ => "part".into(),
    }
}

/// `layer 3 composed qL=128, layer 7 fused`: what each full layer's attention
/// calls reported (distinct per layer, in order).
pub fn routes_that_ran(reports: &[headroom_model::qwen3_5::LayerAttentionReport]) -> String {
    route_summary(
        reports
            .iter()
            .map(|r| (r.layer, r.report.route.to_string(), r.report.query_block)),
    )
}

/// `layer 3 composed qL=128, layer 7 fused` from `(layer, route, query block)`
/// items, each distinct (layer, route, block) once, in order.
pub fn route_summary(runs: impl IntoIterator<Item = (usize, String, Option<usize>)>) -> String {
    let mut seen: Vec<(usize, String)> = Vec::new();
    for (layer, route, query_block) in runs {
        let what = match query_block {
            Some(q) => format!("{route} qL={q}"),
            None => route,
        };
        if !seen.iter().any(|(l, w)| *l == layer && *w == what) {
            seen.push((layer, what));
        }
    }
    if seen.is_empty() {
        return "none (no full-attention layer)".into();
    }
    seen.iter()
        .map(|(l, w)| format!("layer {l} {w}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::Dtype;

    #[test]
    fn indices_compress_into_ranges() {
        assert_eq!(fmt_indices(&[0, 1, 2, 4, 7, 8]), "0-2, 4, 7-8");
        assert_eq!(fmt_indices(&[3]), "3");
        assert_eq!(fmt_indices(&[]), "");
        assert_eq!(layers(&[3]), "layer 3");
        assert_eq!(layers(&[3, 7]), "layers 3, 7");
    }

    #[test]
    fn attention_is_grouped_by_what_each_layer_runs() {
        let kind = |attention| LayerKind {
            attention,
            head_dim: 64,
            q_heads: 4,
            kv_heads: 2,
            dtype: Dtype::Bf16,
        };
        let (lin, full) = (kind(AttentionKind::Linear), kind(AttentionKind::Full));
        let kinds = [lin, lin, lin, full, lin, lin, lin, full];
        let plan = AttentionPlan::PerLayer(vec![
            (3, RouteRequest::Composed { query_block: 128 }),
            (7, RouteRequest::Fused),
        ]);
        let text = attention(&plan, &kinds);
        assert_eq!(
            text,
            "Gated DeltaNet linear attention on layers 0-2, 4-6; \
             composed attention (query block 128) on layer 3; fused attention on layer 7"
        );
        let uniform = AttentionPlan::Uniform(RouteRequest::Composed { query_block: 0 });
        assert!(attention(&uniform, &kinds)
            .contains("composed attention (one query block) on layers 3, 7"));
    }

    #[test]
    fn why_names_the_control_its_source_and_the_deciding_entries() {
        use headroom_core::Route;
        use headroom_policy::ResolutionSource;
        let resolved = |id: Option<&str>| ResolvedAttention {
            control_requested: AttentionControl::Auto,
            control_source: ControlSource::Default,
            route: if id.is_some() {
                Route::Fused
            } else {
                Route::None
            },
            query_block: None,
            source: if id.is_some() {
                ResolutionSource::Qualified
            } else {
                ResolutionSource::Default
            },
            qualification_id: id.map(str::to_string),
            reason: None,
        };
        let layers = [
            resolved(None),
            resolved(Some("h200-fused")),
            resolved(Some("h200-fused")),
        ];
        assert_eq!(
            attention_why(&Controls::default(), &layers),
            "control auto (default), qualified by h200-fused"
        );
        let flag = Controls {
            execution: AttentionControl::Fallback,
            execution_source: ControlSource::Cli,
            ..Controls::default()
        };
        assert_eq!(
            attention_why(&flag, &layers[..1]),
            "control fallback (flag), no qualification entry applies"
        );
        assert_eq!(
            attention_why(&Controls::default(), &layers[..1]),
            "control auto (default), no qualification entry applies: the composed route until \
             `headroom qualify` measures this machine (docs/qualify.md)"
        );
    }

    #[test]
    fn sizes_and_budgets_read_as_words() {
        assert_eq!(gib(3 << 29), 1.5);
        assert_eq!(size(3 << 29), "1.50 GiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        assert_eq!(budget(None), "no memory budget");
        assert_eq!(budget(Some(1 << 30)), "memory budget 1.00 GiB");
        assert_eq!(part(&headroom_model::profile::Part::GdnRule), "gdn rule");
    }
}
