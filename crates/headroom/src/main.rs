//! The `headroom` command line: one subcommand per file under `cmd/`.

mod arg_checks;
mod attention_setup;
mod backend_select;
mod capacity_args;
mod cmd;
mod describe;
mod engine_args;
mod global;
mod input_file;
mod model_source;
mod output;
mod progress_view;
mod shape_args;
mod tp;
mod warmup_mode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "headroom",
    version,
    about = "Long-prompt prefill for the Qwen3.5 / Qwen3.6 hybrid family with hardware-qualified attention",
    long_about = "Headroom runs, on each machine, the attention route that was measured best there \
                  (composed query-blocked attention with block qL, or a fused flash-attention kernel), \
                  records the evidence, and never silently applies an unmeasured setting.\n\n\
                  Start with `headroom doctor --synthetic tiny-d256` to see what this machine resolves to."
)]
struct Cli {
    #[command(flatten)]
    global: global::GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the hardware fingerprint, backends, qualification registry and the attention each layer resolves to.
    Doctor(cmd::doctor::Args),
    /// Benchmarks: one attention call (attention), the model's TTFT (ttft), prefill per
    /// attention setting (prefill), a server under load (serve); checks of bench files (validate).
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// The CUDA kernel artifact gate (build, verify: NVRTC, no GPU needed); on a GPU, correctness checks and timing.
    #[command(subcommand)]
    Kernels(cmd::kernels::KernelsCommand),
    /// Run a prefill and write the logits of every position to a safetensors file.
    Logits(cmd::logits::Args),
    /// Measure this machine's attention routes and write qualification entries with evidence.
    Qualify(cmd::qualify::Args),
    /// Generate text from a prompt (greedy by default), streamed to stdout.
    Generate(cmd::generate::Args),
    /// Serve the model over an OpenAI-compatible HTTP API (chat and text completions, streaming, metrics).
    Serve(cmd::serve::Args),
}

/// Loads NVRTC / cuBLAS from the pip wheels of `python3` when the system has
/// none (before cudarc loads them by soname), and points the kernel compiler
/// at the wheels' CUDA headers unless `HEADROOM_CUDA_INCLUDE` is set.
fn use_pip_wheels() {
    use headroom_hardware::wheels;
    for o in wheels::origins() {
        tracing::debug!("{o}");
    }
    let include = headroom_cuda::nvrtc::INCLUDE_ENV;
    if std::env::var_os(include).is_none() {
        if let Some(dir) = wheels::find_wheel_headers(&wheels::python_site_packages()) {
            // Single-threaded here: nothing else reads the environment yet.
            std::env::set_var(include, dir);
        }
    }
}

fn main() -> std::process::ExitCode {
    let matches = arg_checks::allow_negative_numbers(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    global::init_logging(&cli.global);
    use_pip_wheels();
    let result = match cli.command {
        Command::Doctor(a) => cmd::doctor::run(a, &cli.global),
        Command::Bench(c) => cmd::bench::run(c, &cli.global),
        Command::Kernels(c) => global::refuse_attention_flags(&cli.global, "kernels")
            .and_then(|()| cmd::kernels::run(c, &cli.global)),
        Command::Logits(a) => cmd::logits::run(a, &cli.global),
        Command::Generate(a) => cmd::generate::run(a, &cli.global),
        Command::Qualify(a) => global::refuse_attention_flags(&cli.global, "qualify")
            .and_then(|()| cmd::qualify::run(a, &cli.global)),
        Command::Serve(a) => cmd::serve::run(a, &cli.global),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // `headroom ... | head -1`: the reader is gone; nothing left to say.
        Err(e) if output::is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
