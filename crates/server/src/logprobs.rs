//! A choice's log probabilities in OpenAI's shapes ([`LogprobLog`]): chat's
//! `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}` and a
//! completion's `{tokens, token_logprobs, top_logprobs, text_offset}`. Each
//! token is shown as its own decoded text (a token that is part of a UTF-8
//! character decodes to U+FFFD); `bytes` are that text's UTF-8 bytes. A
//! logprob of `-inf` (a non-finite logit) is written as OpenAI's -9999.0.

use crate::shapes::Endpoint;
use headroom_engine::TokenLogprobs;
use headroom_model::tokenizer::TextCodec;
use serde_json::{json, Map, Value};

/// What JSON shows for `log 0`.
const LOG_ZERO: f64 = -9999.0;

#[derive(Debug, Clone)]
struct Entry {
    token: String,
    logprob: f64,
    top: Vec<(String, f64)>,
    /// Characters of the choice's text before this token.
    offset: usize,
}

/// The log probabilities of one choice's tokens, as they arrive.
#[derive(Debug, Clone)]
pub struct LogprobLog {
    endpoint: Endpoint,
    entries: Vec<Entry>,
    /// Entries already sent in stream chunks.
    sent: usize,
    /// Characters of text before the next token (an echoed prompt counts).
    offset: usize,
}

/// `x` as JSON shows it: its shortest f32 decimal (`-0.1`, not
/// `-0.10000000149011612`), `-inf` as [`LOG_ZERO`].
fn shown(x: f32) -> f64 {
    if x.is_finite() {
        x.to_string().parse().unwrap_or(x as f64)
    } else {
        LOG_ZERO
    }
}

impl LogprobLog {
    /// An empty log whose first token starts at character `offset`.
    pub fn new(endpoint: Endpoint, offset: usize) -> LogprobLog {
        LogprobLog {
            endpoint,
            entries: Vec::new(),
            sent: 0,
            offset,
        }
    }

    /// Records one drawn token's log probabilities.
    pub fn push(&mut self, codec: &TextCodec, lp: &TokenLogprobs) {
        let text = |id: u32| codec.decode(&[id]).unwrap_or_default();
        let token = text(lp.token);
        let offset = self.offset;
        self.offset += token.chars().count();
        self.entries.push(Entry {
            token,
            logprob: shown(lp.logprob),
            top: lp.top.iter().map(|&(t, x)| (text(t), shown(x))).collect(),
            offset,
        });
    }

    /// Tokens recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every token's log probabilities (the whole response).
    pub fn whole(&self) -> Value {
        self.render(&self.entries)
    }

    /// The tokens not sent yet (a stream chunk), `null` when there are none.
    pub fn take(&mut self) -> Value {
        if self.sent == self.entries.len() {
            return Value::Null;
        }
        let v = self.render(&self.entries[self.sent..]);
        self.sent = self.entries.len();
        v
    }

    fn render(&self, entries: &[Entry]) -> Value {
        match self.endpoint {
            Endpoint::Chat => {
                let item =
                    |t: &str, x: f64| json!({"token": t, "logprob": x, "bytes": t.as_bytes()});
                let content: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let mut v = item(&e.token, e.logprob);
                        v["top_logprobs"] = e.top.iter().map(|(t, x)| item(t, *x)).collect();
                        v
                    })
                    .collect();
                json!({"content": content, "refusal": null})
            }
            Endpoint::Completion => {
                // vLLM's form: the alternatives and the drawn token by their text (two
                // tokens of the same text keep the likelier one).
                let top: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let mut m = Map::new();
                        for (t, x) in &e.top {
                            m.entry(t.clone()).or_insert(json!(x));
                        }
                        m.entry(e.token.clone()).or_insert(json!(e.logprob));
                        Value::Object(m)
                    })
                    .collect();
                json!({
                    "tokens": entries.iter().map(|e| e.token.clone()).collect::<Vec<_>>(),
                    "token_logprobs": entries.iter().map(|e| e.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": entries.iter().map(|e| e.offset).collect::<Vec<_>>(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(token: u32, logprob: f32, top: &[(u32, f32)]) -> TokenLogprobs {
        TokenLogprobs {
            token,
            logprob,
            top: top.to_vec(),
        }
    }

    #[test]
    fn chat_entries_carry_text_bytes_and_alternatives() {
        let mut log = LogprobLog::new(Endpoint::Chat, 0);
        log.push(&TextCodec::Bytes, &lp(72, -0.5, &[(72, -0.5), (105, -1.0)]));
        log.push(&TextCodec::Bytes, &lp(105, f32::NEG_INFINITY, &[]));
        let v = log.whole();
        assert_eq!(v["content"][0]["token"], "H");
        assert_eq!(v["content"][0]["bytes"], json!([72]));
        assert_eq!(v["content"][0]["top_logprobs"][1]["token"], "i");
        assert_eq!(v["content"][0]["top_logprobs"][1]["logprob"], -1.0);
        assert_eq!(v["content"][1]["logprob"], -9999.0);
        assert_eq!(v["content"][1]["top_logprobs"], json!([]));
    }

    #[test]
    fn completion_entries_have_offsets_and_a_stream_takes_each_once() {
        let mut log = LogprobLog::new(Endpoint::Completion, 3);
        log.push(&TextCodec::Bytes, &lp(97, -0.25, &[(98, -0.1)]));
        assert_eq!(log.take()["tokens"], json!(["a"]));
        assert_eq!(log.take(), Value::Null);
        log.push(&TextCodec::Bytes, &lp(98, -0.75, &[]));
        let chunk = log.take();
        assert_eq!(chunk["text_offset"], json!([4]));
        let v = log.whole();
        assert_eq!(v["tokens"], json!(["a", "b"]));
        assert_eq!(v["token_logprobs"], json!([-0.25, -0.75]));
        assert_eq!(v["text_offset"], json!([3, 4]));
        assert_eq!(v["top_logprobs"][0], json!({"b": -0.1, "a": -0.25}));
        assert_eq!(v["top_logprobs"][1], json!({"b": -0.75}));
    }
}
