//! The population `punctual run` imports, in one place, so the simulator can simulate exactly
//! it (`punctual simulate --workload run`) and the two reports can be compared.

use chrono::{DateTime, TimeDelta, Timelike, Utc};

use crate::renewal::{Renewal, RenewalInput};

/// Zones the generated renewals are spread over.
pub const ZONES: [&str; 5] =
    ["America/New_York", "Europe/London", "Asia/Kathmandu", "Australia/Lord_Howe", "America/Los_Angeles"];
/// Delivery windows (minutes) the generated renewals cycle through.
pub const WINDOWS: [u32; 4] = [30, 60, 120, 240];
/// Window (minutes) of the tight renewals `run` mixes in: due this minute, so between one and
/// two minutes of slack at release — well under the 15 minutes that make work urgent.
pub const TIGHT_WINDOW: u32 = 2;

/// `n` renewals due now (local due time = this minute in one of five zones), windows cycling
/// through [`WINDOWS`], over five tenants; a `tight_share` of them, spread evenly, with the
/// [`TIGHT_WINDOW`].
pub fn generate(n: usize, now: DateTime<Utc>, tight_share: f64) -> Vec<Renewal> {
    generate_spread(n, now, 0, tight_share)
}

/// Minutes a staggered day's renewals are spread over ([`generate_spread`]).
pub const STAGGERED_MINUTES: u32 = 40;

/// As [`generate`], but the `i`-th renewal is due `i * span_minutes / n` whole minutes after
/// `start`'s minute: arrivals spread evenly over `span_minutes` (0: all due at once), the
/// shape of a day whose customers are due at different times rather than in one burst.
pub fn generate_spread(n: usize, start: DateTime<Utc>, span_minutes: u32, tight_share: f64) -> Vec<Renewal> {
    let first = start.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(start);
    let tight = |i: usize| (i as f64 * tight_share).floor() != ((i + 1) as f64 * tight_share).floor();
    (0..n)
        .filter_map(|i| {
            let zone = ZONES[i % ZONES.len()];
            let tz: chrono_tz::Tz = zone.parse().ok()?;
            let offset = (i as u64 * u64::from(span_minutes)) / (n as u64).max(1);
            let local = (first + TimeDelta::minutes(i64::try_from(offset).ok()?)).with_timezone(&tz);
            Renewal::validate(&RenewalInput {
                tenant_id: format!("tenant-{}", i % 5),
                renewal_id: format!("run-{i:06}"),
                recipient_ref: format!("cust-{i}"),
                channel: if i % 3 == 0 { "sms".into() } else { "email".into() },
                zone: zone.into(),
                local_due_date: local.format("%Y-%m-%d").to_string(),
                local_send_time: local.format("%H:%M").to_string(),
                window_minutes: if tight(i) { TIGHT_WINDOW } else { WINDOWS[i % WINDOWS.len()] }.to_string(),
                ..RenewalInput::default()
            })
            .ok()
        })
        .collect()
}
