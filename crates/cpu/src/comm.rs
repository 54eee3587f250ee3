//! An in-process communicator for tensor parallelism on the CPU: the ranks
//! of a group are threads of one process sharing a [`CpuComm`]; each
//! collective is a rendezvous (shared buffers + a condition-variable
//! barrier). It lets the sharded forward run — and be tested in CI — with no
//! GPU and no NCCL.
//!
//! Every rank deposits its buffer; the last to arrive combines them in rank
//! order (so results are deterministic) and publishes the result; the others
//! wake and copy it. A rank cannot deposit for collective `g + 1` before it
//! has read collective `g`, so one published result at a time is enough.
//! [`CpuComm::abort`] wakes every waiter with an error (a rank that failed
//! between collectives must not leave the others blocked forever).

use headroom_core::ops::{OpError, OpResult};
use std::sync::{Arc, Condvar, Mutex};

/// Which collective a deposit belongs to (ranks must agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collective {
    AllReduceSum,
    AllGatherCols,
}

/// One rank's deposit: (collective, rows, cols, data).
type Deposit = (Collective, usize, usize, Vec<f32>);

#[derive(Debug, Default)]
struct State {
    /// Collectives completed so far.
    generation: u64,
    /// This generation's deposits, by rank: (collective, rows, cols, data).
    deposits: Vec<Option<Deposit>>,
    /// The last completed generation's result.
    result: Option<Arc<OpResult<Vec<f32>>>>,
    aborted: bool,
}

/// The shared half of a CPU group of `world` ranks.
#[derive(Debug)]
pub struct CpuComm {
    world: usize,
    state: Mutex<State>,
    done: Condvar,
}

/// One rank's handle: the group and its place in it.
#[derive(Debug, Clone)]
pub struct CpuRank {
    pub comm: Arc<CpuComm>,
    pub rank: usize,
}

fn comm_err(detail: impl Into<String>) -> OpError {
    OpError::Device(format!("cpu communicator: {}", detail.into()))
}

impl CpuComm {
    /// A group of `world` ranks (≥ 1); hand [`CpuComm::ranks`] to the backends.
    pub fn new(world: usize) -> Arc<CpuComm> {
        Arc::new(CpuComm {
            world: world.max(1),
            state: Mutex::new(State {
                deposits: vec![None; world.max(1)],
                ..State::default()
            }),
            done: Condvar::new(),
        })
    }

