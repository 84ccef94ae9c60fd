//! Local due time → UTC instant, with the DST policy of docs/design.md#the-message-contract-v1, and the delivery window.
//!
//! Policy (explicit, tested):
//! - a local time that does not exist (spring-forward gap) moves **forward** to the first
//!   instant after the gap — 02:30 on a New York spring-forward day becomes 03:00 EDT;
//! - an ambiguous local time (fall-back overlap) takes the **earlier** instant — 01:30 on a
//!   New York fall-back day is 01:30 EDT, not EST.
//!
//! Zones are IANA `Area/Location` names (case-sensitive, as in the tz database), or `UTC`;
//! offsets such as `+05:45` and abbreviations such as `EST` are refused because they carry no
//! DST rules. The tz database itself holds some such names — `EST`, `MST` and `HST` are fixed
//! offsets there, `EST5EDT`, `CET` or `GMT` are legacy rules named by abbreviation, and
//! `Etc/GMT+5` is a fixed offset with its sign inverted — and they are refused too: a New York
//! row imported as `EST` would go out an hour late all summer (S7).

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

/// Why a local due time cannot be turned into an instant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    /// The name is not an IANA zone.
    #[error("unknown time zone {0:?}: expected an IANA name such as Europe/London or America/New_York")]
    UnknownZone(String),
    /// An abbreviation or a fixed offset the tz database happens to hold (`EST`, `CET`,
    /// `Etc/GMT+5`): no daylight-saving rules of a place.
    #[error(
        "time zone {0:?} is an abbreviation or a fixed offset, without a place's daylight-saving rules: use an IANA Area/Location name such as America/New_York or Europe/Paris (or UTC)"
    )]
    NotAPlace(String),
    /// No valid local time follows within a day (only a corrupt tz database could do this).
    #[error("local time {local} in {zone} has no valid instant within 24 hours")]
    NoInstant { zone: String, local: NaiveDateTime },
}

/// Parses an IANA zone name.
pub fn parse_zone(name: &str) -> Result<Tz, ZoneError> {
    let tz = Tz::from_str(name).map_err(|_| ZoneError::UnknownZone(name.to_owned()))?;
    let utc = matches!(name, "UTC" | "Etc/UTC");
    if !utc && (!name.contains('/') || name.starts_with("Etc/")) {
        return Err(ZoneError::NotAPlace(name.to_owned()));
    }
    Ok(tz)
}

/// How the DST policy changed the requested local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstAdjustment {
    /// The local time exists exactly once.
    Exact,
    /// The local time fell in a gap; moved forward by `by` to the first instant after it.
    MovedOutOfGap { by: Duration },
    /// The local time occurred twice; the earlier instant was taken.
    AmbiguousTookEarlier,
}

/// A local due time resolved to an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedLocal {
    /// The UTC instant.
    pub instant: DateTime<Utc>,
    /// What the DST policy did.
    pub adjustment: DstAdjustment,
}

/// Resolves `date` + `time` in `zone` to a UTC instant with the DST policy above.
pub fn resolve_local(zone: Tz, date: NaiveDate, time: NaiveTime) -> Result<ResolvedLocal, ZoneError> {
    let local = date.and_time(time);
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => {
            Ok(ResolvedLocal { instant: t.with_timezone(&Utc), adjustment: DstAdjustment::Exact })
        }
        LocalResult::Ambiguous(earlier, _) => {
            Ok(ResolvedLocal { instant: earlier.with_timezone(&Utc), adjustment: DstAdjustment::AmbiguousTookEarlier })
        }
        LocalResult::None => {
            // Walk forward in minutes to the first local time that exists, then back in
            // seconds to the exact end of the gap (a handful of historical transitions are
            // not on minute boundaries).
            let no_instant = || ZoneError::NoInstant { zone: zone.name().to_owned(), local };
            let valid = |l: &NaiveDateTime| zone.from_local_datetime(l).earliest();
            let mut probe = local;
            let mut first = None;
            for _ in 0..24 * 60 {
                probe += TimeDelta::minutes(1);
                if let Some(t) = valid(&probe) {
                    first = Some((probe, t));
                    break;
                }
            }
            let (mut probe, mut instant) = first.ok_or_else(no_instant)?;
            for _ in 0..60 {
                let back = probe - TimeDelta::seconds(1);
                match valid(&back) {
                    Some(t) if back > local => (probe, instant) = (back, t),
                    _ => break,
                }
            }
            let by = (probe - local).to_std().map_err(|_| no_instant())?;
            Ok(ResolvedLocal { instant: instant.with_timezone(&Utc), adjustment: DstAdjustment::MovedOutOfGap { by } })
        }
    }
}

