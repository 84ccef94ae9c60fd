//! The sender Lambda: `app` is its one composition root (configuration + clients → a ready
//! instance), `handler` maps an SQS batch through the core's sender service into a
//! partial-batch response plus EMF metrics, `config` reads its environment. `main.rs` only
//! builds the clients and runs the loop.

pub mod app;
pub mod config;
pub mod handler;
