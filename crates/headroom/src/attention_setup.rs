//! Attention setup for every command that runs attention: builds the controls
//! from the global flags and the environment, loads the qualification registry
//! (built-in + `--qualifications` + `HEADROOM_QUALIFICATIONS`), detects this
//! machine's fingerprint and resolves every layer through the policy's
//! production entry point ([`headroom_policy::resolve_for_this_machine`]);
//! [`attention_plan`] turns that into the model's per-layer plan.

use crate::global::GlobalArgs;
use anyhow::Context;
use headroom_core::{BackendKind, LayerKind, RouteRequest};
use headroom_hardware::HardwareFingerprint;
use headroom_model::{AttentionPlan, ModelConfig};
use headroom_policy::{resolve_for_this_machine, Controls, Registry, ResolvedAttention};
use serde::Serialize;

/// Everything the policy decided for one model on this machine.
#[derive(Debug, Clone)]
pub struct AttentionSetup {
    pub controls: Controls,
    /// Control-parsing warnings and registry source problems, each once.
    pub warnings: Vec<String>,
    pub registry: Registry,
    pub fingerprint: HardwareFingerprint,
    /// One per layer, index = layer index.
    pub layers: Vec<ResolvedAttention>,
}

/// Layers that share one kind, and what they resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerGroup {
    pub layer_indices: Vec<usize>,
    pub kind: LayerKind,
    pub attention: ResolvedAttention,
}

/// The backend commands run on when none is named: CUDA when available, else CPU.
pub fn default_backend() -> BackendKind {
    match headroom_hardware::cuda_availability() {
        Ok(_) => BackendKind::Cuda,
        Err(_) => BackendKind::Cpu,
    }
}

impl AttentionSetup {
    /// Resolves `kinds` (one per layer) on `backend`. Warnings are collected,
    /// not printed: call [`AttentionSetup::log_warnings`] unless the command
    /// reports them itself.
    pub fn new(g: &GlobalArgs, backend: BackendKind, kinds: &[LayerKind]) -> anyhow::Result<Self> {
        let (controls, mut warnings) =
            Controls::from_env_and_cli(g.attn_execution.as_deref(), g.attn_query_block.as_deref());
        let extra: Vec<_> = g.qualifications.iter().cloned().collect();
        let registry = Registry::load(&extra);
        warnings.extend(registry.problems().iter().cloned());
        let (fingerprint, layers) = resolve_for_this_machine(backend, kinds, &controls, &registry)
            .with_context(|| format!("cannot use the {backend} backend"))?;
        Ok(AttentionSetup {
            controls,
            warnings,
            registry,
            fingerprint,
            layers,
        })
    }

    /// Logs each warning once through `tracing`, and each registry entry
    /// that is invalid and so not used (`doctor` lists those in its rows).
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
        for e in self.registry.entries() {
            if let Err(why) = &e.entry {
                tracing::warn!(
                    "qualification entry {} is invalid and not used: {why}",
                    e.file
                );
            }
        }
    }

    /// What layer `i`'s attention call should run (`None` for linear layers).
    pub fn route_request(&self, layer: usize) -> Option<RouteRequest> {
        self.layers
            .get(layer)
            .and_then(ResolvedAttention::route_request)
    }

    /// Layers grouped by distinct kind, in order of first appearance.
    pub fn groups(&self, kinds: &[LayerKind]) -> Vec<LayerGroup> {
        group_layers(kinds, &self.layers)
    }
}

/// Groups layers by distinct [`LayerKind`], in order of first appearance.
pub fn group_layers(kinds: &[LayerKind], resolved: &[ResolvedAttention]) -> Vec<LayerGroup> {
    let mut groups: Vec<LayerGroup> = Vec::new();
    for (i, (kind, attention)) in kinds.iter().zip(resolved).enumerate() {
        match groups.iter_mut().find(|g| g.kind == *kind) {
            Some(g) => g.layer_indices.push(i),
            None => groups.push(LayerGroup {
                layer_indices: vec![i],
                kind: *kind,
                attention: attention.clone(),
            }),
        }
    }
    groups
}

/// The attention route of every full-attention layer, resolved by the policy
/// (global flags, environment, qualification registry) for `backend`.
pub fn attention_plan(
    g: &GlobalArgs,
    backend: BackendKind,
    cfg: &ModelConfig,
) -> anyhow::Result<AttentionPlan> {
    Ok(attention_plan_and_why(g, backend, cfg)?.0)
}

/// [`attention_plan`] and why, in words ([`crate::describe::attention_why`]).
pub fn attention_plan_and_why(
    g: &GlobalArgs,
    backend: BackendKind,
    cfg: &ModelConfig,
) -> anyhow::Result<(AttentionPlan, String)> {
    let kinds = cfg.layer_kinds();
    let setup = AttentionSetup::new(g, backend, &kinds)?;
    setup.log_warnings();
    let mut plan = Vec::new();
    for layer in cfg.full_attention_layers() {
        let route = setup.route_request(layer).with_context(|| {
            format!("the policy gave no route for full-attention layer {layer}")
        })?;
        tracing::info!(layer, route = %route, "attention route");
        plan.push((layer, route));
    }
    let why = crate::describe::attention_why(&setup.controls, &setup.layers);
    Ok((AttentionPlan::PerLayer(plan), why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::{AttentionKind, Dtype};

    fn kind(attention: AttentionKind, head_dim: usize) -> LayerKind {
        LayerKind {
            attention,
            head_dim,
            q_heads: 4,
            kv_heads: 2,
            dtype: Dtype::Bf16,
        }
    }

    #[test]
    fn groups_keep_indices_per_distinct_kind() {
        let lin = kind(AttentionKind::Linear, 128);
        let full = kind(AttentionKind::Full, 256);
        let kinds = [lin, lin, lin, full, lin, lin, lin, full];
        let (controls, _) = Controls::from_sources(None, None, &|_| None);
        let fp = headroom_hardware::detect_cpu();
        let registry = Registry::default();
        let resolved: Vec<_> = kinds
            .iter()
            .map(|k| headroom_policy::resolve(&fp, k, &controls, &registry))
            .collect();
        let groups = group_layers(&kinds, &resolved);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].layer_indices, vec![0, 1, 2, 4, 5, 6]);
        assert_eq!(groups[1].layer_indices, vec![3, 7]);
        assert_eq!(groups[1].kind, full);
        assert_eq!(groups[1].attention.query_block, Some(128));
    }

    #[test]
    fn cpu_setup_resolves_every_layer() {
        let g = GlobalArgs {
            attn_execution: Some("fused".into()),
            ..GlobalArgs::default()
        };
        let kinds = [
            kind(AttentionKind::Linear, 128),
            kind(AttentionKind::Full, 256),
        ];
        let s = AttentionSetup::new(&g, BackendKind::Cpu, &kinds).unwrap();
        assert_eq!(s.layers.len(), 2);
        assert_eq!(s.route_request(0), None);
        assert_eq!(s.route_request(1), Some(RouteRequest::Fused));
        assert_eq!(s.fingerprint, headroom_hardware::detect_cpu());
    }
}
