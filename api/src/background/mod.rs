//! What the service runs beside its HTTP routes, on timers or as the log grows: the projector
//! (read models kept up to date with the log), on Postgres the run leases (which instance
//! executes which run, and recovery of runs whose instance stopped), and with
//! `--retention-days` the retention sweeper, and the compactor of finished runs.

pub mod compactor;
pub mod projector;
pub mod read_models;
pub mod retention;
pub mod run_leases;
