//! Headroom's OpenAI-compatible HTTP server (axum + tokio) over any
//! [`Generator`] (the engine, through `headroom serve`; a scripted fake in tests).
//!
//! * [`app`] — the routes; [`net`] — the server loop: connection limits
//!   (timeouts, the connection cap) and graceful shutdown;
//! * [`openai`] / [`body_json`] / [`params`] / [`prompt`] — request bodies, reading
//!   them (errors name the JSON path), their checks, prompt ids; [`unsupported`] —
//!   OpenAI parameters refused by name;
//! * [`history`] / [`tools`] — chat messages and tools as the template sees them;
//! * [`parse`] — the model's output split into content, reasoning and tool calls;
//! * [`completion`] / [`choices`] / [`shapes`] / [`stop`] — running a request
//!   (its `n` choices answered together), response and SSE chunk shapes, stop
//!   strings across token boundaries; [`logprobs`] — log probabilities in
//!   OpenAI's shapes;
//! * [`template`] / [`pyjson`] — chat templates (minijinja, Python's `tojson`);
//!   [`metrics`] — Prometheus text; [`gpu_metrics`] — the GPU's clock, power
//!   and energy in it;
//! * [`auth`] — the API key; [`error`] — OpenAI error objects; [`generator`] — the engine seam (the
//!   engine's own request / event / error / stats types); [`fake`];
//! * [`client`] — a minimal HTTP/1.1 client for tests and `bench serve`.

pub mod app;
pub mod auth;
pub mod body_json;
pub mod choice;
pub mod choices;
pub mod client;
pub mod completion;
pub mod engine_adapter;
pub mod error;
mod exposition;
pub mod fake;
pub mod generator;
pub mod gpu_metrics;
pub mod history;
pub mod job;
pub mod logprobs;
pub mod metrics;
pub mod net;
pub mod openai;
pub mod params;
pub mod parse;
pub mod prompt;
mod prompt_de;
pub mod pyjson;
pub mod run;
pub mod shapes;
pub mod state;
pub mod stop;
pub mod template;
pub mod tools;
pub mod unsupported;

pub use app::{router, serve};
pub use generator::{Generator, TokenStream};
pub use state::{AppState, ServerConfig};
pub use template::ChatTemplate;
