//! Checks the shared request parameters ([`CommonParams`]) and turns them
//! into what the engine runs: sampling, the token budget, stop strings and
//! the streaming options. Every refusal is a 400 naming the parameter.

use crate::error::ApiError;
use crate::openai::{CommonParams, Stop};
use headroom_core::ops::SamplingParams;

/// Most stop strings per request, and bytes per stop string.
pub const MAX_STOP_STRINGS: usize = 16;
pub const MAX_STOP_BYTES: usize = 1024;

/// The checked parameters of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub model: Option<String>,
    pub sampling: SamplingParams,
    /// `max_completion_tokens` or `max_tokens`; `None`: the server's default.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Do not stop at the model's end-of-sequence ids.
    pub ignore_eos: bool,
}

/// Checks `p`; `fallback_seed` seeds a sampled request that gave no seed.
pub fn plan(p: &CommonParams, fallback_seed: u64) -> Result<Plan, ApiError> {
    if let Some(n) = p.n {
        if n != 1 {
            return Err(ApiError::bad_param(
                "n",
                format!("only n = 1 is supported (got {n}); send separate requests instead"),
            ));
        }
    }
    let max_tokens = match (p.max_completion_tokens, p.max_tokens) {
        (Some(v), _) => Some(positive("max_completion_tokens", v)?),
        (None, Some(v)) => Some(positive("max_tokens", v)?),
        (None, None) => None,
    };
    let temperature = p.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=100.0).contains(&temperature)) {
        return Err(ApiError::bad_param(
            "temperature",
            format!("temperature must be a number in [0, 100] (got {temperature})"),
        ));
    }
    let top_p = p.top_p.unwrap_or(1.0);
    if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_param(
            "top_p",
            format!("top_p must be in (0, 1] (got {top_p})"),
        ));
    }
    let top_k = match p.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if (1..=i64::from(u32::MAX)).contains(&k) => k as usize,
        Some(k) => {
            return Err(ApiError::bad_param(
                "top_k",
                format!("top_k must be -1, 0 (all tokens) or a positive count (got {k})"),
            ))
        }
    };
    let stop = match &p.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > MAX_STOP_STRINGS {
        return Err(ApiError::bad_param(
            "stop",
            format!(
                "at most {MAX_STOP_STRINGS} stop strings (got {})",
                stop.len()
            ),
        ));
    }
    if let Some(s) = stop
        .iter()
        .find(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ApiError::bad_param(
            "stop",
            format!(
                "each stop string must have 1..={MAX_STOP_BYTES} bytes (got {})",
                s.len()
            ),
        ));
    }
    let include_usage = p.stream_options.as_ref().is_some_and(|o| o.include_usage);
    if p.stream_options.is_some() && !p.stream {
        return Err(ApiError::bad_param(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    let ignore_eos = match &p.ignore_eos {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::bad_param(
                "ignore_eos",
                format!("ignore_eos must be true or false (got {v})"),
            ))
        }
    };
    Ok(Plan {
        model: p.model.clone(),
        sampling: SamplingParams {
            temperature: temperature as f32,
            top_p: top_p as f32,
            top_k,
            seed: p.seed.map(|s| s as u64).unwrap_or(fallback_seed),
        },
        max_tokens,
        stop,
        stream: p.stream,
        include_usage,
        ignore_eos,
    })
}

fn positive(name: &str, v: i64) -> Result<usize, ApiError> {
    if v < 1 {
        return Err(ApiError::bad_param(
            name,
            format!("{name} must be at least 1 (got {v})"),
        ));
    }
    usize::try_from(v).map_err(|_| ApiError::bad_param(name, format!("{name} is too large")))
}

/// The token budget of a request: the asked `max_tokens`, else `default`
/// cut to what the context leaves; a prompt that leaves no room is refused
/// with the numbers.
pub fn resolve_max_tokens(
    asked: Option<usize>,
    default: usize,
    prompt_tokens: usize,
    max_context: usize,
) -> Result<usize, ApiError> {
    if prompt_tokens >= max_context {
        return Err(ApiError::too_long(format!(
            "the prompt has {prompt_tokens} tokens but this model's context is {max_context} tokens \
             (prompt + at least one generated token must fit)"
        )));
    }
    let room = max_context - prompt_tokens;
    match asked {
        Some(m) if m > room => Err(ApiError::too_long(format!(
            "the prompt has {prompt_tokens} tokens and max_tokens is {m}: {} tokens exceed this \
             model's context of {max_context} tokens",
            prompt_tokens.saturating_add(m)
        ))),
        Some(m) => Ok(m),
        None => Ok(default.min(room).max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> CommonParams {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_and_aliases() {
        let p = plan(&params("{}"), 9).unwrap();
        assert_eq!(p.max_tokens, None);
        assert!(!p.ignore_eos);
        assert_eq!(p.sampling.temperature, 1.0);
        assert_eq!(p.sampling.seed, 9);
        let p = plan(
            &params(r#"{"max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_k": -1, "seed": 3, "stop": "x"}"#),
            9,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(p.sampling.temperature, 0.0);
        assert_eq!((p.sampling.top_k, p.sampling.seed), (0, 3));
        assert_eq!(p.stop, vec!["x".to_string()]);
        assert!(
            plan(&params(r#"{"ignore_eos": true}"#), 0)
                .unwrap()
                .ignore_eos
        );
        assert!(
            !plan(&params(r#"{"ignore_eos": false}"#), 0)
                .unwrap()
                .ignore_eos
        );
        assert!(
            !plan(&params(r#"{"ignore_eos": null}"#), 0)
                .unwrap()
                .ignore_eos
        );
    }

    #[test]
    fn bad_values_name_their_parameter() {
        for (json, param) in [
            (r#"{"n": 2}"#, "n"),
            (r#"{"max_tokens": 0}"#, "max_tokens"),
            (r#"{"max_completion_tokens": -3}"#, "max_completion_tokens"),
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"top_p": 1.5}"#, "top_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"stop": [""]}"#, "stop"),
            (r#"{"ignore_eos": "yes"}"#, "ignore_eos"),
            (r#"{"ignore_eos": 1}"#, "ignore_eos"),
            (
                r#"{"stream_options": {"include_usage": true}}"#,
                "stream_options",
            ),
        ] {
            let e = plan(&params(json), 0).unwrap_err();
            assert_eq!(e.status, 400, "{json}");
            assert_eq!(e.param.as_deref(), Some(param), "{json}");
        }
    }

    #[test]
    fn max_tokens_fits_the_context() {
        assert_eq!(resolve_max_tokens(None, 256, 10, 100).unwrap(), 90);
        assert_eq!(resolve_max_tokens(None, 16, 10, 100).unwrap(), 16);
        assert_eq!(resolve_max_tokens(Some(90), 16, 10, 100).unwrap(), 90);
        let e = resolve_max_tokens(Some(91), 16, 10, 100).unwrap_err();
        assert!(
            e.message.contains("101") && e.message.contains("100"),
            "{}",
            e.message
        );
        let e = resolve_max_tokens(None, 16, 100, 100).unwrap_err();
        assert!(e.message.contains("100 tokens"), "{}", e.message);
    }
}
