//! A qualification entry: the TOML schema, its validation, and the evidence check.
//!
//! An entry binds one exact hardware fingerprint and one exact layer shape to a
//! measured route. Parsing is strict: an unknown key, a missing identity field,
//! a malformed value, or evidence whose file is absent or whose SHA-256 differs
//! makes the entry invalid (with the reason); an invalid entry never matches.
//!
//! Values are checked strictly: dates are real calendar days, `route` and
//! `attention` are lowercase keywords, sizes are bounded ([`MAX_QUERY_BLOCK`],
//! [`MAX_LAYER_SIZE`]), ids have no control characters, and the evidence path
//! is relative and stays inside the entry's folder (no `..`, no root).

use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind};
use headroom_hardware::HardwareFingerprint;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What an entry qualified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "lowercase")]
pub enum QualifiedResult {
    Composed { query_block: usize },
    Fused,
}

/// The evidence an entry cites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Relative to the entry file's folder.
    pub file: String,
    /// Lowercase hex SHA-256 of the file's bytes (verified at load).
    pub sha256: String,
}

/// A valid qualification entry (only [`parse_entry`] and tests build one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QualificationEntry {
    pub id: String,
    pub date: String,
    /// Exactly the identity fields of the fingerprint; the CUDA device fields
    /// are present iff the backend is `cuda`.
    pub hardware: HardwareFingerprint,
    pub layer: LayerKind,
    pub result: QualifiedResult,
    pub evidence: Evidence,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    id: Option<String>,
    date: Option<String>,
    hardware: Option<RawHardware>,
    layer: Option<RawLayer>,
    result: Option<RawResult>,
    evidence: Option<RawEvidence>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHardware {
    backend: Option<String>,
    machine_model: Option<String>,
    cpu_brand: Option<String>,
    cpu_cores: Option<usize>,
    memory_gib: Option<u64>,
    device_name: Option<String>,
    device_compute_units: Option<u32>,
    device_memory_gib: Option<u64>,
    compute_capability: Option<String>,
    driver_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    attention: Option<String>,
    head_dim: Option<usize>,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    dtype: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResult {
    route: Option<String>,
    query_block: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidence {
    file: Option<String>,
    sha256: Option<String>,
}

fn req<T>(v: Option<T>, name: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("missing required field `{name}`"))
}

fn non_empty(v: Option<String>, name: &str) -> Result<String, String> {
    let s = req(v, name)?;
    if s.trim().is_empty() {
        return Err(format!("field `{name}` is empty"));
    }
    Ok(s)
}

/// The largest `result.query_block` an entry may give.
pub const MAX_QUERY_BLOCK: usize = 1 << 20;
/// The largest `layer.head_dim`, `layer.q_heads`, `layer.kv_heads` an entry may give.
pub const MAX_LAYER_SIZE: usize = 1 << 16;
/// The longest entry id.
const MAX_ID_CHARS: usize = 200;

fn positive(v: Option<usize>, name: &str) -> Result<usize, String> {
    match req(v, name)? {
        0 => Err(format!("field `{name}` must be > 0")),
        n if n > MAX_LAYER_SIZE => Err(format!(
            "field `{name}` = {n} is above the limit of {MAX_LAYER_SIZE}"
        )),
        n => Ok(n),
    }
}

/// `s` with control characters escaped (`\n`, `\u{1b}`, ...), for printing
/// text that came from a file or the command line to a terminal.
pub fn escape_controls(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn check_id(id: &str) -> Result<(), String> {
    if id.chars().any(char::is_control) {
        return Err(format!(
            "id `{}` contains control characters",
            escape_controls(id)
        ));
    }
    if id.chars().count() > MAX_ID_CHARS {
        return Err(format!("id is longer than {MAX_ID_CHARS} characters"));
    }
    Ok(())
}

fn is_leap(y: u32) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

/// `YYYY-MM-DD`, a real calendar day.
pub fn check_date(d: &str) -> Result<(), String> {
    let bad = || format!("date `{d}` is not YYYY-MM-DD");
    let parts: Vec<&str> = d.split('-').collect();
    let [y, m, day] = parts.as_slice() else {
        return Err(bad());
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(y, 4) && digits(m, 2) && digits(day, 2)) {
        return Err(bad());
    }
    let (y, m, day): (u32, u32, u32) = (
        y.parse().map_err(|_| bad())?,
        m.parse().map_err(|_| bad())?,
        day.parse().map_err(|_| bad())?,
    );
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => return Err(bad()),
    };
    if !(1..=days_in_month).contains(&day) {
        return Err(format!("date `{d}` is not a calendar day"));
    }
    Ok(())
}

/// Turns a TOML error into one line (`line N: message`).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("TOML error at line {line}: {msg}")
        }
        None => format!("TOML error: {msg}"),
    }
}

