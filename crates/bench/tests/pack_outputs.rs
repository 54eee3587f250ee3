//! `bench/gpu/pack_outputs.sh` (sourced by every device-call script): its
//! `pack_outputs NAME` leaves one archive under `$O` holding every file and
//! folder that was there but earlier parts' archives (`*.tgz`, left beside
//! it), and does nothing where `$O` is empty. Needs `bash` and `tar` (CI has
//! them).

use std::path::Path;
use std::process::Command;

fn pack(dir: &Path, name: &str) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/pack_outputs.sh");
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -u; source '{}'; pack_outputs {name}",
            script.display()
        ))
        .env("O", dir)
        .output()
        .expect("bash runs")
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn every_output_ends_in_one_archive() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("timing.txt"), "gdn_decode_timing: n=1\n").unwrap();
    std::fs::write(dir.path().join(".hidden"), "h").unwrap();
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    std::fs::write(dir.path().join("logs/serve.log"), "listening on").unwrap();
    let out = pack(dir.path(), "call9");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(listing(dir.path()), ["call9.tgz"]);
    let list = Command::new("tar")
        .arg("-tzf")
        .arg(dir.path().join("call9.tgz"))
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8(list.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    names.sort();
    assert_eq!(names, [".hidden", "logs", "logs/serve.log", "timing.txt"]);
}

#[test]
fn an_empty_output_folder_is_left_empty() {
    let dir = tempfile::tempdir().unwrap();
    let out = pack(dir.path(), "call9");
    assert!(out.status.success(), "{out:?}");
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn a_later_part_leaves_the_earlier_archive_beside_its_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bench.txt"), "gdn_split t=32768\n").unwrap();
    assert!(pack(dir.path(), "call5").status.success());
    std::fs::write(dir.path().join("details.txt"), "Duration 1.3 ms\n").unwrap();
    let out = pack(dir.path(), "call4");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(listing(dir.path()), ["call4.tgz", "call5.tgz"]);
    let list = |name: &str| {
        let out = Command::new("tar")
            .arg("-tzf")
            .arg(dir.path().join(name))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(list("call4.tgz").trim(), "details.txt");
    assert_eq!(list("call5.tgz").trim(), "bench.txt");
}
