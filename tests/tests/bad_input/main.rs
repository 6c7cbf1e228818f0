//! Bad input over raw sockets: malformed requests, oversized headers, unknown methods, wrong
//! interleaved lengths and random bytes get a 4xx or a clean close and never hurt the node
//! or its other viewers; every RTSP error status of the protocol is where it should be;
//! limits, the session timeout and garbage RTP are handled and counted.

mod limits;
mod malformed;
mod statuses;
mod support;