fn hardware(raw: RawHardware) -> Result<HardwareFingerprint, String> {
    let backend: BackendKind = non_empty(raw.backend, "hardware.backend")?
        .parse()
        .map_err(|e| format!("hardware.backend: {e}"))?;
    let mut fp = HardwareFingerprint {
        backend,
        machine_model: non_empty(raw.machine_model, "hardware.machine_model")?,
        cpu_brand: non_empty(raw.cpu_brand, "hardware.cpu_brand")?,
        cpu_cores: positive(raw.cpu_cores, "hardware.cpu_cores")?,
        memory_gib: req(raw.memory_gib, "hardware.memory_gib")?,
        device_name: None,
        device_compute_units: None,
        device_memory_gib: None,
        compute_capability: None,
        driver_version: None,
    };
    match backend {
        BackendKind::Cuda => {
            fp.device_name = Some(non_empty(raw.device_name, "hardware.device_name")?);
            fp.device_compute_units = Some(req(
                raw.device_compute_units,
                "hardware.device_compute_units",
            )?);
            fp.device_memory_gib = Some(req(raw.device_memory_gib, "hardware.device_memory_gib")?);
            fp.compute_capability = raw.compute_capability;
            fp.driver_version = raw.driver_version;
        }
        BackendKind::Cpu => {
            let device_fields = [
                ("device_name", raw.device_name.is_some()),
                ("device_compute_units", raw.device_compute_units.is_some()),
                ("device_memory_gib", raw.device_memory_gib.is_some()),
                ("compute_capability", raw.compute_capability.is_some()),
                ("driver_version", raw.driver_version.is_some()),
            ];
            if let Some((name, _)) = device_fields.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "hardware.{name} is not an identity field of backend cpu"
                ));
            }
        }
    }
    Ok(fp)
}

fn layer(raw: RawLayer) -> Result<LayerKind, String> {
    let attention = non_empty(raw.attention, "layer.attention")?;
    if attention != "full" {
        return Err(format!(
            "layer.attention `{attention}`: only full attention layers can be qualified"
        ));
    }
    let dtype_raw = non_empty(raw.dtype, "layer.dtype")?;
    let dtype = Dtype::parse(&dtype_raw)
        .ok_or_else(|| format!("layer.dtype `{dtype_raw}` is not f32, f16 or bf16"))?;
    Ok(LayerKind {
        attention: AttentionKind::Full,
        head_dim: positive(raw.head_dim, "layer.head_dim")?,
        q_heads: positive(raw.q_heads, "layer.q_heads")?,
        kv_heads: positive(raw.kv_heads, "layer.kv_heads")?,
        dtype,
    })
}

fn result(raw: RawResult) -> Result<QualifiedResult, String> {
    let route = non_empty(raw.route, "result.route")?;
    match (route.as_str(), raw.query_block) {
        ("composed", Some(q)) if q > MAX_QUERY_BLOCK => Err(format!(
            "result.query_block = {q} is above the limit of {MAX_QUERY_BLOCK}"
        )),
        ("composed", Some(query_block)) => Ok(QualifiedResult::Composed { query_block }),
        ("composed", None) => {
            Err("missing required field `result.query_block` (composed route)".into())
        }
        ("fused", None) => Ok(QualifiedResult::Fused),
        ("fused", Some(_)) => Err("result.query_block is only allowed with route composed".into()),
        (other, _) => Err(format!(
            "result.route `{}` is not `composed` or `fused` (lowercase)",
            escape_controls(other)
        )),
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Checks that an evidence path is relative and stays inside the entry's
/// folder: only plain components (and `.`), no `..`, no root or prefix.
fn check_evidence_path(file: &str) -> Result<(), String> {
    use std::path::Component;
    let shown = escape_controls(file);
    if file.chars().any(char::is_control) {
        return Err(format!(
            "evidence.file `{shown}` contains control characters"
        ));
    }
    for c in std::path::Path::new(file).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "evidence.file `{shown}` must stay inside the entry's folder (no `..`)"
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "evidence.file `{shown}` must be relative to the entry's folder"
                ))
            }
        }
    }
    Ok(())
}

