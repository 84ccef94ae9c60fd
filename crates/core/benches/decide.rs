//! The per-message hot path without I/O: decode a body and run the decision to its first step
//! (a due message asks for a claim) and, with every answer known, to its disposition.
//! `cargo bench -p punctual-core --bench decide`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark states its inputs by unwrapping

use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use punctual_core::ReminderMessage;
use punctual_core::backoff::SplitMix64;
use punctual_core::decision::{ClaimView, Inputs, LimiterAnswer, Observed, RenewalView, SenderPolicy, decide};
use punctual_core::provider::{ProviderOutcome, RetryAfter};

fn bench(c: &mut Criterion) {
    let now = DateTime::parse_from_rfc3339("2026-12-01T14:05:00Z").unwrap().with_timezone(&Utc);
    let body =
        punctual_core::testing::message("bench-1", now - TimeDelta::minutes(5), now + TimeDelta::hours(8)).encode();
    let policy = SenderPolicy::default();
    let throttled = ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(7)) };
    c.bench_function("decode", |b| b.iter(|| ReminderMessage::decode(black_box(&body)).unwrap()));
    // One decision from freshly decoded bytes: the first step (nothing known yet), and the last
    // step after a 429 with everything known.
    let placeholder = punctual_core::MalformedMessage::NotJson { detail: String::new() };
    let first = Inputs {
        message: Err(&placeholder),
        now,
        invocation_deadline: now + TimeDelta::seconds(60),
        observed: Observed::default(),
        claim: None,
        recorded: None,
        renewal: None,
        channel: punctual_core::decision::ChannelView::Open,
        limiter: None,
        call_marked: None,
        provider: None,
    };
    let after_429 = Inputs {
        observed: Observed { queue_delay: Duration::from_secs(5), call_latency: Duration::from_millis(200) },
        claim: Some(ClaimView::Claimed { prior_attempts: 2, unsettled_call: false }),
        renewal: Some(RenewalView::Active),
        limiter: Some(LimiterAnswer::Granted),
        provider: Some(&throttled),
        ..first
    };
    for (name, known) in [("decode_and_first_step", first), ("decode_and_full_decision_after_a_429", after_429)] {
        c.bench_function(name, |b| {
            let mut rng = SplitMix64::new(1);
            b.iter(|| {
                let m = ReminderMessage::decode(black_box(&body));
                black_box(decide(&policy, &Inputs { message: m.as_ref(), ..known }, &mut rng))
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
