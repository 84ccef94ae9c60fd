//! `punctual-lambda`: what every punctual function shares — configuration from the
//! environment with named errors, tracing, the real clock, the invocation budget, SQS batch
//! processing with partial failures, and the `HandlerError` → `Diagnostic` boundary.

pub mod batch;
pub mod config;
pub mod error;

use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_core::clock::Clock;

/// The wall clock, sleeping on tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep(&self, d: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

/// When this invocation is killed, from the runtime's deadline (epoch milliseconds).
pub fn invocation_deadline(ctx: &lambda_runtime::Context) -> DateTime<Utc> {
    i64::try_from(ctx.deadline)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

/// Installs JSON logs on stderr-less stdout (CloudWatch reads stdout), level from `RUST_LOG`
/// (default `info`). Fields are stable snake_case; bodies and secrets are never logged.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_ansi(false)
        .with_target(false)
        .without_time()
        .try_init();
}
