//! Reading a request body under the connection limits (a middleware on
//! every route): a declared `Content-Length` over the body limit is a 413
//! before any byte of the body is read; a body that takes longer than the
//! body timeout is a 408; both close the connection.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The whole body read within the limits, then the route.
pub async fn read_body(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let limit = state.config.body_limit_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return closing(&state, ApiError::too_large(limit));
    }
    let (parts, body) = req.into_parts();
    let timeout = state.config.limits.body_timeout;
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let err = if too_large {
                ApiError::too_large(limit)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            };
            return closing(&state, err);
        }
        Err(_) => {
            return closing(
                &state,
                ApiError::timeout(format!(
                    "the request body did not arrive within the body timeout of {} s",
                    timeout.as_secs_f64()
                )),
            )
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `e` with `Connection: close` (the rest of the body is never read).
fn closing(state: &AppState, e: ApiError) -> Response {
    state.metrics.http_error(e.status.as_u16());
    let mut r = e.into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
