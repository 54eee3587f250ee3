//! `bench validate`: strict checks of `headroom.bench.prefill/1` files, and
//! of `qualify`'s `headroom.qualify.evidence/1` files through their embedded
//! prefill bench (same rules) plus the checks of [`evidence`].
//!
//! Every violation is collected (none stops the others): schema and version;
//! every field present with the right type and no unknown field, checked per
//! sample (a NaN is written as `null` and fails as a missing number); every
//! sample's recorded policy equals the arm it claims (an arm that *reported*
//! another arm's route fails; blocks are checked against the rows of the
//! largest call, the engine's chunk when it split the prompt), and its call
//! and step counts match the scheduling it records; each (arm, length) once, every length
//! measured for every arm; at least `min_iterations` runs; and across files
//! the same hardware, model, lengths and build.

mod evidence;

use crate::prefill::Arm;
use crate::prefill_schema::{PrefillBenchFile, PrefillSample, PREFILL_SCHEMA};
use crate::qualify::EVIDENCE_SCHEMA;
use headroom_core::Route;
use headroom_policy::AttentionControl;
use serde_json::Value;

/// Validation settings.
#[derive(Debug, Clone, Copy)]
pub struct ValidateOptions {
    pub min_iterations: usize,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions { min_iterations: 3 }
    }
}

/// Validates files (name, bytes); returns the parsed files and every violation found.
pub fn validate_files(
    files: &[(String, Vec<u8>)],
    opts: ValidateOptions,
) -> (Vec<PrefillBenchFile>, Vec<String>) {
    let mut out = Vec::new();
    let mut v = Vec::new();
    for (name, bytes) in files {
        if let Some(f) = validate_one(name, bytes, opts, &mut v) {
            out.push((name.clone(), f));
        }
    }
    check_same_run(&out, &mut v);
    (out.into_iter().map(|(_, f)| f).collect(), v)
}

/// Parses one file strictly, pushing its violations; `None` when it could not be read at all.
fn validate_one(
    name: &str,
    bytes: &[u8],
    opts: ValidateOptions,
    v: &mut Vec<String>,
) -> Option<PrefillBenchFile> {
    let mut root: Value = match serde_json::from_slice(bytes) {
        Ok(x) => x,
        Err(e) => {
            v.push(format!("{name}: not JSON: {e}"));
            return None;
        }
    };
    match root.get("schema").and_then(Value::as_str) {
        Some(PREFILL_SCHEMA) => {}
        Some(EVIDENCE_SCHEMA) => return evidence::validate_evidence(name, root, opts, v),
        Some(other) => {
            v.push(format!(
                "{name}: schema `{other}`, expected `{PREFILL_SCHEMA}` or `{EVIDENCE_SCHEMA}`"
            ));
            return None;
        }
        None => {
            v.push(format!("{name}: no `schema` field"));
            return None;
        }
    }
    let raw_samples = match root.get_mut("samples").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => {
            v.push(format!("{name}: `samples` is missing or not an array"));
            Vec::new()
        }
    };
    if let Some(obj) = root.as_object_mut() {
        obj.insert("samples".into(), Value::Array(Vec::new()));
    }
    let raw_root = root.clone();
    let mut file: PrefillBenchFile = match serde_json::from_value(root) {
        Ok(f) => {
            if let Ok(back) = serde_json::to_value(&f) {
                missing_keys(&raw_root, &back, name, v);
            }
            f
        }
        Err(e) => {
            v.push(format!("{name}: {e}"));
            return None;
        }
    };
    for (i, s) in raw_samples.into_iter().enumerate() {
        match serde_json::from_value::<PrefillSample>(s.clone()) {
            Ok(p) => {
                if let Ok(back) = serde_json::to_value(&p) {
                    missing_keys(&s, &back, &format!("{name}: samples[{i}]"), v);
                }
                file.samples.push(p)
            }
            Err(e) => v.push(format!(
                "{name}: samples[{i}]: {e} (a NaN is written as null)"
            )),
        }
    }
    check_file(name, &file, opts, v);
    Some(file)
}

/// Fields the strict types write but `raw` lacks (an absent optional field
/// parses as `null`; the format requires it written).
fn missing_keys(raw: &Value, back: &Value, at: &str, v: &mut Vec<String>) {
    match (raw, back) {
        (Value::Object(r), Value::Object(b)) => {
            for (k, bv) in b {
                match r.get(k) {
                    None => v.push(format!("{at}: missing field `{k}`")),
                    Some(rv) => missing_keys(rv, bv, &format!("{at}.{k}"), v),
                }
            }
        }
        (Value::Array(r), Value::Array(b)) => {
            for (i, (rv, bv)) in r.iter().zip(b).enumerate() {
                missing_keys(rv, bv, &format!("{at}[{i}]"), v);
            }
        }
        _ => {}
    }
}

fn check_file(name: &str, f: &PrefillBenchFile, opts: ValidateOptions, v: &mut Vec<String>) {
    if f.iterations < opts.min_iterations {
        v.push(format!(
            "{name}: {} iterations, at least {} required",
            f.iterations, opts.min_iterations
        ));
    }
    if f.samples.is_empty() {
        v.push(format!("{name}: no samples"));
    }
    let mut arms: Vec<&str> = Vec::new();
    for (i, s) in f.samples.iter().enumerate() {
        let at = format!("{name}: samples[{i}] (arm {}, length {})", s.arm, s.length);
        check_sample(&at, f, s, v);
        if !arms.contains(&s.arm.as_str()) {
            arms.push(&s.arm);
        }
    }
    for arm in &arms {
        for &len in &f.lengths {
            let n = f
                .samples
                .iter()
                .filter(|s| s.arm == *arm && s.length == len)
                .count();
            if n != 1 {
                v.push(format!(
                    "{name}: arm {arm} has {n} samples at length {len}, expected 1"
                ));
            }
        }
    }
}

