//! Which CUDA context this crate last made current on each thread: binding a
//! device's context is a thread-local comparison when it is already current,
//! and one `cuCtxSetCurrent` the first time a thread (the engine loop's, a
//! tensor-parallel rank's) uses the device or after it used another.
//!
//! The record only knows about calls made through [`bind_with`]; code that
//! lets a foreign library switch contexts (NCCL's communicator set-up
//! selects each device in turn) calls [`forget`] after it.

use std::cell::Cell;

/// No context recorded.
const NONE: usize = 0;

thread_local! {
    /// The context (its handle's address) this thread last made current here.
    static CURRENT: Cell<usize> = const { Cell::new(NONE) };
}

/// Makes `ctx` current on the calling thread through `set` unless the record
/// says it already is; records it once `set` succeeds.
/// While the thread's locals are being torn down (a buffer freed by another
/// thread-local's destructor) there is no record: `set` runs every time.
pub(crate) fn bind_with<E>(ctx: usize, set: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
    if ctx != NONE && CURRENT.try_with(Cell::get) == Ok(ctx) {
        return Ok(());
    }
    set()?;
    let _ = CURRENT.try_with(|c| c.set(ctx));
    Ok(())
}

/// Drops the calling thread's record: its next bind sets the context again.
pub fn forget() {
    let _ = CURRENT.try_with(|c| c.set(NONE));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Binds `ctx`, counting the driver calls it makes.
    fn bind(ctx: usize, calls: &mut u32) -> Result<(), ()> {
        bind_with(ctx, || {
            *calls += 1;
            Ok(())
        })
    }

    #[test]
    fn a_thread_sets_a_context_once_until_it_switches() {
        forget();
        let mut calls = 0;
        bind(0x10, &mut calls).unwrap();
        bind(0x10, &mut calls).unwrap();
        assert_eq!(calls, 1, "the second bind of the same context is a no-op");
        bind(0x20, &mut calls).unwrap();
        assert_eq!(calls, 2, "another device's context is set");
        bind(0x10, &mut calls).unwrap();
        assert_eq!(calls, 3, "switching back sets it again");
        forget();
        bind(0x10, &mut calls).unwrap();
        assert_eq!(calls, 4, "after forget the context is set again");
    }

    #[test]
    fn each_thread_binds_on_its_own_first_use() {
        forget();
        let mut calls = 0;
        bind(0x30, &mut calls).unwrap();
        let on_thread = std::thread::spawn(|| {
            let mut calls = 0;
            bind(0x30, &mut calls).unwrap();
            bind(0x30, &mut calls).unwrap();
            calls
        })
        .join()
        .unwrap();
        assert_eq!(
            on_thread, 1,
            "a new thread sets the context on its first bind"
        );
        bind(0x30, &mut calls).unwrap();
        assert_eq!(calls, 1, "the first thread's record is its own");
    }

    #[test]
    fn a_failed_set_is_not_recorded() {
        forget();
        assert!(bind_with(0x40, || Err("no")).is_err());
        let mut calls = 0;
        bind(0x40, &mut calls).unwrap();
        assert_eq!(calls, 1, "the bind after a failure tries again");
    }
}
