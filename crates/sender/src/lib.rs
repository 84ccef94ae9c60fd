//! The sender Lambda: `handler` maps an SQS batch through the core's sender service into a
//! partial-batch response plus EMF metrics; `config` reads its environment. `main.rs` only
//! composes.

pub mod config;
pub mod handler;
