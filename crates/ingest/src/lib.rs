//! `punctual-ingest`: the ingest function. Renewal commands (docs/integration.md) from the
//! commands queue, through the one validation and the one conditional write `punctual import`
//! uses, in the producer's version order; what cannot be applied goes to the commands DLQ with
//! its reason.

pub mod app;
pub mod config;
pub mod handler;