fn evidence(
    raw: RawEvidence,
    hash_evidence: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Evidence, String> {
    let file = non_empty(raw.file, "evidence.file")?;
    let sha = non_empty(raw.sha256, "evidence.sha256")?
        .trim()
        .to_ascii_lowercase();
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("evidence.sha256 `{sha}` is not 64 hex digits"));
    }
    check_evidence_path(&file)?;
    let actual = hash_evidence(&file).map_err(|e| format!("evidence file `{file}`: {e}"))?;
    if actual != sha {
        return Err(format!(
            "evidence file `{file}` has sha256 {actual}, the entry says {sha}"
        ));
    }
    Ok(Evidence { file, sha256: sha })
}

/// Parses and validates one entry. `hash_evidence` returns the lowercase hex
/// SHA-256 of a path relative to the entry's folder (already checked to stay
/// inside it). Returns the reason when the entry is invalid.
pub fn parse_entry(
    text: &str,
    hash_evidence: &dyn Fn(&str) -> Result<String, String>,
) -> Result<QualificationEntry, String> {
    let raw: RawEntry = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    let id = non_empty(raw.id, "id")?;
    check_id(&id)?;
    let date = non_empty(raw.date, "date")?;
    check_date(&date)?;
    Ok(QualificationEntry {
        hardware: hardware(req(raw.hardware, "[hardware]")?)?,
        layer: layer(req(raw.layer, "[layer]")?)?,
        result: result(req(raw.result, "[result]")?)?,
        evidence: evidence(req(raw.evidence, "[evidence]")?, hash_evidence)?,
        id,
        date,
    })
}

