//! Socket helpers: UDP port pairs, batched UDP sends (to one viewer, or to many from a shared
//! socket: `udp_fanout`), whose RTCP a shared port received (`rtcp_routes`), vectored interleaved TCP writes, UDP
//! with another node's source address (`raw`, for migration's preserve mode), a TCP writer
//! that notices a peer which stopped reading (`stall`), an RTSP connection's socket shared
//! by its connection task and its live sender (`tcp_sink`), the TLS listeners' certificate and
//! handshake (`tls`), the TLS connection under an `rtsps://` pull (`tls_client`), and SRTP
//! keys and protection of RTSPS viewers' media (`srtp`).

pub mod ports;
pub mod raw;
pub mod rtcp_routes;
pub mod srtp;
pub mod stall;
pub mod tcp;
pub mod tcp_sink;
pub mod tls;
pub mod tls_client;
pub mod udp;
pub mod udp_fanout;
