//! Tests of the pool sizing ([`super::size_pool`], [`super::contiguous_pool`]).

use super::*;

const MIB: u64 = 1 << 20;

fn inputs(available: Option<u64>, running: RunningSlots) -> PoolInputs {
    PoolInputs {
        available_bytes: available,
        block_bytes: MIB,
        gdn_bytes_per_slot: 10 * MIB,
        sampled_bytes_per_slot: 0,
        step_transient_bytes: 100 * MIB,
        running,
        max_context: 640,
        snapshots: SnapshotSlots::Fixed(0),
    }
}

#[test]
fn a_fixed_slot_count_leaves_the_rest_to_blocks() {
    // 1100 MiB - 100 MiB transient - 4 x 10 MiB GDN = 960 MiB = 960 blocks,
    // capped at 4 slots x 10 blocks (640 tokens).
    let p = size_pool(&inputs(Some(1100 * MIB), RunningSlots::Fixed(4))).unwrap();
    assert_eq!(
        (p.slots, p.blocks),
        (4, 40),
        "no more than every slot at full context"
    );
    let p = size_pool(&inputs(Some(175 * MIB), RunningSlots::Fixed(4))).unwrap();
    assert_eq!((p.slots, p.blocks), (4, 35));
    assert_eq!(p.full_context_sequences(), 3);
    assert_eq!(
        (p.tokens(), p.kv_bytes(), p.gdn_bytes()),
        (2240, 35 * MIB, 40 * MIB)
    );
    let p = size_pool(&inputs(Some(165 * MIB), RunningSlots::Fixed(4))).unwrap();
    assert_eq!((p.blocks, p.full_context_sequences()), (25, 2));
}

#[test]
fn slots_from_memory_take_at_most_two_thirds_and_the_cap() {
    // 1100 - 100 = 1000 MiB left: two thirds (666 MiB) / 10 MiB = 66 slots;
    // 66 x 10 = 660 MiB of GDN, 340 blocks of 1 MiB (under 66 x 10).
    let p = size_pool(&inputs(
        Some(1100 * MIB),
        RunningSlots::FromMemory { cap: 1024 },
    ))
    .unwrap();
    assert_eq!((p.slots, p.blocks), (66, 340));
    let capped = size_pool(&inputs(
        Some(1100 * MIB),
        RunningSlots::FromMemory { cap: 8 },
    ))
    .unwrap();
    assert_eq!((capped.slots, capped.blocks), (8, 80));
    // No GDN state: the cap decides.
    let mut none = inputs(Some(1100 * MIB), RunningSlots::FromMemory { cap: 16 });
    none.gdn_bytes_per_slot = 0;
    assert_eq!(size_pool(&none).unwrap().slots, 16);
}

#[test]
fn each_running_slot_keeps_room_for_its_sampled_rows_logits() {
    // 10 MiB of state + 10 MiB of logits a slot: two thirds of the 1000 MiB
    // left / 20 MiB = 33 slots; 1000 - 33 x 20 = 340 MiB, of which every
    // slot's full context takes 33 x 10 blocks.
    let mut i = inputs(Some(1100 * MIB), RunningSlots::FromMemory { cap: 1024 });
    i.sampled_bytes_per_slot = 10 * MIB;
    let p = size_pool(&i).unwrap();
    assert_eq!((p.slots, p.blocks), (33, 330));
    // A fixed count: 4 x 20 MiB before the blocks (1100 - 100 - 80 = 920,
    // capped at 4 x 10 blocks; 175 - 100 - 80 does not hold one sequence).
    i.running = RunningSlots::Fixed(4);
    assert_eq!(size_pool(&i).unwrap().blocks, 40);
    i.available_bytes = Some(175 * MIB);
    assert!(matches!(size_pool(&i), Err(PoolError::NoFit { .. })));
}

#[test]
fn unbounded_gives_every_slot_its_context() {
    let p = size_pool(&inputs(None, RunningSlots::Fixed(3))).unwrap();
    assert_eq!((p.slots, p.blocks), (3, 30));
    let p = size_pool(&inputs(None, RunningSlots::FromMemory { cap: 5 })).unwrap();
    assert_eq!((p.slots, p.blocks), (5, 50));
}

