//! Files the project reads and writes, checked the same way everywhere.
//!
//! Reading ([`check_regular`], [`open_regular`], [`read_regular`]): only a
//! regular file of at most a given size is opened, so a FIFO, device or
//! folder given where a file is expected is refused (by what it is) before
//! anything can block on it, and at most `limit + 1` bytes are ever read.
//!
//! Writing ([`write_atomic`], [`write_bytes`]): the data goes to a new
//! temporary file in the target's folder, is flushed and fsynced, then
//! renamed over the target, so a failed write (ENOSPC, an error of the
//! producer) leaves the previous file intact. An existing target that is
//! not a regular file (a symlink, device, FIFO or folder) is refused with
//! one message, and so is a target that is the same file (device + inode,
//! so hard links count) as one of the run's inputs.

use std::fs::{File, Metadata};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A refused or failed file read or write; every message names the path.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not something this operation accepts (what it is is said).
    #[error("{path}: {reason}")]
    Refused { path: String, reason: String },
    /// An operating-system error while doing `op` (e.g. "writing").
    #[error("{path}: {op} failed: {error}")]
    Io {
        path: String,
        op: &'static str,
        error: std::io::Error,
    },
}

impl FileError {
    fn refused(path: &Path, reason: impl Into<String>) -> FileError {
        FileError::Refused {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }

    fn io(path: &Path, op: &'static str, error: std::io::Error) -> FileError {
        FileError::Io {
            path: path.display().to_string(),
            op,
            error,
        }
    }
}

/// What a non-regular file is, in words ("a folder", "a FIFO (named pipe)").
pub fn kind_of(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Checks that `path` (symlinks followed) is a regular file of at most
/// `limit` bytes; returns its metadata. Opens nothing.
pub fn check_regular(path: &Path, limit: u64) -> Result<Metadata, FileError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileError::refused(path, "does not exist"),
        _ => FileError::io(path, "reading its metadata", e),
    })?;
    if !meta.is_file() {
        return Err(FileError::refused(
            path,
            format!("is {}, not a regular file", kind_of(&meta)),
        ));
    }
    if meta.len() > limit {
        return Err(FileError::refused(
            path,
            format!("{} bytes, above the limit of {limit} bytes", meta.len()),
        ));
    }
    Ok(meta)
}

/// Opens `path` for reading after [`check_regular`]; the opened file is
/// checked again (it may have been replaced in between). Returns the file
/// and its size.
pub fn open_regular(path: &Path, limit: u64) -> Result<(File, u64), FileError> {
    check_regular(path, limit)?;
    let file = File::open(path).map_err(|e| FileError::io(path, "opening", e))?;
    let meta = file
        .metadata()
        .map_err(|e| FileError::io(path, "reading its metadata", e))?;
    if !meta.is_file() || meta.len() > limit {
        return Err(FileError::refused(
            path,
            "changed while being opened; not read",
        ));
    }
    Ok((file, meta.len()))
}

/// Reads the whole of `path`, a regular file of at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let (file, len) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, "reading", e))?;
    if bytes.len() as u64 > limit {
        return Err(FileError::refused(
            path,
            format!("grew above the limit of {limit} bytes while being read"),
        ));
    }
    Ok(bytes)
}

/// As [`read_regular`], as UTF-8 text.
pub fn read_regular_text(path: &Path, limit: u64) -> Result<String, FileError> {
    let bytes = read_regular(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        FileError::refused(
            path,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Whether `a` and `b` are the same file (device and inode).
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Checks that `out` may be replaced: when it exists it is a regular file
/// (not a symlink, device, FIFO or folder), and it is not the same file as
/// any of `inputs` (compared by device and inode, so a hard link or a
/// symlink to an input is caught). Inputs that do not exist are skipped.
pub fn check_output(out: &Path, inputs: &[&Path]) -> Result<(), FileError> {
    if out.as_os_str().is_empty() {
        return Err(FileError::refused(out, "the output path is empty"));
    }
    let meta = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(FileError::io(out, "reading its metadata", e)),
    };
    if !meta.file_type().is_file() {
        return Err(FileError::refused(
            out,
            format!(
                "exists and is {}; an output must be a new or regular file (refusing to replace it)",
                kind_of(&meta)
            ),
        ));
    }
    for input in inputs {
        if let Ok(m) = std::fs::metadata(input) {
            if same_file(&meta, &m) {
                return Err(FileError::refused(
                    out,
                    format!(
                        "is the same file as the input {}; refusing to overwrite it",
                        input.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The folder that holds `path` (`.` for a bare file name).
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh temporary file next to `path`, created exclusively.
fn create_temp(path: &Path) -> Result<(File, PathBuf), FileError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let folder = folder_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let mut last = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = folder.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(FileError::io(path, "creating a temporary file", e)),
        }
    }
    Err(FileError::io(
        path,
        "creating a temporary file",
        last.unwrap_or_else(|| std::io::Error::other("no free name")),
    ))
}

/// Writes `path` through `produce`, atomically: after [`check_output`]
/// against `inputs`, `produce` writes into a temporary file in the same
/// folder, which is flushed, fsynced and renamed over `path`. On any error
/// (of `produce` or of the file system) the temporary file is removed and
/// the previous `path`, if any, is left as it was.
pub fn write_atomic(
    path: &Path,
    inputs: &[&Path],
    produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), FileError> {
    write_atomic_via_path(path, inputs, |tmp| {
        let file = std::fs::OpenOptions::new().write(true).open(tmp)?;
        let mut w = BufWriter::new(file);
        produce(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?;
        Ok(())
    })
}

/// As [`write_atomic`] for a producer that writes a file by its path (a
/// library that only writes to a named file): `produce` is given the path
/// of the new, empty temporary file to fill.
pub fn write_atomic_via_path(
    path: &Path,
    inputs: &[&Path],
    produce: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), FileError> {
    check_output(path, inputs)?;
    let (file, tmp) = create_temp(path)?;
    drop(file);
    let result = (|| {
        produce(&tmp).map_err(|e| FileError::io(path, "writing", e))?;
        // The producer must have left a regular file there.
        check_regular(&tmp, u64::MAX)?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| FileError::io(path, "syncing to disk", e))?;
        // The target may have changed since the first check.
        check_output(path, inputs)?;
        std::fs::rename(&tmp, path).map_err(|e| FileError::io(path, "renaming into place", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    // Make the rename itself durable (best effort: some file systems refuse).
    if let Ok(dir) = File::open(folder_of(path)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// [`write_atomic`] of a byte string.
pub fn write_bytes(path: &Path, inputs: &[&Path], bytes: &[u8]) -> Result<(), FileError> {
    write_atomic(path, inputs, |w| w.write_all(bytes))
}

#[cfg(test)]
mod tests;
