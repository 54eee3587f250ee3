//! One choice of a request being generated ([`Running`]): its token
//! stream from the engine, detokenised incrementally and passed through the
//! stop strings, then (chat) through the output parser into content,
//! reasoning and tool calls, with its log probabilities when asked and the
//! request's outcome recorded when it ends; collected whole
//! ([`Running::collect`]) or as stream items ([`Item`], ending with
//! [`ChoiceEnd`]) that `crate::choices` answers together.

use crate::error::ApiError;
use crate::generator::{FinishReason, StreamEvent, TokenStream, Usage};
use crate::job::Job;
use crate::logprobs::LogprobLog;
use crate::metrics::Outcome;
use crate::parse::{push_event, Event, OutputParser};
use crate::shapes::{tool_call_json, ChatReply, Endpoint, Head};
use crate::state::AppState;
use crate::stop::StopMatcher;
use headroom_model::tokenizer::StreamDecoder;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// How one choice ended: its token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChoiceEnd {
    pub prompt: usize,
    pub completion: usize,
    pub cached: usize,
}

/// One item of a choice's stream.
pub enum Item {
    /// An SSE `data:` payload (a chunk or an error object).
    Data(String),
    /// The choice ended normally.
    Done(ChoiceEnd),
}

/// Records the request's outcome when it ends, `Cancelled` if dropped early.
struct Tracker {
    state: Arc<AppState>,
    endpoint: &'static str,
    outcome: Option<Outcome>,
    /// Whether this choice counts the request (the first of `n` does).
    counted: bool,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if self.counted {
            let outcome = self.outcome.unwrap_or(Outcome::Cancelled);
            self.state.metrics.request(self.endpoint, outcome);
        }
    }
}

/// Incremental detokenisation + stop strings + latency metrics.
struct TextOut {
    decoder: StreamDecoder,
    stops: StopMatcher,
    tokens: usize,
    arrived: Instant,
    last: Option<Instant>,
}

impl TextOut {
    fn new(stops: Vec<String>, arrived: Instant) -> TextOut {
        TextOut {
            decoder: StreamDecoder::new(),
            stops: StopMatcher::new(stops),
            tokens: 0,
            arrived,
            last: None,
        }
    }

    /// Text to emit for token `id`, and whether a stop string matched.
    fn token(&mut self, state: &AppState, id: u32) -> Result<(String, bool), ApiError> {
        let now = Instant::now();
        match self.last {
            None => {
                let ttft = (now - self.arrived).as_secs_f64();
                state.metrics.ttft(ttft);
                tracing::debug!(
                    ms = ttft * 1e3,
                    "first token of a request drawn and read by the server"
                );
            }
            Some(t) => state.metrics.inter_token((now - t).as_secs_f64()),
        }
        self.last = Some(now);
        self.tokens += 1;
        let piece = self
            .decoder
            .push(&state.codec, id)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let fed = self.stops.feed(&piece);
        Ok((fed.emit, fed.stopped))
    }

    /// The held-back text at the end, and whether it held a stop string.
    fn finish(&mut self, state: &AppState) -> Result<(String, bool), ApiError> {
        let piece = self
            .decoder
            .finish(&state.codec)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let fed = self.stops.feed(&piece);
        if fed.stopped {
            return Ok((fed.emit, true));
        }
        Ok((fed.emit + &self.stops.finish(), false))
    }
}

/// Cancels a request whose output a stop string ended and reads its
/// stream to the end for the engine's usage (the prompt's cached tokens
/// are known only there); `None` when the stream ended without one.
/// Tokens the engine drew after the stop string are dropped.
async fn usage_after_cancel(stream: &mut dyn TokenStream) -> Option<Usage> {
    stream.cancel();
    loop {
        match stream.next().await? {
            StreamEvent::Finished { usage, .. } => return Some(usage),
            StreamEvent::Error(_) => return None,
            StreamEvent::Token(_) | StreamEvent::Logprobs(_) => {}
        }
    }
}

/// How a choice ended.
pub(crate) enum End {
    Done {
        finish: &'static str,
        prompt: usize,
        completion: usize,
        cached: usize,
    },
    Failed(ApiError),
}

/// One choice of a request being generated.
pub(crate) struct Running {
    tracker: Tracker,
    text: TextOut,
    stream: Option<Box<dyn TokenStream>>,
    parser: Option<OutputParser>,
    head: Head,
    /// The choice's `index`.
    index: usize,
    prompt_tokens: usize,
    include_usage: bool,
    /// The tokens' log probabilities, when asked.
    logprobs: Option<LogprobLog>,
    /// The prompt's text starting a completion's answer (`echo`), or empty.
    echo: String,
}

