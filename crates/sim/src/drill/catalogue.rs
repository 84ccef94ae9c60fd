//! The drill's mornings and incidents.
//!
//! A morning has the seeds' shape: renewals fall due at 09:00 in their customers' zones, so
//! the day comes in waves (08:00, 09:00 and 10:00 UTC here: three zones an hour apart), each
//! released by the scheduler ten minutes ahead and sent at the provider's quota (100/s); most
//! windows are four hours long, a tenth are tight (2–5 minutes, the urgent lane) in the mixed
//! morning, and a few addresses bounce (the provider refuses them for good). The normal days
//! vary the shape: mixed deadlines, one noisy tenant, a night with a trickle of a few reminders
//! an hour (one of which bounces: a small population where one miss is a third of it), and a
//! holiday trough.
//!
//! Each incident starts inside a normal morning (at the 09:00 wave unless said otherwise) and
//! states when it starts, when it is over (recovery: the operator's fix, or the trouble ends),
//! and whether it must page. `redrive_during_traffic` is the one that must not: an operator's
//! bounded redrive while the morning runs is work, not an incident.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use punctual_core::backoff::{Jitter, SplitMix64};
use punctual_core::lanes::QueueLane;
use punctual_core::reason::ReasonCode;

use super::world::{Row, Trouble, Window};

/// The drill's day (a Tuesday): every time below is on it.
pub fn day() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

fn at(h: i64, m: i64) -> DateTime<Utc> {
    day() + TimeDelta::hours(h) + TimeDelta::minutes(m)
}

/// The provider's quota every drill runs at (calls/s).
pub const QUOTA: f64 = 100.0;
/// SMS's provider quota in the two-channel incidents (calls/s): a fifth of the reminders at a
/// quarter of email's quota, so both drain a wave in about the same time.
pub const SMS_QUOTA: f64 = 25.0;
/// The two-channel runs put SMS on a queue of its own (`CHANNEL_SMS_QUEUE_URL`) and an urgent
/// lane of its own (`CHANNEL_SMS_URGENT_QUEUE_URL`), as the template's sms channel has them,
/// each drained by this many instances: on the two lanes it shares with email, an SMS record
/// waiting for SMS's token holds its batch's email records and their poller, and in
/// `sms_outage_email_unaffected` 14 email reminders waited past the SLO (delivered up to 5 min
/// 16 s after `deliver_after`).
pub const SMS_POLLERS: usize = 2;
/// Reminders in each of a normal morning's three waves.
pub const WAVE: usize = 6_000;

/// The shapes of a normal day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Three waves of 6,000, four-hour windows, 1 in 2,000 addresses bounce.
    Normal,
    /// The same with a tenth on tight deadlines (2–5 minutes).
    Mixed,
    /// One tenant holds 70 % of each wave.
    Tenants,
    /// Five reminders an hour from 01:00 to 06:00, one of them bounces.
    Night,
    /// Three waves of 300.
    Holiday,
    /// The normal day over two channels: one reminder in five by SMS, on its own provider at
    /// [`SMS_QUOTA`] (the channel alarms' normal day).
    Channels,
}

impl Shape {
    /// Its name in the report.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Mixed => "mixed",
            Self::Tenants => "tenants",
            Self::Night => "night",
            Self::Holiday => "holiday",
            Self::Channels => "channels",
        }
    }
}

/// The normal days.
pub const NORMAL_DAYS: usize = 24;

/// The [`NORMAL_DAYS`] normal days, the most different first (a `--mornings N` prefix stays varied).
pub fn normal_days() -> Vec<(Shape, u64)> {
    let shapes = [Shape::Normal, Shape::Night, Shape::Holiday, Shape::Mixed, Shape::Tenants, Shape::Channels];
    (1..=4).flat_map(|seed| shapes.into_iter().map(move |s| (s, seed))).collect()
}

