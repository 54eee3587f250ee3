//! API-key authentication (a middleware on every route): with a key set,
//! `/v1/*` (and `/health`, `/metrics` when the probes are protected) need
//! `Authorization: Bearer KEY`, compared in constant time; anything else is
//! a 401 in OpenAI's error shape. Also the start-up warning for a server
//! reachable from the network without a key ([`exposure_warning`]).

use crate::error::ApiError;
use crate::state::{ApiKey, AppState};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The route, or 401 when it needs the key and the request lacks it.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(ApiKey(key)) = state.config.api_key.as_ref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    let probe = path == "/health" || path == "/metrics";
    if probe && !state.config.protect_probes {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let err = match given {
        None => ApiError::unauthorized(
            "missing API key: send `Authorization: Bearer KEY` (the server's --api-key)",
        ),
        Some(k) if !same(k.as_bytes(), key.as_bytes()) => {
            ApiError::unauthorized("incorrect API key provided")
        }
        Some(_) => return next.run(req).await,
    };
    state.metrics.http_error(401);
    let mut r = err.into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// `given == expected` in time that depends only on `expected`'s length.
pub fn same(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= g ^ e;
    }
    std::hint::black_box(diff) == 0
}

/// A warning when `host` may be reachable from other machines and no key is set.
pub fn exposure_warning(host: &str, has_key: bool) -> Option<String> {
    if has_key {
        return None;
    }
    let loopback = match host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    (!loopback).then(|| {
        format!(
            "warning: listening on {host} without an API key: anyone who can reach this \
             address can use the server (set --api-key or HEADROOM_API_KEY)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_exactly_and_never_print() {
        assert_eq!(
            format!("{:?}", ApiKey("s3cr3t".into())),
            "ApiKey(<redacted>)"
        );
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secreT", b"secret"));
        assert!(!same(b"secret1", b"secret"));
        assert!(!same(b"secre", b"secret"));
        assert!(!same(b"", b"secret"));
        // A given byte equal to the complement filler still differs by length.
        assert!(!same(&[!b's'], b"s\0"));
    }

    #[test]
    fn only_non_loopback_hosts_without_a_key_warn() {
        assert!(exposure_warning("127.0.0.1", false).is_none());
        assert!(exposure_warning("::1", false).is_none());
        assert!(exposure_warning("[::1]", false).is_none());
        assert!(exposure_warning("localhost", false).is_none());
        assert!(exposure_warning("0.0.0.0", true).is_none());
        let w = exposure_warning("0.0.0.0", false).unwrap();
        assert!(w.contains("0.0.0.0") && w.contains("--api-key"), "{w}");
        assert!(exposure_warning("example.com", false).is_some());
    }
}
