//! The local pipeline's functions with their requests counted below the SDK: what `punctual run`
//! and `local drain` both run, so their reports carry the same request keys, divided the same
//! way, and can be compared field by field (and with the simulator's).
//!
//! The sender side (both lanes' pollers, playing the event source mappings, with the handler's
//! DynamoDB, SQS and provider requests) is counted apart from the scheduler; the command's own
//! reads (progress, depth, reconcile) go through clients of its own, uncounted.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use aws_config::SdkConfig;
use punctual_aws::counting::{RequestCounts, is_dynamodb_read};
use punctual_aws::emf::Metrics;
use punctual_aws::sqs::SqsQueues;
use punctual_core::cost::RequestsPerMessage;
use punctual_core::secret::Secret;
use punctual_ops::Resources;
use serde::Serialize;

use crate::HarnessError;
use crate::env::{LimiterBreakdown, LocalSender, local_provider, local_senders, scheduler_config, sender_config};
use crate::esm::EsmStats;

/// How many pollers each lane runs, their jitter seed and the scheduler's release rate.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Pollers of the normal lane (its mapping's `MaximumConcurrency`).
    pub concurrency: usize,
    /// Pollers of the urgent lane.
    pub urgent_concurrency: usize,
    /// Seed of the senders' jitter (the urgent lane's is derived from it).
    pub seed: u64,
    /// The scheduler's release rate, messages/s.
    pub release_rate: f64,
    /// Pollers of each channel's own queue (its mapping's `MaximumConcurrency`).
    pub channel_concurrency: usize,
}

/// The sender instances of both lanes and the scheduler, on counted clients.
pub struct CountedPipeline {
    sender_requests: RequestCounts,
    scheduler_requests: RequestCounts,
    /// The redrive function's requests (`run --redrive`; none otherwise).
    redrive_requests: RequestCounts,
    queues: SqsQueues,
    /// The normal lane's sender instances.
    pub normal: Vec<Arc<LocalSender>>,
    /// The urgent lane's sender instances.
    pub urgent: Vec<Arc<LocalSender>>,
    /// Each channel's own queue and its sender instances.
    pub channels: Vec<(String, Vec<Arc<LocalSender>>)>,
    /// The scheduler function's own composition root (its pause rule included).
    pub scheduler: Arc<punctual_scheduler::app::App>,
}

/// The requests a counted pipeline made, per message (the keys both reports share).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PipelineRequests {
    /// Shared-limiter DynamoDB writes (failed conditional writes included) ÷ tokens granted.
    pub limiter_writes_per_call: f64,
    /// What those writes were: bookings, other writes, stranded slots.
    pub limiter: LimiterBreakdown,
    /// The sender side's requests (its event source mappings' included) per message, in the
    /// simulator's shape.
    pub requests_per_message: RequestsPerMessage,
    /// The scheduler's requests per message (its limiter column is 0).
    pub scheduler_requests_per_message: RequestsPerMessage,
    /// The sender side's requests by `service/Operation[/item kind]`.
    pub requests: BTreeMap<String, u64>,
    /// The scheduler's requests by `service/Operation[/item kind]`.
    pub scheduler_requests: BTreeMap<String, u64>,
    /// `run --redrive`: the redrive function's own requests per message it moved back (its
    /// DLQ receives, sends back, deletes and releases; its ledger reads of each letter and of
    /// the redriven outcomes; its pause read and audit writes). They are in
    /// `requests_per_message` too, divided there by every message, as the simulator counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redrive_requests_per_message: Option<RequestsPerMessage>,
    /// `run --redrive`: the redrive function's requests by `service/Operation[/item kind]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub redrive_requests: BTreeMap<String, u64>,
}

impl CountedPipeline {
    /// Builds the functions from the local resources, on clients of `config` whose requests
    /// are counted (DynamoDB at `dynamodb_endpoint` when dynalite serves it).
    pub fn build(
        res: &Resources,
        config: &SdkConfig,
        dynamodb_endpoint: Option<&str>,
        token: &Secret,
        quota: f64,
        shape: Shape,
    ) -> Result<Self, HarnessError> {
        use punctual_aws::config::dynamodb_client;
        let (sender_requests, scheduler_requests) = (RequestCounts::new(), RequestCounts::new());
        let sender_sdk = sender_requests.wrap(config);
        let sender_ddb = dynamodb_client(&sender_sdk, dynamodb_endpoint);
        let queues = res.queues(aws_sdk_sqs::Client::new(&sender_sdk));
        let scheduler_sdk = scheduler_requests.wrap(config);
        let sender = sender_config(res, quota)?;
        let provider = local_provider(&sender_sdk, &sender_ddb, token, &sender)?;
        let sqs = queues.client();
        let normal = local_senders(&sender, &sender_ddb, sqs, &provider, shape.seed, shape.concurrency);
        let urgent = local_senders(&sender, &sender_ddb, sqs, &provider, shape.seed ^ 0xa5a5, shape.urgent_concurrency);
        // Each channel's own queue and its own urgent lane, each drained by its own senders.
        let channels = sender
            .channel_queues
            .iter()
            .chain(&sender.channel_urgent_queues)
            .zip(1u64..)
            .map(|((_, url), i)| {
                let seed = shape.seed ^ (0x5a5a_0000 + i);
                (url.clone(), local_senders(&sender, &sender_ddb, sqs, &provider, seed, shape.channel_concurrency))
            })
            .collect();
        let scheduler = Arc::new(punctual_scheduler::app::build(
            &scheduler_config(res, shape.release_rate)?,
            &dynamodb_client(&scheduler_sdk, dynamodb_endpoint),
            &aws_sdk_sqs::Client::new(&scheduler_sdk),
        ));
        let redrive_requests = RequestCounts::new();
        Ok(Self { sender_requests, scheduler_requests, redrive_requests, queues, normal, urgent, channels, scheduler })
    }

