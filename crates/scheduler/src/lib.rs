//! The scheduler Lambda: `app` is its one composition root, `handler` runs one tick of the
//! core's scheduler per EventBridge event and turns its report into EMF metrics, `config` reads
//! its environment.

pub mod app;
pub mod config;
pub mod handler;
