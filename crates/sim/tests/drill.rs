//! `punctual drill` asked the operator's question: when this incident starts, which alarm pages,
//! and when? These tests hold the shipped template to it for a few incidents, and show that the
//! drill notices when an alarm goes missing (a scratch copy of the template without it), and
//! refuses a template it cannot evaluate instead of skipping the alarm.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::path::{Path, PathBuf};

use punctual_sim::drill::catalogue::Incident;
use punctual_sim::drill::{DrillError, DrillOptions, DrillReport, IncidentReport, drill};

fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/template.yaml")
}

fn run(path: &Path, incidents: &[Incident], mornings: usize) -> Result<DrillReport, DrillError> {
    let opts = DrillOptions { incidents: incidents.to_vec(), mornings, seed: 1, parameters: Default::default() };
    drill(path, &opts, |_| {})
}

fn incident<'a>(r: &'a DrillReport, name: &str) -> &'a IncidentReport {
    r.incidents.iter().find(|i| i.name == name).unwrap()
}

/// The template without the resource `logical_id` (its block up to the next resource).
fn without(logical_id: &str) -> PathBuf {
    let text = std::fs::read_to_string(template()).unwrap();
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line == format!("  {logical_id}:") {
            skipping = true;
            continue;
        }
        let starts_resource = line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':');
        if skipping && (starts_resource || !line.starts_with(' ') && !line.is_empty()) {
            skipping = false;
        }
        // A composite's rule that names it one line a part (CausePagingAlarm's) loses that line.
        let names_it = line.trim_start().starts_with("- !") && line.contains(&format!("\"${{{logical_id}}}\")"));
        if !skipping && !names_it {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(!out.contains(&format!("  {logical_id}:\n")), "{logical_id} removed");
    let dir = std::env::temp_dir().join(format!("punctual-drill-{}-{logical_id}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("template.yaml");
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn the_shipped_alarms_page_a_fleet_pause_and_a_silent_scheduler_in_time_and_a_normal_day_never() {
    let r = run(&template(), &[Incident::CredentialsRevoked, Incident::SchedulerNotInvoked], 2).unwrap();
    let fleet = incident(&r, "credentials_revoked");
    assert_eq!(fleet.paged_by.as_deref(), Some("FleetPausedAlarm"), "{fleet:#?}");
    assert!(fleet.page_after_seconds.unwrap() <= 300.0, "{fleet:#?}");
    assert_eq!(fleet.runbook.as_deref(), Some("docs/operations.md#fleet-paused"));
    assert!(fleet.cleared_after_seconds.unwrap() <= 900.0, "{fleet:#?}");
    let ticks = incident(&r, "scheduler_not_invoked");
    assert_eq!(ticks.paged_by.as_deref(), Some("SchedulerNotTickingAlarm"), "{ticks:#?}");
    assert!(ticks.page_after_seconds.unwrap() <= 300.0, "{ticks:#?}");
    assert_eq!((r.normal.mornings, r.normal.pages), (2, 0), "{:#?}", r.normal);
    assert!(r.ok, "{r:#?}");
}

/// Delete the alarm an incident depends on: the drill names the incident that goes silent (or
/// pages too late), and the report is not ok.
#[test]
fn without_its_alarm_an_incident_is_reported_silent_or_late() {
    for (alarm, incident_) in [
        ("FleetPausedAlarm", Incident::CredentialsRevoked),
        ("NormalLaneStalledAlarm", Incident::LaneNotPolled),
        ("UrgentLaneStalledAlarm", Incident::UrgentLaneNotPolled),
        ("SenderErrorsAlarm", Incident::SenderCrashLoop),
        ("SenderInfrastructureFailuresAlarm", Incident::LedgerRefusing),
        ("DlqNewLettersAlarm", Incident::PoisonBurst),
    ] {
        let r = run(&without(alarm), &[incident_], 0).unwrap();
        let i = &r.incidents[0];
        assert!(!i.ok && !r.ok, "without {alarm}, {} still passes: {i:#?}", incident_.name());
        assert_ne!(i.paged_by.as_deref(), Some(alarm));
        assert!(
            i.why.as_deref().unwrap().contains("paged after") || i.why.as_deref().unwrap().contains("nothing paged"),
            "{i:#?}"
        );
    }
}

/// Two channels, SMS in trouble (`make test`'s drill runs both incidents against the shipped
/// template, where they page in time and email stays whole; here, what each depends on). Point
/// the channel components at a channel nobody declares (`SecondChannel=push`) and SMS's outage
/// is hidden by email's successes in the fleet's ratio: every page clears while SMS is still
/// down. Delete `ChannelTrippedAlarm` and a 401 on SMS pages only once its held reminders pass
/// the SLO.
#[test]
fn one_channels_trouble_goes_unpaged_without_its_own_signals() {
    let opts = DrillOptions {
        incidents: vec![Incident::SmsOutageEmailUnaffected],
        mornings: 0,
        seed: 1,
        parameters: [("SecondChannel".to_owned(), "push".to_owned())].into(),
    };
    let hidden = drill(&template(), &opts, |_| {}).unwrap();
    let i = &hidden.incidents[0];
    assert!(!i.ok && i.why.as_deref().unwrap().contains("false all-clear"), "{i:#?}");

    let late = run(&without("ChannelTrippedAlarm"), &[Incident::SmsCredentialsRevoked], 0).unwrap();
    let i = &late.incidents[0];
    assert!(!i.ok && i.why.as_deref().unwrap().contains("paged after"), "{i:#?}");
}

/// A redrive while the morning runs must page nobody: the DLQ shrinks, its letters are held
/// invisible by the redrive, and the redriven copies' old deliver_after is not "waiting".
#[test]
fn an_operators_redrive_during_traffic_pages_nobody() {
    let r = run(&template(), &[Incident::RedriveDuringTraffic], 0).unwrap();
    let i = &r.incidents[0];
    assert!(i.redriven.unwrap() >= 500, "the redrive moved the letters: {i:#?}");
    assert!(i.ok && i.paged_by.is_none(), "{i:#?}");
}

/// A provider that halves its quota unannounced: the limiter keeps the four-hour windows
/// (nothing misses, nobody is paged), and `ThrottleRatioAlarm` opens a ticket in the time a
/// page has. Without that alarm the cut goes unheard: the drill names it.
#[test]
fn a_quiet_quota_cut_opens_a_ticket_and_pages_nobody() {
    let r = run(&template(), &[Incident::ProviderQuotaCut], 0).unwrap();
    let i = &r.incidents[0];
    assert!(i.ok && i.paged_by.is_none(), "{i:#?}");
    assert_eq!(i.missed, 0, "{i:#?}");
    assert!(i.tickets.iter().any(|t| t == "ThrottleRatioAlarm"), "{i:#?}");
    assert!(i.ticket_after_seconds.unwrap() <= 300.0, "{i:#?}");

    let unheard = run(&without("ThrottleRatioAlarm"), &[Incident::ProviderQuotaCut], 0).unwrap();
    let i = &unheard.incidents[0];
    assert!(!i.ok && i.why.as_deref().unwrap().contains("opened no ticket"), "{i:#?}");
}

/// A template the drill cannot evaluate is an error naming what it cannot do, never a skip.
#[test]
fn an_alarm_it_cannot_evaluate_is_an_error_naming_it() {
    let original = std::fs::read_to_string(template()).unwrap();
    let text = original.replacen(
        "Expression: \"IF(visible > 0 AND FILL(received, 0) == 0, 1, 0)\"",
        "Expression: \"ANOMALY_DETECTION_BAND(visible, 2)\"",
        1,
    );
    assert_ne!(text, original, "the template has the expression this test replaces");
    let dir = std::env::temp_dir().join(format!("punctual-drill-{}-band", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("template.yaml");
    std::fs::write(&path, text).unwrap();
    let e = run(&path, &[Incident::SchedulerNotInvoked], 0).unwrap_err().to_string();
    assert!(e.contains("ANOMALY_DETECTION_BAND"), "{e}");
    assert!(e.contains("NormalLaneStalledAlarm"), "{e}");
    let missing = run(Path::new("/nonexistent/template.yaml"), &[], 0).unwrap_err();
    assert!(matches!(missing, DrillError::Template { .. }), "{missing}");
}
