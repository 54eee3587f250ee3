//! `--synthetic NAME | --model DIR`: where a command's model comes from.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct ModelSource {
    /// A built-in synthetic model: tiny-d256, tiny-d64, qwen3.6-35b-a3b[:layers=N].
    #[arg(long, value_name = "NAME")]
    pub synthetic: Option<String>,

    /// A Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
}
