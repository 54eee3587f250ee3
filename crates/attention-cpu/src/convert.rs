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

/// `dst[i] = src[i] as f32`; returns whether every value is finite.
#[inline(always)]
pub(crate) fn load<T: Element>(src: &[T], dst: &mut [f32]) -> bool {
    debug_assert_eq!(src.len(), dst.len());
    let mut finite = true;
    for (d, s) in dst.iter_mut().zip(src) {
        let x = s.to_f32();
        finite &= x.is_finite();
        *d = x;
    }
    finite
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

/// Whether every value of `xs` is finite.
#[inline(always)]
pub(crate) fn all_finite(xs: &[f32]) -> bool {
    xs.iter().fold(true, |ok, x| ok & x.is_finite())
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
    fn load_reports_non_finite_values() {
        let mut dst = [0.0f32; 3];
        assert!(load(&[bf16::ONE, bf16::ZERO, bf16::NEG_ONE], &mut dst));
        assert_eq!(dst, [1.0, 0.0, -1.0]);
        assert!(!load(&[bf16::ONE, bf16::NAN, bf16::ONE], &mut dst));
        assert!(!load(&[f32::INFINITY], &mut dst[..1]));
    }
}