    /// The redrive function as its Lambda composes it ([`punctual_redrive::app::build`]), on
    /// clients of `config` whose requests are counted apart from the sender's.
    pub fn redrive(
        &self,
        res: &Resources,
        config: &SdkConfig,
        dynamodb_endpoint: Option<&str>,
        quota: f64,
    ) -> Result<(punctual_redrive::app::App, punctual_core::redrive::RedriveCaps), HarnessError> {
        let sdk = self.redrive_requests.wrap(config);
        let redrive = crate::env::redrive_config(res, quota)?;
        let app = punctual_redrive::app::build(
            &redrive,
            &punctual_aws::config::dynamodb_client(&sdk, dynamodb_endpoint),
            &aws_sdk_sqs::Client::new(&sdk),
        );
        Ok((app, redrive.caps))
    }

    /// Both lanes' pollers (playing the event source mappings) until `stop`.
    pub async fn poll(&self, stop: Arc<AtomicBool>, stats: Arc<EsmStats>, metrics: Arc<Mutex<Metrics>>) {
        crate::esm::run_pollers_with(
            self.normal.clone(),
            self.urgent.clone(),
            self.channels.clone(),
            self.queues.clone(),
            stop,
            stats,
            metrics,
        )
        .await;
    }

    /// The requests so far, divided by `messages` (the limiter column by `calls`, provider
    /// calls). With no message the per-message figures are 0 (nothing to divide by; the
    /// totals stay in `requests`), not the totals under a per-message name.
    ///
    /// With a redrive (`redriven`: the messages it moved back), the redrive function's
    /// requests join the sender side's in `requests_per_message` (the simulator's totals
    /// count them so) and are reported alone per message moved.
    pub fn requests(&self, messages: u64, calls: u64, redriven: Option<u64>) -> PipelineRequests {
        let limiter = LimiterBreakdown::of(
            &self
                .normal
                .iter()
                .chain(&self.urgent)
                .chain(self.channels.iter().flat_map(|(_, s)| s))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let sender = self.sender_requests.snapshot();
        let scheduler = self.scheduler_requests.snapshot();
        let redrive = self.redrive_requests.snapshot();
        let mut both = sender.clone();
        if redriven.is_some() {
            for (k, n) in &redrive {
                *both.entry(k.clone()).or_default() += n;
            }
        }
        PipelineRequests {
            limiter_writes_per_call: limiter.writes_per_call(),
            limiter,
            requests_per_message: per_message(&both, messages, calls),
            scheduler_requests_per_message: per_message(&scheduler, messages, 0),
            requests: sender,
            scheduler_requests: scheduler,
            redrive_requests_per_message: redriven.map(|n| per_message(&redrive, n, 0)),
            redrive_requests: if redriven.is_some() { redrive } else { BTreeMap::new() },
        }
    }
}

/// The late buckets' labels, from the limiter's own bounds: `<10, <25, <50, 50+`.
fn late_buckets() -> String {
    use punctual_core::limiter::LATE_BOUNDS_MS;
    let upper: Vec<String> = LATE_BOUNDS_MS.iter().map(|b| format!("<{b}")).collect();
    format!("{}, {}+", upper.join(", "), LATE_BOUNDS_MS[LATE_BOUNDS_MS.len() - 1])
}

impl PipelineRequests {
    /// The report's lines, labels padded to `width`.
    pub fn render(&self, width: usize) -> String {
        format!(
            "{:width$}{:.3} per call ({} bookings, {} other writes for {} calls; {} slots stranded)\n{:width$}{:?} ({} ms late; latest {} ms)\n{:width$}{} (sender side)\n{:width$}{}\n",
            "limiter writes",
            self.limiter_writes_per_call,
            self.limiter.bookings,
            self.limiter.other_writes,
            self.limiter.granted,
            self.limiter.stranded,
            "calls by slot",
            self.limiter.late_ms,
            late_buckets(),
            self.limiter.late_max_ms,
            "requests/msg",
            self.requests_per_message.line(),
            "scheduler",
            self.scheduler_requests_per_message.line()
        ) + &self
            .redrive_requests_per_message
            .as_ref()
            .map_or_else(String::new, |r| format!("{:width$}{} (per message moved back)\n", "redrive", r.line()))
    }
}

fn per_message(all: &BTreeMap<String, u64>, messages: u64, calls: u64) -> RequestsPerMessage {
    if messages == 0 {
        return RequestsPerMessage::default();
    }
    let (mut reads, mut writes, mut sqs, mut limiter) = (0, 0, 0, 0);
    for (key, n) in all {
        let mut parts = key.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("dynamodb"), Some(op), _) if is_dynamodb_read(op) => reads += n,
            (Some("dynamodb"), Some(_), kind) => {
                writes += n;
                if kind == Some("limiter") {
                    limiter += n;
                }
            }
            (Some("sqs"), _, _) => sqs += n,
            _ => {}
        }
    }
    RequestsPerMessage::from_totals(reads, writes, sqs, limiter, messages, calls)
}