/// Resolves a due time given the zone by name.
pub fn resolve_local_named(zone: &str, date: NaiveDate, time: NaiveTime) -> Result<ResolvedLocal, ZoneError> {
    resolve_local(parse_zone(zone)?, date, time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }
    fn t(h: u32, m: u32) -> NaiveTime {
        NaiveTime::from_hms_opt(h, m, 0).unwrap()
    }
    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn new_york_spring_forward_gap_moves_to_the_end_of_the_gap() {
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT. 02:30 does not exist.
        let r = resolve_local_named("America/New_York", d(2026, 3, 8), t(2, 30)).unwrap();
        assert_eq!(r.instant, utc("2026-03-08T07:00:00Z")); // 03:00 EDT
        assert_eq!(r.adjustment, DstAdjustment::MovedOutOfGap { by: Duration::from_secs(30 * 60) });
        // The first second of the gap moves by the whole hour.
        let r = resolve_local_named("America/New_York", d(2026, 3, 8), t(2, 0)).unwrap();
        assert_eq!(r.instant, utc("2026-03-08T07:00:00Z"));
        assert_eq!(r.adjustment, DstAdjustment::MovedOutOfGap { by: Duration::from_secs(3600) });
        // 09:00 that day is ordinary EDT.
        let r = resolve_local_named("America/New_York", d(2026, 3, 8), t(9, 0)).unwrap();
        assert_eq!((r.instant, r.adjustment), (utc("2026-03-08T13:00:00Z"), DstAdjustment::Exact));
    }

    #[test]
    fn new_york_fall_back_overlap_takes_the_earlier_instant() {
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
        let r = resolve_local_named("America/New_York", d(2026, 11, 1), t(1, 30)).unwrap();
        assert_eq!(r.instant, utc("2026-11-01T05:30:00Z")); // 01:30 EDT (UTC-4), not 06:30
        assert_eq!(r.adjustment, DstAdjustment::AmbiguousTookEarlier);
    }

    #[test]
    fn europe_london_gmt_and_bst() {
        let winter = resolve_local_named("Europe/London", d(2026, 12, 1), t(9, 0)).unwrap();
        assert_eq!(winter.instant, utc("2026-12-01T09:00:00Z"));
        let summer = resolve_local_named("Europe/London", d(2026, 7, 1), t(9, 0)).unwrap();
        assert_eq!(summer.instant, utc("2026-07-01T08:00:00Z"));
        // 2026-03-29 01:00 GMT → 02:00 BST: 01:30 moves to 02:00 BST = 01:00 UTC.
        let gap = resolve_local_named("Europe/London", d(2026, 3, 29), t(1, 30)).unwrap();
        assert_eq!(gap.instant, utc("2026-03-29T01:00:00Z"));
        // 2026-10-25 02:00 BST → 01:00 GMT: 01:30 is 01:30 BST = 00:30 UTC.
        let overlap = resolve_local_named("Europe/London", d(2026, 10, 25), t(1, 30)).unwrap();
        assert_eq!(
            (overlap.instant, overlap.adjustment),
            (utc("2026-10-25T00:30:00Z"), DstAdjustment::AmbiguousTookEarlier)
        );
    }

    #[test]
    fn lord_howe_shifts_by_thirty_minutes() {
        // Lord Howe: +10:30 standard, +11:00 summer. 2026-10-04 02:00 → 02:30 local.
        let gap = resolve_local_named("Australia/Lord_Howe", d(2026, 10, 4), t(2, 10)).unwrap();
        assert_eq!(gap.adjustment, DstAdjustment::MovedOutOfGap { by: Duration::from_secs(20 * 60) });
        assert_eq!(gap.instant, utc("2026-10-03T15:30:00Z")); // 02:30 +11:00
        // 2026-04-05 02:00 +11:00 → 01:30 +10:30: 01:45 happens twice; earlier is +11:00.
        let overlap = resolve_local_named("Australia/Lord_Howe", d(2026, 4, 5), t(1, 45)).unwrap();
        assert_eq!(overlap.instant, utc("2026-04-04T14:45:00Z"));
        assert_eq!(overlap.adjustment, DstAdjustment::AmbiguousTookEarlier);
        let ordinary = resolve_local_named("Australia/Lord_Howe", d(2026, 7, 1), t(9, 0)).unwrap();
        assert_eq!(ordinary.instant, utc("2026-06-30T22:30:00Z"));
    }

    #[test]
    fn kathmandu_quarter_hour_offset() {
        let r = resolve_local_named("Asia/Kathmandu", d(2026, 12, 1), t(9, 0)).unwrap();
        assert_eq!((r.instant, r.adjustment), (utc("2026-12-01T03:15:00Z"), DstAdjustment::Exact));
    }

    #[test]
    fn invalid_zone_names_get_a_clear_error() {
        for bad in ["Mars/Olympus_Mons", "", "EST5", "+05:45", "america/new_york"] {
            let e = resolve_local_named(bad, d(2026, 12, 1), t(9, 0)).unwrap_err();
            assert_eq!(e, ZoneError::UnknownZone(bad.to_owned()));
            assert!(e.to_string().contains("IANA"), "{e}");
        }
    }

    /// S7: names the tz database holds that are not places (fixed offsets, abbreviations).
    #[test]
    fn abbreviations_and_fixed_offsets_from_the_tz_database_are_refused() {
        for bad in ["EST", "MST", "HST", "EST5EDT", "CET", "GMT", "Etc/GMT+5", "Etc/GMT-14"] {
            let e = resolve_local_named(bad, d(2026, 7, 1), t(9, 0)).unwrap_err();
            assert_eq!(e, ZoneError::NotAPlace(bad.to_owned()), "{bad} was accepted");
            assert!(e.to_string().contains("America/New_York"), "{e}");
        }
        for good in ["UTC", "Etc/UTC", "US/Eastern", "America/Argentina/Buenos_Aires"] {
            assert!(resolve_local_named(good, d(2026, 7, 1), t(9, 0)).is_ok(), "{good} refused");
        }
    }
}
