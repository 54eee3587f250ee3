//! The qualification registry: every entry file found, valid or not.
//!
//! Sources, in order: the repository's `qualifications/` folder embedded in the
//! binary (unless `HEADROOM_BUILTIN_QUALIFICATIONS=off`), folders passed by the
//! caller (`--qualifications DIR`), and the folders listed in
//! `HEADROOM_QUALIFICATIONS`. Folders are walked recursively
//! for `*.toml`; everything else in them (README, evidence) is data. Loading
//! never fails: an unreadable or invalid entry is kept with its reason, a
//! missing folder becomes a registry problem.
//!
//! The walk is hostile-input safe: each folder is visited once (by its
//! canonical path, so symlink cycles and loops neither hang nor duplicate),
//! the depth is bounded, only regular files are read (a FIFO or a device
//! named `*.toml` or cited as evidence is refused, never opened), an entry
//! is at most [`MAX_ENTRY_BYTES`], the evidence is hashed while streamed
//! (at most [`MAX_EVIDENCE_BYTES`]) and must resolve, symlinks included,
//! inside the entry's folder. Ids, file names and reasons are stored with
//! control characters escaped.

use crate::entry::{escape_controls, parse_entry, peek_id, sha256_hex};
use crate::{QualificationEntry, ENV_QUALIFICATIONS};
use headroom_core::{AttentionKind, LayerKind};
use headroom_hardware::HardwareFingerprint;
use include_dir::{include_dir, Dir};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The largest entry file read.
pub const MAX_ENTRY_BYTES: u64 = 1 << 20;
/// The largest evidence file hashed.
pub const MAX_EVIDENCE_BYTES: u64 = 1 << 30;
/// How deep below a qualification folder the walk goes.
const MAX_DEPTH: usize = 32;

static EMBEDDED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../qualifications");

/// Label prefix of entries embedded in the binary.
pub const EMBEDDED_PREFIX: &str = "builtin:qualifications/";

/// Environment variable that switches the entries embedded in the binary
/// `off` (or `on`, the default). Tests of the binary set `off` so that
/// committing an entry for the machine they run on cannot change what they
/// resolve; they name the folders they need with `--qualifications` /
/// [`ENV_QUALIFICATIONS`]. Values are trimmed and case-insensitive (`off`,
/// `0`, `false`, `no` / `on`, `1`, `true`, `yes`; blank = unset); anything
/// else keeps the built-in entries and is reported as a registry problem.
pub const ENV_BUILTIN_QUALIFICATIONS: &str = "HEADROOM_BUILTIN_QUALIFICATIONS";

/// Whether the embedded entries load, from the value of
/// [`ENV_BUILTIN_QUALIFICATIONS`] (`None` = unset); a malformed value keeps
/// them, with the problem to report.
fn builtin_setting(raw: Option<&str>) -> (bool, Option<String>) {
    let Some(raw) = raw else { return (true, None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => (true, None),
        "off" | "0" | "false" | "no" => (false, None),
        _ => (
            true,
            Some(format!(
                "{ENV_BUILTIN_QUALIFICATIONS}=`{}` is not on or off: the built-in entries are used",
                escape_controls(raw)
            )),
        ),
    }
}

/// One entry file and what loading made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEntry {
    /// Where it came from (a path, or `builtin:qualifications/...`).
    pub file: String,
    /// The entry's `id`, when one could be read.
    pub id: Option<String>,
    /// The validated entry, or why it is invalid.
    pub entry: Result<QualificationEntry, String>,
}

/// How an entry relates to this machine and model (for `doctor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowStatus {
    Matched,
    Rejected,
    Invalid,
}

/// One line of the registry report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryRow {
    pub file: String,
    pub id: Option<String>,
    pub status: RowStatus,
    /// Why it was rejected (first differing field) or is invalid.
    pub reason: Option<String>,
}

/// All entries found, plus problems with the sources themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    entries: Vec<RegistryEntry>,
    problems: Vec<String>,
    /// Whether the entries embedded in the binary were loaded.
    builtin: bool,
}

impl Registry {
    /// The production registry: embedded entries (unless
    /// `HEADROOM_BUILTIN_QUALIFICATIONS=off`), `extra_dirs`, then
    /// `HEADROOM_QUALIFICATIONS`. `HEADROOM_QUALIFICATIONS` is read as an OS
    /// string: folders whose names are not UTF-8 are used as they are.
    pub fn load(extra_dirs: &[PathBuf]) -> Registry {
        let list = std::env::var_os(ENV_QUALIFICATIONS).unwrap_or_default();
        let builtin = std::env::var_os(ENV_BUILTIN_QUALIFICATIONS)
            .map(|v| v.into_string().unwrap_or_else(|_| "<not UTF-8>".into()));
        Registry::load_folders(extra_dirs, &list, builtin.as_deref())
    }

