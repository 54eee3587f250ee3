//! Steps recorded as CUDA graphs on the device itself
//! (`crates/cuda/src/graph.rs`, `Backend::queue_step`), below the engine:
//! an op whose table copy is held during the capture gives the bits it
//! gives queued as it is, capture after capture (the kept graph updated);
//! a key whose first step reads device memory is never captured, a read
//! met inside a capture fails that step and refuses its key, and the
//! stream stays usable; and what the host spends on a
//! recorded step of 300 launches against the same launches queued one by
//! one (printed: the figure the prepared H200 call is after). Needs a GPU:
//! `cargo test --release -p headroom-cuda --test graphs -- --ignored
//! --test-threads=1 --nocapture` (in `bench/gpu/check_backend_ops.sh`).

use headroom_core::ops::{Backend, StepKey, WeightInit};
use headroom_cuda::backend::CudaBackend;
use std::time::Instant;

fn backend() -> CudaBackend {
    let be = CudaBackend::open(0).expect("a CUDA device");
    assert!(be.step_recording().is_ok());
    be.set_step_recording(true);
    be
}

fn key(rows: usize) -> StepKey {
    StepKey {
        rows,
        sequences: rows,
        drawn_ids: false,
    }
}

fn bits(be: &CudaBackend, x: &<CudaBackend as Backend>::Act) -> Vec<u32> {
    be.act_to_f32(x)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn recorded_embeddings_give_the_eager_bits_capture_after_capture() {
    let be = backend();
    let (vocab, hidden) = (1000, 256);
    let table = be
        .init_matrix(vocab, hidden, WeightInit::new(7, 0.0, 0.5))
        .unwrap();
    let mut steps = 0;
    for (i, rows) in [1usize, 1, 1, 3, 1, 3, 1, 1, 5, 1].into_iter().enumerate() {
        // Fresh ids each time: the ids table is a new copy, held during the
        // capture and queued before the graph.
        let ids: Vec<u32> = (0..rows as u32)
            .map(|r| (r * 131 + i as u32 * 37 + 11) % vocab as u32)
            .collect();
        let recorded = be
            .queue_step(key(rows), || be.embed(&table, &ids))
            .unwrap()
            .unwrap();
        steps += 1;
        let eager = be.embed(&table, &ids).unwrap();
        assert_eq!(
            bits(&be, &recorded),
            bits(&be, &eager),
            "step {i}: {rows} rows"
        );
    }
    let st = be.graph_stats();
    println!("{st:?}");
    assert_eq!(st.probed, 3, "the first step of 1, 3 and 5 rows: {st:?}");
    assert_eq!(st.launched, steps - 3);
    assert_eq!(
        (st.instantiated, st.updated),
        (1, 6),
        "one launch, one graph: {st:?}"
    );
    assert_eq!((st.eager, st.refused_keys), (0, 0));
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn reads_are_kept_out_of_captures_and_leave_the_stream_usable() {
    let be = backend();
    let x = be
        .act_from_f32(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    let table = be.init_matrix(10, 8, WeightInit::new(1, 0.0, 1.0)).unwrap();
    let read = |k: StepKey| be.queue_step(k, || be.act_to_f32(&x)).unwrap();
    // A key whose first step reads is never captured: none of its steps fails.
    for _ in 0..2 {
        assert_eq!(read(key(3)).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
    let st = be.graph_stats();
    assert_eq!(
        (st.probed, st.refused_keys, st.eager, st.launched),
        (1, 1, 1, 0)
    );
    // A key whose first step did not read is captured after it; a read met
    // there fails that step and refuses the key.
    be.queue_step(key(2), || be.embed(&table, &[1, 2]))
        .unwrap()
        .unwrap();
    let err = read(key(2)).unwrap_err().to_string();
    assert!(
        err.contains("waits for the device") && err.contains("--cuda-graphs off"),
        "{err}"
    );
    assert_eq!(be.graph_stats().refused_keys, 2);
    // The key now runs as it is, reads included, and nothing is left capturing.
    assert_eq!(read(key(2)).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(be.graph_stats().eager, 2);
    be.synchronize().unwrap();
    for _ in 0..3 {
        let recorded = be
            .queue_step(key(1), || be.embed(&table, &[3]))
            .unwrap()
            .unwrap();
        assert_eq!(
            bits(&be, &recorded),
            bits(&be, &be.embed(&table, &[3]).unwrap())
        );
    }
    assert_eq!(be.graph_stats().launched, 2, "key 1 after its probe");
}

#[test]
#[ignore = "needs a CUDA GPU: prints the host's cost of a recorded step against eager launches"]
fn host_cost_of_a_recorded_step_of_300_launches() {
    let be = backend();
    let dev = be.device();
    const LAUNCHES: usize = 300;
    const STEPS: usize = 200;
    let recorded = || {
        be.queue_step(key(1), || dev.launch_empty(LAUNCHES))
            .unwrap()
            .unwrap()
    };
    for _ in 0..10 {
        dev.launch_empty(LAUNCHES).unwrap();
        recorded();
    }
    be.synchronize().unwrap();
    let mut report = Vec::new();
    for round in 0..2 {
        let t = Instant::now();
        for _ in 0..STEPS {
            dev.launch_empty(LAUNCHES).unwrap();
        }
        let eager_host = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        be.synchronize().unwrap();
        let eager_all = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        let t = Instant::now();
        for _ in 0..STEPS {
            recorded();
        }
        let graph_host = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        be.synchronize().unwrap();
        let graph_all = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        report.push(format!(
            "round {round}: a step of {LAUNCHES} empty launches: eager host {eager_host:.1} us \
             (until the GPU is done {eager_all:.1}), recorded host {graph_host:.1} us \
             (until done {graph_all:.1}): captured launch + update + graph launch"
        ));
    }
    for r in &report {
        println!("{r}");
    }
    let st = be.graph_stats();
    println!("{st:?}");
    assert_eq!(st.instantiated, 1, "one shape: {st:?}");
    assert_eq!(
        st.launched as usize,
        9 + 2 * STEPS,
        "all but the first: {st:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: prints whether updating a graph still running waits for it"]
fn updating_the_graph_still_running_does_not_wait_for_it() {
    let be = backend();
    // A step of 150 launches writing 64 MiB each: milliseconds on the GPU
    // against well under one on the host.
    let busy = || {
        let t = Instant::now();
        be.queue_step(key(1), || {
            for i in 0..150 {
                drop(be.init_matrix(4096, 8192, WeightInit::new(i, 0.0, 1.0))?);
            }
            Ok::<_, headroom_core::ops::OpError>(())
        })
        .unwrap()
        .unwrap();
        t.elapsed().as_secs_f64() * 1e6
    };
    busy(); // the probe
    busy(); // the shape's graph
    be.synchronize().unwrap();
    let t = Instant::now();
    busy();
    be.synchronize().unwrap();
    let gpu_step = t.elapsed().as_secs_f64() * 1e6;
    let before = be.graph_stats();
    // Three steps back to back: the first updates the graph at rest, the
    // next two the same graph while its earlier launch still runs.
    let hosts = [busy(), busy(), busy()];
    be.synchronize().unwrap();
    println!(
        "a step of 150 launches: {gpu_step:.0} us until the GPU is done; host per recorded step \
         back to back {:.0} / {:.0} / {:.0} us (the last two update the graph still running: a \
         host time near the GPU's step would mean the update waited for it)",
        hosts[0], hosts[1], hosts[2]
    );
    let after = be.graph_stats();
    println!("{after:?}");
    assert_eq!(after.instantiated, 1, "one graph for the shape: {after:?}");
    assert_eq!(after.updated - before.updated, 3, "{after:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn recorded_composed_decode_attention_gives_the_eager_bits() {
    use headroom_core::{AttentionShape, Dtype, RouteRequest};
    use headroom_cuda::attention::{prefill, AttentionBuffers};
    let be = backend();
    let dev = be.device();
    let (mut differ, mut unstable) = (Vec::new(), Vec::new());
    for (q_heads, kv_heads) in [(2usize, 1usize), (8, 2), (16, 2), (4, 4)] {
        for kv_len in 60..=130usize {
            let shape = AttentionShape {
                q_len: 1,
                kv_len,
                q_heads,
                kv_heads,
                head_dim: 128,
                scale: None,
            };
            let seed = (kv_len * 131 + q_heads) as u32;
            let bf16_bits = |n: usize, salt: u32| -> Vec<u16> {
                (0..n as u32)
                    .map(|i| {
                        let x =
                            (i.wrapping_mul(2654435761) ^ seed.wrapping_mul(40503) ^ salt) % 2001;
                        half::bf16::from_f32(x as f32 / 1000.0 - 1.0).to_bits()
                    })
                    .collect()
            };
            let q = dev.upload(&bf16_bits(q_heads * 128, 1)).unwrap();
            let k = dev.upload(&bf16_bits(kv_heads * kv_len * 128, 2)).unwrap();
            let v = dev.upload(&bf16_bits(kv_heads * kv_len * 128, 3)).unwrap();
            let nan = vec![0x7fc0u16; q_heads * 128];
            let (eager, again, recorded) = (
                dev.upload(&nan).unwrap(),
                dev.upload(&nan).unwrap(),
                dev.upload(&nan).unwrap(),
            );
            let route = RouteRequest::Composed { query_block: 0 };
            let call = |out| {
                let bufs = AttentionBuffers {
                    q: &q,
                    k: &k,
                    v: &v,
                    out,
                };
                prefill(dev, &shape, Dtype::Bf16, route, &bufs).map(|_| ())
            };
            call(&eager).unwrap();
            call(&again).unwrap();
            be.queue_step(key(1), || call(&recorded)).unwrap().unwrap();
            let (mut a, mut b, mut c) = (nan.clone(), nan.clone(), nan.clone());
            dev.read(&eager, &mut a).unwrap();
            dev.read(&again, &mut c).unwrap();
            dev.read(&recorded, &mut b).unwrap();
            assert!(a.iter().all(|x| *x != 0x7fc0), "every output written");
            if a != c {
                unstable.push((q_heads, kv_heads, kv_len));
            }
            if a != b {
                differ.push((q_heads, kv_heads, kv_len));
            }
        }
    }
    println!("{:?}", be.graph_stats());
    assert!(
        unstable.is_empty(),
        "(q heads, kv heads, keys) whose eager composed decode differs run to run: {unstable:?}"
    );
    assert!(
        differ.is_empty(),
        "(q heads, kv heads, keys) whose recorded composed decode differs: {differ:?}"
    );
}
