//! The scheduler on the emulator: renewals imported through the real adapter, released through
//! the real SQS adapter, marked in the real table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use chrono::{DateTime, TimeDelta, Timelike, Utc};
use punctual_aws::dynamodb::get;
use punctual_aws::renewals::{DynamoRenewals, RowOutcome, create_table};
use punctual_aws::sqs::SqsQueues;
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::lanes::LaneDepths;
use punctual_core::ports::QueueError;
use punctual_core::ports::{Release, ReleaseQueue};
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::{ReminderId, ReminderMessage};
use punctual_tests::sdk_config;
use punctual_tests::stack::Stack;

const ZONES: [&str; 5] =
    ["America/New_York", "Europe/London", "Asia/Kathmandu", "Australia/Lord_Howe", "America/Los_Angeles"];

/// Records every release (message, delay) and can fail after sending a given batch, like a
/// crash between "send" and "mark".
#[derive(Clone)]
struct Recording {
    inner: SqsQueues,
    sent: Arc<Mutex<Vec<(ReminderMessage, Duration)>>>,
    crash_after_batches: Arc<Mutex<Option<usize>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("injected crash after sending, before marking")]
struct Crash;

impl ReleaseQueue for Recording {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        let result = self.inner.release(batch).await?;
        self.sent.lock().unwrap().extend(batch.iter().map(|r| (r.message.clone(), r.delay)));
        let mut crash = self.crash_after_batches.lock().unwrap();
        if let Some(n) = crash.as_mut() {
            if *n == 0 {
                *crash = None;
                return Err(QueueError::Unknown(Box::new(Crash)));
            }
            *n -= 1;
        }
        Ok(result)
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        self.inner.depth().await
    }
}

struct Rig {
    stack: Stack,
    /// Where the renewals table lives: dynalite when `make test` started it (it isolates the
    /// scheduler's conditional marks from a racing import as DynamoDB does; moto does not),
    /// else the emulator; the lanes stay on the emulator's SQS.
    ddb: aws_sdk_dynamodb::Client,
    renewals: DynamoRenewals,
    release: Recording,
    clock: ManualClock,
}

async fn rig(name: &str) -> Rig {
    let config = sdk_config().await;
    let stack = Stack::create(&config, name).await.unwrap();
    let table = format!("{}-due", stack.renewals_table);
    let dynalite = punctual_tests::dynalite_client().await;
    let ddb = dynalite.clone().unwrap_or_else(|| stack.ddb.clone());
    create_table(&ddb, &table).await.unwrap();
    if dynalite.is_some() {
        punctual_tests::assert_on_dynalite(&table).await;
    }
    let renewals = DynamoRenewals::new(ddb.clone(), &table);
    let release = Recording { inner: stack.queues.clone(), sent: Arc::default(), crash_after_batches: Arc::default() };
    let now = Utc::now().with_nanosecond(0).unwrap();
    Rig { stack, ddb, renewals, release, clock: ManualClock::new(now) }
}

/// A renewal row whose local due time in `zone` is the instant `at` (minute-aligned).
fn row_at(n: usize, zone: &str, at: DateTime<Utc>, window_minutes: u32) -> Renewal {
    let tz: chrono_tz::Tz = zone.parse().unwrap();
    let local = at.with_timezone(&tz);
    Renewal::validate(&RenewalInput {
        tenant_id: format!("tenant-{}", n % 7),
        renewal_id: format!("ren-{n:05}"),
        recipient_ref: format!("cust-{n}"),
        channel: "email".into(),
        zone: zone.into(),
        local_due_date: local.format("%Y-%m-%d").to_string(),
        local_send_time: local.format("%H:%M").to_string(),
        window_minutes: window_minutes.to_string(),
        ..RenewalInput::default()
    })
    .unwrap()
}

fn minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_second(0).unwrap().with_nanosecond(0).unwrap()
}

