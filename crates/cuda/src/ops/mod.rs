//! Model ops on the device beyond attention, each in its folder with its
//! kernel sources: the gated delta rule ([`gdn`]: chunked prefill, recurrent
//! step, fused decode core), the mixture of experts ([`moe`]: routing,
//! grouped GEMMs, decode), the causal conv1d ([`conv`]), the shape-general
//! fallbacks of both ([`fallback`]) and the tensor-parallel partials ([`tp`]).

pub mod conv;
pub mod fallback;
pub mod gdn;
pub mod moe;
pub mod tp;
