//! `punctual reconcile` (docs/design.md#the-deadline-slo-and-reconciliation): a window's due population joined with the ledger and the
//! queues, every renewal in a bucket or named as unaccounted (the buckets and the evidence:
//! [`punctual_core::reconcile`]). Reads, in this order so a reminder settling meanwhile is not
//! mistaken for a lost one: the population (the renewals table's `by_day_channel` index: 16 queries
//! per UTC day), the queues' depths (2 requests for the lanes, one per channel queue), then the ledger records of the population
//! (one strongly consistent `BatchGetItem` per 100), and — only when some released reminder
//! is in no terminal state — the DLQ, read without taking anything (at most
//! [`DLQ_READ_MAX`] messages, each received and made visible again: O(DLQ)). Never a scan.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_core::ReminderId;
use punctual_core::reconcile::{DEFAULT_GRACE, ReconcileInput, Reconciliation, reconcile as judge_window};
use punctual_core::slo::SloPolicy;

use crate::target::Target;
use crate::{OpsError, step};

/// What to reconcile.
#[derive(Debug, Clone)]
pub struct Window {
    /// Start, inclusive (on `deliver_after`).
    pub from: DateTime<Utc>,
    /// End, exclusive.
    pub to: DateTime<Utc>,
    /// One tenant only.
    pub tenant: Option<String>,
    /// One declared channel only (checked against the target when reconciled).
    pub channel: Option<String>,
    /// How long a due renewal may stay unreleased before it is unaccounted.
    pub grace: Duration,
}

/// Most DLQ messages one reconcile reads (each is received and made visible again).
pub const DLQ_READ_MAX: usize = 10_000;

/// Longest window: 31 days (the ledger keeps records 30 days past `deliver_by`).
pub const MAX_WINDOW_DAYS: i64 = 31;

