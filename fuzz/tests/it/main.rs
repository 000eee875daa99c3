//! The fuzz harnesses in the ordinary test suite, one binary: the kept inputs replayed, and a
//! bounded mutation run.

mod bounded_run;
mod regressions;
