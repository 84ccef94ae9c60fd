//! Reconciliation (docs/design.md#the-deadline-slo-and-reconciliation): every renewal due in a window, joined with the ledger and the
//! queues, lands in exactly one bucket — or is named as **unaccounted**. Pure: the operator
//! command reads the population (the renewals table's `by_day_channel` index), the ledger records
//! (one batched strongly consistent read per 100) and the queues' depths, and hands them here.
//!
//! Buckets, in the order they are decided for each renewal:
//! 1. a terminal ledger record decides: `delivered` (and `delivered_late` when at or after
//!    `deliver_by`: the sender never calls after it, so only a call in flight at the deadline
//!    can land there), `expired`, `cancelled` (at send), `dead_lettered{reason}` — except a
//!    cancellation at send of a renewal active again and re-armed since, which the steps below
//!    decide as if no copy had reached a sender (the reminder is owed again);
//! 2. one the scheduler expired at release (`missed_schedule_window`) is `expired` — even if
//!    the renewal was paid afterwards: it was due, and missed;
//! 3. a renewal cancelled or paid (and not ended otherwise before) is `excluded` from the due
//!    population, counted by status;
//! 4. one whose message is in the DLQ while the ledger has no terminal state for it (moved by
//!    the queue's `maxReceiveCount` backstop) is `dead_lettered{receive_count_backstop}`: the
//!    DLQ is read (without taking anything) only when step 5 has candidates;
//! 5. one released — by the renewals table, or by a ledger record, which only a released copy
//!    can have written — and in no terminal state is a *candidate* for a queue. Released less
//!    than `grace` ago it is `waiting.on_queue` (SQS's counts lag). Otherwise SQS cannot be
//!    listed without receiving (which would change what it reconciles), so the evidence is
//!    the queues' own count (the lanes and every channel queue; per channel, the queues that
//!    carry it: [`by_channel`]), visible + in flight + delayed: with at least as many messages as
//!    candidates they are `waiting.on_queue`; with **none**, every candidate is unaccounted by
//!    name (`released_not_on_any_queue`); with fewer, the shortfall is unaccounted and the
//!    candidates are listed as `suspects` (which of them is missing cannot be told from
//!    counts). Messages of the window that may be on a lane but are not candidates' are set
//!    aside first: a release younger than `grace`, a copy of a renewal cancelled or paid after
//!    release, and a dead-lettered reminder whose letter is not in the DLQ as read (a redrive
//!    moved it back to a lane; the ledger says dead-lettered until that copy claims) — so
//!    none of them covers a loss. A letter deleted by hand is set aside the same way: the
//!    count then errs towards naming suspects, never towards hiding one. The lanes also hold other windows' messages, so a count covers a loss only while
//!    those fill the gap: reconcile after the incident, when the window has drained, for a
//!    verdict by name;
//! 6. one never released: `waiting.not_yet_released` while its `deliver_after` is less than
//!    `grace` ago (the scheduler releases ahead, by its lookahead, on a 1-minute tick), else
//!    **unaccounted** (`never_released`).
//!
//! The due population is the window's renewals less those excluded by status and those the
//! sender found cancelled or paid (`cancelled`): the SLO's denominator.
//!
//! The SLO of the window is judged over the same endings ([`crate::slo::judge`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::accounting::{Ending, Outcome};
use crate::clock::{add, until};
use crate::ids::ReminderId;
use crate::ports::LedgerRecord;
use crate::reason::ReminderState;
use crate::renewal::RenewalStatus;
use crate::slo::{SloPolicy, SloSummary, SloTally, judge};

/// Where the scheduler left a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseState {
    /// Not released yet.
    Scheduled,
    /// Released to a lane at this time (when recorded).
    Enqueued(Option<DateTime<Utc>>),
    /// Expired at release (`missed_schedule_window`).
    ExpiredAtRelease,
}

/// One renewal of the due population, as the renewals table has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRow {
    /// Tenant.
    pub tenant_id: String,
    /// Renewal.
    pub renewal_id: String,
    /// Its reminder.
    pub reminder_id: ReminderId,
    /// Active, cancelled or paid.
    pub status: RenewalStatus,
    /// The scheduler's state.
    pub release: ReleaseState,
    /// Due from.
    pub deliver_after: DateTime<Utc>,
    /// Business deadline.
    pub deliver_by: DateTime<Utc>,
    /// Its channel, as the row gives it (`None`: a row without one; a population file).
    pub channel: Option<String>,
}

/// Why a reminder is unaccounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Due more than `grace` ago and never released by the scheduler.
    NeverReleased,
    /// Released, in no terminal state, and the queues are empty.
    ReleasedNotOnAnyQueue,
    /// Released and in no terminal state while the queues hold fewer messages than such
    /// reminders: one of the suspects is missing.
    PossiblyLost,
}

impl Problem {
    /// The name the JSON report uses.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NeverReleased => "never_released",
            Self::ReleasedNotOnAnyQueue => "released_not_on_any_queue",
            Self::PossiblyLost => "possibly_lost",
        }
    }
}

/// A reminder reconcile could not account for, with what is known of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unaccounted {
    /// The reminder.
    pub reminder_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Renewal.
    pub renewal_id: String,
    /// Why.
    pub problem: Problem,
    /// Due from.
    pub deliver_after: DateTime<Utc>,
    /// Deadline.
    pub deliver_by: DateTime<Utc>,
    /// When the scheduler released it, if it did.
    pub released_at: Option<DateTime<Utc>>,
    /// The ledger's state, if it has a record.
    pub ledger_state: Option<&'static str>,
    /// The ledger's last reason.
    pub last_reason: Option<&'static str>,
    /// Provider attempts recorded.
    pub attempts: u32,
    /// Seconds left to `deliver_by` (negative: past).
    pub slack_seconds: f64,
}

/// Reminders still on their way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Waiting {
    /// Released, not terminal, covered by the queues' count.
    pub on_queue: u64,
    /// Of those, past `deliver_by` already (the sender expires them when it receives them).
    pub past_deadline: u64,
    /// Not released yet (due in the future, or within `grace`).
    pub not_yet_released: u64,
    /// The least slack among them, seconds (negative: past `deliver_by`).
    pub min_slack_seconds: Option<f64>,
}

