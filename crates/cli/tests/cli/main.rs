//! The `punctual` binary as an operator runs it, one test binary (each module was one, and each
//! linked the whole AWS SDK).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

mod import;
mod lifecycle;
mod local;
mod ops;
mod reconcile;
mod simulate;