#[test]
fn what_cannot_fit_is_an_error_with_the_numbers() {
    let e = size_pool(&inputs(Some(50 * MIB), RunningSlots::Fixed(1))).unwrap_err();
    assert!(matches!(e, PoolError::Transient { .. }), "{e}");
    assert!(e.to_string().contains("0.10 GiB predicted"), "{e}");
    // 150 - 100 = 50 MiB; 4 slots = 40 MiB GDN; 10 blocks left for a
    // 640-token sequence: fits exactly. 149 MiB does not.
    assert_eq!(
        size_pool(&inputs(Some(150 * MIB), RunningSlots::Fixed(4)))
            .unwrap()
            .blocks,
        10
    );
    let e = size_pool(&inputs(Some(149 * MIB), RunningSlots::Fixed(4))).unwrap_err();
    let msg = e.to_string();
    for want in [
        "4 state slots",
        "10 KV blocks",
        "640 tokens",
        "--max-running",
    ] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    let e = size_pool(&inputs(Some(120 * MIB), RunningSlots::Fixed(4))).unwrap_err();
    assert!(matches!(e, PoolError::NoFit { slots: 4, .. }), "{e}");
}

#[test]
fn the_room_left_for_transients_is_what_the_pools_do_not_take() {
    // 175 - 2 x 10 snapshots - 4 x 10 GDN - 15 blocks = 100 MiB, the step's
    // transient set aside (the solo stripe resolves within it).
    let mut i = inputs(Some(175 * MIB), RunningSlots::Fixed(4));
    i.snapshots = SnapshotSlots::Fixed(2);
    let p = size_pool(&i).unwrap();
    assert_eq!(p.transient_room_bytes(), Some(100 * MIB));
    // Blocks capped at every slot's full context leave more room.
    let p = size_pool(&inputs(Some(1100 * MIB), RunningSlots::Fixed(4))).unwrap();
    assert_eq!(p.transient_room_bytes(), Some((1100 - 40 - 40) * MIB));
    // Unbounded: no room to keep to.
    let p = size_pool(&inputs(None, RunningSlots::Fixed(4))).unwrap();
    assert_eq!(p.transient_room_bytes(), None);
}

