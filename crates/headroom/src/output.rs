//! Output that never panics: stdout writes that return their error (a
//! closed pipe ends the program quietly with exit 0, any other write error
//! is exit 1 with one message), output files checked *before* the work that
//! produces them (not one of the inputs, not an existing symlink, device,
//! FIFO or folder, folder exists and is writable) and written atomically
//! through [`headroom_model::files`], and text from files or models escaped
//! before it reaches a terminal.

use anyhow::bail;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `text` to stdout and flushes. Use through [`out!`] / [`outln!`].
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// `print!` that returns an [`anyhow::Result`] instead of panicking.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(&format!($($arg)*)).context("writing to stdout")
    };
}

/// `println!` that returns an [`anyhow::Result`] instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(&(format!($($arg)*) + "\n")).context("writing to stdout")
    };
}

/// Whether `e` is (caused by) a write to a closed pipe, e.g. `headroom ... | head -1`.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The canonical form of `p` when it exists (symlinks resolved), else `None`.
fn canonical(p: &Path) -> Option<PathBuf> {
    p.canonicalize().ok()
}

/// Checks, before any work, that `out` can be written: it is not one of
/// `inputs` (files or folders that the run reads; an output inside an input
/// folder is allowed only when it does not replace an input file), it is not
/// a folder, and its folder exists and accepts a new file. `flag` names the
/// option in errors.
pub fn check_output_path(flag: &str, out: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    let shown = out.display();
    if out.as_os_str().is_empty() {
        bail!("{flag}: the output path is empty");
    }
    if let Some(real_out) = canonical(out) {
        for input in inputs {
            if let Some(real_in) = canonical(input) {
                if real_in == real_out {
                    bail!(
                        "{flag} {shown} is one of the inputs ({}); refusing to overwrite it",
                        input.display()
                    );
                }
                if real_in.is_dir() && real_out.starts_with(&real_in) {
                    bail!(
                        "{flag} {shown} is an existing file of the input folder {}; refusing to overwrite it",
                        input.display()
                    );
                }
            }
        }
    }
    // A symlink, device, FIFO or folder; a hard link to an input.
    headroom_model::files::check_output(out, inputs).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    let folder = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !folder.is_dir() {
        bail!(
            "{flag} {shown}: the folder {} does not exist",
            folder.display()
        );
    }
    // Probe: create and remove a file next to the output.
    let probe = folder.join(format!(".headroom-write-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| {
        anyhow::anyhow!(
            "{flag} {shown}: the folder {} is not writable: {e}",
            folder.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same folder,
/// fsync and a rename ([`headroom_model::files::write_bytes`]): a failed
/// write leaves the previous file intact; an existing symlink, device, FIFO
/// or folder at `path` is refused.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_output(path, &[], bytes)
}

/// As [`write_file_atomically`], also refusing a `path` that is the same
/// file (device + inode) as one of `inputs`.
pub fn write_output(path: &Path, inputs: &[&Path], bytes: &[u8]) -> anyhow::Result<()> {
    headroom_model::files::write_bytes(path, inputs, bytes).map_err(anyhow::Error::from)
}

pub use headroom_policy::escape_controls;

/// `text` with control characters escaped, except newlines and tabs (for
/// generated text streamed to a terminal: a model can emit any byte).
pub fn escape_generated(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_that_are_inputs_or_unwritable_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("model.safetensors");
        std::fs::write(&input, b"x").unwrap();
        let err = check_output_path("--out", &input, &[&input]).unwrap_err();
        assert!(err.to_string().contains("one of the inputs"), "{err}");
        let err = check_output_path("--out", dir.path(), &[]).unwrap_err();
        assert!(err.to_string().contains("is a folder"), "{err}");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let err = check_output_path("--json", &link, &[]).unwrap_err();
        assert!(
            err.to_string().contains("--json") && err.to_string().contains("symbolic link"),
            "{err}"
        );
        std::fs::remove_file(&link).unwrap();
        let hard = dir.path().join("hard.safetensors");
        std::fs::hard_link(&input, &hard).unwrap();
        let err = check_output_path("--out", &hard, &[&input]).unwrap_err();
        assert!(err.to_string().contains("same file as the input"), "{err}");
        std::fs::remove_file(&hard).unwrap();
        let err = check_output_path("--out", &dir.path().join("missing/x.bin"), &[]).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        check_output_path("--out", &dir.path().join("new.bin"), &[&input]).unwrap();
        let err = check_output_path("--out", &input, &[dir.path()]).unwrap_err();
        assert!(err.to_string().contains("input folder"), "{err}");
        check_output_path("--out", &dir.path().join("new.bin"), &[dir.path()]).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "probe removed"
        );
    }

    #[test]
    fn atomic_write_leaves_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_file_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        assert!(write_file_atomically(&dir.path().join("no/such/x"), b"{}").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn generated_text_keeps_newlines_and_escapes_other_controls() {
        assert_eq!(escape_generated("a\nb\tc"), "a\nb\tc");
        assert_eq!(escape_generated("x\u{1b}[2Jy\u{7}"), "x\\u{1b}[2Jy\\u{7}");
    }
}