impl Running {
    /// Choice `index` of `job`, reading `stream`.
    pub(crate) fn new(
        state: &Arc<AppState>,
        job: &Job,
        index: usize,
        stream: Box<dyn TokenStream>,
        prompt_tokens: usize,
        echo: String,
    ) -> Running {
        Running {
            tracker: Tracker {
                state: state.clone(),
                endpoint: job.head.endpoint.label(),
                outcome: None,
                counted: index == 0,
            },
            text: TextOut::new(job.plan.stop.clone(), job.arrived),
            stream: Some(stream),
            parser: job.parser.clone().map(OutputParser::new),
            head: job.head.clone(),
            index,
            prompt_tokens,
            include_usage: job.plan.include_usage,
            logprobs: job
                .plan
                .extras
                .logprobs
                .map(|_| LogprobLog::new(job.head.endpoint, echo.chars().count())),
            echo,
        }
    }

    /// The events the next engine event produced, and how the request
    /// ended if it did (the token stream is then dropped: a stop string
    /// cancels the rest).
    async fn step(&mut self) -> (Vec<Event>, Option<End>) {
        let (text, end) = self.next_text().await;
        let mut events = Vec::new();
        match self.parser.as_mut() {
            Some(p) => {
                events = p.feed(&text);
                if end.is_some() {
                    events.extend(p.finish());
                }
            }
            None => push_event(&mut events, Event::Content(text)),
        }
        let calls = self.parser.as_ref().map_or(0, OutputParser::calls);
        let end = end.map(|e| match e {
            End::Done {
                finish: "stop",
                prompt,
                completion,
                cached,
            } if calls > 0 => End::Done {
                finish: "tool_calls",
                prompt,
                completion,
                cached,
            },
            e => e,
        });
        (events, end)
    }

    /// The text the next engine event produced, and how the request ended if it did.
    async fn next_text(&mut self) -> (String, Option<End>) {
        let state = self.tracker.state.clone();
        let Some(stream) = self.stream.as_mut() else {
            return (
                String::new(),
                Some(End::Failed(ApiError::internal("the request already ended"))),
            );
        };
        let mut event = stream.next().await;
        while let Some(StreamEvent::Logprobs(lp)) = &event {
            if let Some(log) = self.logprobs.as_mut() {
                log.push(&state.codec, lp);
            }
            event = stream.next().await;
        }
        let (text, end) = match event {
            Some(StreamEvent::Token(id)) => match self.text.token(&state, id) {
                Ok((text, false)) => return (text, None),
                Ok((text, true)) => {
                    self.tracker.outcome = Some(Outcome::Stop);
                    let usage = usage_after_cancel(stream.as_mut()).await;
                    let end = End::Done {
                        finish: "stop",
                        prompt: usage.map_or(self.prompt_tokens, |u| u.prompt_tokens),
                        completion: self.text.tokens,
                        cached: usage.map_or(0, |u| u.cached_tokens),
                    };
                    (text, end)
                }
                Err(e) => (String::new(), End::Failed(e)),
            },
            Some(StreamEvent::Finished { reason, usage, .. }) => {
                let (finish, outcome) = match reason {
                    FinishReason::Stop => ("stop", Outcome::Stop),
                    FinishReason::Length => ("length", Outcome::Length),
                    FinishReason::Cancelled => ("stop", Outcome::Cancelled),
                };
                self.tracker.outcome = Some(outcome);
                match self.text.finish(&state) {
                    Ok((rest, matched)) => {
                        let end = End::Done {
                            finish: if matched { "stop" } else { finish },
                            prompt: usage.prompt_tokens,
                            completion: usage.completion_tokens,
                            cached: usage.cached_tokens,
                        };
                        (rest, end)
                    }
                    Err(e) => (String::new(), End::Failed(e)),
                }
            }
            Some(StreamEvent::Logprobs(_)) => unreachable!("log probabilities are read above"),
            Some(StreamEvent::Error(msg)) => (String::new(), End::Failed(ApiError::internal(msg))),
            None => {
                let why = match state.generator.health() {
                    Err(why) => format!("the engine failed: {why}"),
                    Ok(()) => "the engine dropped the request".to_string(),
                };
                (String::new(), End::Failed(ApiError::internal(why)))
            }
        };
        if let End::Failed(_) = end {
            self.tracker.outcome = Some(Outcome::Error);
        }
        self.stream = None;
        (text, Some(end))
    }

