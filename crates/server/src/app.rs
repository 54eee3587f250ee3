//! The router ([`router`]) and the server loop with graceful shutdown
//! ([`serve`]): `POST /v1/chat/completions`, `POST /v1/completions`,
//! `GET /v1/models`, `GET /health`, `GET /metrics`; JSON errors for bodies
//! too large, unknown paths and methods.

use crate::completion;
use crate::error::ApiError;
use crate::job::Job;
use crate::metrics::Outcome;
use crate::openai::{ChatRequest, CompletionRequest};
use crate::params::{self, Plan};
use crate::parse::ParserConfig;
use crate::prompt;
use crate::shapes::{Endpoint, Head};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The server's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.body_limit_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::net::body::read_body,
        ))
        // Outermost: a request without the key is refused before its body is read.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_key,
        ))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` resolves, then stops accepting,
/// answers new requests 503, lets in-flight requests finish for `grace`,
/// then shuts the generator down (which ends the rest) and returns. The
/// connection limits are `state.config.limits` (see [`crate::net`]).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let app = router(state.clone());
    crate::net::serve(listener, app, state, shutdown, grace).await
}

/// The body, or 413 / 400.
fn body(state: &AppState, b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.config.body_limit_bytes)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })
}

/// Counts an error answer in the metrics.
fn answer(state: &AppState, endpoint: Endpoint, r: Result<Response, ApiError>) -> Response {
    match r {
        Ok(r) => r,
        Err(e) => {
            state.metrics.http_error(e.status.as_u16());
            state.metrics.request(endpoint.label(), Outcome::Rejected);
            e.into_response()
        }
    }
}

async fn chat(State(state): State<Arc<AppState>>, b: Result<Bytes, BytesRejection>) -> Response {
    let arrived = Instant::now();
    let r = async {
        let req: ChatRequest = crate::body_json::parse_request(&body(&state, b)?)?;
        let plan = check(&state, &req.common, Endpoint::Chat)?;
        let p = render_off_workers(&state, req).await?;
        job(&state, Endpoint::Chat, plan, p.ids, arrived, Some(p.parser))
    };
    let r = match r.await {
        Ok(job) => completion::run(state.clone(), job).await,
        Err(e) => Err(e),
    };
    answer(&state, Endpoint::Chat, r)
}

async fn completions(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    let r = async {
        let req: CompletionRequest = crate::body_json::parse_request(&body(&state, b)?)?;
        let plan = check(&state, &req.common, Endpoint::Completion)?;
        let ids = prompt::completion_prompt(&state, &req.prompt)?;
        tracing::debug!(
            prompt_tokens = ids.len(),
            read_ms = arrived.elapsed().as_secs_f64() * 1e3,
            "completion request read"
        );
        job(&state, Endpoint::Completion, plan, ids, arrived, None)
    };
    let r = match r.await {
        Ok(job) => completion::run(state.clone(), job).await,
        Err(e) => Err(e),
    };
    answer(&state, Endpoint::Completion, r)
}

/// Renders and encodes a chat prompt on a blocking thread (never on the async
/// workers), answering 400 once the template's time limit passed (its fuel
/// and the render's own deadline stop the thread).
async fn render_off_workers(
    state: &Arc<AppState>,
    req: ChatRequest,
) -> Result<prompt::ChatPrompt, ApiError> {
    let limits = *state.template.limits();
    let st = state.clone();
    let task = tokio::task::spawn_blocking(move || prompt::chat_prompt(&st, &req));
    match tokio::time::timeout(limits.time, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ApiError::internal(format!(
            "rendering the chat template failed: {e}"
        ))),
        Err(_) => Err(ApiError::bad_param(
            "messages",
            limits.exceeded(crate::template::Limit::Time),
        )),
    }
}

/// Draining, parameters, model name.
fn check(
    state: &AppState,
    common: &crate::openai::CommonParams,
    _: Endpoint,
) -> Result<Plan, ApiError> {
    if state.draining() {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    state.generator.health().map_err(ApiError::unavailable)?;
    let plan = params::plan(common, state.next_id().wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
    if let Some(m) = &plan.model {
        if *m != state.config.served_model_name {
            return Err(ApiError::model_not_found(
                m,
                &state.config.served_model_name,
            ));
        }
    }
    Ok(plan)
}

fn job(
    state: &AppState,
    endpoint: Endpoint,
    plan: Plan,
    ids: Vec<u32>,
    arrived: Instant,
    parser: Option<ParserConfig>,
) -> Result<Job, ApiError> {
    let max_tokens = params::resolve_max_tokens(
        plan.max_tokens,
        state.config.default_max_tokens,
        ids.len(),
        state.generator.max_context(),
    )?;
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completion => "cmpl",
    };
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Job {
        head: Head {
            endpoint,
            id: format!("{prefix}-{}", state.next_id()),
            created,
            model: state.config.served_model_name.clone(),
        },
        prompt_ids: ids,
        plan,
        max_tokens,
        arrived,
        parser,
    })
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    let c = &state.config;
    axum::Json(json!({"object": "list", "data": [{
        "id": c.served_model_name, "object": "model", "created": c.created,
        "owned_by": "headroom", "max_model_len": state.generator.max_context(),
    }]}))
    .into_response()
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "draining"})),
        )
            .into_response();
    }
    if let Err(why) = state.generator.health() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "unhealthy", "error": why})),
        )
            .into_response();
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state.metrics.render(&state.generator.stats());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
