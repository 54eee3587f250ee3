//! `ignore_eos`: with it a request generates exactly `max_tokens` even when
//! the greedy path draws an EOS id; without it the same EOS ends the request.

mod common;

use common::{core, drive, ids, tiny};
use headroom_engine::{EngineConfig, FinishReason, GenerateRequest};

fn engine(eos: Vec<u32>) -> EngineConfig {
    EngineConfig {
        max_running: 2,
        max_context: 256,
        eos_token_ids: eos,
        ..EngineConfig::default()
    }
}

#[test]
fn ignore_eos_generates_exactly_max_tokens_through_a_drawn_eos() {
    let max_tokens = 8;
    let r = GenerateRequest::greedy(ids(12, 512, 5), max_tokens);
    // The greedy path without any EOS: the tokens we then declare EOS.
    let mut c = core(tiny("tiny-d64"), engine(Vec::new()));
    let s = c.submit(r.clone()).unwrap();
    let free = drive(&mut c, vec![s]).remove(0);
    assert_eq!(free.streamed.len(), max_tokens);
    let eos = free.streamed[2];
    let first_eos = free.streamed.iter().position(|&t| t == eos).unwrap();

    // EOS honoured: the request stops at the first drawn EOS.
    let mut c = core(tiny("tiny-d64"), engine(vec![eos]));
    let s = c.submit(r.clone()).unwrap();
    let stopped = drive(&mut c, vec![s]).remove(0);
    assert_eq!(stopped.reason, Some(FinishReason::Stop));
    assert_eq!(stopped.streamed, free.streamed[..first_eos].to_vec());
    assert_eq!(stopped.usage.unwrap().completion_tokens, first_eos + 1);

    // EOS ignored: every one of max_tokens is generated and streamed.
    let mut c = core(tiny("tiny-d64"), engine(vec![eos]));
    let s = c
        .submit(GenerateRequest {
            ignore_eos: true,
            ..r.clone()
        })
        .unwrap();
    let ignored = drive(&mut c, vec![s]).remove(0);
    assert_eq!(ignored.reason, Some(FinishReason::Length));
    assert_eq!(ignored.streamed, free.streamed);
    assert_eq!(ignored.usage.unwrap().completion_tokens, max_tokens);

    // An explicit stop id still ends an ignore_eos request.
    let mut c = core(tiny("tiny-d64"), engine(vec![eos]));
    let s = c
        .submit(GenerateRequest {
            ignore_eos: true,
            stop_token_ids: vec![eos],
            ..r
        })
        .unwrap();
    let explicit = drive(&mut c, vec![s]).remove(0);
    assert_eq!(explicit.reason, Some(FinishReason::Stop));
    assert_eq!(explicit.streamed, free.streamed[..first_eos].to_vec());
}