/// Most reminders listed by name (counts are always complete).
pub const LIST_MAX: usize = 1000;

/// The reconciliation of one window (JSON keys are a contract).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reconciliation {
    /// Window start (inclusive), on `deliver_after`.
    pub from: DateTime<Utc>,
    /// Window end (exclusive).
    pub to: DateTime<Utc>,
    /// The tenant, when the window was narrowed to one.
    pub tenant: Option<String>,
    /// The channel, when the window was narrowed to one.
    pub channel: Option<String>,
    /// When it was taken.
    pub as_of: DateTime<Utc>,
    /// Renewals whose `deliver_after` falls in the window, every status.
    pub population: u64,
    /// Excluded from the due population by the renewal's status (and not ended before).
    pub excluded: BTreeMap<String, u64>,
    /// The due population: `population` minus `excluded` and `cancelled`.
    pub due: u64,
    /// Delivered.
    pub delivered: u64,
    /// Delivered at or after `deliver_by` (0 by construction).
    pub delivered_late: u64,
    /// Expired (at the sender, or at release).
    pub expired: u64,
    /// Cancelled at send (the sender found the renewal cancelled or paid after release).
    pub cancelled: u64,
    /// Dead-lettered, by reason.
    pub dead_lettered: BTreeMap<String, u64>,
    /// Still on the way.
    pub waiting: Waiting,
    /// Not accounted for (named in `unaccounted_reminders`, or the shortfall behind `suspects`).
    pub unaccounted: u64,
    /// The unaccounted reminders known by name (at most [`LIST_MAX`]).
    pub unaccounted_reminders: Vec<Unaccounted>,
    /// Candidates of which `missing_among_suspects` are on no queue (at most [`LIST_MAX`]).
    pub suspects: Vec<Unaccounted>,
    /// How many of `suspects` are missing (counted in `unaccounted`).
    pub missing_among_suspects: u64,
    /// Messages the queues that carry the window's reminders held (visible + in flight +
    /// delayed): the lanes and every channel's own queue, or with `channel` that channel's.
    pub queued_messages: u64,
    /// The SLO over the window's due population.
    pub slo: SloSummary,
    /// True when every renewal of the window is in a bucket.
    pub accounted: bool,
    /// Each channel's own account of the window, by the rows' channel, whether the deployment
    /// declares channels or not (so the channels renewals use can be read before declaring
    /// them); absent for a window narrowed to one channel, or with no renewals.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, ChannelAccount>,
}

/// One channel's account of a window: its rows reconciled on their own, against the messages
/// of the queues that carry that channel (JSON keys are a contract).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelAccount {
    /// Its renewals in the window, every status.
    pub population: u64,
    /// Excluded by the renewal's status (cancelled or paid before release).
    pub excluded: u64,
    /// Cancelled at send.
    pub cancelled: u64,
    /// Its due population: `population` minus `excluded` and `cancelled`.
    pub due: u64,
    /// Delivered.
    pub delivered: u64,
    /// Delivered at or after `deliver_by`.
    pub delivered_late: u64,
    /// Expired.
    pub expired: u64,
    /// Dead-lettered, every reason.
    pub dead_lettered: u64,
    /// Still on the way (on a queue or not yet released).
    pub waiting: u64,
    /// Not accounted for (a lower bound when it `shares_lanes`).
    pub unaccounted: u64,
    /// The unaccounted reminders known by name (at most [`LIST_MAX`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unaccounted_reminders: Vec<Unaccounted>,
    /// It has no queue of its own and another channel shares the lanes with it: the lanes'
    /// count is its evidence and theirs, so their messages can cover a loss of its own (the
    /// window's totals, judged against every queue together, are the check then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shares_lanes: bool,
    /// The SLO over its due population.
    pub slo: SloSummary,
    /// The deployment declares channels and not this one: the sender dead-letters its
    /// reminders as `unknown_channel` (a renewal imported before the channels were declared,
    /// or under another name).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub undeclared: bool,
}

impl From<&Reconciliation> for ChannelAccount {
    fn from(r: &Reconciliation) -> Self {
        Self {
            population: r.population,
            excluded: r.excluded.values().sum(),
            cancelled: r.cancelled,
            due: r.due,
            delivered: r.delivered,
            delivered_late: r.delivered_late,
            expired: r.expired,
            dead_lettered: r.dead_lettered.values().sum(),
            waiting: r.waiting.on_queue + r.waiting.not_yet_released,
            unaccounted: r.unaccounted,
            unaccounted_reminders: r.unaccounted_reminders.clone(),
            shares_lanes: false,
            slo: r.slo.clone(),
            undeclared: false,
        }
    }
}

/// The key a row's channel is filed under in [`Reconciliation::channels`] (a row without one
/// under `(none)`).
pub fn channel_key(row: &DueRow) -> &str {
    row.channel.as_deref().unwrap_or("(none)")
}

/// Each channel's own account of `input`'s window, by the rows' channel: its rows reconciled on
/// their own, with `queued(channel)` the messages of the queues that carry it as the evidence
/// (`Some`: a queue of its own; `None`: it shares the lanes, whose count is `input.queued`
/// less the channels' own queues' — the caller's `lanes`). The same judgement as
/// [`reconcile`], so a channel's figures add up to the window's whenever the queued evidence
/// is each channel's own; channels that share the lanes are marked
/// [`ChannelAccount::shares_lanes`] when more than one of them has renewals in the window. With
/// `declared` channels, one the rows use and the deployment does not declare is marked
/// [`ChannelAccount::undeclared`].
pub fn by_channel(
    input: &ReconcileInput<'_>,
    (own_queue, lanes): (impl Fn(&str) -> Option<u64>, u64),
    declared: &[String],
) -> BTreeMap<String, ChannelAccount> {
    let mut names: Vec<&str> = input.rows.iter().map(channel_key).collect();
    names.sort_unstable();
    names.dedup();
    let on_lanes = names.iter().filter(|n| own_queue(n).is_none()).count();
    names
        .into_iter()
        .map(|name| {
            // One channel in the window: its rows are the window's, no copy.
            let own: Vec<DueRow>;
            let rows = if input.rows.iter().all(|r| channel_key(r) == name) {
                input.rows
            } else {
                own = input.rows.iter().filter(|r| channel_key(r) == name).cloned().collect();
                &own
            };
            let queued = own_queue(name);
            let one = ReconcileInput { rows, queued: queued.unwrap_or(lanes), channel: Some(name), ..*input };
            let mut account = ChannelAccount::from(&reconcile(&one));
            account.shares_lanes = queued.is_none() && on_lanes > 1;
            account.undeclared = !declared.is_empty() && !declared.iter().any(|d| d == name);
            (name.to_owned(), account)
        })
        .collect()
}

