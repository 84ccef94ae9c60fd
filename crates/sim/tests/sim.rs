//! The simulator's scenarios against the targets of the runbook, with punctual and the naive
//! baseline side by side on the same seed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use punctual_sim::{Scenario, SimConfig, Worker, run};

fn both(scenario: Scenario, reminders: usize) -> (punctual_sim::SimReport, punctual_sim::SimReport) {
    let config = SimConfig { reminders, ..SimConfig::new(scenario) };
    let p = run(&config, Worker::Punctual);
    let n = run(&config, Worker::Naive);
    if std::env::var("PUNCTUAL_SIM_PRINT").is_ok() {
        eprintln!("{scenario:?} punctual {p:#?}\nnaive {n:#?}");
    }
    (p, n)
}

#[test]
fn normal_drains_at_the_quota_with_nothing_late_or_lost() {
    let (p, n) = both(Scenario::Normal, 12_000);
    assert_eq!(
        (p.counts.delivered, p.counts.late, p.counts.lost, p.counts.double_effects),
        (12_000, 0, 0, 0),
        "{p:#?}"
    );
    assert!(p.throughput.utilisation >= 0.98, "utilisation {}", p.throughput.utilisation);
    assert!(
        p.throughput.drain_seconds <= 1.02 * p.throughput.floor_seconds,
        "drain {} floor {}",
        p.throughput.drain_seconds,
        p.throughput.floor_seconds
    );
    assert!(
        n.throughput.provider_429 > p.throughput.provider_429,
        "the naive worker floods the provider: {} vs {}",
        n.throughput.provider_429,
        p.throughput.provider_429
    );
}

#[test]
fn crash_loses_nothing_and_delivers_nothing_twice() {
    let (p, n) = both(Scenario::Crash, 5_000);
    assert_eq!((p.counts.delivered, p.counts.double_effects, p.counts.lost), (5_000, 0, 0), "{p:#?}");
    assert!(n.counts.double_effects > 0, "without idempotency a crash after the call re-sends: {n:#?}");
}

#[test]
fn poison_is_dead_lettered_as_malformed_and_the_rest_delivered() {
    let (p, _) = both(Scenario::Poison, 5_000);
    let malformed = p.counts.dead_lettered.get("malformed").copied().unwrap_or(0);
    assert!(malformed > 0);
    assert_eq!(p.counts.delivered + malformed, 5_000, "{p:#?}");
    assert_eq!((p.counts.lost, p.healthy_dead_lettered), (0, 0));
}

#[test]
fn throttle_costs_few_retries_and_no_healthy_reminder_in_the_dlq() {
    let (p, n) = both(Scenario::Throttle, 30_000);
    assert!(p.throughput.retry_amplification <= 1.02, "amplification {}: {p:#?}", p.throughput.retry_amplification);
    assert_eq!((p.healthy_dead_lettered, p.counts.lost), (0, 0), "{p:#?}");
    assert!(n.throughput.retry_amplification > p.throughput.retry_amplification);
}

#[test]
fn overload_fires_the_alarm_before_the_first_reminder_is_late() {
    // Punctual's run only (the naive one's answer is not asked: half of the test's 30 s).
    let p = run(&SimConfig { reminders: 200_000, ..SimConfig::new(Scenario::Overload) }, Worker::Punctual);
    let alarm = p.alarm_first_fired_seconds.expect("alarm fired");
    let late = p.first_late_seconds.expect("some are late");
    assert!(alarm < late, "alarm {alarm} first late {late}");
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let config = SimConfig { reminders: 2_000, ..SimConfig::new(Scenario::Crash) };
    assert_eq!(run(&config, Worker::Punctual), run(&config, Worker::Punctual));
}

#[test]
fn mixed_deadlines_are_served_close_to_earliest_deadline_first() {
    let (p, n) = both(Scenario::Mixed, 20_000);
    assert!(p.counts.late as f64 <= 1.05 * p.edf_late as f64, "late {} vs EDF {}: {p:#?}", p.counts.late, p.edf_late);
    assert!(n.counts.late > p.counts.late, "served in SQS order the tight ones are late: {n:#?}");
    assert_eq!(p.counts.lost, 0);
}

