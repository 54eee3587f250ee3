//! Model ops beyond attention that the CUDA backend launches: the routed
//! experts of the sparse MoE ([`moe`]) and the Gated DeltaNet ([`gdn`]).

pub mod gdn;
pub mod moe;
