//! The repository's own `infra/template.yaml`, read and evaluated as the drill will.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use punctual_alarms::{
    Comparison, Evaluator, MetricId, MetricStore, Options, QueryKind, Rule, Source, Stat, State, TemplateError,
    TreatMissing, load_path,
};

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:alarms";

fn template() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/template.yaml")
}

/// The defaults, and the one parameter without a default (AlarmTopicArn).
fn defaults() -> Options {
    let mut opts = Options::default();
    opts.parameters.insert("AlarmTopicArn".into(), TOPIC.into());
    opts
}

/// How many resources of `kind` the template declares, counted on its text.
fn count(kind: &str) -> usize {
    let text = std::fs::read_to_string(template()).unwrap();
    text.lines().filter(|l| l.trim() == format!("Type: {kind}")).count()
}

#[test]
fn yields_every_alarm_of_the_template() {
    // With ProviderKind ses, the SES-only alarms (Condition: IsSes) exist too. The sms queue's
    // and urgent lane's age and stall alarms exist with the sms channel or without it: turning
    // it off must leave what was released there watched (docs/deployment.md#turning-the-sms-channel-on-and-off).
    let mut opts = defaults();
    opts.parameters.insert("ProviderKind".into(), "ses".into());
    opts.parameters.insert("SmsProviderUrl".into(), "https://sms.example/v1/messages".into());
    let alarms = load_path(&template(), &opts).unwrap();
    let http = load_path(&template(), &defaults()).unwrap();
    let only = |name: &str| alarms.metric.iter().any(|a| a.name == name) && !http.metric.iter().any(|a| a.name == name);
    assert!(
        only("SesBounceRateAlarm") && only("SesComplaintRateAlarm"),
        "the SES reputation alarms exist only for ses"
    );
    let both = |name: &str| alarms.metric.iter().any(|a| a.name == name) && http.metric.iter().any(|a| a.name == name);
    assert!(
        both("SmsOldestMessageAgeAlarm")
            && both("SmsQueueStalledAlarm")
            && both("SmsUrgentOldestMessageAgeAlarm")
            && both("SmsUrgentQueueStalledAlarm"),
        "the SMS queue's and urgent lane's age and stall alarms exist with and without the sms channel"
    );
    assert_eq!(alarms.metric.len() - http.metric.len(), 2);
    assert_eq!(alarms.metric.len(), count("AWS::CloudWatch::Alarm"));
    assert_eq!(alarms.composite.len(), count("AWS::CloudWatch::CompositeAlarm"));
    assert!(alarms.metric.len() >= 20 && alarms.composite.len() >= 2);
    // A composite's components notify nobody (the composite does); every alarm that notifies
    // sends its all-clear to the same place; without a ticket topic, tickets notify nobody.
    for alarm in &alarms.metric {
        if alarm.name.starts_with("SloFastBurn")
            || alarm.name.starts_with("SloSlowBurn")
            || alarm.name.starts_with("ProviderFailing")
        {
            assert!(alarm.actions.is_empty(), "{}", alarm.name);
        }
        assert_eq!(alarm.actions, alarm.ok_actions, "{}", alarm.name);
        assert!(alarm.actions.is_empty() || alarm.actions == vec![TOPIC], "{}", alarm.name);
    }
}

#[test]
fn the_topic_parameter_has_no_default() {
    let err = load_path(&template(), &Options::default()).unwrap_err();
    assert!(matches!(&err, TemplateError::MissingParameter { parameter, .. } if parameter == "AlarmTopicArn"), "{err}");
}

#[test]
fn scheduler_not_ticking() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let a = alarms.metric_alarm("SchedulerNotTickingAlarm").unwrap();
    let Source::Metric { metric, stat, period } = &a.source else { panic!("{:?}", a.source) };
    assert_eq!(metric, &MetricId::new("AWS/Lambda", "Invocations", &[("FunctionName", "SchedulerFunction")]));
    assert_eq!((*stat, *period), (Stat::Sum, 60));
    assert_eq!((a.evaluation_periods, a.datapoints_to_alarm), (1, 1));
    assert_eq!((a.comparison, a.threshold), (Comparison::LessThanThreshold, 1.0));
    assert_eq!(a.treat_missing, TreatMissing::Breaching);
}

#[test]
fn throttle_ratio_is_metric_math_returning_ratio() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let a = alarms.metric_alarm("ThrottleRatioAlarm").unwrap();
    let Source::Math { queries } = &a.source else { panic!("{:?}", a.source) };
    assert_eq!(queries.len(), 3);
    let returned: Vec<&str> = queries.iter().filter(|q| q.return_data).map(|q| q.id.as_str()).collect();
    assert_eq!(returned, vec!["ratio"]);
    assert_eq!(queries[2].label.as_deref(), Some("429 ratio"));
    let QueryKind::Stat { metric, stat, period } = &queries[0].kind else { panic!() };
    assert_eq!(metric, &MetricId::new("punctual/drill", "Provider429", &[("Function", "sender")]));
    assert_eq!((*stat, *period), (Stat::Sum, 60));
    assert_eq!((a.evaluation_periods, a.datapoints_to_alarm, a.threshold), (3, 2, 0.01));
}