#[test]
fn redrive_under_a_cap_delivers_the_dlq_without_making_fresh_traffic_late() {
    let (p, n) = both(Scenario::Redrive, 3_000);
    assert_eq!(
        (p.reminders, p.redriven, p.counts.delivered, p.counts.lost, p.counts.double_effects),
        (3_500, 500, 3_500, 0, 0),
        "{p:#?}"
    );
    assert_eq!(p.fresh_late, 0, "{p:#?}");
    // 500 at the cap of 10/s cannot move in less than 49.9 s.
    assert!(p.redrive_seconds >= 49.9, "moved too fast: {p:#?}");
    assert!(
        n.fresh_late > p.fresh_late && n.throughput.provider_429 > p.throughput.provider_429,
        "the bulk move floods: {n:#?}"
    );
}

/// The lanes (docs/design.md#lanes-and-pacing): deadline-near work travels on its own queue, paced in deadline order,
/// so finding it costs no deferral churn — the sender-side price of a mixed morning stays that
/// of a normal one.
#[test]
fn a_mixed_morning_costs_what_a_normal_one_does() {
    let config = SimConfig { reminders: 20_000, ..SimConfig::new(Scenario::Mixed) };
    let p = run(&config, Worker::Punctual);
    assert_eq!((p.counts.late, p.counts.lost), (0, 0), "{p:#?}");
    assert!(p.released_urgent > 0, "the tight ones go to the urgent lane: {p:#?}");
    assert!(p.sqs_requests_per_message <= 0.35, "{p:#?}");
    assert!(p.dynamodb_writes_per_message <= 2.3, "{p:#?}");
    assert!(p.limiter_writes_per_call <= 0.12, "{p:#?}");
}

/// Tight windows of 30–90 s (10 %): a random order within the urgent lane alone would leave
/// about an eighth of them late; paced in deadline order they are served within a few of EDF.
#[test]
fn deadlines_thirty_to_ninety_seconds_out_are_served_within_five_of_edf() {
    let config = SimConfig { reminders: 20_000, tight_seconds: (30, 90), ..SimConfig::new(Scenario::Mixed) };
    let p = run(&config, Worker::Punctual);
    assert!(
        p.counts.late as f64 <= 1.05 * p.edf_late as f64 + 5.0,
        "late {} vs EDF {}: {p:#?}",
        p.counts.late,
        p.edf_late
    );
    assert_eq!(p.counts.lost, 0);
}

/// SQS fair queues (the sender's `MessageGroupId = tenant_id`): one tenant's backlog does not
/// hold back the others. Without them the quiet tenants wait as long as the noisy one.
#[test]
fn fair_queues_serve_quiet_tenants_ahead_of_a_noisy_backlog() {
    let run = |fair| {
        let config = SimConfig { reminders: 5_900, fair_queues: fair, ..SimConfig::new(Scenario::Tenants) };
        run(&config, Worker::Punctual)
    };
    for fair in [true, false] {
        let r = run(fair);
        assert_eq!((r.counts.delivered, r.counts.late, r.counts.lost), (5_900, 0, 0), "fair {fair}");
        let t = &r.tenant_p99_delay_seconds;
        assert_eq!(t.len(), 10, "{t:?}");
        let noisy = t["noisy"];
        let quiet = t.iter().filter(|(k, _)| k.starts_with("quiet")).map(|(_, v)| *v).fold(0.0, f64::max);
        if fair {
            assert!(quiet < 0.3 * noisy, "fair queues: quiet p99 {quiet} s against noisy {noisy} s");
        } else {
            assert!(quiet > 0.8 * noisy, "random order: quiet p99 {quiet} s against noisy {noisy} s");
        }
    }
}

/// A staggered day whose scheduler is held by the operator's pause for its first 20 minutes:
/// the tick after the lift catches up 30 minutes of renewals at once (the whole lookahead).
/// Against the optimum that could start only at the lift (earliest-deadline-first at the
/// quota, each reminder available at `max(deliver_after, lift)`), punctual's late reminders
/// and SLO breaches stay within 5 %; the pause itself is visible (what expired during it).
#[test]
fn a_catch_up_after_a_twenty_minute_pause_stays_within_five_percent_of_edf() {
    let start = chrono::Utc::now();
    let day = punctual_core::workload::generate_spread(12_000, start, punctual_core::workload::STAGGERED_MINUTES, 0.1);
    let population = std::sync::Arc::new(punctual_sim::SimPopulation::from_renewals(&day));
    let config = |minutes: u64| SimConfig {
        reminders: population.rows.len(),
        population: Some(std::sync::Arc::clone(&population)),
        tight_share: 0.1,
        paused_for: std::time::Duration::from_secs(minutes * 60),
        ..SimConfig::new(Scenario::Normal)
    };
    let steady = run(&config(0), Worker::Punctual);
    assert_eq!((steady.counts.late, steady.edf_late, steady.counts.lost), (0, 0, 0), "{:#?}", steady.counts);
    let p = run(&config(20), Worker::Punctual);
    let (late, edf) = (p.counts.late, p.edf_late);
    // Tight renewals whose two-minute window closed during the pause are late for anyone.
    assert!(edf > 0 && late >= edf, "late {late}, EDF {edf}");
    assert!(late as f64 <= 1.05 * edf as f64, "late {late} against EDF {edf}");
    let breached = p.slo.as_ref().map_or(0, |s| s.counts.breached);
    let edf_breached = p.edf_slo_breached.unwrap_or(0);
    assert!(edf_breached > 0 && breached as f64 <= 1.05 * edf_breached as f64, "SLO {breached} against {edf_breached}");
    assert_eq!((p.counts.lost, p.counts.double_effects), (0, 0), "{:#?}", p.counts);
    assert_eq!(p.counts.delivered + p.counts.late, 12_000, "every reminder delivered or late: {:#?}", p.counts);
}

