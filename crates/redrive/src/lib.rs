//! The redrive Lambda: configuration and the handler (the binary only composes them).

pub mod config;
pub mod handler;
