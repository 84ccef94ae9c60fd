//! What delivering a reminder costs in AWS requests: one price list and one per-message shape,
//! used by the simulator's cost model and by the real pipeline's counted requests (`punctual
//! run`, `local drain`), so the two reports can be compared key by key.

use serde::Serialize;

/// On-demand prices (us-east-1, arm64), USD.
pub mod price {
    /// SQS standard queue, per request (each ≤ 64 KB chunk).
    pub const SQS_REQUEST: f64 = 0.40 / 1e6;
    /// DynamoDB on-demand, per write request unit (items ≤ 1 KB; ledger items with a long
    /// history take 2–3, so this is a lower bound).
    pub const DDB_WRITE: f64 = 0.625 / 1e6;
    /// DynamoDB on-demand, per read request unit (strongly consistent ≤ 4 KB).
    pub const DDB_READ: f64 = 0.125 / 1e6;
    /// Lambda arm64, per GB-second.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    /// Lambda, per invocation.
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// Sender memory (the template's 256 MB), GB.
    pub const SENDER_GB: f64 = 0.25;
}

/// The sender side's AWS requests (the SQS event source mapping's receives and deletes
/// included, the scheduler's not) per delivered message, and the limiter's writes per provider
/// call. Both `simulate` and `run` report this shape under `requests_per_message`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RequestsPerMessage {
    /// DynamoDB reads (renewal re-reads, ledger reads, recipients, the pause switch).
    pub dynamodb_reads: f64,
    /// DynamoDB writes, the limiter's included (refused conditional writes count: AWS bills
    /// them).
    pub dynamodb_writes: f64,
    /// SQS requests: receives, batch deletes, requeues, visibility changes, DLQ sends.
    pub sqs: f64,
    /// Limiter writes per provider call.
    pub limiter_writes_per_call: f64,
    /// What these requests cost per million messages at [`price`] (Lambda time excluded: the
    /// real pipeline's handlers do not run inside Lambda here).
    pub request_usd_per_million: f64,
}

impl RequestsPerMessage {
    /// From totals: `messages` delivered (or otherwise ended), `calls` to the provider.
    pub fn from_totals(reads: u64, writes: u64, sqs: u64, limiter_writes: u64, messages: u64, calls: u64) -> Self {
        let per = |x: u64| round3(x as f64 / messages.max(1) as f64);
        let (reads, writes, sqs_per) = (per(reads), per(writes), per(sqs));
        Self {
            dynamodb_reads: reads,
            dynamodb_writes: writes,
            sqs: sqs_per,
            limiter_writes_per_call: round3(limiter_writes as f64 / calls.max(1) as f64),
            request_usd_per_million: ((sqs_per * price::SQS_REQUEST
                + writes * price::DDB_WRITE
                + reads * price::DDB_READ)
                * 1e6
                * 100.0)
                .round()
                / 100.0,
        }
    }
}

impl RequestsPerMessage {
    /// One line for the human reports (`run`, `simulate`).
    pub fn line(&self) -> String {
        format!(
            "DynamoDB {:.3} reads + {:.3} writes, SQS {:.3}; limiter {:.3} writes/call; ${:.2}/M in requests",
            self.dynamodb_reads,
            self.dynamodb_writes,
            self.sqs,
            self.limiter_writes_per_call,
            self.request_usd_per_million
        )
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_message_and_priced() {
        // 2,000 messages: 3,000 reads, 6,000 writes (1,000 of them the limiter's), 1,400 SQS
        // requests, 2,000 calls.
        let r = RequestsPerMessage::from_totals(3000, 6000, 1400, 1000, 2000, 2000);
        assert_eq!((r.dynamodb_reads, r.dynamodb_writes, r.sqs, r.limiter_writes_per_call), (1.5, 3.0, 0.7, 0.5));
        // 0.7 × 0.40 + 3 × 0.625 + 1.5 × 0.125 = 0.28 + 1.875 + 0.1875 = 2.3425 → 2.34
        assert_eq!(r.request_usd_per_million, 2.34);
        assert_eq!(RequestsPerMessage::from_totals(1, 1, 1, 1, 0, 0).dynamodb_reads, 1.0);
    }
}
