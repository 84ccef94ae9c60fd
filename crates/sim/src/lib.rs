//! `punctual-sim`: the deterministic simulator — the core's sender service, scheduler and
//! shared limiter over the core's in-memory adapters (feature `testing`) in virtual time —
//! with its scenarios, the naive baseline, the cost model and the chart. Counted by the core's
//! one accounting, like `run` and `local drain`.
//!
//! It is the only room besides tests that uses the fakes and tokio's paused clock, and it runs
//! as its own binary (`punctual-sim`, which `punctual simulate` hands over to), so the operator
//! CLI never links either.

pub mod chart;
pub mod check;
pub mod drill;
pub mod simulate;
pub(crate) mod sqs;

pub use simulate::*;

/// Polls a future whose every await is ready (the in-memory ports) to completion: reading the
/// fakes after a run, outside its runtime.
pub(crate) fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}