#[test]
fn fast_burn_composite_rule() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let fast = alarms.composite_alarm("SloFastBurnAlarm").unwrap();
    let is = |alarm: &str| Rule::Is { state: State::Alarm, alarm: alarm.into() };
    assert_eq!(fast.rule, Rule::And(Box::new(is("SloFastBurn1hAlarm")), Box::new(is("SloFastBurn5mAlarm"))));
    assert_eq!(fast.rule.to_string(), "ALARM(SloFastBurn1hAlarm) AND ALARM(SloFastBurn5mAlarm)");
    assert_eq!(fast.actions, vec![TOPIC]);
    let slow = alarms.composite_alarm("SloSlowBurnAlarm").unwrap();
    assert_eq!(slow.rule.to_string(), "ALARM(SloSlowBurn6hAlarm) AND ALARM(SloSlowBurn30mAlarm)");
}

#[test]
fn custom_metrics_live_in_the_stacks_namespace() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let a = alarms.metric_alarm("ReleasedWorkWaitingSignalAlarm").unwrap();
    let Source::Metric { metric, .. } = &a.source else { panic!() };
    assert_eq!(metric.namespace, "punctual/drill");
    let mut opts = defaults();
    opts.stack_name = "prod".into();
    let prod = load_path(&template(), &opts).unwrap();
    let Source::Metric { metric, .. } = &prod.metric_alarm("ReleasedWorkWaitingSignalAlarm").unwrap().source else {
        panic!()
    };
    assert_eq!(metric.namespace, "punctual/prod");
    // Every custom metric, MetricStat queries included, is in the stack's namespace.
    for alarm in &alarms.metric {
        let metrics: Vec<&MetricId> = match &alarm.source {
            Source::Metric { metric, .. } => vec![metric],
            Source::Math { queries } => queries
                .iter()
                .filter_map(|q| match &q.kind {
                    QueryKind::Stat { metric, .. } => Some(metric),
                    QueryKind::Expression(_) => None,
                })
                .collect(),
        };
        for m in metrics {
            assert!(m.namespace.starts_with("AWS/") || m.namespace == "punctual/drill", "{}: {m}", alarm.name);
        }
    }
}

#[test]
fn burn_expression_has_the_slo_target_substituted() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let burn = |alarms: &punctual_alarms::Alarms| -> String {
        let Source::Math { queries } = &alarms.metric_alarm("SloFastBurn1hAlarm").unwrap().source else { panic!() };
        let q = queries.iter().find(|q| q.return_data).unwrap();
        let QueryKind::Expression(expr) = &q.kind else { panic!() };
        expr.to_string()
    };
    assert_eq!(burn(&alarms), "(IF((judged >= 100), (errors / judged), 0) / (1 - 0.99))");
    let mut opts = defaults();
    opts.parameters.insert("SloTarget".into(), "0.999".into());
    assert!(burn(&load_path(&template(), &opts).unwrap()).contains("(1 - 0.999)"));
}

#[test]
fn scheduler_throttles_threshold_follows_the_reservation() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    assert_eq!(alarms.metric_alarm("SchedulerThrottlesAlarm").unwrap().threshold, 0.0);
    let mut opts = defaults();
    opts.parameters.insert("SchedulerReservedConcurrency".into(), "1".into());
    assert_eq!(load_path(&template(), &opts).unwrap().metric_alarm("SchedulerThrottlesAlarm").unwrap().threshold, 20.0);
}

fn put_every_minute(store: &mut MetricStore, id: &MetricId, minutes: std::ops::Range<i64>, value: f64) {
    for minute in minutes {
        store.put(id, minute * 60 + 5, value);
    }
}

/// The heartbeat: the scheduler is invoked every minute up to minute 59, then never. One
/// 1-minute period, missing data breaching, CloudWatch's lookback of 2 more periods: the alarm
/// fires when the whole 3-minute range is empty, at minute 63 — 3 minutes after the last
/// minute with an invocation closed. (With the two 5-minute periods the template had before,
/// the same rule made it 20 minutes: minute 80.) One skipped minute pages nobody.
#[test]
fn heartbeat_alarm_fires_three_minutes_after_the_scheduler_stops() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let invocations = MetricId::new("AWS/Lambda", "Invocations", &[("FunctionName", "SchedulerFunction")]);
    let mut store = MetricStore::new();
    put_every_minute(&mut store, &invocations, 0..30, 1.0);
    put_every_minute(&mut store, &invocations, 31..60, 1.0);
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut changes = Vec::new();
    for minute in 1..=120 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            if t.alarm == "SchedulerNotTickingAlarm" {
                changes.push((minute, t.to));
            }
        }
    }
    assert_eq!(changes, vec![(1, State::Ok), (63, State::Alarm)]);
}

