//! The clock port: the only way time enters the core. It reads the time and it sleeps, so one
//! `ManualClock` (feature `testing`) controls a whole test or simulation.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Reads the current instant and waits.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
    /// Waits for `d` of this clock's time.
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send;
}