    /// [`Registry::load`] with an explicit environment lookup.
    pub fn load_with_env(extra_dirs: &[PathBuf], env: &dyn Fn(&str) -> Option<String>) -> Registry {
        let list = env(ENV_QUALIFICATIONS).unwrap_or_default();
        let builtin = env(ENV_BUILTIN_QUALIFICATIONS);
        Registry::load_folders(extra_dirs, std::ffi::OsStr::new(&list), builtin.as_deref())
    }

    fn load_folders(
        extra_dirs: &[PathBuf],
        env_list: &std::ffi::OsStr,
        builtin_env: Option<&str>,
    ) -> Registry {
        let mut dirs = extra_dirs.to_vec();
        if !env_list.to_string_lossy().trim().is_empty() {
            dirs.extend(std::env::split_paths(env_list).filter(|p| !p.as_os_str().is_empty()));
        }
        let mut r = Registry::default();
        let (builtin, problem) = builtin_setting(builtin_env);
        r.problems.extend(problem);
        if builtin {
            r.add_embedded(&EMBEDDED);
            r.builtin = true;
        }
        for d in &dirs {
            r.add_dir(d);
        }
        r.reject_duplicate_ids();
        r
    }

    /// Only the given folders (no embedded entries, no environment): for tests and tools.
    pub fn from_dirs(dirs: &[PathBuf]) -> Registry {
        let mut r = Registry::default();
        for d in dirs {
            r.add_dir(d);
        }
        r.reject_duplicate_ids();
        r
    }

    pub fn entries(&self) -> &[RegistryEntry] {
        &self.entries
    }

    /// Whether the entries embedded in the binary were loaded (`false` for
    /// [`Registry::from_dirs`] and under `HEADROOM_BUILTIN_QUALIFICATIONS=off`).
    pub fn builtin_loaded(&self) -> bool {
        self.builtin
    }

    /// Problems with the sources (e.g. a folder that does not exist).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Valid entries.
    pub fn valid(&self) -> impl Iterator<Item = &QualificationEntry> {
        self.entries.iter().filter_map(|e| e.entry.as_ref().ok())
    }

    /// Valid entries that match `fp` and `kind` exactly.
    pub fn matching<'a>(
        &'a self,
        fp: &'a HardwareFingerprint,
        kind: &'a LayerKind,
    ) -> impl Iterator<Item = &'a QualificationEntry> + 'a {
        self.valid().filter(move |e| e.matches(fp, kind).is_ok())
    }

    /// One row per entry file: matched (against some layer kind of the model),
    /// rejected with the first differing field, or invalid with the reason.
    pub fn rows(&self, fp: &HardwareFingerprint, kinds: &[LayerKind]) -> Vec<RegistryRow> {
        self.entries
            .iter()
            .map(|e| {
                let (status, reason) = match &e.entry {
                    Err(why) => (RowStatus::Invalid, Some(why.clone())),
                    Ok(q) => match first_mismatch(q, fp, kinds) {
                        None => (RowStatus::Matched, None),
                        Some(why) => (RowStatus::Rejected, Some(why)),
                    },
                };
                RegistryRow {
                    file: e.file.clone(),
                    id: e.id.clone(),
                    status,
                    reason,
                }
            })
            .collect()
    }

    fn push(
        &mut self,
        file: String,
        text: Result<String, String>,
        hash: &dyn Fn(&str) -> Result<String, String>,
    ) {
        let (id, entry) = match text {
            Err(e) => (None, Err(format!("unreadable: {e}"))),
            Ok(t) => (peek_id(&t), parse_entry(&t, hash)),
        };
        let file = escape_controls(&file);
        let id = id.map(|i| escape_controls(&i));
        let entry = entry.map_err(|why| escape_controls(&why));
        if let Err(why) = &entry {
            tracing::debug!(%file, %why, "invalid qualification entry");
        }
        self.entries.push(RegistryEntry { file, id, entry });
    }

    fn add_embedded(&mut self, root: &'static Dir<'static>) {
        let mut files = Vec::new();
        collect_embedded(root, &mut files);
        files.sort_by_key(|f| f.path().to_path_buf());
        for f in files {
            let rel = f.path().to_path_buf();
            let folder = rel.parent().map(Path::to_path_buf).unwrap_or_default();
            let text = f
                .contents_utf8()
                .map(str::to_string)
                .ok_or_else(|| "not UTF-8".to_string());
            let hash = |p: &str| -> Result<String, String> {
                let path = normalize(&folder.join(p)).ok_or("escapes the embedded folder")?;
                root.get_file(&path)
                    .map(|f| sha256_hex(f.contents()))
                    .ok_or_else(|| "not found".to_string())
            };
            self.push(format!("{EMBEDDED_PREFIX}{}", rel.display()), text, &hash);
        }
    }

    fn add_dir(&mut self, dir: &Path) {
        if !dir.is_dir() {
            self.problems.push(format!(
                "qualification folder {} does not exist or is not a folder",
                dir.display()
            ));
            return;
        }
        let mut walk = Walk::default();
        walk.collect(dir, 0);
        for p in walk.problems {
            self.problems.push(escape_controls(&p));
        }
        let mut files = walk.files;
        files.sort();
        for path in files {
            let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let text = read_entry(&path);
            let hash = |p: &str| hash_evidence(&folder, p);
            self.push(path.display().to_string(), text, &hash);
        }
    }

    /// A second valid entry with an id already taken becomes invalid.
    fn reject_duplicate_ids(&mut self) {
        let mut seen: Vec<(String, String)> = Vec::new();
        for e in &mut self.entries {
            let Ok(q) = &e.entry else { continue };
            if let Some((_, first)) = seen.iter().find(|(id, _)| *id == q.id) {
                e.entry = Err(format!(
                    "duplicate id `{}` (first defined in {first})",
                    q.id
                ));
            } else {
                seen.push((q.id.clone(), e.file.clone()));
            }
        }
    }
}

