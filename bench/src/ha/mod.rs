//! Postgres high availability (issue #37), on the three-node cluster of
//! `scripts/ha-cluster.sh` (etcd, three Patroni-managed Postgres 15 nodes in strict synchronous
//! mode, HAProxy), started and stopped by the script for each scenario:
//!
//! - `failover`: a kill -9 of the primary's postmaster under a steady load of keyed appends
//!   (`failover.rs`, its writers `writers.rs`);
//! - `standby-fanout`: SSE fan-out with stream pages read on the primary alone, then on the two
//!   standbys (`fanout.rs`).

mod cluster;
mod failover;
mod fanout;
mod writers;

pub use failover::failover;
pub use fanout::standby_fanout;
