//! The one decision: which attention route and query block a layer gets.
//!
//! Order: a valid override (CLI, then env) > an exact qualified entry > the
//! default (composed, qL 128). `fused` is honoured wherever the fused kernel
//! supports the layer; `auto` picks fused only where an entry qualified it;
//! linear-attention layers get route `none`. Query blocking is bypassed only
//! when the route is fused.

use crate::{
    AttentionControl, ControlSource, Controls, QualificationEntry, QualifiedResult,
    QueryBlockControl, Registry, DEFAULT_QUERY_BLOCK,
};
use headroom_core::fused_capability::fused_support;
use headroom_core::{AttentionKind, BackendKind, LayerKind, Route, RouteRequest};
use headroom_hardware::{HardwareError, HardwareFingerprint};
use serde::{Deserialize, Serialize};

/// What decided a layer's route and query block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolutionSource {
    Cli,
    Env,
    Qualified,
    Default,
}

impl From<ControlSource> for ResolutionSource {
    fn from(s: ControlSource) -> Self {
        match s {
            ControlSource::Cli => ResolutionSource::Cli,
            ControlSource::Env => ResolutionSource::Env,
            ControlSource::Default => ResolutionSource::Default,
        }
    }
}

/// The resolved attention of one layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedAttention {
    pub control_requested: AttentionControl,
    pub control_source: ControlSource,
    pub route: Route,
    /// The composed query block (0 = one block); `None` for fused and none.
    pub query_block: Option<usize>,
    pub source: ResolutionSource,
    /// The entry that decided, when `source` is `qualified`.
    pub qualification_id: Option<String>,
    /// Why the route differs from what the control alone would suggest.
    pub reason: Option<String>,
}

impl ResolvedAttention {
    /// What to pass to the attention call; `None` for layers without softmax attention.
    pub fn route_request(&self) -> Option<RouteRequest> {
        match self.route {
            Route::Composed => Some(RouteRequest::Composed {
                query_block: self.query_block.unwrap_or(DEFAULT_QUERY_BLOCK),
            }),
            Route::Fused => Some(RouteRequest::Fused),
            Route::None => None,
        }
    }
}

/// Resolves one layer. The only place a route is chosen.
pub fn resolve(
    fp: &HardwareFingerprint,
    kind: &LayerKind,
    controls: &Controls,
    registry: &Registry,
) -> ResolvedAttention {
    let mut r = ResolvedAttention {
        control_requested: controls.execution,
        control_source: controls.execution_source,
        route: Route::None,
        query_block: None,
        source: ResolutionSource::Default,
        qualification_id: None,
        reason: None,
    };
    if kind.attention != AttentionKind::Full {
        r.reason = Some(format!(
            "{} attention layer: no softmax attention",
            kind.attention
        ));
        return r;
    }
    let matched: Vec<&QualificationEntry> = registry.matching(fp, kind).collect();
    let mut notes: Vec<String> = Vec::new();

    match controls.execution {
        AttentionControl::Fallback => {}
        AttentionControl::Fused => match fused_support(fp.backend, kind) {
            Ok(()) => {
                r.route = Route::Fused;
                r.source = controls.execution_source.into();
                if matches!(controls.query_block, QueryBlockControl::Set { .. }) {
                    r.reason = Some(
                        "query block override ignored: the fused route has no query blocks".into(),
                    );
                }
                return r;
            }
            Err(why) => notes.push(format!("fused requested but unsupported here: {why}")),
        },
        AttentionControl::Auto => {
            match matched.iter().find(|e| e.result == QualifiedResult::Fused) {
                Some(e) => match fused_support(fp.backend, kind) {
                    Ok(()) => {
                        r.route = Route::Fused;
                        r.source = ResolutionSource::Qualified;
                        r.qualification_id = Some(e.id.clone());
                        return r;
                    }
                    Err(why) => notes.push(format!(
                        "entry `{}` qualified fused but the kernel does not support this layer: {why}",
                        e.id
                    )),
                },
                None => notes.push("auto: no fused qualification for this hardware and layer".into()),
            }
        }
    }

    r.route = Route::Composed;
    let (qb, source, id) = composed_block(controls, &matched, &mut notes);
    r.query_block = Some(qb);
    r.source = source;
    r.qualification_id = id;
    if !notes.is_empty() {
        r.reason = Some(notes.join("; "));
    }
    r
}

/// The composed query block: a valid override, else one agreed qualified block, else 128.
fn composed_block(
    controls: &Controls,
    matched: &[&QualificationEntry],
    notes: &mut Vec<String>,
) -> (usize, ResolutionSource, Option<String>) {
    match &controls.query_block {
        QueryBlockControl::Set { value, source } => return (*value, (*source).into(), None),
        QueryBlockControl::Invalid { raw, .. } => {
            notes.push(format!(
                "malformed query block `{raw}`: built-in {DEFAULT_QUERY_BLOCK}, qualifications ignored"
            ));
            return (DEFAULT_QUERY_BLOCK, ResolutionSource::Default, None);
        }
        QueryBlockControl::Unset => {}
    }
    let composed: Vec<(&str, usize)> = matched
        .iter()
        .filter_map(|e| match e.result {
            QualifiedResult::Composed { query_block } => Some((e.id.as_str(), query_block)),
            QualifiedResult::Fused => None,
        })
        .collect();
    match composed.as_slice() {
        [] => (DEFAULT_QUERY_BLOCK, ResolutionSource::Default, None),
        [(id, qb), rest @ ..] if rest.iter().all(|(_, b)| b == qb) => {
            (*qb, ResolutionSource::Qualified, Some(id.to_string()))
        }
        all => {
            let list: Vec<String> = all.iter().map(|(id, b)| format!("{id}={b}")).collect();
            notes.push(format!(
                "conflicting qualified query blocks ({}): built-in {DEFAULT_QUERY_BLOCK}",
                list.join(", ")
            ));
            (DEFAULT_QUERY_BLOCK, ResolutionSource::Default, None)
        }
    }
}

/// The production entry point: detects this machine's fingerprint for
/// `backend` and resolves every layer with [`resolve`].
pub fn resolve_for_this_machine(
    backend: BackendKind,
    kinds: &[LayerKind],
    controls: &Controls,
    registry: &Registry,
) -> Result<(HardwareFingerprint, Vec<ResolvedAttention>), HardwareError> {
    let fp = headroom_hardware::detect(backend)?;
    let resolved = kinds
        .iter()
        .map(|k| resolve(&fp, k, controls, registry))
        .collect();
    Ok((fp, resolved))
}
