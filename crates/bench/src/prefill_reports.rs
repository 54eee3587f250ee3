//! Reads each full-attention layer's route back from the attention reports
//! of the measured runs and groups the layers by shape
//! ([`layer_routes_from_reports`]).
//!
//! Every call of a layer must report the same route. A composed layer's
//! calls report the block they ran, `min(qL, rows of the call)`: when the
//! engine splits a prompt into chunks, the last (shorter) chunk may report a
//! smaller block, so one call per layer and run may differ from the others
//! and only by being smaller; the layer's block is the largest reported.
//! Anything else — two routes, two full-size blocks, several short calls —
//! fails the run.

use crate::prefill_schema::{LayerShapeRecord, ReportedRecord, ResolvedRecord};
use crate::prefill_target::{AttentionRun, PrefillRun};
use anyhow::{bail, ensure, Context};
use headroom_core::{AttentionKind, LayerKind, Route};
use headroom_policy::ResolvedAttention;

/// What one run's calls of one layer reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LayerCalls {
    route: Route,
    query_block: Option<usize>,
    calls: usize,
    transient: u64,
}

/// Folds one run's reports of `layer` into one record, or says why they disagree.
fn layer_calls(layer: usize, run: &[AttentionRun]) -> anyhow::Result<Option<LayerCalls>> {
    let mine: Vec<&AttentionRun> = run.iter().filter(|a| a.layer == layer).collect();
    let Some(first) = mine.first() else {
        return Ok(None);
    };
    if let Some(other) = mine.iter().find(|a| a.route != first.route) {
        bail!("layer {layer}: calls reported {first:?} and {other:?}");
    }
    let largest = mine.iter().map(|a| a.query_block).max().flatten();
    let short: usize = mine
        .iter()
        .filter(|a| a.query_block != largest)
        .map(|a| a.calls)
        .sum();
    if short > 1 {
        bail!(
            "layer {layer}: {short} calls reported a block other than {largest:?} (only the \
             last chunk of a prompt may run a smaller one): {mine:?}"
        );
    }
    Ok(Some(LayerCalls {
        route: first.route,
        query_block: largest,
        calls: mine.iter().map(|a| a.calls).sum(),
        transient: mine.iter().map(|a| a.transient_bytes).max().unwrap_or(0),
    }))
}

/// Groups the full-attention layers by kind and reads each group's route
/// back from the runs' reports (identical in every run, or an error).
pub fn layer_routes_from_reports(
    kinds: &[LayerKind],
    resolved: &[ResolvedAttention],
    runs: &[PrefillRun],
) -> anyhow::Result<Vec<LayerShapeRecord>> {
    let mut groups: Vec<LayerShapeRecord> = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        if kind.attention != AttentionKind::Full {
            continue;
        }
        let mut seen: Option<LayerCalls> = None;
        for run in runs {
            let Some(c) = layer_calls(i, &run.attention)? else {
                bail!("layer {i}: the forward reported no attention call");
            };
            match &mut seen {
                None => seen = Some(c),
                Some(s) => {
                    ensure!(
                        (s.route, s.query_block, s.calls) == (c.route, c.query_block, c.calls),
                        "layer {i}: one run reported {s:?}, another {c:?}"
                    );
                    s.transient = s.transient.max(c.transient);
                }
            }
        }
        let Some(first) = seen else {
            bail!("layer {i}: no run to read back");
        };
        let r = resolved
            .get(i)
            .with_context(|| format!("layer {i} has no resolution"))?;
        match groups.iter_mut().find(|g| g.kind == *kind) {
            Some(g) => {
                ensure!(
                    (g.reported.route, g.reported.query_block) == (first.route, first.query_block),
                    "layers {:?} and {i} share a shape but ran different routes",
                    g.layers
                );
                g.layers.push(i);
                g.reported.calls += first.calls;
                g.reported.transient_peak_bytes =
                    g.reported.transient_peak_bytes.max(first.transient);
            }
            None => groups.push(LayerShapeRecord {
                kind: *kind,
                layers: vec![i],
                resolved: ResolvedRecord {
                    route: r.route,
                    query_block: r.query_block,
                    source: r.source,
                    qualification_id: r.qualification_id.clone(),
                    reason: r.reason.clone(),
                },
                reported: ReportedRecord {
                    route: first.route,
                    query_block: first.query_block,
                    calls: first.calls,
                    transient_peak_bytes: first.transient,
                },
            }),
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(layer: usize, q: Option<usize>, calls: usize) -> AttentionRun {
        AttentionRun {
            layer,
            route: if q.is_some() {
                Route::Composed
            } else {
                Route::Fused
            },
            query_block: q,
            transient_bytes: 10,
            calls,
        }
    }

    #[test]
    fn a_short_last_chunk_is_accepted_and_the_largest_block_kept() {
        let c = layer_calls(3, &[call(3, Some(512), 3), call(3, Some(100), 1)])
            .unwrap()
            .unwrap();
        assert_eq!((c.query_block, c.calls), (Some(512), 4));
        assert!(layer_calls(4, &[call(3, Some(512), 1)]).unwrap().is_none());
    }

    #[test]
    fn several_short_calls_or_two_routes_fail() {
        let e = layer_calls(3, &[call(3, Some(512), 3), call(3, Some(128), 2)]).unwrap_err();
        assert!(e.to_string().contains("2 calls reported a block"), "{e}");
        let e = layer_calls(3, &[call(3, Some(512), 3), call(3, None, 1)]).unwrap_err();
        assert!(e.to_string().contains("calls reported"), "{e}");
    }
}