/// `None` when the entry matches some kind; else its mismatch against the most
/// relevant kind (the first full-attention kind, or the first kind at all).
fn first_mismatch(
    q: &QualificationEntry,
    fp: &HardwareFingerprint,
    kinds: &[LayerKind],
) -> Option<String> {
    let results: Vec<_> = kinds.iter().map(|k| (k, q.matches(fp, k))).collect();
    if results.iter().any(|(_, r)| r.is_ok()) {
        return None;
    }
    let pick = results
        .iter()
        .find(|(k, _)| k.attention == AttentionKind::Full)
        .or(results.first());
    Some(match pick {
        Some((_, Err(m))) => m.to_string(),
        _ => "the model has no layers".into(),
    })
}

fn collect_embedded(
    dir: &'static Dir<'static>,
    out: &mut Vec<&'static include_dir::File<'static>>,
) {
    for f in dir.files() {
        if f.path().extension().is_some_and(|e| e == "toml") {
            out.push(f);
        }
    }
    for d in dir.dirs() {
        collect_embedded(d, out);
    }
}

/// The folder walk: `*.toml` paths found, each folder visited once.
#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    seen_dirs: HashSet<PathBuf>,
    seen_files: HashSet<PathBuf>,
    problems: Vec<String>,
}

impl Walk {
    fn collect(&mut self, dir: &Path, depth: usize) {
        // A folder reached twice (a symlink loop, or two links to one folder) is walked once.
        let Ok(canonical) = dir.canonicalize() else {
            self.problems.push(format!(
                "cannot resolve qualification folder {}",
                dir.display()
            ));
            return;
        };
        if !self.seen_dirs.insert(canonical) {
            return;
        }
        if depth > MAX_DEPTH {
            self.problems.push(format!(
                "qualification folder {} is nested deeper than {MAX_DEPTH} levels; not read",
                dir.display()
            ));
            return;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.problems.push(format!(
                    "cannot read qualification folder {}: {e}",
                    dir.display()
                ));
                return;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // `metadata` follows symlinks: the target decides; cycles end at `seen_dirs`.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                self.collect(&path, depth + 1);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let key = path.canonicalize().unwrap_or_else(|_| path.clone());
                if self.seen_files.insert(key) {
                    self.files.push(path);
                }
            }
        }
    }
}

/// Opens `path` for reading only when it is a regular file of at most `limit` bytes
/// (never opens a FIFO or a device, which could block or never end).
fn open_regular(path: &Path, limit: u64) -> Result<std::fs::File, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > limit {
        return Err(format!("{} bytes, above the limit of {limit}", meta.len()));
    }
    std::fs::File::open(path).map_err(|e| e.to_string())
}

