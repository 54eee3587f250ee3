//! The NCCL collectives of a two-GPU group (`headroom_cuda::nccl`): the
//! all-reduce sums every rank's activation, the column all-gather puts the
//! ranks' blocks side by side in every row (one row and several), on values
//! exact in bf16 so the comparison is exact.

use headroom_core::ops::Backend;
use headroom_cuda::backend::open_group;

fn values(rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i % 17) as f32 + rank as f32) * 0.25)
        .collect()
}

#[test]
#[ignore = "needs 2 CUDA GPUs: run by bench/gpu/check_tp.sh"]
fn all_reduce_and_all_gather_over_two_gpus() {
    let group = open_group(&[0, 1]).expect("two GPUs and NCCL");
    assert_eq!(group.len(), 2);
    assert!(group.iter().all(|b| b.world_size() == 2));
    std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(rank, be)| {
                s.spawn(move || {
                    for rows in [1usize, 3] {
                        let cols = 256;
                        let mut x = be
                            .act_from_f32(rows, cols, &values(rows, cols, rank))
                            .unwrap();
                        be.all_reduce_sum(&mut x).unwrap();
                        let got = be.act_to_f32(&x).unwrap();
                        let want: Vec<f32> = values(rows, cols, 0)
                            .iter()
                            .zip(values(rows, cols, 1))
                            .map(|(a, b)| a + b)
                            .collect();
                        assert_eq!(got, want, "all-reduce, {rows} rows, rank {rank}");
                        let y = be
                            .act_from_f32(rows, cols, &values(rows, cols, rank))
                            .unwrap();
                        let g = be.all_gather_cols(y).unwrap();
                        assert_eq!(be.act_shape(&g), (rows, 2 * cols));
                        let got = be.act_to_f32(&g).unwrap();
                        let (a, b) = (values(rows, cols, 0), values(rows, cols, 1));
                        for r in 0..rows {
                            assert_eq!(
                                &got[r * 2 * cols..r * 2 * cols + cols],
                                &a[r * cols..(r + 1) * cols]
                            );
                            assert_eq!(
                                &got[r * 2 * cols + cols..(r + 1) * 2 * cols],
                                &b[r * cols..(r + 1) * cols]
                            );
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("rank thread");
        }
    });
}