/// What a reconciliation reads.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileInput<'a> {
    /// The window.
    pub from: DateTime<Utc>,
    /// Its end (exclusive).
    pub to: DateTime<Utc>,
    /// The tenant filter applied to `rows`, for the report.
    pub tenant: Option<&'a str>,
    /// The channel filter applied to `rows`, for the report.
    pub channel: Option<&'a str>,
    /// The population.
    pub rows: &'a [DueRow],
    /// Ledger records of the population's reminders (absent: never claimed).
    pub records: &'a HashMap<ReminderId, LedgerRecord>,
    /// Messages on the lanes.
    pub queued: u64,
    /// What the DLQ holds by reminder id (its reason), as far as it was read.
    pub in_dlq: &'a HashMap<String, String>,
    /// Now.
    pub now: DateTime<Utc>,
    /// How long past `deliver_after` a renewal may stay unreleased before it counts as
    /// never released.
    pub grace: Duration,
    /// The SLO.
    pub policy: &'a SloPolicy,
}

/// The default `grace`: two scheduler ticks.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(120);

fn unaccounted(row: &DueRow, rec: Option<&LedgerRecord>, problem: Problem, now: DateTime<Utc>) -> Unaccounted {
    Unaccounted {
        reminder_id: row.reminder_id.to_string(),
        tenant_id: row.tenant_id.clone(),
        renewal_id: row.renewal_id.clone(),
        problem,
        deliver_after: row.deliver_after,
        deliver_by: row.deliver_by,
        released_at: match row.release {
            ReleaseState::Enqueued(at) => at,
            _ => None,
        },
        ledger_state: rec.map(|r| r.state.as_str()),
        last_reason: rec.and_then(|r| r.last_reason.map(|c| c.as_str())),
        attempts: rec.map_or(0, |r| r.attempts),
        slack_seconds: slack(row, now),
    }
}

fn slack(row: &DueRow, now: DateTime<Utc>) -> f64 {
    if now <= row.deliver_by {
        until(now, row.deliver_by).as_secs_f64()
    } else {
        -until(row.deliver_by, now).as_secs_f64()
    }
}

/// The ledger record that decides `row`: its record, except a cancellation at send the row has
/// superseded since — the renewal active again and re-armed (pending, released again after
/// the cancellation, or expired at release since). Its reminder was owed again: the old
/// cancellation must not file it as cancelled, nor hide a loss of its new copy; the row's own
/// state decides it, as for a renewal no copy has reached yet. A renewal active again with
/// nothing released since (its window was over when it came back) stays cancelled.
fn deciding<'a>(row: &DueRow, rec: Option<&'a LedgerRecord>) -> Option<&'a LedgerRecord> {
    let superseded = rec.is_some_and(|r| {
        let cancelled_at = r.history.last().map(|h| h.at);
        r.state == ReminderState::Cancelled
            && row.status == RenewalStatus::Active
            && match row.release {
                ReleaseState::Scheduled | ReleaseState::ExpiredAtRelease => true,
                ReleaseState::Enqueued(at) => matches!((at, cancelled_at), (Some(at), Some(c)) if at > c),
            }
    });
    if superseded { None } else { rec }
}

/// True for a renewal steps 4 and 5 decide: active, not expired at release, released (by the
/// table or by a ledger record) and in no terminal state.
fn is_open(row: &DueRow, rec: Option<&LedgerRecord>) -> bool {
    let terminal = rec.is_some_and(|r| r.state.is_terminal());
    let released = rec.is_some() || matches!(row.release, ReleaseState::Enqueued(_));
    !terminal && row.status == RenewalStatus::Active && row.release != ReleaseState::ExpiredAtRelease && released
}

/// How many renewals of `rows` are released and in no terminal state: when there are some, the
/// DLQ is worth reading (a backstop letter is one of them).
pub fn open_releases(rows: &[DueRow], records: &HashMap<ReminderId, LedgerRecord>) -> usize {
    rows.iter().filter(|r| is_open(r, deciding(r, records.get(&r.reminder_id)))).count()
}

