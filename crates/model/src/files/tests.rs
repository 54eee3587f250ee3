use super::*;

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

#[test]
fn a_fifo_is_refused_without_blocking_and_says_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.safetensors");
    mkfifo(&fifo);
    // Opening a FIFO with no writer would block forever; the check must not open it.
    let e = read_regular(&fifo, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("FIFO") && e.contains("model.safetensors"), "{e}");
}

#[test]
fn a_folder_and_a_device_are_named_and_sizes_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let e = check_regular(dir.path(), 10).unwrap_err().to_string();
    assert!(e.contains("is a folder"), "{e}");
    let e = check_regular(Path::new("/dev/null"), 10)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a device"), "{e}");
    let p = dir.path().join("x");
    std::fs::write(&p, b"abcd").unwrap();
    assert_eq!(read_regular(&p, 4).unwrap(), b"abcd");
    let e = read_regular(&p, 3).unwrap_err().to_string();
    assert!(e.contains("above the limit of 3 bytes"), "{e}");
    let e = check_regular(&dir.path().join("nope"), 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn a_failed_write_leaves_the_previous_file_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    write_bytes(&path, &[], b"old").unwrap();
    let e = write_atomic(&path, &[], |w| {
        w.write_all(b"partial")?;
        Err(std::io::Error::other("no space left (simulated)"))
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("out.json") && e.contains("simulated"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    write_bytes(&path, &[], b"new").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn symlinks_fifos_and_folders_are_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"keep").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = dir.path().join("fifo.json");
    mkfifo(&fifo);
    for (p, kind) in [
        (&link, "a symbolic link"),
        (&fifo, "a FIFO"),
        (&dir.path().to_path_buf(), "a folder"),
    ] {
        let e = write_bytes(p, &[], b"x").unwrap_err().to_string();
        assert!(e.contains(kind) && e.contains("refusing to replace"), "{e}");
    }
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    let e = write_bytes(Path::new("/dev/null"), &[], b"x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("a device"), "{e}");
}

#[test]
fn an_output_that_is_an_input_or_its_hard_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("p.jsonl");
    std::fs::write(&input, b"{\"prompt\": \"hi\"}\n").unwrap();
    let e = write_bytes(&input, &[&input], b"x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("same file as the input"), "{e}");
    let hard = dir.path().join("hard.jsonl");
    std::fs::hard_link(&input, &hard).unwrap();
    let e = write_bytes(&hard, &[&input], b"x").unwrap_err().to_string();
    assert!(e.contains("same file as the input"), "{e}");
    assert_eq!(std::fs::read(&input).unwrap(), b"{\"prompt\": \"hi\"}\n");
    write_bytes(&dir.path().join("out.jsonl"), &[&input], b"x").unwrap();
}