/// An entry's text: a regular UTF-8 file of at most [`MAX_ENTRY_BYTES`].
fn read_entry(path: &Path) -> Result<String, String> {
    let file = open_regular(path, MAX_ENTRY_BYTES)?;
    let mut bytes = Vec::new();
    file.take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_ENTRY_BYTES {
        return Err(format!("larger than the limit of {MAX_ENTRY_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())
}

/// SHA-256 of the evidence `rel` of an entry in `folder`, streamed. The
/// path must resolve (symlinks followed) inside `folder` and be a regular file.
fn hash_evidence(folder: &Path, rel: &str) -> Result<String, String> {
    let path = folder.join(rel);
    let root = folder.canonicalize().map_err(|e| e.to_string())?;
    let real = path.canonicalize().map_err(|e| e.to_string())?;
    if !real.starts_with(&root) {
        return Err("resolves outside the entry's folder".into());
    }
    let file = open_regular(&real, MAX_EVIDENCE_BYTES)?;
    let mut hasher = Sha256::new();
    let mut reader = std::io::BufReader::new(file.take(MAX_EVIDENCE_BYTES + 1));
    let mut buf = [0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > MAX_EVIDENCE_BYTES {
            return Err(format!(
                "larger than the limit of {MAX_EVIDENCE_BYTES} bytes"
            ));
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Lexically resolves `.` and `..`; `None` when the path climbs above its root.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_stays_inside_root() {
        assert_eq!(
            normalize(Path::new("a/./b/../c.json")),
            Some(PathBuf::from("a/c.json"))
        );
        assert_eq!(normalize(Path::new("../x")), None);
        assert_eq!(normalize(Path::new("/etc/passwd")), None);
    }

    #[test]
    fn builtin_setting_parses_on_off_and_keeps_builtins_on_a_malformed_value() {
        for v in ["off", " OFF ", "0", "false", "No"] {
            assert_eq!(builtin_setting(Some(v)), (false, None), "{v}");
        }
        for v in [
            None,
            Some(""),
            Some("  "),
            Some("on"),
            Some("1"),
            Some("TRUE"),
            Some("yes"),
        ] {
            assert_eq!(builtin_setting(v), (true, None), "{v:?}");
        }
        let (on, problem) = builtin_setting(Some("of\u{1b}f"));
        assert!(on);
        let problem = problem.unwrap();
        assert!(problem.contains(ENV_BUILTIN_QUALIFICATIONS), "{problem}");
        assert!(!problem.contains('\u{1b}'), "{problem}");
    }

    #[test]
    fn embedded_entries_load_without_crashing() {
        let r = Registry::load_with_env(&[], &|_| None);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        for e in r.entries() {
            assert!(e.file.starts_with(EMBEDDED_PREFIX));
            // Shipped entries must be valid: an invalid built-in entry is a bug.
            assert!(e.entry.is_ok(), "{}: {:?}", e.file, e.entry);
        }
        assert!(r.builtin_loaded());
        // The committed entries (qualifications/h200, qualifications/h100, qualifications/cpu-*) are all embedded.
        assert_eq!(r.entries().len(), collect_count(&EMBEDDED));
        assert!(r.entries().len() >= 2, "{:?}", r.entries());
    }

    fn collect_count(root: &'static Dir<'static>) -> usize {
        let mut files = Vec::new();
        collect_embedded(root, &mut files);
        files.len()
    }

    #[test]
    fn builtin_entries_switch_off_and_other_sources_still_load() {
        let dir = std::env::temp_dir().join(format!("headroom-builtin-off-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = |k: &str| (k == ENV_BUILTIN_QUALIFICATIONS).then(|| "off".to_string());
        let r = Registry::load_with_env(std::slice::from_ref(&dir), &env);
        assert!(!r.builtin_loaded());
        assert!(r.entries().is_empty(), "{:?}", r.entries());
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // A malformed value keeps them, with one problem.
        let bad = |k: &str| (k == ENV_BUILTIN_QUALIFICATIONS).then(|| "maybe".to_string());
        let r = Registry::load_with_env(&[], &bad);
        assert!(r.builtin_loaded());
        assert_eq!(r.entries().len(), collect_count(&EMBEDDED));
        assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
        assert!(!Registry::from_dirs(std::slice::from_ref(&dir)).builtin_loaded());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
