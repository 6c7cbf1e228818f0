//! Live streams: the per-path hub and the readers attached to it.

pub mod frames;
pub mod handoff;
pub mod prefetch;
pub mod reader;
pub mod stream;