/// Just the `id` of an entry text, when it can be read (for reporting invalid entries).
pub fn peek_id(text: &str) -> Option<String> {
    text.parse::<toml::Table>()
        .ok()?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

impl QualificationEntry {
    /// An entry for a fresh measurement. `evidence_file` is the evidence's path
    /// relative to the folder the entry will be written to, `evidence` its bytes
    /// (hashed here). The hardware is taken as given: every field present,
    /// including `compute_capability` / `driver_version`, will be matched.
    pub fn new(
        id: impl Into<String>,
        date: impl Into<String>,
        hardware: HardwareFingerprint,
        layer: LayerKind,
        result: QualifiedResult,
        evidence_file: impl Into<String>,
        evidence: &[u8],
    ) -> Self {
        QualificationEntry {
            id: id.into(),
            date: date.into(),
            hardware,
            layer,
            result,
            evidence: Evidence {
                file: evidence_file.into(),
                sha256: sha256_hex(evidence),
            },
        }
    }

    /// The entry in the registry's TOML schema (what `qualify` writes; parses back equal).
    pub fn to_toml(&self) -> Result<String, String> {
        toml::to_string(self).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = "cpu-test"
date = "2026-11-29"
[hardware]
backend = "cpu"
machine_model = "Box"
cpu_brand = "AMD EPYC"
cpu_cores = 2
memory_gib = 23
[layer]
attention = "full"
head_dim = 256
q_heads = 16
kv_heads = 2
dtype = "bf16"
[result]
route = "composed"
query_block = 512
[evidence]
file = "ev.json"
sha256 = "SHA"
"#;

    fn with_sha(text: &str, bytes: &[u8]) -> String {
        text.replace("SHA", &sha256_hex(bytes))
    }

    fn reader(bytes: &'static [u8]) -> impl Fn(&str) -> Result<String, String> {
        move |p| {
            if p == "ev.json" {
                Ok(sha256_hex(bytes))
            } else {
                Err("not found".into())
            }
        }
    }

    #[test]
    fn good_entry_parses_and_round_trips() {
        let e = parse_entry(&with_sha(GOOD, b"{}"), &reader(b"{}")).unwrap();
        assert_eq!(e.result, QualifiedResult::Composed { query_block: 512 });
        assert_eq!(e.layer.dtype, Dtype::Bf16);
        let again = parse_entry(&e.to_toml().unwrap(), &reader(b"{}")).unwrap();
        assert_eq!(again, e);
        let built = QualificationEntry::new(
            "cpu-test",
            "2026-11-29",
            e.hardware.clone(),
            e.layer,
            e.result,
            "ev.json",
            b"{}",
        );
        assert_eq!(built, e);
    }

    #[test]
    fn schema_violations_are_reasons() {
        let good = with_sha(GOOD, b"{}");
        let cases: Vec<(String, &str)> = vec![
            (
                good.replace("cpu_brand = \"AMD EPYC\"\n", ""),
                "hardware.cpu_brand",
            ),
            (
                good.replace("memory_gib = 23", "memory_gib = 23\ncolour = \"red\""),
                "colour",
            ),
            (
                good.replace("date = \"2026-11-29\"", "date = \"29/11/2026\""),
                "YYYY-MM-DD",
            ),
            (
                good.replace("query_block = 512\n", ""),
                "result.query_block",
            ),
            (
                good.replace("route = \"composed\"", "route = \"fused\""),
                "only allowed with route composed",
            ),
            (good.replace("dtype = \"bf16\"", "dtype = \"int4\""), "int4"),
            (
                good.replace("attention = \"full\"", "attention = \"linear\""),
                "only full attention",
            ),
            (
                good.replace("memory_gib = 23", "memory_gib = 23\ndevice_name = \"X\""),
                "not an identity field of backend cpu",
            ),
            (
                good.replace("backend = \"cpu\"", "backend = \"cuda\""),
                "hardware.device_name",
            ),
            (
                good.replace("file = \"ev.json\"", "file = \"missing.json\""),
                "missing.json",
            ),
            (GOOD.replace("SHA", &"0".repeat(64)), "the entry says"),
            (GOOD.replace("SHA", "xyz"), "64 hex digits"),
            ("id = [".to_string(), "TOML error at line 1"),
            (
                good.replace("2026-11-29", "2026-02-30"),
                "not a calendar day",
            ),
            (
                good.replace("2026-11-29", "2025-02-29"),
                "not a calendar day",
            ),
            (good.replace("2026-11-29", "2026-13-01"), "YYYY-MM-DD"),
            (
                good.replace("route = \"composed\"", "route = \"COMPOSED\""),
                "`COMPOSED` is not",
            ),
            (
                good.replace("attention = \"full\"", "attention = \"FULL\""),
                "FULL",
            ),
            (
                good.replace("query_block = 512", "query_block = 9223372036854775807"),
                "above the limit",
            ),
            (
                good.replace("head_dim = 256", "head_dim = 1000000"),
                "layer.head_dim",
            ),
            (
                good.replace("id = \"cpu-test\"", "id = \"evil\\u001b[31m\""),
                "control characters",
            ),
            (
                good.replace("ev.json", "../../etc/passwd"),
                "inside the entry's folder",
            ),
            (
                good.replace("ev.json", "sub/../../x.json"),
                "inside the entry's folder",
            ),
            (good.replace("ev.json", "/etc/passwd"), "must be relative"),
        ];
        for (text, needle) in cases {
            let err = parse_entry(&text, &reader(b"{}")).unwrap_err();
            assert!(err.contains(needle), "expected `{needle}` in `{err}`");
        }
    }

    #[test]
    fn leap_days_and_escaping() {
        assert!(check_date("2024-02-29").is_ok());
        assert!(check_date("2000-02-29").is_ok());
        assert!(check_date("1900-02-29").is_err());
        assert_eq!(escape_controls("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(escape_controls("plain"), "plain");
    }

    #[test]
    fn peek_id_reads_ids_of_invalid_entries() {
        assert_eq!(peek_id("id = \"x\"\nbogus = 1").as_deref(), Some("x"));
        assert_eq!(peek_id("id = ["), None);
    }
}
