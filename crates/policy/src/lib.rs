//! Attention policy: the controls a user sets, the qualification registry
//! (data: TOML entries binding an exact machine and layer shape to a measured
//! route, with evidence), and the single [`resolve`] that picks each layer's
//! route and query block.
//!
//! * [`Controls`] — `fallback | fused | auto` and the query-block override,
//!   from CLI flags and the environment (malformed values fail closed).
//! * [`Registry`] — entries from the embedded `qualifications/` folder plus
//!   extra folders; invalid entries are kept with their reason.
//! * [`QualificationEntry::matches`] — the one predicate (tests, `doctor`,
//!   and production all use it).
//! * [`resolve`] / [`resolve_for_this_machine`] — the decision.

mod control;
mod entry;
mod matcher;
mod registry;
mod resolve;

pub use control::{
    non_utf8_warnings, parse_query_block, AttentionControl, ControlSource, Controls,
    QueryBlockControl, DEFAULT_QUERY_BLOCK, ENV_EXECUTION, ENV_QUALIFICATIONS, ENV_QUERY_BLOCK,
};
pub use entry::{
    check_date, escape_controls, parse_entry, sha256_hex, Evidence, QualificationEntry,
    QualifiedResult, MAX_LAYER_SIZE, MAX_QUERY_BLOCK,
};
pub use matcher::Mismatch;
pub use registry::{
    Registry, RegistryEntry, RegistryRow, RowStatus, EMBEDDED_PREFIX, ENV_BUILTIN_QUALIFICATIONS,
    MAX_ENTRY_BYTES, MAX_EVIDENCE_BYTES,
};
pub use resolve::{resolve, resolve_for_this_machine, ResolutionSource, ResolvedAttention};