    /// One handle per rank, in rank order.
    pub fn ranks(self: &Arc<Self>) -> Vec<CpuRank> {
        (0..self.world)
            .map(|rank| CpuRank {
                comm: Arc::clone(self),
                rank,
            })
            .collect()
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Fails every collective now waiting or yet to come.
    pub fn abort(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.aborted = true;
        self.done.notify_all();
    }

    fn exchange(
        &self,
        rank: usize,
        what: Collective,
        rows: usize,
        cols: usize,
        data: Vec<f32>,
    ) -> OpResult<Vec<f32>> {
        if rank >= self.world {
            return Err(comm_err(format!("rank {rank} of {}", self.world)));
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.aborted {
            return Err(comm_err("aborted"));
        }
        if s.deposits[rank].is_some() {
            return Err(comm_err(format!("rank {rank} entered a collective twice")));
        }
        let gen = s.generation;
        s.deposits[rank] = Some((what, rows, cols, data));
        if s.deposits.iter().all(Option::is_some) {
            let deposits: Vec<_> = s.deposits.iter_mut().map(|d| d.take()).collect();
            let result = combine(deposits.into_iter().flatten().collect());
            s.result = Some(Arc::new(result));
            s.generation += 1;
            self.done.notify_all();
        } else {
            while s.generation == gen && !s.aborted {
                s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.generation == gen {
                return Err(comm_err("aborted"));
            }
        }
        match s.result.as_deref() {
            Some(Ok(v)) => Ok(v.clone()),
            Some(Err(e)) => Err(comm_err(e.to_string())),
            None => Err(comm_err("no result")),
        }
    }
}

/// Combines one generation's deposits (in rank order).
fn combine(deposits: Vec<Deposit>) -> OpResult<Vec<f32>> {
    let (what, rows, cols, _) = deposits[0];
    if deposits
        .iter()
        .any(|(w, r, c, _)| (*w, *r, *c) != (what, rows, cols))
    {
        let seen: Vec<String> = deposits
            .iter()
            .map(|(w, r, c, _)| format!("{w:?} [{r}][{c}]"))
            .collect();
        return Err(comm_err(format!(
            "ranks disagree on the collective: {}",
            seen.join(", ")
        )));
    }
    match what {
        Collective::AllReduceSum => {
            let mut it = deposits.into_iter();
            let mut sum = it.next().map(|d| d.3).unwrap_or_default();
            for (_, _, _, d) in it {
                sum.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
            }
            Ok(sum)
        }
        Collective::AllGatherCols => {
            let world = deposits.len();
            let mut out = vec![0.0f32; rows * cols * world];
            for (r, (_, _, _, d)) in deposits.iter().enumerate() {
                for row in 0..rows {
                    let dst = row * cols * world + r * cols;
                    out[dst..dst + cols].copy_from_slice(&d[row * cols..(row + 1) * cols]);
                }
            }
            Ok(out)
        }
    }
}

impl CpuRank {
    /// In place, the sum of every rank's `data` (`[rows][cols]`).
    pub fn all_reduce_sum(&self, rows: usize, cols: usize, data: &mut Vec<f32>) -> OpResult<()> {
        let mine = std::mem::take(data);
        *data = self
            .comm
            .exchange(self.rank, Collective::AllReduceSum, rows, cols, mine)?;
        Ok(())
    }

    /// Every rank's `[rows][cols]` side by side: `[rows][world · cols]`.
    pub fn all_gather_cols(&self, rows: usize, cols: usize, data: Vec<f32>) -> OpResult<Vec<f32>> {
        self.comm
            .exchange(self.rank, Collective::AllGatherCols, rows, cols, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_ranks<T: Send>(world: usize, f: impl Fn(CpuRank) -> T + Sync) -> Vec<T> {
        let comm = CpuComm::new(world);
        std::thread::scope(|s| {
            let hs: Vec<_> = comm
                .ranks()
                .into_iter()
                .map(|r| {
                    let f = &f;
                    s.spawn(move || f(r))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_sums_over_ranks_many_times() {
        let out = on_ranks(3, |r| {
            let mut last = Vec::new();
            for round in 0..50 {
                let mut v = vec![r.rank as f32 + round as f32; 4];
                r.all_reduce_sum(2, 2, &mut v).unwrap();
                last = v;
                assert_eq!(last, vec![3.0 + 3.0 * round as f32; 4], "round {round}");
            }
            last
        });
        assert!(out.iter().all(|v| v == &out[0]));
    }

    #[test]
    fn all_gather_puts_ranks_side_by_side_per_row() {
        let out = on_ranks(2, |r| {
            let base = 10.0 * r.rank as f32;
            r.all_gather_cols(2, 3, (0..6).map(|i| base + i as f32).collect())
                .unwrap()
        });
        let want = vec![
            0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 3.0, 4.0, 5.0, 13.0, 14.0, 15.0,
        ];
        assert_eq!(out, vec![want.clone(), want]);
    }

    #[test]
    fn mismatched_collectives_are_an_error_on_every_rank() {
        let out = on_ranks(2, |r| {
            if r.rank == 0 {
                let mut v = vec![1.0; 4];
                r.all_reduce_sum(2, 2, &mut v).map(|_| ())
            } else {
                r.all_gather_cols(2, 2, vec![1.0; 4]).map(|_| ())
            }
        });
        assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    }

    #[test]
    fn abort_wakes_a_waiting_rank() {
        let comm = CpuComm::new(2);
        let ranks = comm.ranks();
        let r0 = ranks[0].clone();
        let waiter = std::thread::spawn(move || {
            let mut v = vec![1.0];
            r0.all_reduce_sum(1, 1, &mut v)
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        comm.abort();
        assert!(waiter.join().unwrap().is_err());
        let mut v = vec![1.0];
        assert!(
            ranks[1].all_reduce_sum(1, 1, &mut v).is_err(),
            "stays aborted"
        );
    }

    #[test]
    fn world_one_is_the_identity() {
        let r = &CpuComm::new(1).ranks()[0];
        let mut v = vec![1.5, 2.5];
        r.all_reduce_sum(1, 2, &mut v).unwrap();
        assert_eq!(v, vec![1.5, 2.5]);
        assert_eq!(r.all_gather_cols(1, 2, v).unwrap(), vec![1.5, 2.5]);
    }
}
