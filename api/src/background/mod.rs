//! What the service runs beside its HTTP routes, on timers or as the log grows: the projector
//! (read models kept up to date with the log) and, on Postgres, the run leases (which instance
//! executes which run, and recovery of runs whose instance stopped).

pub mod projector;
pub mod run_leases;
