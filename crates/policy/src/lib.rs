//! Work in progress: see the crate description.
