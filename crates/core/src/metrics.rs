//! The functions' metrics, assembled once for every caller: what a sender invocation and a
//! scheduler tick emit ([`sender`], [`scheduler`]), collected in one [`Metrics`] and rendered as
//! CloudWatch Embedded Metric Format documents ([`Metrics::lines`]): structured log lines on
//! stdout that CloudWatch Logs extracts, with no `PutMetricData` call on the hot path.
//!
//! It lives in the core, not beside the AWS adapters, so that the Lambda handlers and the
//! simulator (`punctual drill` evaluates the template's alarms over what the simulated
//! functions emit) build the same metrics with the same code.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{Map, Value, json};

/// Metric names. Stable: dashboards and alarms use them.
pub mod name {
    /// Reminders the provider accepted.
    pub const DELIVERED: &str = "Delivered";
    /// Provider calls made.
    pub const ATTEMPTS: &str = "ProviderAttempts";
    /// Deferrals, by `Reason`.
    pub const DEFERRED: &str = "Deferred";
    /// Provider 429 answers.
    pub const THROTTLED: &str = "Provider429";
    /// Permanent provider failures.
    pub const PERMANENT: &str = "PermanentFailures";
    /// Messages sent to the DLQ, by `Reason`.
    pub const DLQ_INGRESS: &str = "DlqIngress";
    /// Duplicates acknowledged without a call.
    pub const SUPPRESSED: &str = "SuppressedDuplicates";
    /// Reminders cancelled before sending.
    pub const CANCELLED: &str = "Cancelled";
    /// Copies dropped because their renewal was moved after they were released (`rescheduled`).
    pub const RESCHEDULED: &str = "Rescheduled";
    /// Messages whose processing failed on infrastructure (retried by SQS).
    pub const INFRA_FAILURES: &str = "InfrastructureFailures";
    /// Delivery − `deliver_after`, milliseconds.
    pub const DELIVERY_LAG: &str = "DeliveryLagMs";
    /// `deliver_by` − now at decision, milliseconds.
    pub const DEADLINE_SLACK: &str = "DeadlineSlackMs";
    /// Calls to a provider without idempotency keys that may repeat an effect
    /// (`PROVIDER_IDEMPOTENCY=at_least_once`).
    pub const POSSIBLE_DOUBLE: &str = "PossibleDoubleEffect";
    /// The deadline SLO's due population, counted by the scheduler at release (released, or
    /// expired at release).
    pub const SLO_DUE: &str = "SloDue";
    /// Reminders delivered within `SLO_WITHIN_SECS` of `deliver_after` (sender).
    pub const SLO_MET: &str = "SloMet";
    /// Reminders that missed the SLO: delivered later, expired, dead-lettered (sender), or
    /// expired at release (scheduler).
    pub const SLO_BREACHED: &str = "SloBreached";
    /// Reminders the sender found cancelled or paid after release: out of the due population.
    pub const SLO_EXCLUDED: &str = "SloExcluded";
    /// Records a sender invocation settled (delivered, dead-lettered, expired, cancelled,
    /// acknowledged; malformed ones too), deferrals and infrastructure failures left out: the
    /// denominator of the dead-letter ratio, which a backlog re-processing its held records
    /// every minute must not inflate.
    pub const RECORDS: &str = "Records";
    /// For each record of a reminder already due (not a redrive's copy): seconds since its
    /// `deliver_after`. Its maximum is the age of released, undelivered work — what SQS's own
    /// age cannot show, since every deferral is a fresh message and a message received three
    /// times leaves SQS's age.
    pub const RELEASED_WAIT: &str = "ReleasedWaitSeconds";
    /// Provider calls that failed without an answer that settles them: 5xx, timeouts, refused
    /// connections (not 429s, which are [`THROTTLED`], nor permanent refusals).
    pub const PROVIDER_FAILED: &str = "ProviderFailures";
    /// Each provider call's duration, milliseconds.
    pub const PROVIDER_LATENCY: &str = "ProviderLatencyMs";
}

