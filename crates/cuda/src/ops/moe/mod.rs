//! Mixture-of-experts kernels (filled by the cuda-moe work).
