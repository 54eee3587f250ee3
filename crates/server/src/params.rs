//! Checks the shared request parameters ([`CommonParams`]) and turns them
//! into what the engine runs: sampling, the token budget, stop strings and
//! the streaming options. Every refusal is a 400 naming the parameter.

use crate::error::ApiError;
use crate::openai::{CommonParams, Stop};
use headroom_core::ops::SamplingParams;
use headroom_engine::{SamplingExtras, MAX_TOP_LOGPROBS};

/// Most stop strings per request, and bytes per stop string.
pub const MAX_STOP_STRINGS: usize = 16;
pub const MAX_STOP_BYTES: usize = 1024;
/// Most choices (`n`) per request.
pub const MAX_CHOICES: usize = 8;
/// Most alternatives per token of a completion's `logprobs` (OpenAI's limit);
/// chat's `top_logprobs` allows [`MAX_TOP_LOGPROBS`].
pub const MAX_COMPLETION_LOGPROBS: usize = 5;

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
    /// Penalties and log probabilities.
    pub extras: SamplingExtras,
    /// Choices to generate; choice `i` samples with seed `seed + i`.
    pub n: usize,
    /// Completions: the prompt text starts the answer.
    pub echo: bool,
}

/// Checks `p`; `fallback_seed` seeds a sampled request that gave no seed.
pub fn plan(p: &CommonParams, fallback_seed: u64) -> Result<Plan, ApiError> {
    let n = match p.n {
        None => 1,
        Some(n) if (1..=MAX_CHOICES as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::bad_param(
                "n",
                format!("n must be in 1..={MAX_CHOICES} (got {n})"),
            ))
        }
    };
    let extras = extras(p)?;
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
        extras,
        n,
        echo: p.echo.unwrap_or(false),
    })
}

/// Penalties and log probabilities. `logprobs` is `true` / `false` (chat,
/// with `top_logprobs`) or a count (completions); which form an endpoint
/// takes is checked in `crate::unsupported`.
fn extras(p: &CommonParams) -> Result<SamplingExtras, ApiError> {
    let penalty = |name: &str, v: Option<f64>| -> Result<f32, ApiError> {
        match v {
            None => Ok(0.0),
            Some(v) if v.is_finite() && (-2.0..=2.0).contains(&v) => Ok(v as f32),
            Some(v) => Err(ApiError::bad_param(
                name,
                format!("{name} must be in [-2, 2] (got {v})"),
            )),
        }
    };
    let repetition_penalty = match p.repetition_penalty {
        None => 1.0,
        Some(v) if v.is_finite() && v > 0.0 && v <= 1e6 => v as f32,
        Some(v) => {
            return Err(ApiError::bad_param(
                "repetition_penalty",
                format!("repetition_penalty must be > 0 (1 is off; got {v})"),
            ))
        }
    };
    let top = match p.top_logprobs {
        None => None,
        Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
        Some(k) => {
            return Err(ApiError::bad_param(
                "top_logprobs",
                format!("top_logprobs must be in 0..={MAX_TOP_LOGPROBS} (got {k})"),
            ))
        }
    };
    let logprobs = match &p.logprobs {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {
            if top.is_some_and(|k| k > 0) {
                return Err(ApiError::bad_param(
                    "top_logprobs",
                    "top_logprobs needs logprobs: true",
                ));
            }
            None
        }
        Some(serde_json::Value::Bool(true)) => Some(top.unwrap_or(0)),
        Some(v) => match v.as_i64() {
            Some(k) if (0..=MAX_COMPLETION_LOGPROBS as i64).contains(&k) => Some(k as usize),
            _ => {
                return Err(ApiError::bad_param(
                    "logprobs",
                    format!(
                        "logprobs must be true or false (chat) or an integer in                          0..={MAX_COMPLETION_LOGPROBS} (completions) (got {v})"
                    ),
                ))
            }
        },
    };
    Ok(SamplingExtras {
        presence_penalty: penalty("presence_penalty", p.presence_penalty)?,
        frequency_penalty: penalty("frequency_penalty", p.frequency_penalty)?,
        repetition_penalty,
        logprobs,
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
            (r#"{"n": 0}"#, "n"),
            (r#"{"n": 9}"#, "n"),
            (r#"{"top_logprobs": 21, "logprobs": true}"#, "top_logprobs"),
            (r#"{"top_logprobs": 2}"#, "top_logprobs"),
            (r#"{"logprobs": 6}"#, "logprobs"),
            (r#"{"logprobs": "yes"}"#, "logprobs"),
            (r#"{"presence_penalty": 2.5}"#, "presence_penalty"),
            (r#"{"frequency_penalty": -3}"#, "frequency_penalty"),
            (r#"{"repetition_penalty": 0}"#, "repetition_penalty"),
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
    fn choices_penalties_and_logprobs_are_read() {
        let p = plan(&params("{}"), 0).unwrap();
        assert_eq!((p.n, p.echo), (1, false));
        assert_eq!(p.extras, SamplingExtras::default());
        let p = plan(
            &params(
                r#"{"n": 8, "echo": true, "logprobs": true, "top_logprobs": 20,
                    "presence_penalty": -2, "frequency_penalty": 1.5, "repetition_penalty": 1.2}"#,
            ),
            0,
        )
        .unwrap();
        assert_eq!((p.n, p.echo), (8, true));
        assert_eq!(
            p.extras,
            SamplingExtras {
                presence_penalty: -2.0,
                frequency_penalty: 1.5,
                repetition_penalty: 1.2,
                logprobs: Some(20),
            }
        );
        let e = |json| plan(&params(json), 0).unwrap().extras.logprobs;
        assert_eq!(e(r#"{"logprobs": 3}"#), Some(3));
        assert_eq!(e(r#"{"logprobs": 0}"#), Some(0));
        assert_eq!(e(r#"{"logprobs": true}"#), Some(0));
        assert_eq!(e(r#"{"logprobs": false, "top_logprobs": 0}"#), None);
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