/// A low-load day: 12,000 renewals due over 40 minutes at 100/s (`--workload
/// staggered`), the lanes idle most of the time. An event source mapping with a
/// `MaximumConcurrency` keeps five pollers long-polling an idle queue (Lambda Developer Guide,
/// "Configuring scaling behavior for SQS event source mappings"), not one per instance it may
/// invoke: the day's empty receives are at most those of five pollers per lane (fewer when the
/// lane's concurrency is lower), one 20 s long poll each at a time. Counting one per worker
/// charged the day twice the idle polling AWS bills (0.41 requests per message).
#[test]
fn a_low_load_day_pays_for_the_pollers_the_mappings_keep_on_an_idle_queue() {
    let day = punctual_core::workload::generate_spread(
        12_000,
        chrono::Utc::now(),
        punctual_core::workload::STAGGERED_MINUTES,
        0.1,
    );
    let population = std::sync::Arc::new(punctual_sim::SimPopulation::from_renewals(&day));
    for (normal, urgent) in [(10, 10), (3, 3)] {
        let config = SimConfig {
            reminders: population.rows.len(),
            population: Some(std::sync::Arc::clone(&population)),
            tight_share: 0.1,
            concurrency: normal,
            urgent_concurrency: urgent,
            ..SimConfig::new(Scenario::Normal)
        };
        let p = run(&config, Worker::Punctual);
        assert_eq!((p.counts.delivered, p.counts.late, p.counts.lost), (12_000, 0, 0), "{:#?}", p.counts);
        assert_eq!(p.throughput.provider_429, 0, "{:#?}", p.throughput);
        let idle_pollers = (normal.min(5) + urgent.min(5)) as f64;
        let most = idle_pollers * (p.simulated_seconds / 20.0).ceil() / 12_000.0;
        let empty = p.sqs_requests_by_kind.empty_receives;
        assert!(empty <= most + 0.001, "{normal} + {urgent}: {empty} empty receives per message, at most {most}");
        assert!(p.sqs_requests_per_message <= 0.35, "{normal} + {urgent}: {:#?}", p.sqs_requests_by_kind);
        assert!(p.limiter_writes_per_call <= 0.15, "{normal} + {urgent}: {}", p.limiter_writes_per_call);
    }
}

/// `simulate --workload run --redrive N`: the N letters are in the DLQ at T0 (dead-lettered
/// through the ledger as the sender leaves them), and the redrive moves every one back beside
/// the fresh reminders, each delivered once; the redrive's own requests are reported per letter.
#[test]
fn a_workload_with_letters_seeds_them_and_redrives_every_one() {
    let now = chrono::Utc::now();
    let (fresh, letters) = (300, 40);
    let population = std::sync::Arc::new(
        punctual_sim::SimPopulation::from_renewals(&punctual_core::workload::generate(fresh, now, 0.1))
            .with_letters(&punctual_core::workload::letter_renewals(fresh, letters, now)),
    );
    assert_eq!((population.rows.len(), population.letters.len()), (fresh, letters));
    let config = SimConfig {
        reminders: population.rows.len(),
        population: Some(std::sync::Arc::clone(&population)),
        tight_share: 0.1,
        quota: 20.0,
        ..SimConfig::new(Scenario::Normal)
    };
    let p = run(&config, Worker::Punctual);
    assert_eq!(p.reminders, fresh + letters, "every letter is one of the report's messages");
    assert_eq!(p.redriven, letters as u64, "{p:#?}");
    assert_eq!((p.counts.delivered, p.counts.late, p.counts.lost), ((fresh + letters) as u64, 0, 0), "{:#?}", p.counts);
    assert!(p.counts.dead_lettered.is_empty() && p.counts.duplicates == 0, "{:#?}", p.counts);
    let rd = p.redrive_requests_per_message.expect("the redrive's own requests");
    // At least a receive per ten, a send back and a delete per letter; a read of each letter's record.
    assert!(rd.sqs >= 2.1 && rd.dynamodb_reads >= 1.0, "{rd:?}");
    assert!(p.sqs_requests_by_kind.redrive > 0.0, "{:#?}", p.sqs_requests_by_kind);
    // Without letters the same workload has no redrive.
    let plain = SimConfig {
        population: Some(std::sync::Arc::new(punctual_sim::SimPopulation::from_renewals(
            &punctual_core::workload::generate(fresh, now, 0.1),
        ))),
        ..config
    };
    let q = run(&plain, Worker::Punctual);
    assert_eq!((q.reminders, q.redriven, q.redrive_requests_per_message), (fresh, 0, None));
}

