//! Model ops on the device beyond attention: the gated delta rule ([`gdn`])
//! and the mixture of experts ([`moe`]).

pub mod gdn;
pub mod moe;
