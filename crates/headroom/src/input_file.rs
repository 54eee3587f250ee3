//! Reading a file the user named (`--prompt-file`, `--prompts`, `--ids`,
//! `bench validate FILE`): regular files only (a FIFO, device or folder is
//! refused before it is opened, so nothing waits on a writer), and never
//! more than a limit: `limit + 1` bytes are read at most, so a file that
//! grows after the check is still refused (all through
//! `headroom_model::files`). Every error names the flag, the file and what
//! it is or the limit.

use std::path::Path;

/// Reads `path` (given as `what`, e.g. `--prompt-file`) if it is a regular
/// file of at most `limit` bytes ([`headroom_model::files::read_regular`]).
pub fn read_input_file(what: &str, path: &Path, limit: u64) -> anyhow::Result<Vec<u8>> {
    headroom_model::files::read_regular(path, limit).map_err(|e| anyhow::anyhow!("{what} {e}"))
}

/// As [`read_input_file`], as UTF-8 text.
pub fn read_input_text(what: &str, path: &Path, limit: u64) -> anyhow::Result<String> {
    let bytes = read_input_file(what, path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what} {}: not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_at_the_limit_is_read_and_one_byte_more_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.txt");
        std::fs::write(&p, b"abcd").unwrap();
        assert_eq!(read_input_file("--prompt-file", &p, 4).unwrap(), b"abcd");
        let e = read_input_file("--prompt-file", &p, 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--prompt-file") && e.contains("p.txt"), "{e}");
        assert!(e.contains("limit of 3 bytes"), "{e}");
    }

    #[test]
    fn folders_and_devices_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_input_file("--ids", dir.path(), 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--ids") && e.contains("not a regular file"),
            "{e}"
        );
        let e = read_input_file("--ids", Path::new("/dev/zero"), 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.txt");
        std::fs::write(&p, b"ab\xffcd").unwrap();
        let e = read_input_text("--prompt-file", &p, 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.txt") && e.contains("offset 2"), "{e}");
    }
}
