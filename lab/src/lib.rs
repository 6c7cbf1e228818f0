//! vigil's experiment and benchmark tools, out of the node crate (issue 24 §3): the
//! `vigil-lab` binary's `lab` (the papers' scenarios on real `vigil serve` processes),
//! `bench` (load generators against a running node) and `sim` (a scenario in virtual time
//! by `vigil-sim`, its report folder written). The node crate `vigil-server` depends on none
//! of this; the clients and the node harness come from `vigil-testkit`.

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod lab;
pub mod sim;
