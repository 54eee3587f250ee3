//! `headroom bench validate FILE...`: strict checks of prefill bench files
//! (`headroom_bench::validate`); exit 1 listing every violation.

use anyhow::bail;
use headroom_bench::validate::{validate_files, ValidateOptions};
use std::path::PathBuf;

/// Largest prefill bench file read (bytes).
const MAX_FILE_BYTES: u64 = 256 << 20;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// headroom.bench.prefill/1 files, all of one comparison.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Fewest measured runs per arm and length accepted.
    #[arg(long, default_value_t = 3)]
    pub min_iterations: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for p in &a.files {
        let bytes = crate::input_file::read_input_file("bench validate", p, MAX_FILE_BYTES)?;
        files.push((p.display().to_string(), bytes));
    }
    let opts = ValidateOptions {
        min_iterations: a.min_iterations,
    };
    let (parsed, violations) = validate_files(&files, opts);
    if violations.is_empty() {
        let samples: usize = parsed.iter().map(|f| f.samples.len()).sum();
        println!("valid: {} file(s), {samples} sample(s)", parsed.len());
        return Ok(());
    }
    for v in &violations {
        println!("violation: {v}");
    }
    bail!("{} violation(s)", violations.len())
}
