//! The crate's error type: every failure of the CUDA backend is one of these,
//! never a panic (a missing library is an ordinary error).

use headroom_core::AttentionError;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CudaError {
    #[error("{library} cannot be loaded ({hint})")]
    LibraryMissing {
        library: &'static str,
        hint: &'static str,
    },
    #[error("CUDA headers not found: {0}")]
    HeadersMissing(String),
    #[error("NVRTC could not compile {kernel} for {arch}:\n{log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("cuBLAS: {0}")]
    Blas(String),
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    #[error("kernel entry point `{0}` is not in any embedded kernel source")]
    UnknownEntryPoint(String),
    #[error("invalid kernel launch: {0}")]
    InvalidLaunch(String),
    #[error("kernel artifact: {0}")]
    Artifact(String),
    #[error(transparent)]
    Attention(#[from] AttentionError),
    /// Arguments of an op launch that no kernel can run (checked before launching).
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// The OS error is in the message only (not also a `source`), so it is printed once.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(e.to_string())
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        CudaError::Blas(e.to_string())
    }
}

impl From<cudarc::nvrtc::result::NvrtcError> for CudaError {
    fn from(e: cudarc::nvrtc::result::NvrtcError) -> Self {
        CudaError::Nvrtc(e.to_string())
    }
}

/// Wraps an `std::io::Error` with the path it concerns.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CudaError {
    let path = path.into();
    move |error| CudaError::Io { path, error }
}

/// A device error as an op error (attention's typed errors kept as such).
pub(crate) fn dev_err(e: CudaError) -> headroom_core::ops::OpError {
    use headroom_core::ops::OpError;
    match e {
        CudaError::Attention(a) => OpError::Attention(a),
        other => OpError::Device(other.to_string()),
    }
}
