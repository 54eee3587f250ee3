//! Running one checked request on the generator and answering it: the whole
//! response, or a server-sent event stream (`data: {chunk}` lines, the
//! usage chunk when asked, `data: [DONE]`). A request of `n` choices submits
//! `n` sequences (choice `i` seeded `seed + i`), each one
//! [`crate::choice::Running`] (detokenised, stop strings, the output parser,
//! log probabilities when asked, cancellation when the client goes away),
//! answered together by `crate::choices`; a completion with `echo` starts
//! with the prompt's text.

use crate::choice::Running;
use crate::choices;
use crate::error::ApiError;
use crate::generator::{GenerateRequest, SubmitError};
use crate::job::Job;
use crate::shapes::Endpoint;
use crate::state::AppState;
use axum::response::Response;
use std::sync::Arc;

/// Maps a submit refusal to its answer.
pub fn refusal(e: SubmitError) -> ApiError {
    match e {
        SubmitError::NeverFits { .. } | SubmitError::TooLong { .. } => {
            ApiError::too_long(e.to_string())
        }
        SubmitError::QueueFull { .. } => ApiError::busy(e.to_string()),
        SubmitError::ShuttingDown => ApiError::unavailable(e.to_string()),
    }
}

/// Submits `job` (one sequence per choice) and answers it (streamed when asked).
pub async fn run(state: Arc<AppState>, job: Job) -> Result<Response, ApiError> {
    // The server's stop ids are the model's end-of-turn ids (the engine adds EOS):
    // `ignore_eos` drops both.
    let mut stop_token_ids = if job.plan.ignore_eos {
        Vec::new()
    } else {
        state.config.stop_token_ids.clone()
    };
    stop_token_ids.sort_unstable();
    stop_token_ids.dedup();
    let prompt_tokens = job.prompt_ids.len();
    let echo = if job.plan.echo && job.head.endpoint == Endpoint::Completion {
        state
            .codec
            .decode(&job.prompt_ids)
            .map_err(|e| ApiError::internal(format!("decoding the prompt to echo it: {e}")))?
    } else {
        String::new()
    };
    let mut runs = Vec::with_capacity(job.plan.n);
    for index in 0..job.plan.n {
        let mut sampling = job.plan.sampling;
        sampling.seed = sampling.seed.wrapping_add(index as u64);
        let stream = state
            .generator
            .submit(GenerateRequest {
                prompt_ids: job.prompt_ids.clone(),
                sampling,
                max_tokens: job.max_tokens,
                stop_token_ids: stop_token_ids.clone(),
                ignore_eos: job.plan.ignore_eos,
                extras: job.plan.extras,
            })
            .map_err(refusal)?;
        tracing::debug!(
            ms = job.arrived.elapsed().as_secs_f64() * 1e3,
            "request submitted to the engine"
        );
        runs.push(Running::new(
            &state,
            &job,
            index,
            stream,
            prompt_tokens,
            echo.clone(),
        ));
    }
    if job.plan.stream {
        Ok(choices::sse(job.head, job.plan.include_usage, runs))
    } else {
        choices::whole(job.head, runs).await
    }
}
