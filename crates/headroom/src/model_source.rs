//! `--synthetic NAME | --model DIR`: where a command's model comes from.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct ModelSource {
    /// A built-in synthetic model: tiny-d256, tiny-d64, qwen3.6-35b-a3b, qwen3.5-122b-a10b, each optionally with -fp8 (FP8 block-scaled weights) and :layers=N.
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
    /// A built-in synthetic model: tiny-d256, tiny-d64, qwen3.6-35b-a3b, qwen3.5-122b-a10b, each optionally with -fp8 (FP8 block-scaled weights) and :layers=N (default: tiny-d256).
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

/// The largest `generation_config.json` read (real ones are under 1 KiB).
const MAX_GENERATION_CONFIG_BYTES: u64 = 1 << 20;

/// The text of `DIR/generation_config.json`: `None` when there is none, or
/// (with a warning saying why) when it is not a regular file of at most
/// 1 MiB or not UTF-8. A FIFO there is never opened, so nothing blocks.
pub fn read_generation_config(dir: &std::path::Path) -> Option<String> {
    let path = dir.join("generation_config.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return None;
    }
    match headroom_model::files::read_regular_text(&path, MAX_GENERATION_CONFIG_BYTES) {
        Ok(text) => Some(text),
        Err(e) => {
            tracing::warn!("{e}; ignoring it");
            None
        }
    }
}

#[cfg(test)]
mod generation_config_tests {
    use super::read_generation_config;

    #[test]
    fn a_fifo_or_folder_generation_config_is_skipped_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_generation_config(dir.path()), None);
        let path = dir.path().join("generation_config.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        // Reading a FIFO with no writer would block this test forever.
        assert_eq!(read_generation_config(dir.path()), None);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(read_generation_config(dir.path()), None);
        std::fs::remove_dir(&path).unwrap();
        std::fs::write(&path, "{\"eos_token_id\": 7}").unwrap();
        assert_eq!(
            read_generation_config(dir.path()).as_deref(),
            Some("{\"eos_token_id\": 7}")
        );
    }
}
