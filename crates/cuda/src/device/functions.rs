//! The kernel function table of one device: one slot per entry point of the
//! kernel registry ([`crate::kernels::SOURCES`]), filled when its module
//! loads and read without a lock from then on, beside the dynamic shared
//! memory each function has been allowed so far (so a launch sets that
//! attribute only when it needs more than before).

use cudarc::driver::sys;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

/// A loaded kernel function and its slot in the device's table.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    pub(crate) raw: sys::CUfunction,
    slot: usize,
}

// SAFETY: CUfunction handles are immutable and usable from any thread of the context.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// FNV-1a over the bytes of an entry point's name: the names are short and
/// come from this crate (no adversarial keys), and it is several times
/// cheaper than the default SipHash on the per-launch lookup.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Slot of every entry point of the registry, in registry order (built once
/// per process; entry points are unique, `kernels::tests`).
static SLOTS: LazyLock<HashMap<&'static str, usize, BuildHasherDefault<Fnv>>> =
    LazyLock::new(|| {
        crate::kernels::SOURCES
            .iter()
            .flat_map(|s| s.entry_points.iter().copied())
            .enumerate()
            .map(|(i, e)| (e, i))
            .collect()
    });

/// The slot of `entry`, if the registry has it.
pub(crate) fn slot_of(entry: &str) -> Option<usize> {
    SLOTS.get(entry).copied()
}

/// A raw function handle that may cross threads (see [`Function`]).
#[derive(Clone, Copy)]
struct Raw(sys::CUfunction);
// SAFETY: as for `Function`.
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

pub(crate) struct FunctionTable {
    functions: Box<[OnceLock<Raw>]>,
    /// Dynamic shared memory each function is allowed (0: the default).
    smem: Box<[AtomicUsize]>,
    /// Held while loading modules and raising attributes (never by a
    /// lookup of a loaded function).
    cold: Mutex<()>,
}

impl FunctionTable {
    /// An empty table with a slot for every entry point of the registry.
    pub(crate) fn new() -> FunctionTable {
        let n = SLOTS.len();
        FunctionTable {
            functions: (0..n).map(|_| OnceLock::new()).collect(),
            smem: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            cold: Mutex::new(()),
        }
    }

    /// The loaded function of `entry`, without a lock.
    pub(crate) fn get(&self, entry: &str) -> Option<Function> {
        let slot = slot_of(entry)?;
        self.functions[slot]
            .get()
            .map(|r| Function { raw: r.0, slot })
    }

    /// Whether `entry` is loaded.
    pub(crate) fn has(&self, entry: &str) -> bool {
        self.get(entry).is_some()
    }

    /// Records `raw` as `entry`'s function (a second record of an entry
    /// keeps the first); false when the registry has no such entry.
    pub(crate) fn insert(&self, entry: &str, raw: sys::CUfunction) -> bool {
        match slot_of(entry) {
            Some(slot) => {
                let _ = self.functions[slot].set(Raw(raw));
                true
            }
            None => false,
        }
    }

    /// The lock of the cold paths (module loads, attribute raises).
    pub(crate) fn cold(&self) -> MutexGuard<'_, ()> {
        self.cold.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `f` must be allowed more dynamic shared memory than so far to
    /// launch with `bytes`.
    pub(crate) fn needs_smem(&self, f: Function, bytes: usize) -> bool {
        bytes > self.smem[f.slot].load(Ordering::Acquire)
    }

    /// Records that `f` is now allowed `bytes` of dynamic shared memory
    /// (call under [`Self::cold`], after the driver accepted it).
    pub(crate) fn allowed_smem(&self, f: Function, bytes: usize) {
        self.smem[f.slot].fetch_max(bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(n: usize) -> sys::CUfunction {
        n as sys::CUfunction
    }

    #[test]
    fn every_registry_entry_has_its_own_slot() {
        let entries: Vec<&str> = crate::kernels::required_entry_points();
        let mut slots: Vec<usize> = entries.iter().map(|e| slot_of(e).unwrap()).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), entries.len());
        assert_eq!(slot_of("no_such_kernel"), None);
    }

    #[test]
    fn a_lookup_finds_what_was_loaded_and_nothing_else() {
        let t = FunctionTable::new();
        assert!(!t.has("argmax_finish"));
        assert!(t.insert("argmax_finish", fake(0x100)));
        assert!(!t.insert("no_such_kernel", fake(0x200)));
        assert_eq!(t.get("argmax_finish").unwrap().raw, fake(0x100));
        assert!(t.get("sample_bf16").is_none());
        assert!(t.insert("argmax_finish", fake(0x300)));
        assert_eq!(
            t.get("argmax_finish").unwrap().raw,
            fake(0x100),
            "the first load stays"
        );
    }

    #[test]
    fn shared_memory_is_raised_only_past_what_was_allowed() {
        let t = FunctionTable::new();
        t.insert("argmax_finish", fake(1));
        t.insert("sample_bf16", fake(2));
        let (f, g) = (
            t.get("argmax_finish").unwrap(),
            t.get("sample_bf16").unwrap(),
        );
        assert!(t.needs_smem(f, 64 << 10));
        t.allowed_smem(f, 64 << 10);
        assert!(!t.needs_smem(f, 64 << 10));
        assert!(!t.needs_smem(f, 1 << 10), "less than allowed needs nothing");
        assert!(t.needs_smem(f, 100 << 10));
        assert!(t.needs_smem(g, 1 << 10), "each function has its own record");
        t.allowed_smem(f, 1 << 10);
        assert!(!t.needs_smem(f, 64 << 10), "the record never shrinks");
    }
}
