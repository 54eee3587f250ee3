//! Helpers shared by the tests of the `headroom` binary: a temporary folder,
//! running the built binary in a hermetic attention environment, writing a
//! synthetic model as a checkpoint folder, and reading back the f32 logits
//! `headroom logits` writes.
//!
//! Every test runs the binary through [`headroom_command`] (or applies
//! [`hermetic`] to a wrapper such as `timeout`): the qualification entries
//! built into the binary are switched off and the caller's registry and
//! attention variables are removed, so committing an entry under
//! `qualifications/` for the machine the tests run on cannot change what they
//! resolve. A test that needs entries names their folder.
#![allow(dead_code)] // each test file uses its own subset

use headroom_model::weights::write_safetensors;
use headroom_model::{ModelConfig, Tensor, Weights};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh folder under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!("headroom-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The attention environment every test of the binary runs in: no built-in
/// qualification entries (`HEADROOM_BUILTIN_QUALIFICATIONS=off`), no extra
/// registry folders and no attention controls inherited from the caller.
/// Later `.env(..)` calls on `cmd` still override these.
pub fn hermetic(cmd: &mut Command) -> &mut Command {
    cmd.env("HEADROOM_BUILTIN_QUALIFICATIONS", "off")
        .env_remove("HEADROOM_QUALIFICATIONS")
        .env_remove("HEADROOM_ATTN_EXECUTION")
        .env_remove("HEADROOM_ATTN_QUERY_BLOCK")
}

/// The built `headroom` binary, in the [`hermetic`] environment.
pub fn headroom_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom"));
    hermetic(&mut cmd);
    cmd
}

/// `headroom serve` of the tiny synthetic model on an ephemeral loopback
/// port with a 256-token context: the server the CLI tests start (add flags,
/// pipes and `spawn`, then [`listening_addr`]).
pub fn tiny_serve_command() -> Command {
    let mut cmd = headroom_command();
    cmd.args([
        "serve",
        "--synthetic",
        "tiny-d64",
        "--port",
        "0",
        "--max-context",
        "256",
    ]);
    cmd
}

/// Runs the built `headroom` binary with `args` and checks that it succeeded.
pub fn headroom(args: &[&str]) -> Output {
    let out = headroom_command().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs the built `headroom` binary with `args`, checks that it failed with
/// exit code 1 (an error, not a panic), and returns its stderr.
pub fn headroom_fails(args: &[&str]) -> String {
    let out = headroom_command().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    stderr
}

/// Writes `tensors` as one safetensors file.
pub fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) {
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(path, &refs).unwrap();
}

/// Writes `cfg` and `weights` into `dir` as a checkpoint folder: the Hugging
/// Face `config.json` and one `model.safetensors` with transformers' `model.`
/// names (`lm_head.weight` stays bare), after `edit` changed the tensor list.
pub fn write_checkpoint(
    dir: &Path,
    cfg: &ModelConfig,
    weights: &Weights,
    edit: impl FnOnce(&mut Vec<(String, Tensor)>),
) {
    std::fs::write(dir.join("config.json"), cfg.to_hf_json().to_string()).unwrap();
    let mut tensors: Vec<(String, Tensor)> = weights
        .iter()
        .map(|(n, t)| {
            let name = if n == "lm_head.weight" {
                n.to_string()
            } else {
                format!("model.{n}")
            };
            (name, t.clone())
        })
        .collect();
    edit(&mut tensors);
    write_tensors(&dir.join("model.safetensors"), &tensors);
}

/// The JSON header of safetensors file bytes (u64 header length, JSON
/// header, little-endian data) and where the data starts.
pub fn safetensors_header(bytes: &[u8]) -> (serde_json::Value, usize) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
}

/// Reads the f32 tensor `name` of a safetensors file: its shape and values.
pub fn read_f32_tensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let (header, data_start) = safetensors_header(&bytes);
    let t = &header[name];
    assert_eq!(t["dtype"], "F32", "{}", path.display());
    let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
    let [start, end]: [usize; 2] = serde_json::from_value(t["data_offsets"].clone()).unwrap();
    let data: Vec<f32> = bytes[data_start + start..data_start + end]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

/// Relative Frobenius error of `a` against the reference `b`.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// The address a `headroom serve` child prints on its first stdout line
/// (`listening on http://ADDR ...`); panics on anything else.
pub fn listening_addr(child: &mut std::process::Child) -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader};
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the child's stdout is piped"))
        .read_line(&mut line)
        .unwrap();
    line.strip_prefix("listening on http://")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .unwrap()
}

/// Stops a `headroom serve` child with SIGTERM, asserts it exits 0 and
/// returns its stderr (piped).
pub fn stop_server(mut child: std::process::Child) -> String {
    use std::io::Read;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("the child's stderr is piped")
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    stderr
}