/// A day's population: its rows, its tenants, and the window the drill watches.
#[derive(Debug, Clone)]
pub struct Population {
    /// Rows.
    pub rows: Vec<Row>,
    /// Tenant names.
    pub tenants: Vec<String>,
    /// Start.
    pub start: DateTime<Utc>,
    /// End.
    pub end: DateTime<Utc>,
}

fn tenants(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tenant-{i:02}")).collect()
}

/// Tenant `0` holds `noisy` of the traffic; the rest share what is left in decreasing weights.
fn pick_tenant(rng: &mut SplitMix64, n: u32, noisy: f64) -> u32 {
    if rng.next_unit() < noisy {
        return 0;
    }
    // Weights 1/k over the others (k = 1..n-1): a few large tenants and a tail.
    let total: f64 = (1..n).map(|k| 1.0 / f64::from(k)).sum();
    let mut x = rng.next_unit() * total;
    for k in 1..n {
        x -= 1.0 / f64::from(k);
        if x <= 0.0 {
            return k;
        }
    }
    n - 1
}

/// A wave of `n` renewals due at `due`.
fn wave(rows: &mut Vec<Row>, rng: &mut SplitMix64, due: DateTime<Utc>, n: usize, w: WaveShape) {
    for _ in 0..n {
        let tight = rng.next_unit() < w.tight;
        let by = if tight { due + TimeDelta::seconds(120 + (rng.next_unit() * 180.0) as i64) } else { due + w.window };
        rows.push(Row {
            tenant: pick_tenant(rng, w.tenants, w.noisy),
            after: due,
            by,
            bad_address: rng.next_unit() < w.bad,
            sms: false,
        });
    }
}

#[derive(Debug, Clone, Copy)]
struct WaveShape {
    window: TimeDelta,
    tight: f64,
    bad: f64,
    tenants: u32,
    noisy: f64,
}

const STANDARD: WaveShape = WaveShape { window: TimeDelta::hours(4), tight: 0.0, bad: 0.0005, tenants: 10, noisy: 0.0 };

/// A normal day of `shape`.
pub fn normal(shape: Shape, seed: u64) -> Population {
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9) ^ 0xd1);
    let mut rows = Vec::new();
    let waves = [at(8, 0), at(9, 0), at(10, 0)];
    let (start, end) = (at(7, 30), at(11, 30));
    match shape {
        Shape::Normal => waves.iter().for_each(|d| wave(&mut rows, &mut rng, *d, WAVE, STANDARD)),
        Shape::Channels => {
            waves.iter().for_each(|d| wave(&mut rows, &mut rng, *d, WAVE, STANDARD));
            one_in_five_by_sms(&mut rows);
        }
        Shape::Mixed => {
            waves.iter().for_each(|d| wave(&mut rows, &mut rng, *d, WAVE, WaveShape { tight: 0.1, ..STANDARD }))
        }
        Shape::Tenants => {
            waves.iter().for_each(|d| wave(&mut rows, &mut rng, *d, WAVE, WaveShape { noisy: 0.7, ..STANDARD }))
        }
        Shape::Holiday => waves.iter().for_each(|d| wave(&mut rows, &mut rng, *d, 300, STANDARD)),
        Shape::Night => {
            for h in 1..6 {
                for k in 0..5 {
                    let after = at(h, 7 + 11 * k);
                    rows.push(Row {
                        tenant: (k % 3) as u32,
                        after,
                        by: after + TimeDelta::hours(4),
                        bad_address: false,
                        sms: false,
                    });
                }
            }
            // One of the first hour's three reminders of tenant 0 bounces: one miss in a tiny
            // population must not read as a fast burn.
            if let Some(r) = rows.get_mut(3) {
                r.bad_address = true;
            }
            return Population { rows, tenants: tenants(3), start: at(0, 30), end: at(7, 0) };
        }
    }
    Population { rows, tenants: tenants(10), start, end }
}