/// Parses an instant: RFC 3339 (`2026-12-01T09:00:00Z`), or a date (`2026-12-01`, its 00:00
/// UTC), or `now`.
pub fn parse_instant(flag: &str, v: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if v.trim() == "now" {
        return Ok(now);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(v.trim()) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(v.trim(), "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()).unwrap_or(now));
    }
    Err(format!(
        "{flag} {v:?} is not an instant: use RFC 3339 (2026-12-01T09:00:00Z), a date (2026-12-01 = 00:00 UTC) or `now`"
    ))
}

impl Window {
    /// A window from the flags' text, refused with every problem at once.
    pub fn parse(from: &str, to: &str, tenant: Option<String>, grace_secs: Option<u64>) -> Result<Self, OpsError> {
        Self::parse_at(from, to, tenant, grace_secs, Utc::now())
    }

    /// [`Window::parse`] as of `now`.
    pub fn parse_at(
        from: &str,
        to: &str,
        tenant: Option<String>,
        grace_secs: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<Self, OpsError> {
        let mut problems = Vec::new();
        let from = parse_instant("--from", from, now).map_err(|e| problems.push(e)).ok();
        let to = parse_instant("--to", to, now).map_err(|e| problems.push(e)).ok();
        if let (Some(f), Some(t)) = (from, to) {
            if t <= f {
                problems.push(format!("--to {t} must be after --from {f}"));
            } else if t - f > chrono::TimeDelta::days(MAX_WINDOW_DAYS) {
                problems.push(format!("the window is longer than {MAX_WINDOW_DAYS} days: reconcile it in parts"));
            }
            // The ledger's TTL deletes a record 30 days after its deliver_by, so in an older
            // window every renewal would read as lost. Refused rather than judged from what
            // remains: a verdict over a half-deleted ledger is not one an operator can act on.
            let kept_since = now - chrono::TimeDelta::seconds(punctual_aws::ledger::RETENTION_SECS);
            if f < kept_since {
                problems.push(format!(
                    "--from {f} is older than the ledger keeps its records (30 days past each deliver_by: since {}); its renewals would all read as lost",
                    kept_since.format("%Y-%m-%dT%H:%MZ")
                ));
            }
        }
        if let Some(t) = &tenant
            && punctual_core::TenantId::parse(t.as_str()).is_err()
        {
            problems.push(format!("--tenant {t:?} is not a tenant id"));
        }
        match (from, to, problems.is_empty()) {
            (Some(from), Some(to), true) => Ok(Self {
                from,
                to,
                tenant,
                channel: None,
                grace: grace_secs.map_or(DEFAULT_GRACE, Duration::from_secs),
            }),
            _ => Err(OpsError::Invalid(problems)),
        }
    }
}

/// A live line on stderr (hidden without `progress`).
fn spinner(progress: bool) -> ProgressBar {
    let bar = if progress { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The SLO from the environment (`SLO_TARGET`, `SLO_WITHIN_SECS`, as the functions read it).
pub fn slo_policy() -> Result<SloPolicy, OpsError> {
    let env = |k: &str| std::env::var(k).ok();
    SloPolicy::parse(env("SLO_TARGET").as_deref(), env("SLO_WITHIN_SECS").as_deref())
        .map_err(|e| OpsError::Invalid(vec![e.to_string()]))
}

/// `punctual reconcile`; `progress` draws a live line on stderr.
pub async fn reconcile(
    target: &Target,
    window: &Window,
    policy: &SloPolicy,
    progress: bool,
) -> Result<Reconciliation, OpsError> {
    let (ddb, queues) = target.clients().await;
    Ok(reconcile_with(target, ddb, &queues, window, policy, progress, true).await?.0)
}

/// [`reconcile`] over given clients; also returns the AWS requests it made. Without
/// `read_dlq` a backstop letter is judged lost instead of dead-lettered — the same SLO verdict
/// (breached) without receiving from the DLQ (`status`'s SLO line: no interference with a
/// running redrive, no cost in O(DLQ)).
pub async fn reconcile_with(
    target: &Target,
    ddb: aws_sdk_dynamodb::Client,
    queues: &punctual_aws::sqs::SqsQueues,
    window: &Window,
    policy: &SloPolicy,
    progress: bool,
    read_dlq: bool,
) -> Result<(Reconciliation, u32), OpsError> {
    if let Some(c) = &window.channel {
        target.resources.declared_channel(c, "every renewal goes through the one provider: leave out --channel")?;
    }
    let bar = spinner(progress);
    // The window is judged as of when its population was read, not after the reads that
    // follow (a 10,000-letter DLQ peek takes minutes): a renewal inside its grace when the
    // table was read is not called lost because the DLQ took long to read.
    let read_at = Utc::now();
    let renewals = DynamoRenewals::new(ddb.clone(), target.resources.renewals_table.clone());
    let population = renewals
        .population(window.from, window.to, window.tenant.as_deref(), window.channel.as_deref(), |n| {
            bar.set_message(format!("reading the due population: {n} renewals"));
        })
        .await
        .map_err(step("reading the renewals table's by_day_channel index"))?;
    if !population.unreadable.is_empty() {
        let (pk, why) = &population.unreadable[0];
        return Err(OpsError::NotFound(format!(
            "{} renewals of the window cannot be read (first: {pk}: {why}); fix them before reconciling",
            population.unreadable.len()
        )));
    }
    bar.set_message("reading the lanes' depths");
    let queued = lanes_hold(queues).await?;
    let ids: Vec<ReminderId> = population.rows.iter().map(|r| r.reminder_id.clone()).collect();
    let total = ids.len();
    let ledger = DynamoLedger::new(ddb, &target.resources.ledger_table);
    let records = ledger
        .get_many(&ids, |n| bar.set_message(format!("reading the ledger: {n} records of {total} reminders")))
        .await
        .map_err(step("reading the ledger"))?;
    // A released reminder in no terminal state may be a letter the queue's maxReceiveCount
    // moved to the DLQ: read the DLQ (every message made visible again) only then, bounded.
    let mut dlq_reads = 0u64;
    let mut in_dlq = std::collections::HashMap::new();
    if read_dlq && punctual_core::reconcile::open_releases(&population.rows, &records) > 0 {
        let depth = queues.depth_of(queues.dlq_url()).await.map_err(step("reading the DLQ's depth"))?;
        dlq_reads += 1;
        if depth.total() > 0 {
            bar.set_message(format!("reading the DLQ ({} messages)", depth.total()));
            let dlq = crate::dlq::peek_dlq(queues, DLQ_READ_MAX).await.map_err(step("reading the DLQ"))?;
            in_dlq =
                dlq.by_reminder.keys().filter_map(|id| Some((id.clone(), dlq.reason_of(id)?.to_owned()))).collect();
            // A receive per 10 and a visibility change per message.
            dlq_reads += depth.total().min(DLQ_READ_MAX as u64) * 11 / 10 + 1;
        }
    }
    bar.finish_and_clear();
    let requests = u32::try_from(
        population.pages
            + 1
            + u64::from(queues.has_urgent_lane())
            + target.resources.channels.iter().map(own_queues).sum::<u64>()
            + total.div_ceil(100) as u64
            + dlq_reads,
    )
    .unwrap_or(u32::MAX);
    let input = ReconcileInput {
        from: window.from,
        to: window.to,
        tenant: window.tenant.as_deref(),
        channel: window.channel.as_deref(),
        rows: &population.rows,
        records: &records,
        // Narrowed to a channel: the messages of the queues that carry it only.
        queued: window.channel.as_deref().map_or_else(|| queued.total(), |c| queued.of(c)),
        in_dlq: &in_dlq,
        now: read_at,
        grace: window.grace,
        policy,
    };
    let mut r = judge_window(&input);
    if window.channel.is_none() {
        let declared: Vec<String> = target.resources.channels.iter().map(|c| c.name.clone()).collect();
        let own = |c: &str| queued.own.get(c).copied();
        r = r.with_channels(punctual_core::reconcile::by_channel(&input, (own, queued.lanes), &declared));
    }
    Ok((r, requests))
}

/// Messages the queues hold (visible, in flight or delayed): reconcile's evidence that a
/// released reminder is still on a queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queued {
    /// Both lanes together.
    pub lanes: u64,
    /// Each channel's own queue, by the channel's name.
    pub own: std::collections::BTreeMap<String, u64>,
}

impl Queued {
    /// Every queue.
    pub fn total(&self) -> u64 {
        self.lanes + self.own.values().sum::<u64>()
    }

    /// The queues that carry `channel`'s messages: its own queue, else the lanes (which it
    /// shares with every other channel without one).
    pub fn of(&self, channel: &str) -> u64 {
        self.own.get(channel).copied().unwrap_or(self.lanes)
    }
}

/// A channel's own queues (its queue and its urgent lane): one depth request each.
pub(crate) fn own_queues(c: &crate::target::ChannelResources) -> u64 {
    u64::from(!c.queue_url.is_empty()) + u64::from(!c.urgent_queue_url.is_empty())
}

/// What the lanes and each channel's own queues hold (2 requests, 1 with one lane, plus one
/// per channel queue and urgent lane).
pub(crate) async fn lanes_hold(queues: &punctual_aws::sqs::SqsQueues) -> Result<Queued, OpsError> {
    let send = queues.depth_of(queues.send_url()).await.map_err(step("reading the send queue"))?;
    let urgent = if queues.has_urgent_lane() {
        queues.depth_of(queues.urgent_url()).await.map_err(step("reading the urgent lane"))?
    } else {
        punctual_aws::sqs::Depth::default()
    };
    // A channel's own queue holds its reminders as the lanes do.
    let own = queues.channel_depths().await.map_err(step("reading a channel's queue"))?;
    Ok(Queued { lanes: send.total() + urgent.total(), own: own.into_iter().map(|(c, d)| (c, d.total())).collect() })
}

/// `punctual forecast`'s read: every renewal whose `deliver_after` falls on the UTC `day` (of
/// the declared `channel` only, when given), from the `by_day_channel` index (16 queries,
/// paged), with a live count on stderr.
pub async fn day_population(
    target: &Target,
    day: NaiveDate,
    channel: Option<&str>,
    progress: bool,
) -> Result<Vec<punctual_core::reconcile::DueRow>, OpsError> {
    if let Some(c) = channel {
        target.resources.declared_channel(c, "every renewal goes through the one provider: leave out --channel")?;
    }
    let (ddb, _) = target.clients().await;
    let bar = spinner(progress);
    let from =
        day.and_hms_opt(0, 0, 0).map(|t| t.and_utc()).ok_or_else(|| OpsError::Invalid(vec![format!("{day}")]))?;
    let renewals = DynamoRenewals::new(ddb, target.resources.renewals_table.clone());
    let population = renewals
        .population(from, from + chrono::TimeDelta::days(1), None, channel, |n| {
            bar.set_message(format!("reading the renewals due on {day}: {n}"));
        })
        .await
        .map_err(step("reading the renewals table's by_day_channel index"))?;
    bar.finish_and_clear();
    if let Some((pk, why)) = population.unreadable.first() {
        return Err(OpsError::NotFound(format!(
            "{} renewals due on {day} cannot be read (first: {pk}: {why}); fix them before forecasting",
            population.unreadable.len()
        )));
    }
    Ok(population.rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(from: &str, to: &str, tenant: Option<String>, grace: Option<u64>) -> Result<Window, OpsError> {
        let now = DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z").unwrap().with_timezone(&Utc);
        Window::parse_at(from, to, tenant, grace, now)
    }

    /// A window older than the ledger keeps its records is refused, not judged all lost.
    #[test]
    fn a_window_older_than_the_ledger_keeps_records_is_refused() {
        let Err(OpsError::Invalid(p)) = at("2026-10-01", "2026-10-02", None, None) else { panic!("accepted") };
        assert!(p[0].contains("older than the ledger keeps its records"), "{p:?}");
        assert!(at("2026-11-03", "2026-11-04", None, None).is_ok(), "29 days back is kept");
    }

    #[test]
    fn windows_are_refused_with_every_problem_at_once() {
        let Err(OpsError::Invalid(p)) = at("yesterday", "2026-12-01", Some("bad tenant!".into()), None) else {
            panic!("accepted")
        };
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("--from \"yesterday\""));
        let Err(OpsError::Invalid(p)) = at("2026-12-02", "2026-12-01", None, None) else { panic!() };
        assert!(p[0].contains("must be after"));
        let Err(OpsError::Invalid(p)) = at("2026-11-05", "2026-12-07", None, None) else { panic!() };
        assert!(p[0].contains("31 days"));
        let w = at("2026-12-01", "2026-12-01T09:30:00+01:00", None, Some(60)).unwrap();
        assert_eq!(w.to.to_rfc3339(), "2026-12-01T08:30:00+00:00");
        assert_eq!(w.grace, Duration::from_secs(60));
    }
}
