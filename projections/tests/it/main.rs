//! projections's integration tests, one binary (each file below is a module) so they link once.

mod fork;
mod golden;
mod n8n_reducer;
mod thread_properties;
