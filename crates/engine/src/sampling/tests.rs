//! The host sampling path against the CPU backend's sampler, penalties on
//! constructed rows, log-softmax and top-k.

use super::*;
use headroom_core::ops::rng;

fn params(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p,
        top_k,
        seed,
    }
}

fn row(extras: SamplingExtras, prompt: &[u32], generated: &[u32]) -> HostRow<'static> {
    HostRow {
        row: 0,
        params: params(0.0, 1.0, 0, 0),
        step: 0,
        extras,
        prompt: Box::leak(prompt.to_vec().into_boxed_slice()),
        generated: Box::leak(generated.to_vec().into_boxed_slice()),
    }
}

#[test]
fn the_host_sampler_draws_what_the_cpu_backend_draws() {
    for r in 0..40u64 {
        let logits: Vec<f32> = (0..50).map(|i| rng::normal(r, i) * 3.0).collect();
        for (s, p) in [
            params(0.0, 1.0, 0, r),
            params(1.0, 1.0, 0, r),
            params(0.7, 0.9, 0, r),
            params(1.3, 1.0, 5, r),
            params(1.0, 0.5, 10, r),
        ]
        .iter()
        .enumerate()
        {
            let step = r * 7 + s as u64;
            assert_eq!(
                sample_row(&logits, p, step),
                headroom_cpu::sample::sample_row(&logits, p, step),
                "row {r} params {p:?}"
            );
        }
    }
}

#[test]
fn log_softmax_normalises_and_top_k_orders_with_lowest_index_on_ties() {
    let l = [1.0f32, 3.0, 3.0, f32::NEG_INFINITY, 0.5];
    let lp = log_softmax(&l);
    let total: f64 = lp.iter().map(|&x| (x as f64).exp()).sum();
    assert!((total - 1.0).abs() < 1e-6, "{total}");
    assert_eq!(lp[3], f32::NEG_INFINITY);
    let expect = 1.0f64 - (1.0f64.exp() + 2.0 * 3.0f64.exp() + 0.5f64.exp()).ln();
    assert!((lp[0] as f64 - expect).abs() < 1e-6);
    let top = top_k(&lp, 3);
    assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 0]);
    assert!(top_k(&lp, 0).is_empty());
    assert_eq!(top_k(&lp, 9).len(), 5);
}

#[test]
fn penalties_change_the_chosen_token() {
    // Token 0 leads by 1.0 and was generated twice.
    let raw = [3.0f32, 2.0, 1.0, -1.0];
    let plain = row(SamplingExtras::default(), &[], &[0, 0]);
    assert_eq!(draw(&raw, &plain).unwrap().0, 0);
    let freq = SamplingExtras {
        frequency_penalty: 0.6,
        ..SamplingExtras::default()
    };
    assert_eq!(draw(&raw, &row(freq, &[], &[0, 0])).unwrap().0, 1);
    let pres = SamplingExtras {
        presence_penalty: 1.5,
        ..SamplingExtras::default()
    };
    assert_eq!(draw(&raw, &row(pres, &[], &[0, 0])).unwrap().0, 1);
    // Presence and frequency count generated tokens only: a prompt token is untouched.
    assert_eq!(draw(&raw, &row(pres, &[0], &[])).unwrap().0, 0);
    // Repetition counts the prompt too: 3.0 / 2 = 1.5 < 2.0.
    let rep = SamplingExtras {
        repetition_penalty: 2.0,
        ..SamplingExtras::default()
    };
    assert_eq!(draw(&raw, &row(rep, &[0], &[])).unwrap().0, 1);
    let mut l = raw.to_vec();
    apply_penalties(&mut l, &rep, &[0, 3, 3], &[0]);
    assert_eq!(l, vec![1.5, 2.0, 1.0, -2.0]);
}

#[test]
fn logprobs_are_of_the_raw_distribution_before_penalties() {
    let raw = [3.0f32, 2.0, 1.0, -1.0];
    let e = SamplingExtras {
        frequency_penalty: 2.0,
        logprobs: Some(2),
        ..SamplingExtras::default()
    };
    let (token, lp) = draw(&raw, &row(e, &[], &[0])).unwrap();
    let lp = lp.unwrap();
    let all = log_softmax(&raw);
    assert_eq!((token, lp.token, lp.logprob), (1, 1, all[1]));
    assert_eq!(lp.top, vec![(0, all[0]), (1, all[1])]);
}

#[test]
fn extras_are_checked() {
    let ok = SamplingExtras::default();
    assert!(ok.invalid().is_none() && !ok.on_host());
    for bad in [
        SamplingExtras {
            presence_penalty: 2.5,
            ..ok
        },
        SamplingExtras {
            frequency_penalty: f32::NAN,
            ..ok
        },
        SamplingExtras {
            repetition_penalty: 0.0,
            ..ok
        },
        SamplingExtras {
            logprobs: Some(21),
            ..ok
        },
    ] {
        assert!(bad.invalid().is_some(), "{bad:?}");
    }
    assert!(SamplingExtras {
        logprobs: Some(0),
        ..ok
    }
    .on_host());
}
