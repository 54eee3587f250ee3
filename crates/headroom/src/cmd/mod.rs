//! One module per subcommand.

pub mod bench;
pub mod bench_prefill;
pub mod bench_serve;
pub mod bench_ttft;
pub mod bench_validate;
pub mod doctor;
pub mod generate;
pub mod kernels;
pub mod logits;
pub mod qualify;
pub mod serve;
