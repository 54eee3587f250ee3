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

/// The same choice, optional: commands that can run without a model (e.g. `doctor`)
/// fall back to [`DEFAULT_SYNTHETIC`].
#[derive(Args, Debug, Clone, Default)]
#[group(required = false, multiple = false)]
pub struct OptionalModelSource {
    /// A built-in synthetic model: tiny-d256, tiny-d64, qwen3.6-35b-a3b[:layers=N] (default: tiny-d256).
    #[arg(long, value_name = "NAME")]
    pub synthetic: Option<String>,

    /// A Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
}

/// The built-in default model of commands whose model is optional.
pub const DEFAULT_SYNTHETIC: &str = "tiny-d256";

impl OptionalModelSource {
    /// The chosen source, or the built-in default synthetic model.
    pub fn or_default(&self) -> ModelSource {
        match (&self.synthetic, &self.model) {
            (None, None) => ModelSource {
                synthetic: Some(DEFAULT_SYNTHETIC.to_string()),
                model: None,
            },
            _ => ModelSource {
                synthetic: self.synthetic.clone(),
                model: self.model.clone(),
            },
        }
    }
}

impl ModelSource {
    /// `synthetic tiny-d64` / the checkpoint folder, for the lines people read.
    pub fn label(&self) -> String {
        match (&self.synthetic, &self.model) {
            (Some(name), _) => format!("synthetic {}", crate::output::escape_controls(name)),
            (None, Some(dir)) => crate::output::escape_controls(&dir.display().to_string()),
            (None, None) => "no model".into(),
        }
    }
}