/// The incidents, by the names the runbook and the drill use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incident {
    /// The provider answers 5xx for 90 minutes.
    ProviderOutage,
    /// The provider answers after 10 s for an hour.
    ProviderSlow,
    /// A confirmed 401: the sender pauses the fleet until the secret is fixed.
    CredentialsRevoked,
    /// SES pauses the account (its bounce rate climbed): the sender pauses the fleet.
    SesSendingPaused,
    /// An operator pause left on while reminders fall due.
    OperatorPauseLeftOn,
    /// Every scheduler tick fails.
    SchedulerFailing,
    /// The scheduler's rule is disabled.
    SchedulerNotInvoked,
    /// The normal lane's event source mapping is disabled.
    LaneNotPolled,
    /// The urgent lane's event source mapping is disabled for 30 minutes while 600 reminders
    /// with ten-minute windows fall due at 09:00 (the normal lane still drains). It must page
    /// before they miss.
    UrgentLaneNotPolled,
    /// The sender's concurrency is 0.
    SenderThrottled,
    /// A deploy makes every sender invocation fail at cold start from 09:00; rolled back at
    /// 09:30.
    SenderCrashLoop,
    /// DynamoDB refuses every ledger claim the senders make from 09:00 to 09:20 (a throttled
    /// table, as the claim sees it): each record fails before its call while the invocations
    /// succeed. Settles are untouched (the fault checker drills a settle lost after the call).
    LedgerRefusing,
    /// A producer writes 10 % malformed messages.
    PoisonBurst,
    /// Three times what the quota can deliver inside the windows.
    Overload,
    /// A wave of dead letters while yesterday's letters remain.
    DlqSecondWave,
    /// Every renewal of one tenant is refused as permanent.
    TenantFailing,
    /// An operator's bounded redrive while the morning runs (must not page).
    RedriveDuringTraffic,
    /// The provider halves its quota (to 50/s) from 09:00 to 10:00 without a word: the
    /// limiter meets 429s and cuts its rate. Four-hour windows still hold at half the rate, so
    /// nothing is at risk and it must page nobody, but an operator must hear of it (a ticket:
    /// `ThrottleRatioAlarm`), because the next bigger morning would miss.
    ProviderQuotaCut,
    /// The provider answers 5xx for three hours of a quiet night (a few reminders an hour):
    /// every volume floor is below what a busy morning has.
    ProviderOutageAtNight,
    /// Two channels (email and SMS, one reminder in five by SMS, each with its own provider,
    /// limiter and switch): SMS's provider answers 5xx for 90 minutes while email's is well. It
    /// must page, and email must deliver every reminder in its window.
    SmsOutageEmailUnaffected,
    /// Two channels: SMS's provider refuses the credentials (401) for 45 minutes, which trips
    /// SMS's own switch (not the fleet's) until the operator resumes it. It must page, and email
    /// must deliver every reminder in its window.
    SmsCredentialsRevoked,
    /// Two channels: three times what SMS's quota delivers inside its windows falls due at 09:00
    /// (13,500 SMS with three-minute windows at 25/s), while the fleet's summed quota would
    /// carry it. It must page before SMS's first miss, and email must be unaffected.
    SmsOverload,
    /// Two channels: SMS's own queue's event source mapping is disabled for 30 minutes. None of
    /// SMS's normal reminders reaches a sender (its urgent lane's mapping still runs), so no
    /// sender-side alarm can see it. It must page, and email must deliver every reminder in its
    /// window.
    SmsQueueNotPolled,
    /// Two channels: SMS's own urgent lane's mapping is disabled for 30 minutes while 600 SMS
    /// with ten-minute windows fall due at 09:00 (its normal queue still drains). It must page
    /// before they miss, and email must deliver every reminder in its window.
    SmsUrgentLaneNotPolled,
    /// The commands queue's event source mapping is disabled for 30 minutes while producers
    /// send their steady 30 commands a minute: no producer change (a cancel included) reaches
    /// the renewals table, and nothing on the delivery path can see it. It must page.
    IngestStalled,
}

