//! Options every subcommand shares: attention controls, extra qualification folders, logging.

use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Attention control: fallback | fused | auto. Overrides HEADROOM_ATTN_EXECUTION.
    /// An unknown value falls back to `fallback` with one warning.
    #[arg(long, global = true, value_name = "CONTROL")]
    pub attn_execution: Option<String>,

    /// Composed query block qL (integer >= 0, 0 = one block). Overrides HEADROOM_ATTN_QUERY_BLOCK.
    /// A non-integer or negative value falls back to the built-in 128 with one warning.
    #[arg(long, global = true, value_name = "N", allow_hyphen_values = true)]
    pub attn_query_block: Option<String>,

    /// Extra folder of qualification entries (TOML), besides the built-in ones and HEADROOM_QUALIFICATIONS.
    #[arg(long, global = true, value_name = "DIR")]
    pub qualifications: Option<std::path::PathBuf>,

    /// Log filter (e.g. `info`, `headroom=debug`); default `warn`. Also RUST_LOG.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log: Option<String>,
}

/// Refuses `--attn-execution` / `--attn-query-block` on a command that does
/// not run attention under them (`command` names it): the flags would be
/// silently ignored there.
pub fn refuse_attention_flags(g: &GlobalArgs, command: &str) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        ("--attn-execution", g.attn_execution.is_some()),
        ("--attn-query-block", g.attn_query_block.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(flag, _)| *flag)
    .collect();
    anyhow::ensure!(
        given.is_empty(),
        "{} has no effect on `headroom {command}` (it applies to doctor, logits, generate, \
         serve and bench ttft{}); remove it",
        given.join(" and "),
        match command {
            "bench prefill" | "qualify" => "; this command sets attention per arm: use --arms",
            _ => "",
        }
    );
    Ok(())
}

/// Installs the subscriber: log lines (filtered by `--log` / `RUST_LOG`,
/// default `warn`) on stderr, and progress events (`headroom::progress`) as
/// progress lines when stderr is a terminal, never as log lines.
pub fn init_logging(g: &GlobalArgs) {
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    // Colours only on a terminal, and never with NO_COLOR set (https://no-color.org).
    let ansi = terminal && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing::subscriber::set_global_default(subscriber(g, terminal, ansi));
}

/// The subscriber [`init_logging`] installs, for a stderr that is (or is not) a terminal.
fn subscriber(
    g: &GlobalArgs,
    terminal: bool,
    ansi: bool,
) -> impl tracing::Subscriber + Send + Sync {
    use headroom_core::progress::TARGET;
    use tracing_subscriber::filter::{EnvFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let mut filter = match &g.log {
        Some(f) => EnvFilter::new(f),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
    };
    // Progress events are never log lines, whatever the filter asks for (the
    // most specific directive wins; the filter stays static per call site).
    if let Ok(off) = format!("{TARGET}=off").parse() {
        filter = filter.add_directive(off);
    }
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let progress = crate::progress_view::ProgressLayer::new(terminal)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO));
    tracing_subscriber::registry().with(logs).with(progress)
}
