//! The sans-IO protocol core of vigil.
//!
//! Everything here is plain code with bytes in and bytes out: no sockets, no clocks read
//! implicitly, no async. The node (`vigil-server`) is a thin tokio shell around it, in the
//! way `quinn` sits on `quinn-proto`. Keeping the crate free of I/O means every protocol
//! rule is unit-testable and fuzzable, and the compiler enforces the split (this crate does
//! not depend on tokio).

pub mod codec;
pub mod depacketize;
pub mod mp4;
pub mod rtcp;
pub mod rtp;
pub mod rtsp;
pub mod sdp;
pub mod srtp;
