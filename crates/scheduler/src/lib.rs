//! The scheduler Lambda: `app` is its one composition root, `handler` runs one tick of the
//! core's scheduler per EventBridge event and turns its report into EMF metrics, `config` reads
//! its environment; after each tick it publishes the ledger's outcome events onto the bus
//! (`outcomes`).

pub mod app;
pub mod config;
pub mod handler;
pub mod outcomes;
