//! Durable Streams: `/v1/stream/*` (create `PUT`, append `POST`, read `GET` with catch-up,
//! long-poll and SSE, `HEAD`, `DELETE`), the protocol of
//! <https://github.com/durable-streams/durable-streams> and its conformance suite
//! (`tests/conformance/durable-streams`). Streams live in the log; a stream belongs to the user
//! who created it, like a thread. The server's routes check the caller may use Durable Streams
//! and call in here.
//!
//! One module per method group: `create` (PUT, forks), `append` (POST, producers), `read` (GET
//! and HEAD, through `crate::reader`), `delete` (DELETE, releasing forks); what they share
//! (finding a stream for an actor, its path, commands, offsets) is `shared`.

mod append;
mod create;
mod delete;
mod read;
mod shared;

pub use append::append;
pub use create::create;
pub use delete::delete;
pub use read::{head, read};
pub use shared::{stream_path, ROUTE_PREFIX};
