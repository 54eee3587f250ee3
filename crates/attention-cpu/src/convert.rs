//! Moving rows between storage dtypes and the f32 compute buffers.

use headroom_core::Element;
use std::any::TypeId;

/// The slice itself when the storage type is already f32 (no copy needed).
pub(crate) fn as_f32<T: Element>(s: &[T]) -> Option<&[f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() {
        // SAFETY: T is f32 (same TypeId), so the layout and the lifetime are identical.
        Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
    } else {
        None
    }
}

/// `dst[i] = src[i] as f32`.
#[inline(always)]
pub(crate) fn load<T: Element>(src: &[T], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// `dst[i] = src[i] as f32 * scale`.
#[inline(always)]
pub(crate) fn load_scaled<T: Element>(src: &[T], dst: &mut [f32], scale: f32) {
    debug_assert_eq!(src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32() * scale;
    }
}

/// `dst[i] = T::from(src[i] * factor)`.
#[inline(always)]
pub(crate) fn store_scaled<T: Element>(src: &[f32], factor: f32, dst: &mut [T]) {
    debug_assert_eq!(src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = T::from_f32(s * factor);
    }
}

/// Whether every value of `xs` is finite (exponent bits not all ones),
/// in integer lanes so that it vectorizes.
#[inline(always)]
pub(crate) fn all_finite(xs: &[f32]) -> bool {
    const EXP: u32 = 0x7f80_0000;
    let mut bad = [0u32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (b, x) in bad.iter_mut().zip(c) {
            *b |= u32::from(x.to_bits() & EXP == EXP);
        }
    }
    let tail = chunks.remainder().iter().any(|x| !x.is_finite());
    !tail && bad.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn borrows_only_f32() {
        let a = [1.0f32, 2.0];
        assert_eq!(as_f32(&a), Some(&a[..]));
        assert!(as_f32(&[bf16::ONE]).is_none());
    }

    #[test]
    fn load_converts_and_all_finite_finds_nan_and_inf_anywhere() {
        let mut dst = [0.0f32; 3];
        load(&[bf16::ONE, bf16::ZERO, bf16::NEG_ONE], &mut dst);
        assert_eq!(dst, [1.0, 0.0, -1.0]);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 7, 8, 18] {
                let mut xs = vec![1.0f32; 19];
                assert!(all_finite(&xs));
                xs[at] = bad;
                assert!(!all_finite(&xs), "{bad} at {at}");
            }
        }
        assert!(all_finite(&[f32::MAX, f32::MIN_POSITIVE, 0.0]));
    }
}