impl Incident {
    /// Every incident, in the runbook's order.
    pub const ALL: [Self; 25] = [
        Self::ProviderOutage,
        Self::ProviderSlow,
        Self::CredentialsRevoked,
        Self::SesSendingPaused,
        Self::OperatorPauseLeftOn,
        Self::SchedulerFailing,
        Self::SchedulerNotInvoked,
        Self::LaneNotPolled,
        Self::UrgentLaneNotPolled,
        Self::SenderThrottled,
        Self::SenderCrashLoop,
        Self::LedgerRefusing,
        Self::PoisonBurst,
        Self::Overload,
        Self::DlqSecondWave,
        Self::TenantFailing,
        Self::RedriveDuringTraffic,
        Self::ProviderQuotaCut,
        Self::ProviderOutageAtNight,
        Self::SmsOutageEmailUnaffected,
        Self::SmsCredentialsRevoked,
        Self::SmsOverload,
        Self::SmsQueueNotPolled,
        Self::SmsUrgentLaneNotPolled,
        Self::IngestStalled,
    ];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ProviderOutage => "provider_outage",
            Self::ProviderSlow => "provider_slow",
            Self::CredentialsRevoked => "credentials_revoked",
            Self::SesSendingPaused => "ses_sending_paused",
            Self::OperatorPauseLeftOn => "operator_pause_left_on",
            Self::SchedulerFailing => "scheduler_failing",
            Self::SchedulerNotInvoked => "scheduler_not_invoked",
            Self::LaneNotPolled => "lane_not_polled",
            Self::UrgentLaneNotPolled => "urgent_lane_not_polled",
            Self::SenderThrottled => "sender_throttled",
            Self::SenderCrashLoop => "sender_crash_loop",
            Self::LedgerRefusing => "ledger_refusing",
            Self::PoisonBurst => "poison_burst",
            Self::Overload => "overload",
            Self::DlqSecondWave => "dlq_second_wave",
            Self::TenantFailing => "tenant_failing",
            Self::RedriveDuringTraffic => "redrive_during_traffic",
            Self::ProviderQuotaCut => "provider_quota_cut",
            Self::ProviderOutageAtNight => "provider_outage_at_night",
            Self::SmsOutageEmailUnaffected => "sms_outage_email_unaffected",
            Self::SmsCredentialsRevoked => "sms_credentials_revoked",
            Self::SmsOverload => "sms_overload",
            Self::SmsQueueNotPolled => "sms_queue_not_polled",
            Self::SmsUrgentLaneNotPolled => "sms_urgent_lane_not_polled",
            Self::IngestStalled => "ingest_stalled",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Whether it must page (every one but an operator's redrive and a quota cut nothing
    /// misses under).
    pub const fn pages(self) -> bool {
        !matches!(self, Self::RedriveDuringTraffic | Self::ProviderQuotaCut)
    }

    /// The ticket it must open (from its start, within the time a page has), when it must page
    /// nobody but an operator must still hear of it.
    pub const fn ticket(self) -> Option<&'static str> {
        match self {
            Self::ProviderQuotaCut => Some("ThrottleRatioAlarm"),
            _ => None,
        }
    }

    /// Whether its cause lasts until recovery, so some page must stay in ALARM from the first
    /// page until then (an all-clear while it lasts is a false one). The others are waves:
    /// their page clears when the wave is over.
    pub const fn continuous(self) -> bool {
        matches!(
            self,
            Self::ProviderOutage
                | Self::ProviderSlow
                | Self::CredentialsRevoked
                | Self::SesSendingPaused
                | Self::OperatorPauseLeftOn
                | Self::SchedulerFailing
                | Self::SchedulerNotInvoked
                | Self::LaneNotPolled
                | Self::UrgentLaneNotPolled
                | Self::SenderThrottled
                | Self::SenderCrashLoop
                | Self::LedgerRefusing
                | Self::ProviderOutageAtNight
                | Self::SmsOutageEmailUnaffected
                | Self::SmsCredentialsRevoked
                | Self::SmsQueueNotPolled
                | Self::SmsUrgentLaneNotPolled
                | Self::IngestStalled
        )
    }