/// Reconciles one window.
pub fn reconcile(input: &ReconcileInput<'_>) -> Reconciliation {
    let now = input.now;
    let mut r = Reconciliation {
        from: input.from,
        to: input.to,
        tenant: input.tenant.map(str::to_owned),
        channel: input.channel.map(str::to_owned),
        as_of: now,
        population: input.rows.len() as u64,
        excluded: BTreeMap::new(),
        due: 0,
        delivered: 0,
        delivered_late: 0,
        expired: 0,
        cancelled: 0,
        dead_lettered: BTreeMap::new(),
        waiting: Waiting::default(),
        unaccounted: 0,
        unaccounted_reminders: Vec::new(),
        suspects: Vec::new(),
        missing_among_suspects: 0,
        queued_messages: input.queued,
        slo: SloTally::new().summary(input.policy),
        accounted: true,
        channels: BTreeMap::new(),
    };
    let mut slo = SloTally::new();
    let mut candidates: Vec<(&DueRow, Option<&LedgerRecord>)> = Vec::new();
    // Messages of the window that are on the lanes but not candidates' (fresh releases, copies
    // of renewals cancelled after release, redriven copies of dead-lettered reminders): they
    // must not cover a candidate's missing one.
    let mut occupying = 0u64;
    let note_slack = |w: &mut Waiting, row: &DueRow| {
        let s = slack(row, now);
        w.min_slack_seconds = Some(w.min_slack_seconds.map_or(s, |m: f64| m.min(s)));
    };
    for row in input.rows {
        let rec = deciding(row, input.records.get(&row.reminder_id));
        let ending = |outcome: Outcome| Ending {
            deliver_after: Some(row.deliver_after),
            deliver_by: row.deliver_by,
            outcome,
            ended_at: None,
        };
        let terminal = rec.filter(|rec| rec.state.is_terminal());
        let judged = if let Some(rec) = terminal {
            let e = Ending {
                deliver_after: Some(row.deliver_after),
                deliver_by: row.deliver_by,
                ..Ending::from_record(rec, false)
            };
            match &e.outcome {
                Outcome::Delivered { at } => {
                    r.delivered += 1;
                    if *at >= row.deliver_by {
                        r.delivered_late += 1;
                    }
                }
                Outcome::Expired => r.expired += 1,
                Outcome::Cancelled => r.cancelled += 1,
                Outcome::DeadLettered { reason } => {
                    *r.dead_lettered.entry(reason.clone()).or_default() += 1;
                    // Its letter is not among the DLQ's (or the DLQ was not read): a redrive may
                    // have moved it back to a lane, where it waits, still dead-lettered in the
                    // ledger until it claims. Its message must not cover a candidate's.
                    if !input.in_dlq.contains_key(row.reminder_id.as_str()) {
                        occupying += 1;
                    }
                }
                Outcome::Waiting | Outcome::Lost => {}
            }
            Some(e)
        } else if row.release == ReleaseState::ExpiredAtRelease {
            r.expired += 1;
            Some(ending(Outcome::Expired))
        } else if row.status != RenewalStatus::Active {
            *r.excluded.entry(row.status.as_str().to_owned()).or_default() += 1;
            if matches!(row.release, ReleaseState::Enqueued(_)) || rec.is_some() {
                // Released before it was cancelled or paid: its copy may still be on a lane
                // (the sender cancels it when it comes), so it takes a place in the count.
                occupying += 1;
            }
            Some(ending(Outcome::Cancelled))
        } else if let Some(reason) = input.in_dlq.get(row.reminder_id.as_str()) {
            *r.dead_lettered.entry(reason.clone()).or_default() += 1;
            Some(ending(Outcome::DeadLettered { reason: reason.clone() }))
        } else if is_open(row, rec) {
            // When it was released: the table's mark, or else (a mark that failed, or a row
            // read before it) the ledger's first transition, which only a released copy writes.
            let released = match row.release {
                ReleaseState::Enqueued(at) => at,
                _ => None,
            }
            .or_else(|| rec.and_then(|r| r.history.first()).map(|h| h.at));
            if released.is_some_and(|at| now < add(at, input.grace)) {
                // Just released: SQS's approximate counts may not show it yet, or they do and
                // its message must not cover an older candidate's.
                occupying += 1;
                r.waiting.on_queue += 1;
                note_slack(&mut r.waiting, row);
                Some(ending(Outcome::Waiting))
            } else {
                candidates.push((row, rec));
                None
            }
        } else if now < add(row.deliver_after, input.grace) {
            r.waiting.not_yet_released += 1;
            note_slack(&mut r.waiting, row);
            Some(ending(Outcome::Waiting))
        } else {
            r.unaccounted_reminders.push(unaccounted(row, rec, Problem::NeverReleased, now));
            r.unaccounted += 1;
            Some(ending(Outcome::Lost))
        };
        if let Some(e) = judged {
            slo.add(&row.tenant_id, judge(&e, input.policy, now));
        }
    }
    let c = candidates.len() as u64;
    let (on_queue, named) = match (input.queued, input.queued.saturating_sub(occupying)) {
        (0, _) => (false, true),
        (_, q) if q >= c => (true, false),
        (_, q) => {
            r.unaccounted += c - q;
            r.missing_among_suspects = c - q;
            (false, false)
        }
    };
    for (row, rec) in candidates {
        let outcome = if on_queue {
            r.waiting.on_queue += 1;
            if now >= row.deliver_by {
                r.waiting.past_deadline += 1;
            }
            note_slack(&mut r.waiting, row);
            Outcome::Waiting
        } else if named {
            r.unaccounted += 1;
            r.unaccounted_reminders.push(unaccounted(row, rec, Problem::ReleasedNotOnAnyQueue, now));
            Outcome::Lost
        } else {
            r.suspects.push(unaccounted(row, rec, Problem::PossiblyLost, now));
            // Counted waiting for the SLO: which of them is missing is unknown.
            Outcome::Waiting
        };
        let e = Ending { deliver_after: Some(row.deliver_after), deliver_by: row.deliver_by, outcome, ended_at: None };
        slo.add(&row.tenant_id, judge(&e, input.policy, now));
    }
    r.unaccounted_reminders.sort_by(|a, b| (a.deliver_after, &a.reminder_id).cmp(&(b.deliver_after, &b.reminder_id)));
    r.unaccounted_reminders.truncate(LIST_MAX);
    r.suspects.truncate(LIST_MAX);
    r.due = r.population - r.excluded.values().sum::<u64>() - r.cancelled;
    r.accounted = r.unaccounted == 0;
    r.slo = slo.summary(input.policy);
    r
}

impl Reconciliation {
    /// With each channel's own account ([`by_channel`]): a loss one channel's queue shows and
    /// the window's count does not (another channel's messages covered it) counts too —
    /// `unaccounted` is the larger of the window's count and the channels' sum, and the window
    /// is accounted for only when both are 0.
    #[must_use]
    pub fn with_channels(mut self, channels: BTreeMap<String, ChannelAccount>) -> Self {
        let by_channel: u64 = channels.values().map(|c| c.unaccounted).sum();
        self.unaccounted = self.unaccounted.max(by_channel);
        self.accounted = self.unaccounted == 0;
        self.channels = channels;
        self
    }

