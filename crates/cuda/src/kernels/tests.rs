//! The registry against the sources and the launchers: every source's
//! `__global__` entry points (written out or made by a macro) equal its
//! `entry_points`, and every entry point is launched by the Rust code of the
//! op folder that holds the source. The NVRTC half (the compiled artifact
//! exports exactly these symbols) is `artifact`'s gate test.

use super::{required_entry_points, KernelSource, SOURCES};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// `src` without its `//` and `/* */` comments (string literals hold none of
/// either in the kernels).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("//") {
            rest = tail.find('\n').map_or("", |e| &tail[e..]);
        } else if tail.starts_with("/*") {
            rest = tail.find("*/").map_or("", |e| &tail[e + 2..]);
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Logical lines: continuation backslashes joined.
fn logical_lines(src: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for l in src.lines() {
        match l.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(l);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    lines
}

/// The name a `__global__` declaration in `decl` (from `__global__` on) declares.
fn declared_name(decl: &str) -> Option<String> {
    let mut rest = decl.strip_prefix("__global__")?.trim_start();
    rest = rest.strip_prefix("void")?.trim_start();
    if let Some(r) = rest.strip_prefix("__launch_bounds__") {
        let close = r.find(')')?;
        rest = r[close + 1..].trim_start();
    }
    let end = rest.find('(')?;
    Some(rest[..end].trim().to_string())
}

/// A function-like macro whose body declares a kernel: its parameters and
/// the declared name's template (`a##_##b`).
struct EntryMacro {
    params: Vec<String>,
    template: String,
}

/// Splits `"A, B(c, d), E"` at its top-level commas.
fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

/// The `__global__` entry points `source` defines, written out or made by
/// an invocation of a macro whose body declares one.
fn global_entries(source: &str) -> BTreeSet<String> {
    let lines = logical_lines(&strip_comments(source));
    let mut macros: HashMap<String, EntryMacro> = HashMap::new();
    let mut found = BTreeSet::new();
    // Written-out kernels, whose declarations may span lines.
    let code: Vec<&str> = lines
        .iter()
        .map(|l| l.as_str())
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    let code = code.join("\n");
    let mut at = 0;
    while let Some(g) = code[at..].find("__global__") {
        if let Some(name) = declared_name(&code[at + g..]) {
            found.insert(name);
        }
        at += g + "__global__".len();
    }
    for line in &lines {
        let t = line.trim();
        if let Some(def) = t.strip_prefix("#define") {
            let def = def.trim_start();
            let (Some(open), Some(g)) = (def.find('('), def.find("__global__")) else {
                continue;
            };
            let close = def[open..].find(')').map(|c| open + c);
            let (Some(close), Some(template)) = (close, declared_name(&def[g..])) else {
                continue;
            };
            let params = split_args(&def[open + 1..close]);
            macros.insert(
                def[..open].trim().to_string(),
                EntryMacro { params, template },
            );
            continue;
        }
        let Some(open) = t.find('(') else { continue };
        let Some(m) = macros.get(t[..open].trim()) else {
            continue;
        };
        let Some(close) = t.rfind(')') else { continue };
        let args = split_args(&t[open + 1..close]);
        let name: String = m
            .template
            .split("##")
            .map(|tok| {
                let tok = tok.trim();
                m.params
                    .iter()
                    .position(|p| p == tok)
                    .map_or(tok, |i| args[i].as_str())
                    .to_string()
            })
            .collect();
        found.insert(name);
    }
    found
}

/// The crate's `src` folder.
fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file under `dir`, recursively (`dir` itself if it is a file).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    if dir.is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The folder holding `src`'s file.
fn folder_of(src: &KernelSource) -> PathBuf {
    let hits: Vec<PathBuf> = files_under(&src_dir())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == src.file))
        .collect();
    assert_eq!(hits.len(), 1, "{}: {hits:?}", src.file);
    hits[0].parent().unwrap().to_path_buf()
}

/// `code` without its `KernelSource` declarations (which list entry points
/// without launching them).
fn without_declarations(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("KernelSource = KernelSource {") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("\n};").map_or("", |e| &rest[i + e..]);
    }
    out.push_str(rest);
    out
}

/// The launcher code of the Rust files under `dir`: their text before any
/// `#[cfg(test)]`, without the source declarations and test files.
fn launcher_code(dir: &Path) -> String {
    let registry = src_dir().join("kernels/mod.rs");
    files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| *p != registry)
        .filter(|p| !p.ends_with("sources.rs") && !p.ends_with("tests.rs"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            without_declarations(&strip_comments(code))
        })
        .collect()
}

/// Entry points launched from outside the folder of their source, with the
/// file that launches them.
const LAUNCHED_ELSEWHERE: &[(&str, &str)] = &[("moe_combine_bf16", "backend/moe.rs")];

#[test]
fn every_sources_global_entries_are_its_entry_points() {
    for src in SOURCES {
        let found = global_entries(src.source);
        let listed: BTreeSet<String> = src.entry_points.iter().map(|e| e.to_string()).collect();
        assert_eq!(found, listed, "{}: defined vs listed", src.name);
    }
}

#[test]
fn every_entry_point_is_launched_from_its_op_folder() {
    for src in SOURCES {
        let folder = folder_of(src);
        // A source in the shared kernels folder may be launched from anywhere.
        let scope = if folder == src_dir().join("kernels") {
            src_dir()
        } else {
            folder
        };
        let code = launcher_code(&scope);
        for e in src.entry_points {
            let launcher = match LAUNCHED_ELSEWHERE.iter().find(|(n, _)| n == e) {
                Some((_, file)) => launcher_code(&src_dir().join(file)),
                None => code.clone(),
            };
            assert!(
                launcher.contains(&format!("\"{e}\"")),
                "{}: no launcher under {} names `{e}`",
                src.name,
                scope.display()
            );
        }
    }
}

#[test]
fn entry_points_and_source_names_are_unique() {
    let all = required_entry_points();
    let unique: BTreeSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "an entry point in two sources");
    let names: BTreeSet<_> = SOURCES.iter().map(|s| s.name).collect();
    assert_eq!(names.len(), SOURCES.len(), "two sources of one name");
}

#[test]
fn declarations_are_not_launchers() {
    let code = "pub const A: KernelSource = KernelSource {\n    entry_points: &[\"k\"],\n};\nfn f() { launch(\"g\") }";
    let launchers = without_declarations(code);
    assert!(!launchers.contains("\"k\""), "{launchers}");
    assert!(launchers.contains("\"g\""), "{launchers}");
}

#[test]
fn the_parser_reads_plain_and_macro_made_entries() {
    let src = "// extern \"C\" __global__ void commented(int);\n\
               extern \"C\" __global__ void __launch_bounds__(128, 2) plain(int a) {}\n\
               #define ENTRY(D, NAME, T) \\\n\
                   extern \"C\" __global__ void k_d##D##_##NAME(const T* x) { body<D>(x); }\n\
               ENTRY(64, bf16, __nv_bfloat16)\n\
               ENTRY(128, f16, __half)\n\
               /* extern \"C\" __global__ void gone(); */\n";
    let want: BTreeSet<String> = ["plain", "k_d64_bf16", "k_d128_f16"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(global_entries(src), want);
}
