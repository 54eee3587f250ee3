//! A request's choices answered together: the whole response holds every
//! choice (by `index`) with usage summed over them (the prompt counted
//! once); a stream interleaves the choices' chunks as they come, then sends
//! the usage chunk (when asked) and `[DONE]` once every choice ended.

use crate::choice::{ChoiceEnd, Item, Running};
use crate::error::ApiError;
use crate::shapes::{usage, Head};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;
use std::convert::Infallible;

/// The usage of every choice together: prompt (and cached) tokens once,
/// completion tokens summed.
pub fn total(ends: &[ChoiceEnd]) -> Value {
    let completion = ends.iter().map(|e| e.completion).sum();
    let first = ends.first().copied().unwrap_or_default();
    usage(first.prompt, completion, first.cached)
}

/// Collects every choice; the first failure answers the request.
pub(crate) async fn whole(head: Head, runs: Vec<Running>) -> Result<Response, ApiError> {
    let results = futures_util::future::join_all(runs.into_iter().map(|r| async move {
        let state = r.state();
        r.collect().await.map_err(|e| (e, state))
    }))
    .await;
    let mut choices = Vec::with_capacity(results.len());
    let mut ends = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok((choice, end)) => {
                choices.push(choice);
                ends.push(end);
            }
            Err((e, state)) => {
                // Counted here (outcome `error` by the tracker), not as a rejection.
                state.metrics.http_error(e.status.as_u16());
                return Ok(e.into_response());
            }
        }
    }
    let body = head.combine(choices, total(&ends));
    Ok(axum::Json(body).into_response())
}

/// Where the merged stream is.
enum Phase {
    Choices,
    /// The usage chunk went out; `[DONE]` is next.
    Usage,
    Finished,
}

fn data(d: impl AsRef<str>) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(d))
}

/// The server-sent event stream of every choice.
pub(crate) fn sse(head: Head, with_usage: bool, runs: Vec<Running>) -> Response {
    let merged = futures_util::stream::select_all(runs.into_iter().map(|r| r.chunks().boxed()));
    let start = (merged, Vec::<ChoiceEnd>::new(), Phase::Choices);
    let events = futures_util::stream::unfold(start, move |(mut merged, mut ends, phase)| {
        let head = head.clone();
        async move {
            match phase {
                Phase::Finished => None,
                Phase::Usage => Some((data("[DONE]"), (merged, ends, Phase::Finished))),
                Phase::Choices => loop {
                    match merged.next().await {
                        Some(Item::Data(d)) => {
                            return Some((data(d), (merged, ends, Phase::Choices)))
                        }
                        Some(Item::Done(end)) => ends.push(end),
                        None if with_usage && !ends.is_empty() => {
                            let u = head.usage_chunk(total(&ends)).to_string();
                            return Some((data(u), (merged, ends, Phase::Usage)));
                        }
                        None => return Some((data("[DONE]"), (merged, ends, Phase::Finished))),
                    }
                },
            }
        }
    });
    Sse::new(events).into_response()
}
