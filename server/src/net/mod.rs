//! Socket helpers: UDP port pairs, batched UDP sends, vectored interleaved TCP writes.

pub mod ports;
pub mod tcp;
pub mod udp;
