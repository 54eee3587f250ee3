//! TMA tensor maps (`CUtensorMap`) of row-major bf16 matrices read in boxes
//! of 64 columns (one 128-byte row) with the 128-byte swizzle: the layout the
//! wgmma SW128 shared-memory descriptors read (chunk c of box row r at
//! `r * 128 + (c ^ r % 8) * 16`). [`Sw128Map`] checks the shape and gives the
//! encoding's parameters (no GPU needed); [`Sw128Map::encode`] asks the
//! driver for the map, which a kernel takes by value as a
//! `const __grid_constant__` parameter ([`TensorMap`]).

use crate::CudaError;
use cudarc::driver::sys;

/// Columns of a box: one 128-byte swizzle row of bf16.
pub const SW128_BOX_COLS: usize = 64;
/// Most rows of a box (the hardware's limit per dimension).
pub const MAX_BOX_ROWS: usize = 256;

/// A `rows x cols` row-major bf16 matrix read in boxes of
/// [`SW128_BOX_COLS`] x `box_rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sw128Map {
    pub rows: usize,
    pub cols: usize,
    pub box_rows: usize,
}

/// The parameters of `cuTensorMapEncodeTiled` for an [`Sw128Map`]: sizes
/// innermost first, the row stride in bytes, the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sw128Params {
    pub dims: [u64; 2],
    pub row_stride: u64,
    pub box_dims: [u32; 2],
}

/// A tensor map for a kernel parameter (128 bytes, aligned as the driver's).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct TensorMap(pub sys::CUtensorMap);

impl Sw128Map {
    /// The encoding's parameters, or why the matrix cannot be mapped: rows
    /// and columns at least one box and at most `i32::MAX` (the kernels'
    /// box coordinates), rows of whole 16-byte pieces, 1 to
    /// [`MAX_BOX_ROWS`] box rows.
    pub fn params(&self) -> Result<Sw128Params, CudaError> {
        let bad = |why: &str| {
            Err(CudaError::InvalidLaunch(format!(
                "tensor map of {} x {} bf16 in boxes of {} rows: {why}",
                self.rows, self.cols, self.box_rows
            )))
        };
        if self.box_rows == 0 || self.box_rows > MAX_BOX_ROWS {
            return bad("box rows outside 1..=256");
        }
        if self.rows < self.box_rows || self.cols < SW128_BOX_COLS {
            return bad("smaller than one box");
        }
        if self.rows > i32::MAX as usize || self.cols > i32::MAX as usize {
            return bad("coordinates past i32");
        }
        if !(self.cols * 2).is_multiple_of(16) {
            return bad("rows are not whole 16-byte pieces");
        }
        Ok(Sw128Params {
            dims: [self.cols as u64, self.rows as u64],
            row_stride: (self.cols * 2) as u64,
            box_dims: [SW128_BOX_COLS as u32, self.box_rows as u32],
        })
    }

    /// The driver's tensor map of the matrix at device address `ptr`
    /// (16-byte aligned; the caller keeps the memory alive while kernels use
    /// the map).
    pub fn encode(&self, ptr: u64) -> Result<TensorMap, CudaError> {
        let p = self.params()?;
        if ptr == 0 || !ptr.is_multiple_of(16) {
            return Err(CudaError::InvalidLaunch(format!(
                "tensor map base {ptr:#x} is not 16-byte aligned"
            )));
        }
        let strides = [1u32, 1];
        // SAFETY: an all-zero tensor map is a valid value for the driver to
        // overwrite.
        let mut map: sys::CUtensorMap = unsafe { std::mem::zeroed() };
        // SAFETY: every pointer addresses a live local of the rank (2) given;
        // `ptr` is a device address the driver only records.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                2,
                ptr as *mut std::ffi::c_void,
                p.dims.as_ptr(),
                &p.row_stride,
                p.box_dims.as_ptr(),
                strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()?;
        Ok(TensorMap(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sw128_maps_read_128_byte_rows_in_boxes_of_up_to_256_rows() {
        // The 35B-A3B gate+up weights: 256 experts x 1024 rows of 2048.
        let m = Sw128Map {
            rows: 256 * 1024,
            cols: 2048,
            box_rows: 128,
        };
        let p = m.params().unwrap();
        assert_eq!(p.dims, [2048, 262_144]);
        assert_eq!(p.row_stride, 4096);
        assert_eq!(p.box_dims, [64, 128]);
        assert_eq!(p.box_dims[0] as usize * 2, 128, "one swizzle row");
        let ok = |rows, cols, box_rows| {
            Sw128Map {
                rows,
                cols,
                box_rows,
            }
            .params()
            .is_ok()
        };
        assert!(ok(128, 64, 128));
        assert!(ok(256, 512, 256));
        assert!(!ok(256, 512, 257), "box rows past 256");
        assert!(!ok(256, 512, 0));
        assert!(!ok(127, 512, 128), "fewer rows than a box");
        assert!(!ok(256, 32, 128), "narrower than a box");
        assert!(
            !ok(256, 68, 128),
            "rows of 136 bytes are not 16-byte pieces"
        );
        assert!(!ok(1 << 31, 64, 128), "row coordinates past i32");
        // No driver call for a bad base.
        assert!(m.encode(0).is_err());
        assert!(m.encode(8).is_err());
    }

    #[test]
    fn a_tensor_map_is_128_bytes_aligned_for_the_kernel_parameter() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert!(std::mem::align_of::<TensorMap>() >= 64);
    }
}