    /// The human report: one line per bucket, then the unaccounted by name.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let tenant = self.tenant.as_ref().map_or_else(String::new, |t| format!(" tenant {t}"));
        let channel = self.channel.as_ref().map_or_else(String::new, |c| format!(" channel {c}"));
        let _ = writeln!(
            out,
            "reconcile {} → {}{tenant}{channel} (as of {})",
            self.from.to_rfc3339(),
            self.to.to_rfc3339(),
            self.as_of.to_rfc3339()
        );
        let excluded: Vec<String> = self.excluded.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let _ = writeln!(
            out,
            "  population {:>8}   excluded {}",
            self.population,
            if excluded.is_empty() { "none".to_owned() } else { excluded.join(", ") }
        );
        let _ = writeln!(out, "  due        {:>8}", self.due);
        let _ = writeln!(out, "  delivered  {:>8}   late {}", self.delivered, self.delivered_late);
        let _ = writeln!(out, "  expired    {:>8}", self.expired);
        let _ = writeln!(out, "  cancelled  {:>8}   (at send)", self.cancelled);
        let dead: u64 = self.dead_lettered.values().sum();
        let reasons: Vec<String> = self.dead_lettered.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(out, "  dead       {:>8}   {}", dead, reasons.join(", "));
        let slack = self.waiting.min_slack_seconds.map_or_else(String::new, |s| format!(", least slack {s:.0} s"));
        let _ = writeln!(
            out,
            "  waiting    {:>8}   {} on a queue ({} past deadline), {} not yet released{slack}; queues hold {}",
            self.waiting.on_queue + self.waiting.not_yet_released,
            self.waiting.on_queue,
            self.waiting.past_deadline,
            self.waiting.not_yet_released,
            self.queued_messages
        );
        let _ = writeln!(out, "  unaccounted{:>8}", self.unaccounted);
        let _ = writeln!(out, "  {}", self.slo.line());
        for (name, c) in &self.channels {
            let _ = writeln!(
                out,
                "  channel {name:<8} due {} delivered {} (late {}) expired {} dead {} waiting {} unaccounted {}{}; {}{}",
                c.due,
                c.delivered,
                c.delivered_late,
                c.expired,
                c.dead_lettered,
                c.waiting,
                c.unaccounted,
                if c.shares_lanes { " (at least: it shares the lanes)" } else { "" },
                c.slo.line(),
                if c.undeclared {
                    " — NOT DECLARED by this deployment: the sender dead-letters its reminders (unknown_channel)"
                } else {
                    ""
                }
            );
        }
        // The window's named ones, then those only a channel's own account names (another
        // channel's messages covered them in the window's count).
        let named = |u: &&Unaccounted| self.unaccounted_reminders.iter().all(|n| n.reminder_id != u.reminder_id);
        let by_channel = self.channels.iter().flat_map(|(name, c)| {
            c.unaccounted_reminders.iter().filter(named).map(move |u| (u, format!(" (on channel {name}'s queue)")))
        });
        for (u, on) in self.unaccounted_reminders.iter().map(|u| (u, String::new())).chain(by_channel) {
            let _ = writeln!(
                out,
                "  UNACCOUNTED {} {}{on} tenant {} renewal {} due {} by {} released {} ledger {} {}",
                u.reminder_id,
                u.problem.as_str(),
                u.tenant_id,
                u.renewal_id,
                u.deliver_after.to_rfc3339(),
                u.deliver_by.to_rfc3339(),
                u.released_at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339()),
                u.ledger_state.unwrap_or("none"),
                u.last_reason.unwrap_or(""),
            );
        }
        if !self.suspects.is_empty() {
            let _ = writeln!(
                out,
                "  {} of these {} released reminders are on no queue (the queues hold fewer messages than them):",
                self.missing_among_suspects,
                self.suspects.len()
            );
            for u in &self.suspects {
                let _ =
                    writeln!(out, "    {} tenant {} due {}", u.reminder_id, u.tenant_id, u.deliver_after.to_rfc3339());
            }
        }
        let _ = writeln!(
            out,
            "{}",
            if self.accounted {
                "every renewal of the window is accounted for"
            } else {
                "NOT every renewal is accounted for (exit 3)"
            }
        );
        out
    }
}

/// The header of a population file (`punctual forecast --save-population`, read by
/// `punctual simulate --population`): one renewal per line, instants in RFC 3339 UTC.
pub const POPULATION_HEADER: &str = "tenant_id,renewal_id,reminder_id,status,deliver_after,deliver_by";

/// Writes a population file.
pub fn population_csv(rows: &[DueRow]) -> String {
    let mut out = String::with_capacity(rows.len() * 120 + 80);
    out.push_str(POPULATION_HEADER);
    out.push('\n');
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{}\n",
            r.tenant_id,
            r.renewal_id,
            r.reminder_id,
            r.status.as_str(),
            r.deliver_after.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            r.deliver_by.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ));
    }
    out
}

