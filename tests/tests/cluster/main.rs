//! The cluster (issue 4, first increment): gossip membership with an authenticated transport,
//! scheduler election and failover, placement of DESCRIBEs by 302. Real `vigil` processes on
//! 127.0.0.1/.2/.3; every wait polls for an event with a deadline.

mod bench;
mod ingest;
mod membership;
mod support;
