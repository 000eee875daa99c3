//! api's integration tests, one binary (each file below is a module) so they link once.

mod agent_routes;
mod projector;