    /// Whether it runs two channels, and the other channel must be unaffected: email delivers
    /// every reminder in its window but those whose address bounces.
    pub const fn channels(self) -> bool {
        matches!(
            self,
            Self::SmsOutageEmailUnaffected
                | Self::SmsCredentialsRevoked
                | Self::SmsOverload
                | Self::SmsQueueNotPolled
                | Self::SmsUrgentLaneNotPolled
        )
    }

    /// Whether it is an overload the projection must page ahead of: before its first miss, and
    /// from the release ten minutes ahead (see [`Incident::lead`]).
    pub const fn overload(self) -> bool {
        matches!(self, Self::Overload | Self::SmsOverload)
    }

    /// How long before its start a page still belongs to it: a projection pages when the work
    /// is released, ten minutes before it is due (`overload`). Any other page before the start is
    /// a false page of the morning.
    pub const fn lead(self) -> i64 {
        match self {
            Self::Overload | Self::SmsOverload => 15 * 60,
            _ => 0,
        }
    }
}

/// One incident's run: the morning, the trouble, when it starts and when it is over.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The population.
    pub population: Population,
    /// The trouble.
    pub windows: Vec<Window>,
    /// DLQ letters at the start.
    pub old_letters: Vec<(ReasonCode, DateTime<Utc>)>,
    /// SES instead of an HTTP vendor.
    pub ses: bool,
    /// Two channels: SMS's provider quota (email's is [`QUOTA`]).
    pub sms_quota: Option<f64>,
    /// Two channels: SMS on its own queue, drained by this many instances.
    pub sms_queue: Option<usize>,
    /// Two channels: SMS's urgent reminders on an urgent lane of its own (as many instances
    /// again), as the template's sms channel has it.
    pub sms_urgent_lane: bool,
    /// When it starts.
    pub start: DateTime<Utc>,
    /// When it is over.
    pub recovery: DateTime<Utc>,
}

/// Marks one row in five as sent by SMS.
fn one_in_five_by_sms(rows: &mut [Row]) {
    for (i, r) in rows.iter_mut().enumerate() {
        r.sms = i % 5 == 4;
    }
}

/// Two channels: one reminder in five of the morning by SMS, SMS's provider at [`SMS_QUOTA`].
fn two_channels(mut s: Staged) -> Staged {
    one_in_five_by_sms(&mut s.population.rows);
    s.sms_quota = Some(SMS_QUOTA);
    s.sms_queue = Some(SMS_POLLERS);
    s.sms_urgent_lane = true;
    s
}

/// Deadline-near work for a stalled urgent lane to hold: 600 renewals due at 09:00 with
/// ten-minute windows, appended to `rows`. Returns where they start.
fn urgent_wave(rows: &mut Vec<Row>, seed: u64) -> usize {
    let from = rows.len();
    let shape = WaveShape { window: TimeDelta::minutes(10), ..STANDARD };
    wave(rows, &mut SplitMix64::new(seed), at(9, 0), 600, shape);
    from
}

fn window(trouble: Trouble, from: DateTime<Utc>, until: DateTime<Utc>) -> Window {
    Window { trouble, from, until }
}