impl Rig {
    /// The longest lookahead SQS allows, so the 2,500-row test can release due times 6 to 14
    /// minutes out: none of its messages leaves its delay while the test counts them.
    fn scheduler(&self) -> Scheduler<DynamoRenewals, Recording, ManualClock> {
        let settings =
            SchedulerSettings { page_size: 100, lookahead: Duration::from_secs(900), ..SchedulerSettings::default() };
        Scheduler::new(self.renewals.clone(), self.release.clone(), self.clock.clone(), settings)
    }

    fn deadline(&self) -> DateTime<Utc> {
        self.clock.now() + TimeDelta::minutes(5)
    }

    /// Visible + delayed, read in one request. Even in one request moto computes the two counts
    /// one after the other, so a message whose delay ends between them is counted in neither
    /// (CI read 2,489 of 2,500 when the slow machine let the first minute's messages come due
    /// during the test). Tests therefore release nothing due sooner than 5 minutes after the
    /// manual clock's start.
    async fn queue_total(&self) -> u64 {
        let out = self
            .stack
            .sqs
            .get_queue_attributes()
            .queue_url(self.stack.queues.send_url())
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .unwrap();
        let attrs = out.attributes.unwrap_or_default();
        let n = |k: QueueAttributeName| attrs.get(&k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        n(QueueAttributeName::ApproximateNumberOfMessages) + n(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
    }

    async fn sched_state(&self, r: &Renewal) -> (Option<String>, Option<String>) {
        let key = punctual_aws::renewals::renewal_key(&r.tenant_id, &r.renewal_id);
        let item = get(&self.ddb, &format!("{}-due", self.stack.renewals_table), &key).await.unwrap().unwrap();
        let s = |k: &str| punctual_aws::dynamodb::get_s(&item, k).map(str::to_owned);
        (s("sched_state"), s("sched_reason"))
    }
}

#[tokio::test]
async fn twenty_five_hundred_renewals_across_five_zones_become_exactly_twenty_five_hundred_messages() {
    let r = rig("sched-2500").await;
    let now = r.clock.now();
    // Due between 6 and 14 minutes from now (inside the 15-minute lookahead), local to each zone.
    let rows: Vec<Renewal> =
        (0..2500).map(|n| row_at(n, ZONES[n % 5], minute(now) + TimeDelta::minutes(6 + (n % 9) as i64), 480)).collect();
    let outcomes = r.renewals.import(&rows, now).await.unwrap();
    assert!(outcomes.iter().all(|o| *o == RowOutcome::Inserted));

    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!((report.released, report.finished, report.expired_missed), (2500, true, 0));
    let sent = r.release.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 2500);
    for (m, delay) in &sent {
        let want = (m.deliver_after - now).to_std().unwrap_or_default().min(Duration::from_secs(900));
        assert_eq!(*delay, want, "DelaySeconds must be clamp(deliver_after - now, 0, 900)");
    }
    let ids: HashSet<&ReminderId> = sent.iter().map(|(m, _)| &m.reminder_id).collect();
    assert_eq!(ids.len(), 2500);
    assert_eq!(r.queue_total().await, 2500);
    // Re-running the finished window sends nothing new.
    let again = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!((again.released, again.finished), (0, true));
    assert_eq!(r.queue_total().await, 2500);
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_run_that_dies_between_send_and_mark_is_resumed_and_nothing_is_skipped() {
    let r = rig("sched-crash").await;
    let now = r.clock.now();
    let rows: Vec<Renewal> =
        (0..300).map(|n| row_at(n, ZONES[n % 5], minute(now) + TimeDelta::minutes(2), 240)).collect();
    r.renewals.import(&rows, now).await.unwrap();
    *r.release.crash_after_batches.lock().unwrap() = Some(7); // the 8th batch is sent, then the tick dies
    assert!(r.scheduler().tick(r.deadline()).await.is_err());
    let partial = r.release.sent.lock().unwrap().len();
    assert_eq!(partial, 80);
    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert!(report.finished);
    let sent = r.release.sent.lock().unwrap().clone();
    let ids: HashSet<&ReminderId> = sent.iter().map(|(m, _)| &m.reminder_id).collect();
    assert_eq!(ids.len(), 300, "every renewal enqueued at least once");
    assert_eq!(sent.len(), 310, "only the crashed batch (10) was sent twice; the sender's ledger absorbs it");
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_two_hour_pause_is_caught_up_and_what_missed_its_window_expires() {
    let r = rig("sched-pause").await;
    let paused_at = minute(r.clock.now()) - TimeDelta::hours(2);
    let missed: Vec<Renewal> = (0..40).map(|n| row_at(n, ZONES[n % 5], paused_at, 60)).collect();
    let live: Vec<Renewal> = (40..100).map(|n| row_at(n, ZONES[n % 5], paused_at, 240)).collect();
    // Imported before the pause (an import refuses a row whose window is already over).
    r.renewals.import(&[missed.clone(), live.clone()].concat(), paused_at - TimeDelta::minutes(1)).await.unwrap();

    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!((report.released, report.expired_missed, report.finished), (60, 40, true));
    assert!(report.oldest_due_age >= Duration::from_secs(2 * 3600 - 60));
    let sent = r.release.sent.lock().unwrap().clone();
    assert!(sent.iter().all(|(m, d)| d.is_zero() && m.deliver_by > r.clock.now()));
    assert_eq!(r.sched_state(&missed[0]).await, (Some("expired".into()), Some("missed_schedule_window".into())));
    assert_eq!(r.sched_state(&live[0]).await.0.as_deref(), Some("enqueued"));
    r.stack.destroy().await;
}

/// The scheduler's expiries go through the ledger (one verdict per reminder): a missed renewal
/// no sender ever saw is recorded `expired` (`missed_schedule_window`, out of the dead index:
/// it has no letter), and one a sender already delivered (an earlier release whose mark failed)
/// is marked released, not expired.
#[tokio::test]
async fn the_expiries_at_release_are_recorded_in_the_ledger_and_a_delivered_release_is_not_expired() {
    use punctual_aws::ledger::DynamoLedger;
    use punctual_core::ports::{Ledger, OwnerToken, Pending, SettleOutcome, Settlement};
    use punctual_core::{ReasonCode, ReminderState};
    let r = rig("sched-ledger").await;
    let paused_at = minute(r.clock.now()) - TimeDelta::hours(2);
    let missed: Vec<Renewal> = (0..10).map(|n| row_at(n, ZONES[n % 5], paused_at, 60)).collect();
    r.renewals.import(&missed, paused_at - TimeDelta::minutes(1)).await.unwrap();
    let ledger = DynamoLedger::new(r.stack.ddb.clone(), &r.stack.ledger_table);
    // missed[1] was released and delivered before: its tick failed to mark it.
    let row = &missed[1];
    let p = Pending::from(row);
    let msg = punctual_core::scheduler::message_for(&p, row.deliver_after);
    let (owner, at) = (OwnerToken::new("a-sender"), row.deliver_after + TimeDelta::seconds(5));
    ledger.claim(&msg, &owner, at, at + TimeDelta::seconds(30)).await.unwrap();
    let delivered = Settlement {
        state: ReminderState::Delivered,
        reason: None,
        attempts: 1,
        receipt: Some("r-1".into()),
        provider_status: Some(202),
        next_at: None,
    };
    assert_eq!(ledger.settle(&msg, Some(&owner), at, &delivered).await.unwrap(), SettleOutcome::Recorded);

    let report = r.scheduler().with_ledger(ledger.clone()).tick(r.deadline()).await.unwrap();
    assert_eq!((report.expired_missed, report.judged_before, report.finished), (9, 1, true), "{report:?}");
    let due = report.due_by_tenant.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(due, (1, 9), "its release counted now (the failed mark never did), nine expiries");
    assert_eq!(r.sched_state(&missed[1]).await.0.as_deref(), Some("enqueued"));
    assert_eq!(r.sched_state(&missed[0]).await.0.as_deref(), Some("expired"));
    let rec = ledger.get(&missed[0].reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::Expired, Some(ReasonCode::MissedScheduleWindow)));
    assert_eq!(ledger.get(&missed[1].reminder_id).await.unwrap().unwrap().state, ReminderState::Delivered);
    let dead = ledger.dead_by_reason(paused_at - TimeDelta::days(1)).await.unwrap().0.unwrap();
    assert_eq!(dead.get("missed_schedule_window").copied().unwrap_or(0), 0, "{dead:?}");
    // A second tick finds nothing left: each reminder was judged once.
    let again = r.scheduler().with_ledger(ledger).tick(r.deadline()).await.unwrap();
    assert_eq!((again.expired_missed, again.judged_before), (0, 0));
    r.stack.destroy().await;
}

#[tokio::test]
async fn reimporting_the_same_rows_changes_nothing_and_a_released_row_takes_a_status_or_schedule_change() {
    let r = rig("sched-reimport").await;
    let now = r.clock.now();
    let rows: Vec<Renewal> =
        (0..30).map(|n| row_at(n, ZONES[n % 5], minute(now) + TimeDelta::minutes(3), 120)).collect();
    r.renewals.import(&rows, now).await.unwrap();
    r.scheduler().tick(r.deadline()).await.unwrap();
    let again = r.renewals.import(&rows, now).await.unwrap();
    assert!(again.iter().all(|o| *o == RowOutcome::Unchanged));
    let mut cancelled = rows[0].clone();
    cancelled.status = punctual_core::renewal::RenewalStatus::Cancelled;
    // Built again, not edited: a renewal's deadline is derived from its window at validation.
    let moved = row_at(1, ZONES[1], minute(now) + TimeDelta::minutes(3), 30);
    let mut recipient = rows[2].clone();
    recipient.recipient_ref = "someone-else".into();
    let out = r.renewals.import(&[cancelled, moved.clone(), recipient], now).await.unwrap();
    assert_eq!(out[0], RowOutcome::Updated);
    // A new window is a new version: re-armed, pending release with its new deadline (the
    // copy already released is stale, and its sender drops it).
    assert_eq!(out[1], RowOutcome::Rescheduled);
    assert_eq!(r.sched_state(&moved).await.0.as_deref(), Some("scheduled"));
    assert!(matches!(&out[2], RowOutcome::Conflict(why) if why.contains("already enqueued")), "{:?}", out[2]);
    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!(report.released, 1, "only the rescheduled renewal is released again");
    let again = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!(again.released, 0);
    r.stack.destroy().await;
}

/// An import reads a row, a tick releases it, then the import writes: the write must not
/// re-arm the released renewal (back to `scheduled`, back in the due index, released twice).
#[tokio::test]
async fn an_import_racing_a_tick_never_rearms_a_released_renewal() {
    let r = rig("sched-import-race").await;
    let now = r.clock.now();
    let rows: Vec<Renewal> =
        (0..3).map(|n| row_at(n, ZONES[n % 5], minute(now) + TimeDelta::minutes(3), 120)).collect();
    r.renewals.import(&rows, now).await.unwrap();
    // The operator re-imports with a changed window (allowed while scheduled) and, for a
    // brand-new renewal, a first import: both read first…
    let changed = row_at(0, ZONES[0], minute(now) + TimeDelta::minutes(3), 60);
    let fresh = row_at(7, ZONES[2], minute(now) + TimeDelta::minutes(3), 120);
    let batch = [changed.clone(), fresh.clone()];
    let read = r.renewals.read_for_import(&batch).await.unwrap();
    // …then a tick releases everything due (a concurrent import inserted `fresh` meanwhile).
    r.renewals.import(std::slice::from_ref(&fresh), now).await.unwrap();
    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!(report.released, 4);
    // …then the first import writes what it decided before the release.
    let out = r.renewals.write_import(&batch, read, now).await.unwrap();
    assert_eq!(r.sched_state(&fresh).await.0.as_deref(), Some("enqueued"), "re-armed after release: {out:?}");
    assert_eq!(out[1], RowOutcome::Unchanged, "the same content was inserted meanwhile: {out:?}");
    // The changed window is another version of `changed`: decided again against the released
    // row, it is rescheduled (re-armed with its new deadline), not lost and not refused.
    assert_eq!(out[0], RowOutcome::Rescheduled, "{out:?}");
    let again = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!(again.released, 1, "only the new version is released again, the unchanged row never twice");
    r.stack.destroy().await;
}

/// A tick reads a renewal, an import moves it (another due date: another reminder) while
/// the tick holds it, and the tick then marks what it read. The mark must not stick to the
/// new version: the new version stays pending, and the next tick releases it.
#[tokio::test]
async fn a_renewal_moved_while_a_tick_holds_it_is_left_pending_for_its_new_version() {
    use punctual_core::ports::{DueStore, Marked};
    let r = rig("sched-moved-under-tick").await;
    let now = r.clock.now();
    let v1 = row_at(1, ZONES[0], minute(now) + TimeDelta::minutes(3), 120);
    let mut same_day = row_at(2, ZONES[1], minute(now) + TimeDelta::minutes(3), 120);
    r.renewals.import(&[v1.clone(), same_day.clone()], now).await.unwrap();
    // The tick's read.
    let mut held = Vec::new();
    for shard in 0..r.renewals.shards() {
        held.extend(r.renewals.due_page(shard, now + TimeDelta::minutes(10), 100, None).await.unwrap().items);
    }
    assert_eq!(held.len(), 2);
    // The due index gives each row's channel: what a channel's own queue is chosen by.
    for p in &held {
        let want = [&v1, &same_day].iter().find(|r| r.renewal_id == p.renewal_id).map(|r| r.channel.clone());
        assert!(p.channel.is_some() && p.channel == want, "{p:?}");
    }
    // The import: v1 to tomorrow (a new reminder), the other to a later send time (the same
    // reminder, other times).
    let v2 = row_at(1, ZONES[0], minute(now) + TimeDelta::days(1), 120);
    same_day = row_at(2, ZONES[1], minute(now) + TimeDelta::minutes(9), 120);
    let out = r.renewals.import(&[v2.clone(), same_day.clone()], now).await.unwrap();
    assert_eq!(out, [RowOutcome::Updated, RowOutcome::Updated]);
    // The tick marks what it read.
    for p in &held {
        assert_eq!(r.renewals.mark_enqueued(p, now).await.unwrap(), Marked::NotPending, "marked over a new version");
    }
    assert_eq!(r.sched_state(&v2).await.0.as_deref(), Some("scheduled"));
    assert_eq!(r.sched_state(&same_day).await.0.as_deref(), Some("scheduled"));
    // The next tick releases the new versions, at their new times.
    r.release.sent.lock().unwrap().clear();
    let report = r.scheduler().tick(r.deadline()).await.unwrap();
    assert_eq!(report.released, 1, "{report:?}");
    let sent = r.release.sent.lock().unwrap().clone();
    assert_eq!(sent[0].0.reminder_id, same_day.reminder_id);
    assert_eq!(sent[0].0.deliver_after, same_day.deliver_after);
    r.stack.destroy().await;
}

/// The customer moves the renewal after its reminder was released. The re-import is
/// accepted (`rescheduled`), the row is pending again with its new version, and the sender's
/// read of the row shows that version (the released copy is then stale: see
/// crates/core/tests/reschedule.rs).
#[tokio::test]
async fn a_renewal_moved_after_release_is_rearmed_and_reads_as_its_new_version() {
    use punctual_core::ports::Renewals;
    let r = rig("sched-moved-after-release").await;
    let now = r.clock.now();
    let v1 = row_at(3, ZONES[2], minute(now) + TimeDelta::minutes(3), 120);
    r.renewals.import(std::slice::from_ref(&v1), now).await.unwrap();
    assert_eq!(r.scheduler().tick(r.deadline()).await.unwrap().released, 1);
    let v2 = row_at(3, ZONES[2], minute(now) + TimeDelta::days(1), 120);
    let out = r.renewals.import(std::slice::from_ref(&v2), now).await.unwrap();
    assert_eq!(out, [RowOutcome::Rescheduled], "a released renewal could not be moved");
    assert_eq!(r.sched_state(&v2).await.0.as_deref(), Some("scheduled"));
    let seen = r.renewals.lookup(&v2.tenant_id, &v2.renewal_id).await.unwrap();
    let version = seen.version.expect("an imported row has a version");
    assert_eq!(
        (version.reminder_id, version.deliver_after, version.deliver_by),
        (v2.reminder_id, v2.deliver_after, v2.deliver_by)
    );
    // Tomorrow's version is not released today (it is beyond the lookahead).
    assert_eq!(r.scheduler().tick(r.deadline()).await.unwrap().released, 0);
    r.stack.destroy().await;
}

/// S9: a row whose window is already over when it is imported is refused with its times (it
/// would only be expired at release and burn the SLO); the same row re-imported after its
/// window ended, once imported in time, is still unchanged.
#[tokio::test]
async fn a_row_already_past_its_deadline_is_refused_and_an_old_file_still_reimports() {
    let r = rig("sched-past").await;
    let now = r.clock.now();
    let over = row_at(4, ZONES[3], minute(now) - TimeDelta::hours(3), 60);
    let out = r.renewals.import(std::slice::from_ref(&over), now).await.unwrap();
    assert!(matches!(&out[0], RowOutcome::Conflict(why) if why.contains("already over")), "{out:?}");
    assert!(r.scheduler().tick(r.deadline()).await.unwrap().expired_missed == 0);
    let in_time = row_at(5, ZONES[3], minute(now) + TimeDelta::minutes(3), 60);
    r.renewals.import(std::slice::from_ref(&in_time), now).await.unwrap();
    let later = r.renewals.import(std::slice::from_ref(&in_time), now + TimeDelta::days(1)).await.unwrap();
    assert_eq!(later, [RowOutcome::Unchanged]);
    r.stack.destroy().await;
}

/// A row computed by an older time-zone database (its stored instants an hour off, across a
/// UTC midnight, with the `by_day_channel` key of that day) and already released is imported again
/// unchanged: the row is re-armed at the instant computed today, and the `by_day_channel` index finds
/// it on that instant's day — not on neither day. A send time with seconds is stored exactly.
#[tokio::test]
async fn a_reimport_corrects_stale_instants_and_the_day_index_finds_the_row_on_its_day() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let r = rig("sched-stale-instants").await;
    let now = r.clock.now();
    let day = (now + TimeDelta::days(1)).format("%Y-%m-%d").to_string();
    let input = RenewalInput {
        tenant_id: "acme".into(),
        renewal_id: "ren-tz".into(),
        recipient_ref: "cust-tz".into(),
        channel: "email".into(),
        zone: "UTC".into(),
        local_due_date: day.clone(),
        local_send_time: "23:30:15".into(),
        window_minutes: "60".into(),
        ..RenewalInput::default()
    };
    let row = Renewal::validate(&input).unwrap();
    assert_eq!(r.renewals.import(std::slice::from_ref(&row), now).await.unwrap(), [RowOutcome::Inserted]);
    let key = punctual_aws::renewals::renewal_key(&row.tenant_id, &row.renewal_id);
    let table = format!("{}-due", r.stack.renewals_table);
    let item = get(&r.ddb, &table, &key).await.unwrap().unwrap();
    assert_eq!(punctual_aws::dynamodb::get_s(&item, "local_send_time"), Some("23:30:15"));
    // What an older computation left: an hour later (the next UTC day), keyed on that day,
    // released.
    let stale = row.deliver_after + TimeDelta::hours(1);
    let mut old = item.clone();
    let ms = |t: DateTime<Utc>| AttributeValue::N(t.timestamp_millis().to_string());
    old.insert("deliver_after_ms".into(), ms(stale));
    old.insert("deliver_by_ms".into(), ms(stale + TimeDelta::hours(1)));
    old.insert("day_shard".into(), AttributeValue::S(punctual_aws::renewals::day_shard(stale, &row.reminder_id)));
    old.insert("sched_state".into(), AttributeValue::S("enqueued".into()));
    old.insert("sched_at_ms".into(), ms(now));
    old.remove("due_shard");
    old.remove("due_after_ms");
    r.ddb.put_item().table_name(&table).set_item(Some(old)).send().await.unwrap();

    let out = r.renewals.import(std::slice::from_ref(&row), now).await.unwrap();
    assert_eq!(out, [RowOutcome::Rescheduled], "stale instants kept");
    let on = |from: DateTime<Utc>| {
        let renewals = r.renewals.clone();
        async move { renewals.population(from, from + TimeDelta::hours(1), None, None, |_| {}).await.unwrap().rows }
    };
    let found = on(row.deliver_after - TimeDelta::minutes(30)).await;
    assert_eq!(found.len(), 1, "the row is not on its day in the by_day_channel index");
    assert_eq!((found[0].deliver_after, found[0].deliver_by), (row.deliver_after, row.deliver_by));
    assert!(on(stale - TimeDelta::minutes(30)).await.is_empty(), "still found at the stale instant");
    assert_eq!(r.sched_state(&row).await.0.as_deref(), Some("scheduled"));
    r.stack.destroy().await;
}

/// A released renewal cancelled, then active again before its deadline (its copy may already
/// have been cancelled at send): the import re-arms the row, and the next tick releases it
/// again, once. Cancelled again, or active again after its window, nothing is re-armed.
#[tokio::test]
async fn a_released_renewal_active_again_is_rearmed_and_released_again() {
    let r = rig("sched-active-again").await;
    let now = r.clock.now();
    let row = row_at(6, ZONES[1], minute(now) + TimeDelta::minutes(3), 120);
    r.renewals.import(std::slice::from_ref(&row), now).await.unwrap();
    assert_eq!(r.scheduler().tick(r.deadline()).await.unwrap().released, 1);
    let mut cancelled = row.clone();
    cancelled.status = punctual_core::renewal::RenewalStatus::Cancelled;
    assert_eq!(r.renewals.import(std::slice::from_ref(&cancelled), now).await.unwrap(), [RowOutcome::Updated]);
    assert_eq!(r.sched_state(&row).await.0.as_deref(), Some("enqueued"));
    let out = r.renewals.import(std::slice::from_ref(&row), now).await.unwrap();
    assert_eq!(r.sched_state(&row).await.0.as_deref(), Some("scheduled"), "active again, not re-armed: {out:?}");
    assert_eq!(out, [RowOutcome::Reactivated]);
    r.release.sent.lock().unwrap().clear();
    assert_eq!(r.scheduler().tick(r.deadline()).await.unwrap().released, 1, "not released again");
    assert_eq!(r.release.sent.lock().unwrap()[0].0.reminder_id, row.reminder_id);
    assert_eq!(r.scheduler().tick(r.deadline()).await.unwrap().released, 0);
    // Cancelled again: a status change only.
    assert_eq!(r.renewals.import(std::slice::from_ref(&cancelled), now).await.unwrap(), [RowOutcome::Updated]);
    assert_eq!(r.sched_state(&row).await.0.as_deref(), Some("enqueued"));
    // Active again after its window: a record of the status, nothing to send.
    let after = row.deliver_by + TimeDelta::minutes(1);
    assert_eq!(r.renewals.import(std::slice::from_ref(&row), after).await.unwrap(), [RowOutcome::Updated]);
    assert_eq!(r.sched_state(&row).await.0.as_deref(), Some("enqueued"));
    r.stack.destroy().await;
}
