//! Errors as OpenAI error objects: `{"error": {"message", "type", "param",
//! "code"}}` with the HTTP status that goes with them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400: a malformed body or parameter.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending parameter.
    pub fn bad_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::bad_request(message)
        }
    }

    /// 400: the prompt cannot fit the context or the memory.
    pub fn too_long(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_request(message)
        }
    }

    /// 401: no or a wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
        }
    }

    /// 404: no such model.
    pub fn model_not_found(model: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found_error",
                format!("the model `{model}` does not exist; this server serves `{served}`"),
            )
        }
    }

    /// 413: the body is over the size limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 408: the client was too slow to send its request.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            message,
        )
    }

    /// 429: the engine's queue is full.
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("rate_limit_exceeded"),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
        }
    }

    /// 503: shutting down.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            message,
        )
    }

    /// 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 404 for an unknown path.
    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!("no route {path}"),
        )
    }

    /// 405.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed",
        )
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
