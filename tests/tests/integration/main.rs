//! punctual's integration tests against the emulator endpoint, one binary: each module was a
//! test binary of its own, and each linked the whole AWS SDK (≈ 4 s a link in a debug build,
//! ten times over, on every change).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

mod adapters;
mod events;
mod explain;
mod ingest;
mod ledger;
mod limiter;
mod redrive;
mod scheduler;
mod sender;
mod ses;
mod smoke;
mod status;
mod template;
