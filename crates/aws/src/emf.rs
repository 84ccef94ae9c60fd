//! CloudWatch Embedded Metric Format: the metrics as structured log lines on stdout, extracted
//! by CloudWatch Logs (no `PutMetricData` call on the hot path). The metrics and their
//! documents are built in the core ([`punctual_core::metrics`]) so the simulator emits exactly
//! what the functions emit; this module keeps the name the functions have always imported.

pub use punctual_core::metrics::{Metrics, TENANT_PROPERTY, name};
