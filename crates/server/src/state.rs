//! The state every handler shares ([`AppState`]): the generator, the text
//! codec and chat template, the server's settings (its API key among them,
//! checked by `crate::auth`) and metrics, and the draining flag set at
//! shutdown.

use crate::generator::Generator;
use crate::metrics::Metrics;
use crate::net::limits::ConnLimits;
use crate::template::{ChatTemplate, TemplateLimits};
use headroom_model::tokenizer::TextCodec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// An API key; its `Debug` form hides it.
#[derive(Clone, PartialEq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Settings of one server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The model id clients must name (`model`), listed by `/v1/models`.
    pub served_model_name: String,
    /// Largest request body accepted (413 beyond).
    pub body_limit_bytes: usize,
    /// `max_tokens` of a request that gives none (cut to the context left).
    pub default_max_tokens: usize,
    /// The model's vocabulary (token-id prompts are checked against it).
    pub vocab_size: usize,
    /// Stop ids added to every request (e.g. `<|im_end|>`; the engine adds EOS).
    pub stop_token_ids: Vec<u32>,
    /// Unix seconds the server started (`created` of `/v1/models`).
    pub created: u64,
    /// `enable_thinking` of requests that give none (`None`: the template's default).
    pub enable_thinking: Option<bool>,
    /// Chat output's `<think>…</think>` goes to `reasoning_content` (else to `content`).
    pub reasoning_parser: bool,
    /// Timeouts and the connection cap.
    pub limits: ConnLimits,
    /// With a key, `/v1/*` needs `Authorization: Bearer KEY` (401 otherwise).
    pub api_key: Option<ApiKey>,
    /// With a key, `/health` and `/metrics` need it too.
    pub protect_probes: bool,
    /// Bounds of one chat template render (applied to the template by [`AppState::new`]).
    pub template_limits: TemplateLimits,
}

impl ServerConfig {
    /// Defaults for a model named `name` of `vocab_size` tokens.
    pub fn new(name: &str, vocab_size: usize) -> ServerConfig {
        ServerConfig {
            served_model_name: name.to_string(),
            body_limit_bytes: 4 << 20,
            default_max_tokens: 256,
            vocab_size,
            stop_token_ids: Vec::new(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            enable_thinking: None,
            reasoning_parser: true,
            limits: ConnLimits::default(),
            template_limits: TemplateLimits::default(),
            api_key: None,
            protect_probes: false,
        }
    }
}

/// Everything the handlers share.
pub struct AppState {
    pub generator: Arc<dyn Generator>,
    pub codec: TextCodec,
    pub template: ChatTemplate,
    pub config: ServerConfig,
    pub metrics: Metrics,
    draining: AtomicBool,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(
        generator: Arc<dyn Generator>,
        codec: TextCodec,
        mut template: ChatTemplate,
        config: ServerConfig,
    ) -> AppState {
        template.set_limits(config.template_limits);
        AppState {
            generator,
            codec,
            template,
            config,
            metrics: Metrics::default(),
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// A fresh request number (ids and default seeds).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// True once shutdown began: new requests are answered 503.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}