    /// Collects the whole choice: its JSON (`index`, `logprobs` set) and how it ended.
    pub(crate) async fn collect(mut self) -> Result<(Value, ChoiceEnd), ApiError> {
        let mut reply = ChatReply::default();
        loop {
            let (events, end) = self.step().await;
            for e in events {
                match e {
                    Event::Content(t) => reply.content.push_str(&t),
                    Event::Reasoning(t) => reply.reasoning.push_str(&t),
                    Event::ToolCall(c) => {
                        let id = self.head.tool_call_id(reply.tool_calls.len());
                        reply.tool_calls.push(tool_call_json(&id, &c));
                    }
                }
            }
            match end {
                None => continue,
                Some(End::Failed(e)) => return Err(e),
                Some(End::Done {
                    finish,
                    prompt,
                    completion,
                    cached,
                }) => {
                    let usage = crate::shapes::usage(prompt, completion, cached);
                    let mut body = match self.head.endpoint {
                        Endpoint::Chat => self.head.chat_response(&reply, finish, usage),
                        Endpoint::Completion => {
                            let text = format!("{}{}", self.echo, reply.content);
                            self.head.response(&text, finish, usage)
                        }
                    };
                    let choice = self.finish_choice(body["choices"][0].take(), true);
                    let end = ChoiceEnd {
                        prompt,
                        completion,
                        cached,
                    };
                    return Ok((choice, end));
                }
            }
        }
    }

    /// Sets a choice's `index` and (when asked) its `logprobs`: all of them
    /// (`whole`) or those not sent yet.
    fn finish_choice(&mut self, mut choice: Value, whole: bool) -> Value {
        choice["index"] = self.index.into();
        if let Some(log) = self.logprobs.as_mut() {
            choice["logprobs"] = if whole { log.whole() } else { log.take() };
        }
        choice
    }

    /// The server's state (its metrics count an error answer).
    pub(crate) fn state(&self) -> Arc<AppState> {
        self.tracker.state.clone()
    }

    /// The choice's stream chunks, ending with [`Item::Done`] or its error.
    pub(crate) fn chunks(self) -> impl futures_util::Stream<Item = Item> + Send {
        let start = Streaming {
            run: self,
            queue: VecDeque::new(),
            first: true,
            calls: 0,
            done: false,
        };
        futures_util::stream::unfold(start, |mut s| async move {
            loop {
                if let Some(item) = s.queue.pop_front() {
                    return Some((item, s));
                }
                if s.done {
                    return None;
                }
                s.advance().await;
            }
        })
    }
}

/// The stream's state between events.
struct Streaming {
    run: Running,
    queue: VecDeque<Item>,
    first: bool,
    /// Tool calls sent so far (the next one's `index`).
    calls: usize,
    done: bool,
}

impl Streaming {
    /// Queues a chunk with the choice's `index` and log probabilities not sent yet.
    fn push(&mut self, mut v: Value) {
        let choice = v["choices"][0].take();
        v["choices"][0] = self.run.finish_choice(choice, false);
        self.queue.push_back(Item::Data(v.to_string()));
    }

    /// Waits for the next event and queues its chunks.
    async fn advance(&mut self) {
        let with_usage = self.run.include_usage;
        if self.first && !self.run.echo.is_empty() {
            let echo = std::mem::take(&mut self.run.echo);
            let chunk = self.run.head.chunk(Some(&echo), true, None, with_usage);
            self.first = false;
            self.push(chunk);
        }
        let (events, end) = self.run.step().await;
        if events.is_empty() && self.first && end.is_none() {
            let chunk = self.run.head.chunk(Some(""), true, None, with_usage);
            self.first = false;
            self.push(chunk);
        }
        for e in &events {
            let chunk = match (self.run.head.endpoint, e) {
                (Endpoint::Completion, Event::Content(t)) => {
                    self.run.head.chunk(Some(t), self.first, None, with_usage)
                }
                (_, e) => {
                    let delta = self.run.head.event_delta(e, self.calls);
                    if let Event::ToolCall(_) = e {
                        self.calls += 1;
                    }
                    self.run
                        .head
                        .delta_chunk(delta, self.first, None, with_usage)
                }
            };
            self.first = false;
            self.push(chunk);
        }
        let Some(end) = end else { return };
        match end {
            End::Done {
                finish,
                prompt,
                completion,
                cached,
            } => {
                let last = self
                    .run
                    .head
                    .chunk(None, self.first, Some(finish), with_usage);
                self.push(last);
                self.queue.push_back(Item::Done(ChoiceEnd {
                    prompt,
                    completion,
                    cached,
                }));
            }
            End::Failed(e) => {
                self.run.state().metrics.http_error(e.status.as_u16());
                self.queue.push_back(Item::Data(e.body().to_string()));
            }
        }
        self.done = true;
    }
}
