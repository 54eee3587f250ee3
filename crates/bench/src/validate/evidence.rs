//! `bench validate` of a `qualify` evidence file (`headroom.qualify.evidence/1`):
//! the embedded prefill bench is validated with the same rules as a
//! stand-alone prefill file, and the rest must agree with it: the attention
//! bench is `headroom.bench.attention/1` on the same machine, each of its
//! samples is of the evidence's layer shape with positive finite times; the
//! decision is what [`decide`] concludes from the embedded prefill bench and
//! its recorded budget; the id is what [`entry_id`] names for it. A file
//! edited after `qualify` wrote it (a faster median, another winner, another
//! id) fails here.

use super::validate_one;
use super::ValidateOptions;
use crate::prefill_schema::PrefillBenchFile;
use crate::qualify::{decide, entry_id, QualifyEvidence};
use crate::schema::ATTENTION_SCHEMA;
use serde_json::Value;

/// Validates the evidence file `root` (already parsed, schema checked);
/// returns its prefill bench when that could be read.
pub(super) fn validate_evidence(
    name: &str,
    root: Value,
    opts: ValidateOptions,
    v: &mut Vec<String>,
) -> Option<PrefillBenchFile> {
    let prefill = match root.get("prefill") {
        Some(p) => match serde_json::to_vec(p) {
            Ok(bytes) => validate_one(&format!("{name}: prefill"), &bytes, opts, v),
            Err(e) => {
                v.push(format!("{name}: prefill: {e}"));
                None
            }
        },
        None => {
            v.push(format!("{name}: no `prefill` section"));
            None
        }
    };
    let ev: QualifyEvidence = match serde_json::from_value(root) {
        Ok(ev) => ev,
        Err(e) => {
            v.push(format!("{name}: {e}"));
            return prefill;
        }
    };
    check_attention(name, &ev, v);
    let decision = decide(&ev.prefill, ev.decision.transient_budget_bytes);
    if decision != ev.decision {
        v.push(format!(
            "{name}: the decision does not follow from the embedded prefill bench: it records {:?} \
             (query block {:?}), the rule gives {:?} (query block {:?}){}",
            ev.decision.route,
            ev.decision.query_block,
            decision.route,
            decision.query_block,
            if decision.route == ev.decision.route
                && decision.query_block == ev.decision.query_block
            {
                " with other verdicts"
            } else {
                ""
            }
        ));
    }
    let id = entry_id(&ev.prefill.hardware, &ev.layer, &ev.decision.result());
    if id != ev.id {
        v.push(format!(
            "{name}: id `{}` does not name this machine, layer and result (expected `{id}`)",
            ev.id
        ));
    }
    prefill
}

/// The attention bench section: its schema, machine, and every sample's
/// shape and times.
fn check_attention(name: &str, ev: &QualifyEvidence, v: &mut Vec<String>) {
    let a = &ev.attention;
    if a.schema != ATTENTION_SCHEMA {
        v.push(format!(
            "{name}: attention: schema `{}`, expected `{ATTENTION_SCHEMA}`",
            a.schema
        ));
    }
    if a.hardware != ev.prefill.hardware {
        v.push(format!(
            "{name}: attention: measured on another machine than the prefill bench"
        ));
    }
    if a.samples.is_empty() {
        v.push(format!("{name}: attention: no samples"));
    }
    let l = &ev.layer;
    for (i, s) in a.samples.iter().enumerate() {
        let at = format!("{name}: attention.samples[{i}]");
        if (s.head_dim, s.q_heads, s.kv_heads, s.dtype)
            != (l.head_dim, l.q_heads, l.kv_heads, l.dtype)
        {
            v.push(format!(
                "{at}: shape d{} h{}kv{} {} is not the evidence's layer {l}",
                s.head_dim, s.q_heads, s.kv_heads, s.dtype
            ));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !(positive(s.median_ms) && positive(s.min_ms) && s.min_ms <= s.median_ms) {
            v.push(format!(
                "{at}: times min {} ms, median {} ms are not positive finite with min <= median",
                s.min_ms, s.median_ms
            ));
        }
        if s.iterations == 0 {
            v.push(format!("{at}: 0 iterations"));
        }
    }
}
