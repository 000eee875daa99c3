//! Durable Streams on the log: the protocol of
//! <https://github.com/durable-streams/durable-streams> (`/v1/stream/*`, threads read as
//! streams at `/v1/threads/*`), its subscriptions (`/v1/stream/__ds/*`), and the dispatcher
//! that wakes their consumers by signed webhooks or pull-wake streams.
//!
//! A stream's state is the `DurableStream` aggregate (`threadstream_domain::durable_stream`),
//! folded from its log stream (`stream:<path>`); the subscriptions' is the `Subscriptions`
//! aggregate. Writes are decided by the log's writer; readers keep their own copy of each fold
//! ([`Streams`]). So every instance on one database sees the same streams.
//!
//! The server (`threadstream-api`) keeps the routes, the credentials and the limits: its
//! handlers extract a request, check the caller, and call in here with a [`Context`] and an
//! [`Actor`]. What needs the server's machinery is passed in: a request body to read (a future
//! the engine awaits when it wants it) and a slot for an SSE reader (a closure). Errors that
//! are not the protocol's to phrase are a [`DurableError`], which the server answers.
//!
//! Modules, each importing only those listed before it: `error`, `protocol` (the HTTP
//! vocabulary), `streams` (the folds), `signing`, `webhooks` (the URL policy), `context`,
//! `read` (a stream's messages), `reader` (catch-up, long-poll and SSE over any
//! [`reader::ReadSource`]), `stream` (the `/v1/stream/*` operations), `thread` (a thread read
//! as a stream), `subscriptions` (paths, views, commands), `dispatch` (the background task that
//! wakes consumers), `subscribe` (creating and changing subscriptions), `wake` (callbacks,
//! claims, acks, releases).

pub mod context;
pub mod dispatch;
pub mod error;
pub mod protocol;
pub mod read;
pub mod reader;
pub mod signing;
pub mod stream;
pub mod streams;
pub mod subscribe;
pub mod subscriptions;
pub mod thread;
pub mod wake;
pub mod webhooks;

pub use context::{Actor, Context};
pub use error::DurableError;
pub use streams::Streams;
pub use webhooks::{webhook_client, WebhookTargets, Webhooks};
