//! Why a configuration could not be read ([`ConfigError`]).

/// Why a configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("malformed config JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config is not a JSON object")]
    NotAnObject,
    #[error("config has no `model_type`")]
    MissingModelType,
    #[error(
        "unknown model_type `{0}` (supported: qwen3_5_moe, qwen3_5_moe_text, qwen3_5, qwen3_5_text, qwen3_next)"
    )]
    UnknownModelType(String),
    #[error("config is missing the required field `{0}`")]
    MissingField(String),
    #[error("config field `{field}` is invalid: {reason}")]
    InvalidField { field: String, reason: String },
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    #[error(
        "unknown synthetic model `{0}` (available: tiny-d256, tiny-d64, qwen3.6-35b-a3b, qwen3.5-122b-a10b, each optionally with -fp8 and :layers=N)"
    )]
    UnknownSynthetic(String),
}

impl ConfigError {
    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