#[test]
fn snapshot_slots_are_set_aside_before_the_kv_blocks() {
    // 175 - 100 transient - 2 x 10 snapshots - 4 x 10 GDN = 15 blocks.
    let mut i = inputs(Some(175 * MIB), RunningSlots::Fixed(4));
    i.snapshots = SnapshotSlots::Fixed(2);
    let p = size_pool(&i).unwrap();
    assert_eq!(
        (p.blocks, p.snapshot_slots, p.snapshot_bytes()),
        (15, 2, 20 * MIB)
    );
    assert!(
        p.to_string().contains("2 prefix-cache snapshot slots"),
        "{p}"
    );
    i.snapshots = SnapshotSlots::Fixed(8);
    let e = size_pool(&i).unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::Snapshots {
                snapshot_slots: 8,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn snapshot_slots_from_memory_take_at_most_a_sixteenth_of_what_the_step_leaves() {
    // 1,700 MiB - 100 MiB transient = 1,600 MiB; a sixteenth is 100 MiB =
    // 10 slots of 10 MiB, under the ceiling of 16.
    let mut i = inputs(Some(1700 * MIB), RunningSlots::FromMemory { cap: 1024 });
    i.snapshots = SnapshotSlots::FromMemory { most: 16 };
    let p = size_pool(&i).unwrap();
    assert_eq!((p.snapshot_slots, p.snapshot_bytes()), (10, 100 * MIB));
    // The running slots are sized from what the snapshots leave: two
    // thirds of 1,500 MiB = 100 slots.
    assert_eq!(p.slots, 100);
    // With room for more than the ceiling, the ceiling.
    i.available_bytes = Some(100_000 * MIB);
    assert_eq!(size_pool(&i).unwrap().snapshot_slots, 16);
    // A card too tight for a sixteenth to hold one slot still gets two
    // (a hold-back pins one and needs another free).
    i.available_bytes = Some(200 * MIB);
    i.running = RunningSlots::Fixed(2);
    let p = size_pool(&i).unwrap();
    assert_eq!((p.snapshot_slots, p.slots, p.blocks), (2, 2, 20));
    // ... unless the ceiling is lower.
    assert_eq!(SnapshotSlots::FromMemory { most: 1 }.resolve(Some(0), 1), 1);
    // Unbounded (a CPU engine without a budget): the ceiling.
    i.available_bytes = None;
    assert_eq!(size_pool(&i).unwrap().snapshot_slots, 16);
    // A ceiling of 0 (prefix cache without snapshots) stays 0.
    assert_eq!(
        SnapshotSlots::FromMemory { most: 0 }.resolve(Some(u64::MAX), 1),
        0
    );
    // A given count is taken as given, even where it is more than the share.
    i.available_bytes = Some(1700 * MIB);
    i.snapshots = SnapshotSlots::Fixed(16);
    assert_eq!(size_pool(&i).unwrap().snapshot_slots, 16);
}

#[test]
fn contiguous_reserves_every_slot_its_context() {
    let p = contiguous_pool(&inputs(Some(1100 * MIB), RunningSlots::Fixed(3)));
    assert_eq!((p.slots, p.blocks), (3, 30));
    // 1000 MiB left / (10 MiB GDN + 10 blocks of 1 MiB) = 50 slots.
    let p = contiguous_pool(&inputs(
        Some(1100 * MIB),
        RunningSlots::FromMemory { cap: 1024 },
    ));
    assert_eq!((p.slots, p.blocks), (50, 500));
}

#[test]
fn the_largest_step_is_the_solo_stripe_or_the_shared_budget() {
    let s = SchedulerSettings::default();
    assert_eq!(
        largest_step_rows(&s, BackendKind::Cuda, 1 << 20),
        SOLO_STRIPE_CAP
    );
    // A 4,096-token context: the shared step (8,192 rows of several
    // sequences) is the largest.
    assert_eq!(
        largest_step_rows(&s, BackendKind::Cuda, 4096),
        s.step_tokens
    );
    let cpu = largest_step_rows(&s, BackendKind::Cpu, 1 << 20);
    assert_eq!(cpu, FIXED_SOLO_STRIPE.max(s.step_tokens));
    let explicit = SchedulerSettings {
        solo_stripe: SoloStripe::Tokens(100),
        step_tokens: 3000,
        ..s
    };
    assert_eq!(
        largest_step_rows(&explicit, BackendKind::Cuda, 1 << 20),
        3000
    );
}

#[test]
fn an_auto_stripe_is_planned_whole_only_within_a_sixth_of_the_memory() {
    let s = SchedulerSettings::default();
    let m = crate::stripe::tests::memory(100_000); // 100 kB a row
    let ctx = 1 << 20;
    let whole = largest_step_rows(&s, BackendKind::Cuda, ctx);
    assert_eq!(whole, SOLO_STRIPE_CAP);
    // The whole 65,536-row step (6.55 GB) within a sixth of 60 GB: planned
    // whole; not within a sixth of 30 GB.
    let rows = planned_step_rows(&s, BackendKind::Cuda, ctx, &m, Some(60_000_000_000));
    assert_eq!(rows, whole);
    let rows = planned_step_rows(&s, BackendKind::Cuda, ctx, &m, Some(30_000_000_000));
    assert_eq!(rows, 49_984);
    // A sixth of 6 GB is 1 GB: 10,000 rows fit, rounded down to 64.
    let rows = planned_step_rows(&s, BackendKind::Cuda, ctx, &m, Some(6_000_000_000));
    assert_eq!(rows, 9_984);
    assert!(m.solo_step_transient(rows, ctx) <= 1_000_000_000);
    // Never below the shared step: a sixth of 600 MB fits 1,000 rows, the
    // shared step is 8,192.
    let rows = planned_step_rows(&s, BackendKind::Cuda, ctx, &m, Some(600_000_000));
    assert_eq!(rows, s.step_tokens);
    // Unbounded, the CPU and an explicit stripe: as before.
    assert_eq!(
        planned_step_rows(&s, BackendKind::Cuda, ctx, &m, None),
        whole
    );
    assert_eq!(
        planned_step_rows(&s, BackendKind::Cpu, ctx, &m, Some(6_000_000_000)),
        largest_step_rows(&s, BackendKind::Cpu, ctx)
    );
    let explicit = SchedulerSettings {
        solo_stripe: SoloStripe::Tokens(32_768),
        ..s
    };
    assert_eq!(
        planned_step_rows(&explicit, BackendKind::Cuda, ctx, &m, Some(600_000_000)),
        32_768
    );
}

#[test]
fn the_line_names_blocks_tokens_slots_and_full_context_sequences() {
    let p = size_pool(&inputs(Some(175 * MIB), RunningSlots::Fixed(4))).unwrap();
    let line = p.to_string();
    for want in [
        "35 blocks",
        "2240 tokens",
        "4 state slots",
        "3 sequences fit at full context (640 tokens)",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
}
