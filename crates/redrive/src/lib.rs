//! The redrive Lambda: `app` is its one composition root, `handler` validates a request and
//! runs it, `config` reads its environment (the binary only composes them).

pub mod app;
pub mod config;
pub mod handler;
