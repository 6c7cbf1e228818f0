//! The cluster on a bed of hosts (issue 25): every node in its own network namespace with
//! its own address (198.18.0.0/15), the viewers on a host of their own, faults made by the
//! kernel (`vigil_testkit::hosts`), and the nodes on their plain production config — no
//! fault variable, no loopback address anywhere.
//!
//! Needs root (network namespaces, veth, nftables). Under `CI=true` a machine that cannot
//! make them fails the test with the reason; elsewhere the test says why and skips.

mod bench;
mod cluster;
mod migration;
mod support;
mod trust;
mod viewers;
