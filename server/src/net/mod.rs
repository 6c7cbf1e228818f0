//! Socket helpers: UDP port pairs, batched UDP sends, vectored interleaved TCP writes, UDP
//! with another node's source address (`raw`, for migration's preserve mode).

pub mod ports;
pub mod raw;
pub mod tcp;
pub mod udp;