/// Reads a population file; a bad line is refused with its number and what is wrong (nothing
/// is simulated from a file that does not read whole).
pub fn parse_population(text: &str) -> Result<Vec<DueRow>, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == POPULATION_HEADER => {}
        Some((_, h)) => return Err(format!("line 1: header {h:?} is not {POPULATION_HEADER:?}")),
        None => return Err("the file is empty".into()),
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| format!("line {}: {what}", i + 1);
        let f: Vec<&str> = line.trim().split(',').collect();
        let [tenant, renewal, reminder, status, after, by] = f[..] else {
            return Err(bad(format!("{} fields, want 6", f.len())));
        };
        let at = |name: &str, v: &str| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| bad(format!("{name} {v:?}: {e}")))
        };
        let status = match status {
            "active" => RenewalStatus::Active,
            "cancelled" => RenewalStatus::Cancelled,
            "paid" => RenewalStatus::Paid,
            other => return Err(bad(format!("status {other:?} is not active, cancelled or paid"))),
        };
        let (deliver_after, deliver_by) = (at("deliver_after", after)?, at("deliver_by", by)?);
        if deliver_by <= deliver_after {
            return Err(bad("deliver_by is not after deliver_after".into()));
        }
        rows.push(DueRow {
            tenant_id: crate::TenantId::parse(tenant).map_err(|e| bad(format!("tenant_id: {e}")))?.to_string(),
            renewal_id: renewal.to_owned(),
            reminder_id: ReminderId::parse(reminder).map_err(|e| bad(format!("reminder_id: {e}")))?,
            status,
            release: ReleaseState::Scheduled,
            deliver_after,
            deliver_by,
            channel: None,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::HistoryEntry;
    use crate::reason::ReasonCode;
    use chrono::TimeDelta;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(1_800_000_000 + s)
    }

    fn row(n: u32, status: RenewalStatus, release: ReleaseState) -> DueRow {
        DueRow {
            tenant_id: format!("t{}", n % 2),
            renewal_id: format!("r{n}"),
            reminder_id: ReminderId::parse(format!("rem_{n:032x}")).unwrap(),
            status,
            release,
            deliver_after: t(0),
            deliver_by: t(3600),
            channel: None,
        }
    }

    fn record(row: &DueRow, state: ReminderState, reason: Option<ReasonCode>, at: i64) -> LedgerRecord {
        LedgerRecord {
            attempts: 1,
            last_reason: reason,
            deliver_after: Some(row.deliver_after),
            history: vec![HistoryEntry {
                at: t(at),
                state,
                reason,
                attempts: 1,
                correlation_id: String::new(),
                redrive_id: None,
                provider_status: None,
                next_at: None,
            }],
            ..LedgerRecord::new(row.reminder_id.clone(), state, row.deliver_by)
        }
    }

    /// The window around `t(0)` with nothing in the DLQ and the default SLO.
    fn input<'a>(
        rows: &'a [DueRow],
        records: &'a HashMap<ReminderId, LedgerRecord>,
        queued: u64,
        now: i64,
        (in_dlq, policy): (&'a HashMap<String, String>, &'a SloPolicy),
    ) -> ReconcileInput<'a> {
        ReconcileInput {
            from: t(-60),
            to: t(60),
            tenant: None,
            channel: None,
            rows,
            records,
            queued,
            in_dlq,
            now: t(now),
            grace: DEFAULT_GRACE,
            policy,
        }
    }

    fn run(rows: &[DueRow], records: &HashMap<ReminderId, LedgerRecord>, queued: u64, now: i64) -> Reconciliation {
        reconcile(&input(rows, records, queued, now, (&HashMap::new(), &SloPolicy::default())))
    }

    /// Each channel is reconciled against its own queues' evidence: SMS's queue empty names its
    /// released reminder lost, while email's is covered by the lanes' message (the fleet-wide
    /// count only knows that one of the three open reminders is missing).
    #[test]
    fn each_channel_is_judged_on_its_own_rows_against_its_own_queues() {
        let sent = ReleaseState::Enqueued(Some(t(-600)));
        let mut rows = vec![
            row(1, RenewalStatus::Active, sent),
            row(2, RenewalStatus::Active, sent),
            row(3, RenewalStatus::Active, sent),
            row(4, RenewalStatus::Paid, ReleaseState::Scheduled),
        ];
        for (r, c) in rows.iter_mut().zip(["email", "email", "sms", "sms"]) {
            r.channel = Some(c.to_owned());
        }
        rows.push(row(5, RenewalStatus::Active, sent));
        let mut recs = HashMap::new();
        recs.insert(rows[0].reminder_id.clone(), record(&rows[0], ReminderState::Delivered, None, 10));
        let whole = run(&rows, &recs, 2, 30);
        // The fleet's count knows one of three open reminders is missing, not which.
        assert_eq!((whole.missing_among_suspects, whole.suspects.len()), (1, 3), "{whole:?}");
        let (no_letters, policy) = (HashMap::new(), SloPolicy::default());
        let input = input(&rows, &recs, 2, 30, (&no_letters, &policy));
        let own = |c: &str| (c == "sms").then_some(0);
        let per = by_channel(&input, (own, 1), &["email".to_owned(), "sms".to_owned()]);
        assert_eq!(per.keys().map(String::as_str).collect::<Vec<_>>(), ["(none)", "email", "sms"]);
        let (email, sms) = (&per["email"], &per["sms"]);
        assert_eq!((email.population, email.due, email.delivered, email.waiting, email.unaccounted), (2, 2, 1, 1, 0));
        assert_eq!((sms.population, sms.due, sms.delivered, sms.unaccounted), (2, 1, 0, 1), "{sms:?}");
        let sms_only = reconcile(&ReconcileInput { rows: &rows[2..4], queued: 0, ..input });
        assert_eq!(sms_only.unaccounted_reminders[0].renewal_id, "r3", "named: {sms_only:?}");
        assert_eq!(per["(none)"].unaccounted, 0);
        // A row without a declared channel is marked: its reminders will be dead-lettered.
        assert!(per["(none)"].undeclared && !per["sms"].undeclared && !per["email"].undeclared);
        assert!(
            by_channel(&input, (|_: &str| None, 2), &[]).values().all(|c| !c.undeclared),
            "nothing declared: unmarked"
        );
        // Email and the row without a channel share the lanes: each is marked, its count a lower bound.
        assert!(per["email"].shares_lanes && per["(none)"].shares_lanes && !per["sms"].shares_lanes);
        // The window is not accounted for: SMS's loss counts though the fleet's count could not
        // tell it from the others, and it is named on SMS's line.
        let judged = whole.clone().with_channels(per.clone());
        assert_eq!((judged.unaccounted, judged.accounted), (1, false));
        assert!(judged.render().contains("(on channel sms's queue) tenant t1 renewal r3"), "{}", judged.render());
        // The channels' populations add up to the window's.
        assert_eq!(per.values().map(|c| c.population).sum::<u64>(), whole.population);
        // A window narrowed to a channel says so in its report.
        let narrowed = reconcile(&ReconcileInput { channel: Some("sms"), ..input });
        assert!(narrowed.render().contains(" channel sms "), "{}", narrowed.render());
    }

    #[test]
    fn every_renewal_lands_in_one_bucket() {
        let sent = ReleaseState::Enqueued(Some(t(-600)));
        let rows = vec![
            row(1, RenewalStatus::Active, sent),
            row(2, RenewalStatus::Active, sent),
            row(3, RenewalStatus::Cancelled, ReleaseState::Scheduled),
            row(4, RenewalStatus::Paid, ReleaseState::Scheduled),
            row(5, RenewalStatus::Active, sent),
            row(6, RenewalStatus::Active, ReleaseState::ExpiredAtRelease),
            row(7, RenewalStatus::Active, sent),
            // Paid after release, delivered before: delivered, not excluded.
            row(8, RenewalStatus::Paid, sent),
        ];
        let mut recs = HashMap::new();
        for (i, state, reason, at) in [
            (0, ReminderState::Delivered, None, 30),
            (1, ReminderState::Delivered, None, 400),
            (4, ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit), 100),
            (6, ReminderState::Cancelled, Some(ReasonCode::Cancelled), 5),
            (7, ReminderState::Delivered, None, 10),
        ] {
            recs.insert(rows[i].reminder_id.clone(), record(&rows[i], state, reason, at));
        }
        let r = run(&rows, &recs, 0, 900);
        assert_eq!((r.population, r.due, r.delivered, r.delivered_late, r.expired, r.cancelled), (8, 5, 3, 0, 1, 1));
        assert_eq!(r.excluded, BTreeMap::from([("cancelled".into(), 1), ("paid".into(), 1)]));
        assert_eq!(r.dead_lettered, BTreeMap::from([("attempt_limit".into(), 1)]));
        assert_eq!((r.unaccounted, r.accounted), (0, true), "{r:#?}");
        // SLO: 2 met (30 s, 10 s), breached: 400 s, dead, expired; excluded: 2 by status + 1 at send.
        assert_eq!((r.slo.counts.met, r.slo.counts.breached, r.slo.counts.excluded), (2, 3, 3));
        assert!(r.render().contains("every renewal of the window is accounted for"));
    }

    #[test]
    fn a_released_reminder_on_no_queue_is_named_and_one_never_released_too() {
        let rows = vec![
            row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
            row(2, RenewalStatus::Active, ReleaseState::Scheduled),
        ];
        // Queues empty: the released one is named. 119 s after due: the unreleased one waits.
        let r = run(&rows, &HashMap::new(), 0, 119);
        assert_eq!((r.unaccounted, r.waiting.not_yet_released), (1, 1));
        assert_eq!(r.unaccounted_reminders[0].reminder_id, rows[0].reminder_id.to_string());
        assert_eq!(r.unaccounted_reminders[0].problem, Problem::ReleasedNotOnAnyQueue);
        assert!(!r.accounted);
        assert!(r.render().contains(&format!("UNACCOUNTED {}", rows[0].reminder_id)));
        // Past the grace, the unreleased one is named too.
        let r = run(&rows, &HashMap::new(), 0, 121);
        assert_eq!(r.unaccounted, 2);
        assert!(r.unaccounted_reminders.iter().any(|u| u.problem == Problem::NeverReleased));
        // With a message on a queue for it, the released one is waiting, not lost.
        let r = run(&rows[..1], &HashMap::new(), 1, 119);
        assert_eq!((r.unaccounted, r.waiting.on_queue, r.accounted), (0, 1, true));
    }

    #[test]
    fn fewer_messages_than_candidates_is_a_shortfall_with_suspects() {
        let sent = ReleaseState::Enqueued(None);
        let rows: Vec<DueRow> = (1..=3).map(|n| row(n, RenewalStatus::Active, sent)).collect();
        let mut recs = HashMap::new();
        // A deferred one is still a candidate (its copy waits, delayed).
        recs.insert(
            rows[0].reminder_id.clone(),
            record(&rows[0], ReminderState::Deferred, Some(ReasonCode::RateLimited), -600),
        );
        let r = run(&rows, &recs, 2, 30);
        assert_eq!((r.unaccounted, r.suspects.len(), r.unaccounted_reminders.len()), (1, 3, 0));
        assert!(!r.accounted);
        assert_eq!(r.suspects[0].ledger_state, Some("deferred"));
        assert!(r.render().contains("1 of these 3 released reminders are on no queue"));
    }

    #[test]
    fn found_by_review_expired_at_release_then_paid_is_still_expired_and_breached() {
        let rows = [row(1, RenewalStatus::Paid, ReleaseState::ExpiredAtRelease)];
        let r = run(&rows, &HashMap::new(), 0, 900);
        assert_eq!((r.expired, r.excluded.len(), r.due, r.slo.counts.breached), (1, 0, 1, 1), "{r:#?}");
    }

    #[test]
    fn found_by_review_a_ledger_record_proves_a_release_the_table_never_marked() {
        // Sent, then the scheduler's mark failed: the table still says scheduled, but a copy
        // claimed and deferred it. With messages on the lanes it waits; it was released.
        let rows = [row(1, RenewalStatus::Active, ReleaseState::Scheduled)];
        let mut recs = HashMap::new();
        recs.insert(
            rows[0].reminder_id.clone(),
            record(&rows[0], ReminderState::Deferred, Some(ReasonCode::RateLimited), -600),
        );
        let r = run(&rows, &recs, 5, 600);
        assert_eq!((r.waiting.on_queue, r.unaccounted), (1, 0), "{r:#?}");
    }

    #[test]
    fn found_by_review_a_backstop_letter_is_dead_lettered_not_lost_and_a_fresh_release_waits() {
        let rows = [
            row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
            row(2, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(850)))),
        ];
        let mut recs = HashMap::new();
        recs.insert(rows[0].reminder_id.clone(), record(&rows[0], ReminderState::Leased, None, 20));
        let dlq = HashMap::from([(rows[0].reminder_id.to_string(), "receive_count_backstop".to_owned())]);
        let r = reconcile(&ReconcileInput {
            from: t(-60),
            to: t(60),
            tenant: None,
            channel: None,
            rows: &rows,
            records: &recs,
            queued: 0,
            in_dlq: &dlq,
            now: t(900),
            grace: DEFAULT_GRACE,
            policy: &SloPolicy::default(),
        });
        assert_eq!(r.dead_lettered, BTreeMap::from([("receive_count_backstop".into(), 1)]), "{r:#?}");
        // Released 50 s ago: the lanes' approximate counts may not show it yet.
        assert_eq!((r.waiting.on_queue, r.unaccounted, r.accounted), (1, 0, true), "{r:#?}");
    }

    #[test]
    fn found_by_review_the_shortfall_is_reported_beside_a_truncated_list() {
        let mut rows: Vec<DueRow> = (0..1500).map(|n| row(n, RenewalStatus::Active, ReleaseState::Scheduled)).collect();
        rows.extend((2000..2003).map(|n| row(n, RenewalStatus::Active, ReleaseState::Enqueued(None))));
        let r = run(&rows, &HashMap::new(), 2, 900);
        assert_eq!((r.unaccounted, r.missing_among_suspects, r.unaccounted_reminders.len()), (1501, 1, LIST_MAX));
        assert!(r.render().contains("1 of these 3 released reminders are on no queue"));
    }

    #[test]
    fn found_by_second_review_a_fresh_release_does_not_cover_an_old_loss() {
        // A lost 10 minutes ago; B released 30 s ago, its one message the lanes' only one.
        let rows = [
            row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
            row(2, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-30)))),
        ];
        let r = run(&rows, &HashMap::new(), 1, 0);
        assert_eq!((r.unaccounted, r.missing_among_suspects, r.accounted), (1, 1, false), "{r:#?}");
        assert_eq!(r.suspects[0].reminder_id, rows[0].reminder_id.to_string());
        // A renewal cancelled after release occupies its message the same way.
        let rows = [
            row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
            row(3, RenewalStatus::Cancelled, ReleaseState::Enqueued(Some(t(-600)))),
        ];
        assert!(!run(&rows, &HashMap::new(), 1, 0).accounted);
        // With both messages there, both are accounted for.
        assert!(run(&rows, &HashMap::new(), 2, 0).accounted);
    }

    #[test]
    fn a_redriven_copy_on_a_lane_does_not_cover_a_lost_reminder() {
        // A was released 10 minutes ago and its message lost. B was dead-lettered, then
        // redriven: its letter left the DLQ for a lane, and the ledger says dead-lettered until
        // the copy claims it. The lanes' one message is B's.
        let rows = [
            row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
            row(2, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-600)))),
        ];
        let mut recs = HashMap::new();
        recs.insert(
            rows[1].reminder_id.clone(),
            record(&rows[1], ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit), -300),
        );
        let judge = |in_dlq: &HashMap<String, String>, queued: u64| {
            reconcile(&ReconcileInput {
                from: t(-60),
                to: t(60),
                tenant: None,
                channel: None,
                rows: &rows,
                records: &recs,
                queued,
                in_dlq,
                now: t(0),
                grace: DEFAULT_GRACE,
                policy: &SloPolicy::default(),
            })
        };
        let r = judge(&HashMap::new(), 1);
        assert_eq!(r.dead_lettered, BTreeMap::from([("attempt_limit".into(), 1)]), "{r:#?}");
        assert_eq!((r.unaccounted, r.missing_among_suspects, r.accounted), (1, 1, false), "{r:#?}");
        assert_eq!(r.suspects[0].reminder_id, rows[0].reminder_id.to_string());
        // With B's letter still in the DLQ, the lanes' message can be A's.
        let letter = HashMap::from([(rows[1].reminder_id.to_string(), "attempt_limit".to_owned())]);
        assert!(judge(&letter, 1).accounted);
        // Both messages there: both accounted for.
        assert!(judge(&HashMap::new(), 2).accounted);
    }

    #[test]
    fn found_by_second_review_a_release_seen_only_in_the_ledger_gets_the_grace_too() {
        // Read as scheduled, then released and claimed 3 s before the ledger read.
        let rows = [row(1, RenewalStatus::Active, ReleaseState::Scheduled)];
        let mut recs = HashMap::new();
        recs.insert(rows[0].reminder_id.clone(), record(&rows[0], ReminderState::Leased, None, 597));
        let r = run(&rows, &recs, 0, 600);
        assert_eq!((r.waiting.on_queue, r.unaccounted), (1, 0), "{r:#?}");
        // Long after, with the lanes empty, it is named.
        let r = run(&rows, &recs, 0, 900);
        assert_eq!(r.unaccounted_reminders[0].problem, Problem::ReleasedNotOnAnyQueue);
    }

    #[test]
    fn a_renewal_active_again_after_a_cancel_at_send_is_not_filed_as_cancelled() {
        // Cancelled at send 10 minutes before, then active again and re-armed: released again
        // 5 minutes ago, its new copy on a lane.
        let cancelled_at = -600;
        let rows = [row(1, RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-300))))];
        let mut recs = HashMap::new();
        recs.insert(
            rows[0].reminder_id.clone(),
            record(&rows[0], ReminderState::Cancelled, Some(ReasonCode::Cancelled), cancelled_at),
        );
        let r = run(&rows, &recs, 1, 0);
        assert_eq!((r.cancelled, r.waiting.on_queue, r.due), (0, 1, 1), "{r:#?}");
        // With the lanes empty, its new copy is missing: named, not hidden as a cancellation.
        let r = run(&rows, &recs, 0, 0);
        assert_eq!(r.unaccounted_reminders[0].problem, Problem::ReleasedNotOnAnyQueue, "{r:#?}");
        // Re-armed and not released again yet: pending, then never released past the grace.
        let pending = [row(1, RenewalStatus::Active, ReleaseState::Scheduled)];
        assert_eq!(run(&pending, &recs, 0, 0).waiting.not_yet_released, 1);
        let late = run(&pending, &recs, 0, 900);
        assert_eq!(late.unaccounted_reminders[0].problem, Problem::NeverReleased, "{late:#?}");
        // Still cancelled, or released only before the cancellation (active again after its
        // window, nothing re-armed): the cancellation at send stands.
        for (status, release) in [
            (RenewalStatus::Cancelled, ReleaseState::Enqueued(Some(t(-300)))),
            (RenewalStatus::Active, ReleaseState::Enqueued(Some(t(-900)))),
        ] {
            let r = run(&[row(1, status, release)], &recs, 0, 0);
            assert_eq!((r.cancelled, r.unaccounted), (1, 0), "{r:#?}");
        }
    }

    #[test]
    fn a_population_file_round_trips_and_a_bad_line_is_named() {
        let rows: Vec<DueRow> = (1..=3).map(|n| row(n, RenewalStatus::Active, ReleaseState::Scheduled)).collect();
        let text = population_csv(&rows);
        assert_eq!(parse_population(&text).unwrap(), rows);
        let broken = text.replace("active", "activ");
        assert!(parse_population(&broken).unwrap_err().starts_with("line 2: status"));
        assert!(parse_population("a,b\n").unwrap_err().contains("header"));
        let swapped = format!(
            "{POPULATION_HEADER}\nt,r,{},active,2026-12-01T10:00:00Z,2026-12-01T09:00:00Z\n",
            rows[0].reminder_id
        );
        assert!(parse_population(&swapped).unwrap_err().contains("not after"));
    }
}