/// The fast-burn page, over one population (the reminders judged in each window): 100 judged a
/// minute from minute 0, 20 of them breached from minute 10 (80 met). The 5-minute burn passes
/// 14.4 at minute 14 (80 of 500), the 1-hour burn at minute 36 (520 of 3600 = 14.44): the
/// composite is in ALARM at minute 36, and pages at 38 after its actions suppressor's wait.
#[test]
fn fast_burn_pages_when_both_windows_burn() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let met = MetricId::new("punctual/drill", "SloMet", &[("Function", "sender")]);
    let breached = MetricId::new("punctual/drill", "SloBreached", &[("Function", "sender")]);
    let mut store = MetricStore::new();
    put_every_minute(&mut store, &met, 0..10, 100.0);
    put_every_minute(&mut store, &met, 10..120, 80.0);
    put_every_minute(&mut store, &breached, 10..120, 20.0);
    // The scheduler ticks (else SchedulerNotTickingAlarm pages, a cause, and holds the burn).
    let ticks = MetricId::new("AWS/Lambda", "Invocations", &[("FunctionName", "SchedulerFunction")]);
    put_every_minute(&mut store, &ticks, 0..120, 1.0);
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut changes = Vec::new();
    for minute in 1..=40 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            if t.alarm.starts_with("SloFastBurn") {
                changes.push((minute, t.alarm, t.to, t.actions));
            }
        }
    }
    let none: Vec<String> = Vec::new();
    assert_eq!(
        changes,
        vec![
            (1, "SloFastBurn1hAlarm".to_string(), State::Ok, none.clone()),
            (1, "SloFastBurn5mAlarm".to_string(), State::Ok, none.clone()),
            // The composite's first state is OK; held by its actions suppressor
            // (SymptomPagingAlarm), it sends no all-clear for a page it never sent.
            (1, "SloFastBurnAlarm".to_string(), State::Ok, none.clone()),
            (14, "SloFastBurn5mAlarm".to_string(), State::Alarm, none.clone()),
            (36, "SloFastBurn1hAlarm".to_string(), State::Alarm, none.clone()),
            // In ALARM at 36, it waits 120 s for a cause or another consequence to page first;
            // none does, so it pages at 38 (an ALARM-to-ALARM transition: its actions, late).
            (36, "SloFastBurnAlarm".to_string(), State::Alarm, none),
            (38, "SloFastBurnAlarm".to_string(), State::Alarm, vec![TOPIC.to_string()]),
        ]
    );
}

/// The provider page re-pages a second outage. An outage (every call fails, 10 a minute) pages;
/// the provider recovers into a quiet night (one call every 5 minutes, each delivered: too few for
/// either window's volume floor); a second outage follows. The 15-minute window held its state
/// below its floor (`ignore`: an outage that has dead-lettered everything in flight is not over
/// while nothing is sent), so it stayed in ALARM through the night's successes and the composite
/// never left ALARM: the second outage notified nobody. Calls that all succeed now end it.
#[test]
fn provider_failing_pages_again_after_a_quiet_recovery() {
    let alarms = load_path(&template(), &defaults()).unwrap();
    let attempts = MetricId::new("punctual/drill", "ProviderAttempts", &[("Function", "sender")]);
    let failed = MetricId::new("punctual/drill", "ProviderFailures", &[("Function", "sender")]);
    let mut store = MetricStore::new();
    put_every_minute(&mut store, &attempts, 0..20, 10.0);
    put_every_minute(&mut store, &failed, 0..20, 10.0);
    for minute in (20..180).step_by(5) {
        store.put(&attempts, minute * 60 + 5, 1.0);
        store.put(&failed, minute * 60 + 5, 0.0);
    }
    put_every_minute(&mut store, &attempts, 180..200, 10.0);
    put_every_minute(&mut store, &failed, 180..200, 10.0);
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut pages = Vec::new();
    let mut cleared = Vec::new();
    for minute in 1..=200 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            if t.alarm == "ProviderFailingAlarm" {
                match t.to {
                    State::Alarm => pages.push(minute),
                    State::Ok if minute > 1 => cleared.push(minute),
                    _ => {}
                }
            }
        }
    }
    assert_eq!(pages.len(), 2, "each outage pages: pages at {pages:?}, cleared at {cleared:?}");
    assert!(pages[0] < 20 && pages[1] > 180, "pages at {pages:?}");
    assert_eq!(cleared.len(), 1, "cleared once, between them: {cleared:?}");
    assert!(cleared[0] > 20 && cleared[0] < 180, "cleared at {cleared:?}");
}