/// `query block 128` / `no query block`, for violation messages.
fn block_words(q: Option<usize>) -> String {
    match q {
        Some(q) => format!("query block {q}"),
        None => "no query block".into(),
    }
}

fn check_sample(at: &str, f: &PrefillBenchFile, s: &PrefillSample, v: &mut Vec<String>) {
    if !f.lengths.contains(&s.length) {
        v.push(format!(
            "{at}: length not among the file's lengths {}",
            f.lengths
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let t = &s.ttft_ms;
    if t.runs.len() != f.iterations {
        v.push(format!(
            "{at}: {} TTFT runs, the file says {} iterations",
            t.runs.len(),
            f.iterations
        ));
    }
    let finite = |x: f64| x.is_finite() && x > 0.0;
    if !(finite(t.median) && finite(t.min) && finite(t.max) && t.runs.iter().all(|&x| finite(x))) {
        v.push(format!("{at}: a TTFT is not a positive finite number"));
    } else if !(t.min <= t.median && t.median <= t.max) {
        v.push(format!(
            "{at}: TTFT min {} <= median {} <= max {} does not hold",
            t.min, t.median, t.max
        ));
    }
    if !finite(s.prefill_tokens_per_s) {
        v.push(format!(
            "{at}: prefill_tokens_per_s is not a positive finite number"
        ));
    }
    if s.scheduler.path != f.path {
        v.push(format!(
            "{at}: scheduler path `{}` != file path `{}`",
            s.scheduler.path, f.path
        ));
    }
    check_policy(at, s, v);
}

/// The recorded policy must be the arm's: what the calls reported, per layer shape.
pub fn check_policy(at: &str, s: &PrefillSample, v: &mut Vec<String>) {
    let arm: Arm = match s.arm.parse() {
        Ok(a) => a,
        Err(e) => {
            v.push(format!("{at}: {e}"));
            return;
        }
    };
    if s.control.requested != arm.control || s.control.query_block_override != arm.query_block {
        v.push(format!(
            "{at}: recorded control {}{} is not the arm's",
            s.control.requested.as_str(),
            s.control
                .query_block_override
                .map(|q| format!(":{q}"))
                .unwrap_or_default()
        ));
    }
    if s.attention.is_empty() {
        v.push(format!("{at}: no full-attention layer shape recorded"));
    }
    // Rows of the largest attention call: the prompt, or the engine's chunk of it.
    let rows = call_rows(s);
    let steps = s.length.div_ceil(rows.max(1));
    if s.scheduler.steps_to_first_token != steps {
        v.push(format!(
            "{at}: {} steps to the first token recorded, {steps} expected for {} rows per step",
            s.scheduler.steps_to_first_token, rows
        ));
    }
    for g in &s.attention {
        let layers: Vec<String> = g.layers.iter().map(|l| l.to_string()).collect();
        let shape = format!("{at}: layers {}", layers.join(", "));
        let (rr, rq) = (g.reported.route, g.reported.query_block);
        let resolved_block = g.resolved.query_block.map(|q| effective_block(q, rows));
        if (rr, rq) != (g.resolved.route, resolved_block) {
            v.push(format!(
                "{shape}: reported {rr} {} but the policy resolved {} {}",
                block_words(rq),
                g.resolved.route,
                block_words(g.resolved.query_block)
            ));
        }
        if g.reported.calls == 0 {
            v.push(format!("{shape}: no attention call reported"));
        } else if g.reported.calls != g.layers.len().saturating_mul(steps) {
            v.push(format!(
                "{shape}: {} attention calls reported, {} layers x {steps} steps expected",
                g.reported.calls,
                g.layers.len()
            ));
        }
        let expected_block = arm.query_block.map(|q| effective_block(q, rows));
        match arm.control {
            AttentionControl::Fused if rr != Route::Fused => {
                v.push(format!("{shape}: arm fused reported route {rr}"));
            }
            AttentionControl::Fallback if rr != Route::Composed => {
                v.push(format!("{shape}: arm {} reported route {rr}", s.arm));
            }
            AttentionControl::Fallback | AttentionControl::Auto
                if rr == Route::Composed && expected_block.is_some() && rq != expected_block =>
            {
                v.push(format!(
                    "{shape}: arm {} reported {}, expected {}",
                    s.arm,
                    block_words(rq),
                    block_words(expected_block)
                ));
            }
            _ => {}
        }
    }
}

/// Rows of a sample's largest attention call: the prompt when it ran in one
/// pass (`solo_chunk` null), else the engine's chunk (or the prompt if shorter).
pub fn call_rows(s: &PrefillSample) -> usize {
    s.scheduler.solo_chunk.map_or(s.length, |c| c.min(s.length))
}

/// The block a composed call runs for a requested `q` over `length` rows
/// (0 = one block; a block longer than the prompt is the prompt).
pub fn effective_block(q: usize, length: usize) -> usize {
    if q == 0 {
        length
    } else {
        q.min(length)
    }
}

/// All files of one comparison: same hardware, model, lengths, build, path.
fn check_same_run(files: &[(String, PrefillBenchFile)], v: &mut Vec<String>) {
    let Some((first_name, first)) = files.first() else {
        return;
    };
    for (name, f) in &files[1..] {
        let mut differ = |what: &str, same: bool| {
            if !same {
                v.push(format!("{name}: {what} differs from {first_name}"));
            }
        };
        differ("hardware", f.hardware == first.hardware);
        differ("model", f.model == first.model);
        differ("lengths", f.lengths == first.lengths);
        differ("build", f.build == first.build);
        differ("path", f.path == first.path);
    }
}
