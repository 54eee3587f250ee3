//! The entry lookups of attention against its sources and the capability table.

use super::sources::{ATTENTION_FUSED, ATTENTION_FUSED_WGMMA, MASKED_SOFTMAX};
use super::{fused_entry, fused_wgmma_entry, softmax_entry};
use crate::kernels::{required_entry_points, source_of};
use headroom_core::fused_capability::{CUDA_FUSED_DTYPES, FUSED_HEAD_DIMS};
use headroom_core::Dtype;

#[test]
fn capability_table_has_a_required_entry_point_for_every_cell() {
    let required = required_entry_points();
    for d in FUSED_HEAD_DIMS {
        for dt in CUDA_FUSED_DTYPES {
            let e = fused_entry(d, dt).unwrap_or_else(|| panic!("no fused kernel d{d} {dt}"));
            assert!(required.contains(&e));
            assert_eq!(source_of(e), Some(&ATTENTION_FUSED));
            let w = fused_wgmma_entry(d, dt).unwrap_or_else(|| panic!("no wgmma kernel d{d} {dt}"));
            assert!(required.contains(&w));
            assert_eq!(source_of(w), Some(&ATTENTION_FUSED_WGMMA));
        }
    }
    for dt in CUDA_FUSED_DTYPES {
        let s = softmax_entry(dt).unwrap_or_else(|| panic!("no softmax for {dt}"));
        assert_eq!(source_of(s), Some(&MASKED_SOFTMAX));
    }
    assert_eq!(fused_entry(256, Dtype::F32), None);
    assert_eq!(fused_entry(96, Dtype::Bf16), None);
    assert_eq!(fused_wgmma_entry(96, Dtype::Bf16), None);
    assert_eq!(softmax_entry(Dtype::F32), None);
}
