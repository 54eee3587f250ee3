//! Tests of the cuBLASLt plan cache (`lt.rs`): pointer alignment and the
//! row buckets that key the plans.

use super::*;

#[test]
fn alignment_is_the_largest_power_of_two_up_to_256() {
    assert_eq!(alignment(0), 256);
    assert_eq!(alignment(0x7f00_0000_0000), 256);
    assert_eq!(alignment(0x7f00_0000_0080), 128);
    assert_eq!(alignment(0x7f00_0000_0010), 16);
    assert_eq!(alignment(0x7f00_0000_0002), 2);
    assert_eq!(alignment(0x7f00_0000_0003), 1);
}

#[test]
fn rows_share_a_bucket_exactly_up_to_16_then_by_quarter_octaves() {
    for r in 1..=16 {
        assert_eq!(row_bucket(r), r);
    }
    assert_eq!(row_bucket(17), 20);
    assert_eq!(row_bucket(32), 32);
    assert_eq!(row_bucket(33), 40);
    assert_eq!(row_bucket(200), 224);
    assert_eq!(row_bucket(256), 256);
    assert_eq!(row_bucket(257), 320);
    assert_eq!(row_bucket(700), 768);
    assert_eq!(row_bucket(8192), 8192);
    assert_eq!(row_bucket(usize::MAX), usize::MAX);
    for r in 17..5000usize {
        let b = row_bucket(r);
        assert!(b >= r && b * 4 <= r * 5 + 4 * 4, "{r} -> {b}");
        assert_eq!(row_bucket(b), b, "a bucket is its own bucket");
    }
    let b: Vec<usize> = planned_buckets().collect();
    assert_eq!(
        b[..17],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20]
    );
    assert_eq!(b.len(), 16 + 4 * 11);
    assert_eq!(*b.last().unwrap(), PLANNED_ROWS);
    // Every bucket of a planned row count is planned.
    for r in [1, 9, 16, 17, 100, 1000, 8000, PLANNED_ROWS] {
        assert!(b.contains(&row_bucket(r)), "{r}");
    }
}

#[test]
fn a_plan_is_made_once_per_key_and_the_cache_starts_over_past_its_cap() {
    let mut c: Capped<u32, u32> = Capped::new(2);
    let mut made = 0;
    let mut get = |c: &mut Capped<u32, u32>, k: u32| {
        *c.get_or_try_insert(k, || {
            made += 1;
            Ok::<_, ()>(k * 10)
        })
        .unwrap()
    };
    assert_eq!(get(&mut c, 1), 10);
    assert_eq!(get(&mut c, 1), 10);
    assert_eq!(get(&mut c, 2), 20);
    assert_eq!(c.len(), 2);
    // A third key: the cache starts over with it alone.
    assert_eq!(get(&mut c, 3), 30);
    assert_eq!(c.len(), 1);
    assert_eq!(get(&mut c, 1), 10);
    assert_eq!(made, 4);
    // A failed make keeps nothing.
    assert!(c.get_or_try_insert(9, || Err::<u32, _>("no")).is_err());
    assert_eq!(c.len(), 2);
}
