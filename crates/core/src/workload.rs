//! The population `punctual run` imports, in one place, so the simulator can simulate exactly
//! it (`punctual simulate --workload run`) and the two reports can be compared.

use chrono::{DateTime, Timelike, Utc};

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
    let due = now.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(now);
    let tight = |i: usize| (i as f64 * tight_share).floor() != ((i + 1) as f64 * tight_share).floor();
    (0..n)
        .filter_map(|i| {
            let zone = ZONES[i % ZONES.len()];
            let tz: chrono_tz::Tz = zone.parse().ok()?;
            let local = due.with_timezone(&tz);
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
