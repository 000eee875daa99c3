//! agent's integration tests, one binary (each file below is a module) so they link once.

mod support;

mod fetch;
mod golden_recording;
mod orchestration;
mod providers;
mod runtime;
mod tasks;
mod workflows;
