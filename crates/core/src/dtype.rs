//! Storage dtypes and their conversion to the f32 compute type.

use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A storage dtype. Compute (accumulation, softmax) is always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// The canonical lowercase name (`f32`, `f16`, `bf16`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Parses the names users and Hugging Face configs write
    /// (`bf16`, `bfloat16`, `f16`, `fp16`, `float16`, `half`, `f32`, `fp32`, `float32`, `float`).
    pub fn parse(s: &str) -> Option<Dtype> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" | "float" => Some(Dtype::F32),
            "f16" | "fp16" | "float16" | "half" => Some(Dtype::F16),
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dtype::parse(s).ok_or_else(|| format!("unknown dtype `{s}` (expected f32, f16 or bf16)"))
    }
}

/// A storage element: converts to and from the f32 compute type.
pub trait Element: Copy + Send + Sync + Default + fmt::Debug + 'static {
    const DTYPE: Dtype;
    fn to_f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Element for bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hugging_face_names() {
        assert_eq!(Dtype::parse("bfloat16"), Some(Dtype::Bf16));
        assert_eq!(Dtype::parse(" FP16 "), Some(Dtype::F16));
        assert_eq!(Dtype::parse("float32"), Some(Dtype::F32));
        assert_eq!(Dtype::parse("int8"), None);
    }

    #[test]
    fn element_round_trips_through_f32() {
        assert_eq!(bf16::from_f32(1.5).to_f32(), 1.5);
        assert_eq!(<f16 as Element>::from_f32(-2.25).to_f32(), -2.25);
        assert!(<bf16 as Element>::from_f32(f32::NAN).to_f32().is_nan());
    }
}