/// The property naming the tenant in every SLO document: a property, not a dimension (one
/// metric series per tenant would cost per tenant and hide nothing the logs do not already
/// carry); the Contributor Insights rule ranks tenants by it.
pub const TENANT_PROPERTY: &str = "tenant_id";

/// An observation's unit, by the suffix its name carries.
fn unit_of(metric: &str) -> &'static str {
    if metric.ends_with("Ms") {
        "Milliseconds"
    } else if metric.ends_with("Seconds") {
        "Seconds"
    } else {
        "None"
    }
}

/// The dimension a count's series is split by (besides `Function`): its reason, or the channel
/// that made the provider call.
pub const REASON: &str = "Reason";
/// See [`REASON`]: the declared channel (`CHANNELS`) a provider call went through.
pub const CHANNEL: &str = "Channel";

/// A count's one extra dimension: (name, value).
type Dim = Option<(&'static str, String)>;

/// Metrics of one invocation.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    counts: BTreeMap<(&'static str, Dim), f64>,
    observations: BTreeMap<&'static str, Vec<f64>>,
    /// SLO counts by tenant: one document per tenant, the tenant a property.
    slo: BTreeMap<String, BTreeMap<&'static str, f64>>,
}

impl Metrics {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` to a count.
    pub fn count(&mut self, metric: &'static str, n: f64) {
        *self.counts.entry((metric, None)).or_default() += n;
    }

    /// Adds `n` to a count with a `Reason` dimension.
    pub fn count_reason(&mut self, metric: &'static str, reason: &str, n: f64) {
        self.count_by(metric, REASON, reason, n);
    }

    /// Adds `n` to a count with one more dimension ([`REASON`], [`CHANNEL`]).
    pub fn count_by(&mut self, metric: &'static str, dimension: &'static str, value: &str, n: f64) {
        *self.counts.entry((metric, Some((dimension, value.to_owned())))).or_default() += n;
    }

    /// Records one observation (EMF takes an array of values per metric).
    pub fn observe(&mut self, metric: &'static str, v: f64) {
        self.observations.entry(metric).or_default().push(v);
    }

    /// Adds `n` to an SLO count of `tenant`.
    pub fn slo(&mut self, tenant: &str, metric: &'static str, n: f64) {
        *self.slo.entry(tenant.to_owned()).or_default().entry(metric).or_default() += n;
    }

    /// An SLO count over every tenant.
    pub fn slo_total(&self, metric: &str) -> f64 {
        self.slo.values().filter_map(|m| m.get(metric)).sum()
    }

    /// Adds every count and observation of `other` to this set.
    pub fn merge(&mut self, other: &Metrics) {
        for (t, m) in &other.slo {
            for (k, v) in m {
                *self.slo.entry(t.clone()).or_default().entry(k).or_default() += v;
            }
        }
        for (k, v) in &other.counts {
            *self.counts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.observations {
            self.observations.entry(k).or_default().extend(v);
        }
    }

    /// A count: its series without a dimension, or else summed over its reasons (a channel's
    /// series repeat part of the dimensionless one and are left out).
    pub fn total(&self, metric: &str) -> f64 {
        self.counts
            .iter()
            .filter(|((m, d), _)| *m == metric && d.as_ref().is_none_or(|(k, _)| *k == REASON))
            .map(|(_, v)| v)
            .sum()
    }

    /// Counts of `metric` by reason.
    pub fn by_reason(&self, metric: &str) -> BTreeMap<String, f64> {
        self.by(metric, REASON)
    }

    /// Counts of `metric` by the values of `dimension`.
    pub fn by(&self, metric: &str, dimension: &str) -> BTreeMap<String, f64> {
        self.counts
            .iter()
            .filter(|((m, _), _)| *m == metric)
            .filter_map(|((_, d), v)| d.as_ref().filter(|(k, _)| *k == dimension).map(|(_, r)| (r.clone(), *v)))
            .collect()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.observations.is_empty() && self.slo.is_empty()
    }

    /// Renders the EMF documents, one per dimension set.
    pub fn lines(&self, namespace: &str, function: &str, timestamp_ms: i64) -> Vec<String> {
        let mut docs: BTreeMap<Option<(&str, &str)>, Map<String, Value>> = BTreeMap::new();
        let mut defs: BTreeMap<Option<(&str, &str)>, Vec<Value>> = BTreeMap::new();
        for ((metric, dim), v) in &self.counts {
            let key = dim.as_ref().map(|(k, v)| (*k, v.as_str()));
            docs.entry(key).or_default().insert((*metric).to_owned(), json!(v));
            defs.entry(key).or_default().push(json!({"Name": metric, "Unit": "Count"}));
        }
        for (metric, values) in &self.observations {
            docs.entry(None).or_default().insert((*metric).to_owned(), json!(values));
            defs.entry(None).or_default().push(json!({"Name": metric, "Unit": unit_of(metric)}));
        }
        let envelope = |metrics: Vec<Value>| {
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": namespace,
                    "Dimensions": [["Function"]],
                    "Metrics": metrics,
                }]
            })
        };
        let slo_docs = self.slo.iter().map(|(tenant, counts)| {
            let mut doc = Map::new();
            doc.insert("Function".into(), json!(function));
            doc.insert(TENANT_PROPERTY.into(), json!(tenant));
            for (metric, v) in counts {
                doc.insert((*metric).to_owned(), json!(v));
            }
            let defs = counts.keys().map(|m| json!({"Name": m, "Unit": "Count"})).collect();
            doc.insert("_aws".into(), envelope(defs));
            Value::Object(doc).to_string()
        });
        let slo_docs: Vec<String> = slo_docs.collect();
        docs.into_iter()
            .map(|(dim, mut doc)| {
                let dims = match dim {
                    Some((k, _)) => json!([["Function", k]]),
                    None => json!([["Function"]]),
                };
                doc.insert("Function".into(), json!(function));
                if let Some((k, v)) = dim {
                    doc.insert(k.into(), json!(v));
                }
                doc.insert(
                    "_aws".into(),
                    json!({
                        "Timestamp": timestamp_ms,
                        "CloudWatchMetrics": [{
                            "Namespace": namespace,
                            "Dimensions": dims,
                            "Metrics": defs.remove(&dim).unwrap_or_default(),
                        }]
                    }),
                );
                Value::Object(doc).to_string()
            })
            .chain(slo_docs)
            .collect()
    }

    /// Writes the EMF documents as lines to `out` (stdout in Lambda).
    pub fn flush(
        &self,
        out: &mut impl Write,
        namespace: &str,
        function: &str,
        timestamp_ms: i64,
    ) -> std::io::Result<()> {
        for line in self.lines(namespace, function, timestamp_ms) {
            writeln!(out, "{line}")?;
        }
        out.flush()
    }
}

/// What a sweep of the outbox emits (the scheduler publishes them after its tick,
/// `Function=scheduler`; docs/design.md#outcome-events).
pub mod outcomes {
    use super::Metrics;
    use crate::outcome::SweepReport;

    /// The outbox's metric names.
    pub mod name {
        /// Outcome events the bus accepted.
        pub const PUBLISHED: &str = "OutcomesPublished";
        /// Outcome events the bus refused or could not take (left in the outbox).
        pub const PUBLISH_FAILED: &str = "OutcomesPublishFailed";
        /// Age of the oldest unpublished event when the sweep began, seconds (0 with none):
        /// written by every sweep, so a publisher that cannot publish is a rising line.
        pub const OLDEST_AGE: &str = "OutboxOldestAgeSeconds";
        /// Records still holding events when the sweep stopped.
        pub const PENDING: &str = "OutboxPending";
        /// 1 when the sweep could not read the outbox (its age is then unknown and not
        /// written), 0 otherwise: every sweep writes it.
        pub const SWEEP_FAILED: &str = "OutboxSweepFailed";
    }

    /// The metrics of one sweep.
    pub fn metrics(r: &SweepReport) -> Metrics {
        let mut m = Metrics::new();
        m.observe(name::SWEEP_FAILED, if r.sweep_failed { 1.0 } else { 0.0 });
        if r.sweep_failed {
            return m;
        }
        m.count(name::PUBLISHED, r.published as f64);
        m.count(name::PUBLISH_FAILED, r.failed as f64);
        m.observe(name::OLDEST_AGE, r.oldest_age_seconds);
        m.observe(name::PENDING, r.left as f64);
        m
    }
}

/// What a scheduler tick emits.
pub mod scheduler {
    use super::Metrics;
    use crate::scheduler::TickReport;

    /// The scheduler's own metric names (besides the SLO's, in [`name`]).
    pub mod name {
        /// Messages released this tick.
        pub const RELEASED: &str = "Released";
        /// Of those, released to the urgent lane.
        pub const RELEASED_URGENT: &str = "ReleasedUrgent";
        /// Messages on the urgent lane after the tick (visible, in flight, delayed).
        pub const URGENT_BACKLOG: &str = "UrgentLaneBacklog";
        /// Renewals expired because their window passed before release.
        pub const EXPIRED_MISSED: &str = "ExpiredMissedWindow";
        /// Eligible backlog (on the queue + still pending).
        pub const BACKLOG: &str = "EligibleBacklog";
        /// Backlog ÷ sustainable rate, seconds.
        pub const PROJECTED_DRAIN: &str = "ProjectedDrainSeconds";
        /// Smallest remaining slack among live renewals seen, seconds.
        pub const MIN_SLACK: &str = "MinSlackSeconds";
        /// 1 when the projected drain exceeds the smallest slack.
        pub const BREACH: &str = "ProjectedDeadlineBreach";
        /// Age of the oldest due renewal the scheduler still saw pending, seconds.
        pub const OLDEST_DUE: &str = "OldestDueUndeliveredSeconds";
        /// 1 when the tick stopped before finishing its window.
        pub const UNFINISHED: &str = "SchedulerUnfinished";
        /// 1 when the tick failed (store, queue): written on the failure path too, so a scheduler
        /// that fails on every tick is a series of 1s, not silence (0 on every good tick).
        pub const TICK_FAILED: &str = "SchedulerTickFailed";
        /// 1 while a pause is in force (any owner), 0 otherwise: every tick writes it, so a
        /// paused pipeline never reads as a healthy idle one.
        pub const PAUSED: &str = "Paused";
        /// 1 while a pause the sender set itself is in force (a confirmed 401, an account the
        /// provider refuses): nothing is sent until an operator fixes the cause and resumes.
        pub const FLEET_PAUSED: &str = "FleetPaused";
        /// How many declared channels the sender paused on their own switch (a confirmed 401
        /// on that channel): every tick writes it, 0 with none or no channels declared.
        pub const CHANNELS_TRIPPED: &str = "ChannelsTripped";
    }

    /// The metrics of a tick that failed: a heartbeat on the failure path, and the part of the
    /// SLO's due population it released before failing (those renewals are marked: no later tick
    /// counts them again).
    pub fn failure_metrics(partial: &TickReport) -> Metrics {
        let mut m = Metrics::new();
        m.count(name::TICK_FAILED, 1.0);
        // The channels' switches are read first: a failing tick still says which are tripped,
        // so their page does not clear while the scheduler fails.
        m.count(name::CHANNELS_TRIPPED, partial.channels_tripped.len() as f64);
        // So is the fleet's pause, once the tick has read it (found by review: a scheduler that
        // failed while the sender's pause held let FleetPausedAlarm clear, the fleet still paused).
        if partial.pause_read {
            pauses(&mut m, partial);
        }
        slo_due(&mut m, partial);
        m
    }

    fn pauses(m: &mut Metrics, r: &TickReport) {
        m.count(name::PAUSED, if r.paused { 1.0 } else { 0.0 });
        let by_sender = r.paused_by == Some(crate::pause::PausedBy::Sender);
        m.count(name::FLEET_PAUSED, if by_sender { 1.0 } else { 0.0 });
    }

    fn slo_due(m: &mut Metrics, r: &TickReport) {
        // The deadline SLO's due population, per tenant (a property, never a dimension): counted
        // at release; one expired at release is due and breached at once.
        for (tenant, (released, expired)) in &r.due_by_tenant {
            m.slo(tenant, super::name::SLO_DUE, (released + expired) as f64);
            if *expired > 0 {
                m.slo(tenant, super::name::SLO_BREACHED, *expired as f64);
            }
        }
    }

    /// The tick's metrics.
    pub fn metrics(r: &TickReport) -> Metrics {
        let mut m = Metrics::new();
        m.count(name::RELEASED, r.released as f64);
        m.count(name::RELEASED_URGENT, r.released_urgent as f64);
        m.count(name::URGENT_BACKLOG, r.lanes.urgent as f64);
        m.count(name::EXPIRED_MISSED, r.expired_missed as f64);
        m.count(name::BACKLOG, r.backlog as f64);
        m.count(name::PROJECTED_DRAIN, r.projected_drain.as_secs_f64());
        if let Some(slack) = r.min_slack {
            m.count(name::MIN_SLACK, slack.as_secs_f64());
        }
        m.count(name::BREACH, if r.projected_breach { 1.0 } else { 0.0 });
        m.count(name::OLDEST_DUE, r.oldest_due_age.as_secs_f64());
        m.count(name::UNFINISHED, if r.finished || r.paused { 0.0 } else { 1.0 });
        m.count(name::TICK_FAILED, 0.0);
        pauses(&mut m, r);
        m.count(name::CHANNELS_TRIPPED, r.channels_tripped.len() as f64);
        slo_due(&mut m, r);
        m
    }
}

/// What a sender invocation emits, record by record.
pub mod sender {
    use super::{Metrics, name};
    use crate::decision::Disposition;
    use crate::reason::ReasonCode;
    use crate::sender::Processed;
    use crate::slo::{SloPolicy, Verdict, verdict_of};

    /// Adds what one processed record says: its SLO verdict (once per reminder), the provider
    /// calls, and its disposition.
    pub fn record(m: &mut Metrics, p: &Processed, slo: &SloPolicy) {
        if !matches!(p.disposition, Disposition::Defer { .. }) {
            m.count(name::RECORDS, 1.0);
        }
        if let (Some(w), false) = (p.waited, p.redriven) {
            m.observe(name::RELEASED_WAIT, w.as_secs_f64());
        }
        if let Some(d) = p.call_latency {
            m.observe(name::PROVIDER_LATENCY, d.as_secs_f64() * 1000.0);
        }
        let failed = p.provider_calls > 0 && !p.throttled && failed_call(&p.disposition);
        if failed {
            m.count(name::PROVIDER_FAILED, 1.0);
        }
        // A declared channel's calls again under its own `Channel` series: one channel's
        // outage is a minority of the fleet's calls, which the fleet's ratio would hide.
        if let (Some(channel), true) = (&p.channel, p.provider_calls > 0) {
            m.count_by(name::ATTEMPTS, super::CHANNEL, channel, f64::from(p.provider_calls));
            m.count_by(name::PROVIDER_FAILED, super::CHANNEL, channel, if failed { 1.0 } else { 0.0 });
        }
        // The SLO: one verdict per reminder released by the scheduler, counted per tenant. None
        // for a redrive's copy (judged when it was dead-lettered), nor for a decision the ledger
        // refused to record (another copy settled the reminder first and was judged for it).
        if let (Some(tenant), false, None) = (&p.tenant_id, p.redriven, &p.settle_conflict) {
            let metric = match verdict_of(&p.disposition, p.delivery_lag, p.slack, slo) {
                Some(Verdict::Met) => Some(name::SLO_MET),
                Some(Verdict::Breached) => Some(name::SLO_BREACHED),
                Some(Verdict::Excluded) => Some(name::SLO_EXCLUDED),
                Some(Verdict::Pending) | None => None,
            };
            if let Some(metric) = metric {
                m.slo(tenant.as_str(), metric, 1.0);
            }
        }
        m.count(name::ATTEMPTS, f64::from(p.provider_calls));
        if p.throttled {
            m.count(name::THROTTLED, 1.0);
        }
        if p.possible_double {
            m.count(name::POSSIBLE_DOUBLE, 1.0);
        }
        if let Some(slack) = p.slack {
            m.observe(name::DEADLINE_SLACK, slack.as_millis() as f64);
        }
        match &p.disposition {
            Disposition::Delivered { .. } => {
                m.count(name::DELIVERED, 1.0);
                if let Some(lag) = p.delivery_lag {
                    m.observe(name::DELIVERY_LAG, lag.as_millis() as f64);
                }
            }
            Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate } => m.count(name::SUPPRESSED, 1.0),
            Disposition::Acknowledge { .. } => {}
            Disposition::Defer { reason, .. } => m.count_reason(name::DEFERRED, reason.as_str(), 1.0),
            Disposition::Quarantine { reason, .. } => {
                if *reason == ReasonCode::ClassifiedPermanent {
                    m.count(name::PERMANENT, 1.0);
                }
                m.count_reason(name::DLQ_INGRESS, reason.as_str(), 1.0);
            }
            Disposition::Expire { .. } => {
                m.count_reason(name::DLQ_INGRESS, ReasonCode::BusinessDeadlineExpired.as_str(), 1.0);
            }
            Disposition::Cancel { .. } => m.count(name::CANCELLED, 1.0),
            Disposition::Rescheduled { .. } => m.count(name::RESCHEDULED, 1.0),
        }
    }

    /// A call that ended without a settling answer: not accepted, not refused for good.
    fn failed_call(d: &Disposition) -> bool {
        match d {
            Disposition::Delivered { .. }
            | Disposition::Cancel { .. }
            | Disposition::Rescheduled { .. }
            | Disposition::Acknowledge { .. } => false,
            Disposition::Defer { reason, .. } | Disposition::Quarantine { reason, .. } => !matches!(
                reason,
                ReasonCode::ClassifiedPermanent
                    | ReasonCode::ProviderCredentials
                    | ReasonCode::ProviderAccount
                    | ReasonCode::RecipientUnknown
            ),
            Disposition::Expire { .. } => true,
        }
    }

    /// A record whose processing failed on infrastructure (left for SQS to redeliver). A reminder
    /// whose processing failed on its last receive (`receives`, SQS's `ApproximateReceiveCount`) leaves for the DLQ through SQS's
    /// redrive policy (`receive_count_backstop`) with no decision of the sender's, and its redriven
    /// copy is not judged: without this, an outage that fails every record (the ledger down for an
    /// hour) would publish no breach at all, and the burn rate would read 0 through it.
    pub fn infrastructure_failure(m: &mut Metrics, receives: Option<u32>, body: &str, max_receive: u32) {
        m.count(name::INFRA_FAILURES, 1.0);
        if receives.is_none_or(|n| n < max_receive) {
            return;
        }
        if let Ok(msg) = crate::contract::ReminderMessage::decode(body)
            && msg.redrive.is_none()
        {
            m.slo(msg.tenant_id.as_str(), name::SLO_BREACHED, 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_documents_declare_every_metric_they_carry() {
        let mut m = Metrics::new();
        m.count(name::DELIVERED, 2.0);
        m.count_reason(name::DEFERRED, "rate_limited", 3.0);
        m.count_reason(name::DLQ_INGRESS, "malformed", 1.0);
        m.observe(name::DELIVERY_LAG, 1200.0);
        m.observe(name::DELIVERY_LAG, 800.0);
        let lines = m.lines("punctual", "sender", 1_764_600_000_000);
        assert_eq!(lines.len(), 3);
        for line in &lines {
            let doc: Value = serde_json::from_str(line).unwrap();
            let directive = &doc["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(doc["_aws"]["Timestamp"], 1_764_600_000_000i64);
            assert_eq!(directive["Namespace"], "punctual");
            assert_eq!(doc["Function"], "sender");
            for def in directive["Metrics"].as_array().unwrap() {
                let name = def["Name"].as_str().unwrap();
                assert!(doc.get(name).is_some(), "metric {name} declared but absent: {line}");
            }
            for dims in directive["Dimensions"][0].as_array().unwrap() {
                assert!(doc.get(dims.as_str().unwrap()).is_some(), "dimension missing: {line}");
            }
        }
        let plain: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(plain["Delivered"], 2.0);
        assert_eq!(plain["DeliveryLagMs"], json!([1200.0, 800.0]));
        let reasons: Vec<Value> = lines[1..].iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(reasons.iter().any(|d| d["Reason"] == "rate_limited" && d["Deferred"] == 3.0));
    }

    #[test]
    fn slo_documents_carry_the_tenant_as_a_property_not_a_dimension() {
        let mut m = Metrics::new();
        m.slo("acme", name::SLO_MET, 2.0);
        m.slo("acme", name::SLO_BREACHED, 1.0);
        m.slo("globex", name::SLO_BREACHED, 3.0);
        let mut other = Metrics::new();
        other.slo("globex", name::SLO_BREACHED, 1.0);
        m.merge(&other);
        assert_eq!(m.slo_total(name::SLO_BREACHED), 5.0);
        let docs: Vec<Value> =
            m.lines("punctual/prod", "sender", 1).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(docs.len(), 2, "one document per tenant");
        for d in &docs {
            let directive = &d["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Dimensions"], json!([["Function"]]), "the tenant is never a dimension");
            assert_eq!(directive["Namespace"], "punctual/prod");
            for def in directive["Metrics"].as_array().unwrap() {
                assert!(d.get(def["Name"].as_str().unwrap()).is_some());
            }
        }
        let globex = docs.iter().find(|d| d[TENANT_PROPERTY] == "globex").unwrap();
        assert_eq!(globex[name::SLO_BREACHED], 4.0);
        assert!(globex.get(name::SLO_MET).is_none());
    }

    fn processed(
        disposition: crate::decision::Disposition,
        calls: u32,
        status: Option<u16>,
    ) -> crate::sender::Processed {
        crate::sender::Processed {
            reminder_id: None,
            disposition,
            provider_calls: calls,
            provider_status: status,
            throttled: status == Some(429),
            delivery_lag: None,
            slack: None,
            settle_conflict: None,
            possible_double: false,
            tenant_id: None,
            redriven: false,
            waited: Some(std::time::Duration::from_secs(400)),
            call_latency: (calls > 0).then_some(std::time::Duration::from_millis(1500)),
            channel: None,
        }
    }

    /// A declared channel's calls are counted again under their `Channel` series, failed or
    /// not, so its own failed-call ratio can be read beside the fleet's; the fleet's totals
    /// are unchanged by it, and a record without a call adds to no channel.
    #[test]
    fn a_channels_calls_have_their_own_series_beside_the_fleets() {
        use crate::decision::Disposition;
        use crate::reason::ReasonCode;
        let slo = crate::slo::SloPolicy::default();
        let defer = |status| Disposition::Defer {
            until: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            reason: ReasonCode::ProviderTransient,
            attempts_made: 1,
            provider_status: status,
        };
        let delivered = Disposition::Delivered { attempt: 1, receipt: None };
        let mut m = Metrics::new();
        for (d, calls, status, channel) in [
            (defer(Some(500)), 1, Some(500), Some("sms")),
            (defer(Some(500)), 1, Some(500), Some("sms")),
            (delivered.clone(), 1, Some(202), Some("email")),
            (delivered.clone(), 1, Some(202), Some("email")),
            (delivered, 1, Some(202), None),
            (defer(None), 0, None, Some("sms")),
        ] {
            let mut p = processed(d, calls, status);
            p.channel = channel.map(str::to_owned);
            sender::record(&mut m, &p, &slo);
        }
        assert_eq!(m.total(name::ATTEMPTS), 5.0, "the fleet's calls, each once");
        assert_eq!(m.total(name::PROVIDER_FAILED), 2.0);
        let attempts = m.by(name::ATTEMPTS, CHANNEL);
        let failed = m.by(name::PROVIDER_FAILED, CHANNEL);
        assert_eq!(attempts.get("sms"), Some(&2.0));
        assert_eq!(attempts.get("email"), Some(&2.0));
        assert_eq!(failed.get("sms"), Some(&2.0));
        assert_eq!(failed.get("email"), Some(&0.0));
        let lines = m.lines("punctual", "sender", 0);
        let sms: Value = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|d| d["Channel"] == "sms")
            .expect("a document for the sms channel");
        assert_eq!(sms["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Function", "Channel"]]));
        assert_eq!(sms["ProviderFailures"], 2.0);
        assert_eq!(sms["ProviderAttempts"], 2.0);
    }

    /// What waits, what fails and how slow the provider is are what the pages read: the age of
    /// released work (not for a redrive's copy), failed calls (not 429s, not refusals), latency.
    #[test]
    fn a_record_says_how_long_its_reminder_waited_and_how_its_call_went() {
        use crate::decision::Disposition;
        use crate::reason::ReasonCode;
        let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        let defer = |reason| Disposition::Defer { until: at, reason, attempts_made: 1, provider_status: None };
        let slo = crate::slo::SloPolicy::default();
        let mut m = Metrics::new();
        sender::record(&mut m, &processed(defer(ReasonCode::ProviderTransient), 1, Some(500)), &slo);
        sender::record(&mut m, &processed(defer(ReasonCode::RateLimited), 1, Some(429)), &slo);
        let refused = Disposition::Quarantine {
            reason: ReasonCode::ClassifiedPermanent,
            attempts_made: 1,
            provider_status: Some(400),
            detail: String::new(),
        };
        sender::record(&mut m, &processed(refused, 1, Some(400)), &slo);
        let mut redriven = processed(defer(ReasonCode::OperatorPause), 0, None);
        redriven.redriven = true;
        sender::record(&mut m, &redriven, &slo);
        sender::infrastructure_failure(&mut m, Some(1), "{}", 5);
        assert_eq!(m.total(name::RECORDS), 1.0, "only the refusal settled: deferrals and failures do not count");
        assert_eq!(m.total(name::PROVIDER_FAILED), 1.0, "the 500 only");
        let doc: Value = serde_json::from_str(&m.lines("ns", "sender", 0)[0]).unwrap();
        assert_eq!(doc[name::RELEASED_WAIT], json!([400.0, 400.0, 400.0]), "not the redrive's copy: {doc}");
        assert_eq!(doc[name::PROVIDER_LATENCY], json!([1500.0, 1500.0, 1500.0]));
        let units: Vec<&Value> = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().iter().collect();
        assert!(units.iter().any(|u| u["Name"] == name::RELEASED_WAIT && u["Unit"] == "Seconds"), "{units:?}");
    }
}