/// Stages `incident` on the normal morning of `seed`.
pub fn stage(incident: Incident, seed: u64) -> Staged {
    let population = normal(Shape::Normal, seed);
    let nine = at(9, 0);
    let staged = |windows: Vec<Window>, start: DateTime<Utc>, recovery: DateTime<Utc>| Staged {
        population: population.clone(),
        windows,
        old_letters: Vec::new(),
        ses: false,
        sms_quota: None,
        sms_queue: None,
        sms_urgent_lane: false,
        start,
        recovery,
    };
    match incident {
        // Recovery is the runbook's: the provider is back at 10:30 and the operator redrives the
        // letters whose windows are still open.
        Incident::ProviderOutage => staged(
            vec![
                window(Trouble::ProviderStatus(500), nine, at(10, 30)),
                window(Trouble::Redrive(vec![ReasonCode::AttemptLimit]), at(10, 30), at(10, 45)),
            ],
            nine,
            at(10, 30),
        ),
        Incident::ProviderSlow => staged(
            vec![window(Trouble::ProviderSlow(std::time::Duration::from_secs(10)), nine, at(10, 0))],
            nine,
            at(10, 0),
        ),
        Incident::CredentialsRevoked => {
            staged(vec![window(Trouble::ProviderStatus(401), nine, at(9, 45))], nine, at(9, 45))
        }
        Incident::SesSendingPaused => {
            // Bounces climb from 08:45; SES pauses the account at 09:00; fixed and resumed at 09:45.
            let mut s = staged(
                vec![
                    window(Trouble::BounceRate(0.12), at(8, 45), at(9, 45)),
                    window(Trouble::AccountPaused, nine, at(9, 45)),
                ],
                at(8, 45),
                at(9, 45),
            );
            s.ses = true;
            s
        }
        // Paused at 08:45 for maintenance and forgotten, before the 09:00 wave is released (at
        // 08:50): the wave falls due in the renewals table behind it, seen only by the paused
        // ticks' oldest-due measure.
        Incident::OperatorPauseLeftOn => {
            staged(vec![window(Trouble::OperatorPause, at(8, 45), at(10, 0))], nine, at(10, 0))
        }
        // From 09:45: the 10:00 wave needs releasing at 09:50.
        Incident::SchedulerFailing => {
            staged(vec![window(Trouble::SchedulerFailing, at(9, 45), at(10, 15))], at(9, 45), at(10, 15))
        }
        Incident::SchedulerNotInvoked => {
            staged(vec![window(Trouble::SchedulerNotInvoked, at(9, 45), at(10, 15))], at(9, 45), at(10, 15))
        }
        Incident::LaneNotPolled => {
            staged(vec![window(Trouble::LaneNotPolled(QueueLane::Normal), nine, at(9, 30))], nine, at(9, 30))
        }
        Incident::IngestStalled => staged(vec![window(Trouble::IngestStalled, nine, at(9, 30))], nine, at(9, 30)),
        Incident::UrgentLaneNotPolled => {
            let mut s =
                staged(vec![window(Trouble::LaneNotPolled(QueueLane::Urgent), nine, at(9, 30))], nine, at(9, 30));
            urgent_wave(&mut s.population.rows, seed ^ 0x0e6);
            s
        }
        Incident::ProviderQuotaCut => {
            staged(vec![window(Trouble::ProviderQuota(QUOTA / 2.0), nine, at(10, 0))], nine, at(10, 0))
        }
        // Rolled back at 09:30. The wave's messages fail their fifth receive from about 09:30
        // on and become letters (`receive_count_backstop`, paged by the DLQ at 09:32): 6,000
        // of them, six of the runbook's bounded redrives (1,000 at 10/s each). The drill judges
        // the pages; it does not run those redrives (`provider_outage` drills one).
        Incident::SenderCrashLoop => staged(vec![window(Trouble::SenderCrashing, nine, at(9, 30))], nine, at(9, 30)),
        Incident::LedgerRefusing => staged(vec![window(Trouble::LedgerRefusing, nine, at(9, 20))], nine, at(9, 20)),
        Incident::SenderThrottled => staged(vec![window(Trouble::SenderThrottled, nine, at(9, 30))], nine, at(9, 30)),
        Incident::PoisonBurst => staged(vec![window(Trouble::Poison(0.10), nine, at(9, 20))], nine, at(9, 20)),
        Incident::Overload => {
            // 54,000 due at 09:00 with three-minute windows: the quota delivers 18,000 in them.
            let mut s = staged(Vec::new(), nine, at(9, 3));
            let mut rng = SplitMix64::new(seed ^ 0x0e1);
            s.population.rows.retain(|r| r.after != nine);
            let shape = WaveShape { window: TimeDelta::minutes(3), ..STANDARD };
            wave(&mut s.population.rows, &mut rng, nine, 3 * 180 * QUOTA as usize, shape);
            s
        }
        Incident::DlqSecondWave => {
            // Yesterday's 40 letters are still there; from 09:00 to 09:03 the provider refuses
            // every call for good.
            let mut s = staged(vec![window(Trouble::ProviderPermanent, nine, at(9, 3))], nine, at(9, 3));
            s.old_letters = (0..40).map(|_| (ReasonCode::AttemptLimit, day() - TimeDelta::hours(14))).collect();
            s
        }
        Incident::TenantFailing => staged(vec![window(Trouble::TenantRefused(1), nine, at(10, 0))], nine, at(10, 0)),
        Incident::RedriveDuringTraffic => {
            // 500 letters of this morning's early outage, their windows still open, moved back
            // at the runbook's cap while the 09:00 wave is sent.
            let mut s = staged(
                vec![window(Trouble::Redrive(vec![ReasonCode::NoSafeRetryWindow]), nine, at(9, 15))],
                nine,
                at(9, 15),
            );
            s.old_letters = (0..500).map(|_| (ReasonCode::NoSafeRetryWindow, at(8, 30))).collect();
            s
        }
        // 01:00 to 04:00 of a night of five reminders an hour; at 04:00 the provider is back and
        // the operator redrives the letters. Nothing can notice an outage no call meets: it
        // starts, for the pages, when the night's first reminder falls due (01:07).
        Incident::ProviderOutageAtNight => Staged {
            population: normal(Shape::Night, seed),
            windows: vec![
                window(Trouble::ProviderStatus(500), at(1, 0), at(4, 0)),
                window(Trouble::Redrive(vec![ReasonCode::AttemptLimit]), at(4, 0), at(4, 15)),
            ],
            old_letters: Vec::new(),
            ses: false,
            sms_quota: None,
            sms_queue: None,
            sms_urgent_lane: false,
            start: at(1, 7),
            recovery: at(4, 0),
        },
        // SMS's provider is down from 09:00 to 10:30, then the operator redrives its letters.
        Incident::SmsOutageEmailUnaffected => two_channels(staged(
            vec![
                window(Trouble::ChannelStatus("sms", 500), nine, at(10, 30)),
                window(Trouble::Redrive(vec![ReasonCode::AttemptLimit]), at(10, 30), at(10, 45)),
            ],
            nine,
            at(10, 30),
        )),
        Incident::SmsCredentialsRevoked => {
            two_channels(staged(vec![window(Trouble::ChannelStatus("sms", 401), nine, at(9, 45))], nine, at(9, 45)))
        }
        Incident::SmsQueueNotPolled => {
            two_channels(staged(vec![window(Trouble::ChannelQueueNotPolled, nine, at(9, 30))], nine, at(9, 30)))
        }
        Incident::SmsUrgentLaneNotPolled => {
            let mut s = two_channels(staged(
                vec![window(Trouble::ChannelUrgentQueueNotPolled, nine, at(9, 30))],
                nine,
                at(9, 30),
            ));
            let from = urgent_wave(&mut s.population.rows, seed ^ 0x5e6);
            for r in &mut s.population.rows[from..] {
                r.sms = true;
            }
            s
        }
        Incident::SmsOverload => {
            // The 09:00 wave as usual (one in five by SMS), and 13,500 more SMS with three-minute
            // windows: SMS's quota delivers 4,500 in them; the fleet's 125/s would carry 22,500.
            let mut s = two_channels(staged(Vec::new(), nine, at(9, 3)));
            let mut rng = SplitMix64::new(seed ^ 0x5e5);
            let from = s.population.rows.len();
            let shape = WaveShape { window: TimeDelta::minutes(3), ..STANDARD };
            wave(&mut s.population.rows, &mut rng, nine, 3 * 180 * SMS_QUOTA as usize, shape);
            for r in &mut s.population.rows[from..] {
                r.sms = true;
            }
            s
        }
    }
}