/// `channels`: email at the quota and SMS (one in 11) at a tenth of it from one population,
/// SMS through a 429 storm and an outage. Each channel on its own limiter against all on one:
/// everything delivered once and nothing late either way, but the shared limiter hears SMS's
/// 429s as everyone's and cuts email with it. What this does not show is the target of email
/// at ≥ 0.98 of its quota: one queue serves both channels, and a batch waiting for an SMS token
/// holds its email messages (docs/measurements.md#channels).
#[test]
fn each_channel_on_its_own_limiter_keeps_sms_trouble_off_email() {
    let config = SimConfig::new(Scenario::Channels);
    let own = run(&config, Worker::Punctual);
    let shared = run(&SimConfig { shared_limiter: true, ..config }, Worker::Punctual);
    for r in [&own, &shared] {
        assert_eq!(
            (r.counts.delivered, r.counts.late, r.counts.lost, r.counts.duplicates),
            (12_000, 0, 0, 0),
            "{r:#?}"
        );
    }
    let (email, sms) = (&own.channels["email"], &own.channels["sms"]);
    assert_eq!((email.reminders, sms.reminders), (10_910, 1_090));
    assert_eq!((email.delivered, sms.delivered, email.late, sms.late), (10_910, 1_090, 0, 0));
    assert!(sms.provider_429 > 0, "the storm reached SMS's provider: {sms:?}");
    assert!(email.provider_429 <= 5, "email's provider is not stormed: {email:?}");
    let shared_email = &shared.channels["email"];
    assert!(
        email.utilisation > 2.0 * shared_email.utilisation,
        "email on its own limiter {} against one shared {}",
        email.utilisation,
        shared_email.utilisation
    );
    assert!(
        shared.channels["sms"].provider_429 > 3 * sms.provider_429,
        "one limiter at the summed quota overruns SMS: {} against {}",
        shared.channels["sms"].provider_429,
        sms.provider_429
    );
}

/// SMS on a queue of its own (the scenario's default, two workers): email drains at its quota
/// through SMS's storm and outage, because no email batch waits for an SMS token. On one queue
/// for both, email goes at SMS's pace.
#[test]
fn sms_on_its_own_queue_keeps_email_at_its_quota_through_smss_trouble() {
    let own_queue = run(&SimConfig::new(Scenario::Channels), Worker::Punctual);
    let one_queue =
        run(&SimConfig { channel_concurrency: Some(0), ..SimConfig::new(Scenario::Channels) }, Worker::Punctual);
    for r in [&own_queue, &one_queue] {
        assert_eq!(
            (r.counts.delivered, r.counts.late, r.counts.lost, r.counts.duplicates),
            (12_000, 0, 0, 0),
            "{r:#?}"
        );
    }
    let (email, sms) = (&own_queue.channels["email"], &own_queue.channels["sms"]);
    assert!(email.utilisation >= 0.98, "email at {} of its quota on its own queue", email.utilisation);
    assert_eq!((email.late, email.provider_429, sms.late), (0, 0, 0), "{email:?} {sms:?}");
    assert!(sms.provider_429 > 0, "SMS met its storm: {sms:?}");
    let shared_queue_email = one_queue.channels["email"].utilisation;
    assert!(shared_queue_email < 0.8, "on one queue email waits for SMS: {shared_queue_email}");
    assert!(
        sms.utilisation >= 0.95 * one_queue.channels["sms"].utilisation,
        "SMS does no worse on its own queue: {} against {}",
        sms.utilisation,
        one_queue.channels["sms"].utilisation
    );
}
