//! `headroom bench serve` refuses bad flags with exit 1 and a message naming
//! the flag, before it sends any request (no server needed).

mod common;

use common::headroom_fails;

fn bench_serve(extra: &[&str]) -> String {
    let mut args = vec!["bench", "serve", "--url", "http://127.0.0.1:9"];
    args.extend_from_slice(extra);
    headroom_fails(&args)
}

#[test]
fn bad_values_exit_1_naming_their_flag() {
    let dir = common::TempDir::new("bench-serve-flags");
    let png = dir.0.join("plot.png");
    let missing = dir.0.join("no-such-folder").join("plot.svg");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--concurrency", "0"], "--concurrency"),
        (vec!["--concurrency", "1,abc"], "--concurrency"),
        (vec!["--concurrency", "1,16,16"], "--concurrency"),
        (vec!["--concurrency", "1,5000"], "--concurrency"),
        (vec!["--concurrency", ""], "--concurrency"),
        (vec!["--ignore-eos", "maybe"], "--ignore-eos"),
        (vec!["--sample-ms", "soon"], "--sample-ms"),
        (vec!["--plot", png.to_str().unwrap()], "--plot"),
        (vec!["--plot", missing.to_str().unwrap()], "--plot"),
        (vec!["--requests", "0"], "--requests"),
        (vec!["--prompt-len", "0"], "--prompt-len"),
        (vec!["--max-tokens", "0"], "--max-tokens"),
        (vec!["--time-limit-s", "0"], "--time-limit-s"),
        (vec!["--turns", "0"], "--turns"),
        (vec!["--turns", "3", "--turn-len", "1048576"], "--turn-len"),
    ];
    for (args, flag) in cases {
        let stderr = bench_serve(&args);
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    assert!(!png.exists() && !missing.exists());
}
