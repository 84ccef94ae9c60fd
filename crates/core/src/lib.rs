//! `punctual-core`: the delivery contract, identifiers, states and reason codes, the sender's
//! pure decision, backoff, time-zone rules and the ports the services are generic over.
//!
//! Nothing in here knows about AWS, Lambda or HTTP; `cargo test -p punctual-core` builds
//! without the AWS SDK. Time enters only through [`clock::Clock`].

pub mod accounting;
pub mod backoff;
pub mod clock;
pub mod command;
pub mod contract;
pub mod cost;
pub mod decision;
pub mod ids;
pub mod lanes;
pub mod limiter;
pub mod metrics;
pub mod outcome;
pub mod pause;
pub mod ports;
pub mod progress;
pub mod provider;
pub mod reason;
pub mod reconcile;
pub mod redrive;
pub mod renewal;
pub mod scheduler;
pub mod secret;
pub mod sender;
pub mod slo;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tz;
pub mod workload;

pub use contract::{MalformedMessage, RedriveStamp, ReminderMessage};
pub use decision::{Decision, Disposition, SenderPolicy, Step};
pub use ids::{CorrelationId, IdempotencyKey, ReminderId, ReminderKind, RenewalId, TenantId};
pub use reason::{ReasonCode, ReminderState};
