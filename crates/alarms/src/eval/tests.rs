#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::store::{MetricId, Stat};
use crate::template::{Comparison, CompositeAlarm, MetricAlarm};
use crate::{Rule, load};

/// `0` non-breaching, `X` breaching, `-` missing; oldest first, as the tables write them.
fn points(row: &str) -> Vec<Point> {
    row.split_whitespace()
        .map(|p| match p {
            "0" => Point::NotBreaching,
            "X" => Point::Breaching,
            "-" => Point::Missing,
            other => panic!("bad point {other}"),
        })
        .collect()
}

/// A documented outcome: a state, or "Retain current state".
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Ok,
    Alarm,
    Insufficient,
    Retain,
}

impl Want {
    fn outcome(self) -> Outcome {
        match self {
            Want::Ok => Outcome::To(State::Ok),
            Want::Alarm => Outcome::To(State::Alarm),
            Want::Insufficient => Outcome::To(State::InsufficientData),
            Want::Retain => Outcome::Retain,
        }
    }
}

const TREATMENTS: [TreatMissing; 4] =
    [TreatMissing::Missing, TreatMissing::Ignore, TreatMissing::Breaching, TreatMissing::NotBreaching];

/// "Configuring how CloudWatch alarms treat missing data", first table: Datapoints to Alarm and
/// Evaluation Periods both 3, CloudWatch retrieves the 5 most recent datapoints. Columns:
/// MISSING, IGNORE, BREACHING, NOT BREACHING. (User guide, "How alarm state is evaluated when
/// data is missing"; awsdocs/amazon-cloudwatch-user-guide doc_source/AlarmThatSendsEmail.md.)
const TABLE_3_OF_3: [(&str, [Want; 4]); 6] = [
    ("0 - X - X", [Want::Ok, Want::Ok, Want::Ok, Want::Ok]),
    ("0 - - - -", [Want::Ok, Want::Ok, Want::Ok, Want::Ok]),
    ("- - - - -", [Want::Insufficient, Want::Retain, Want::Alarm, Want::Ok]),
    ("0 X X - X", [Want::Alarm, Want::Alarm, Want::Alarm, Want::Alarm]),
    ("- - - - X", [Want::Insufficient, Want::Retain, Want::Alarm, Want::Ok]),
    ("X - - - -", [Want::Alarm, Want::Retain, Want::Alarm, Want::Ok]),
];

/// The same page, second table: Period 5 minutes, Datapoints to Alarm 2, Evaluation Periods 3
/// (a 2 out of 3 alarm).
const TABLE_2_OF_3: [(&str, [Want; 4]); 5] = [
    ("0 - X - X", [Want::Alarm, Want::Alarm, Want::Alarm, Want::Alarm]),
    ("0 0 X 0 X", [Want::Alarm, Want::Alarm, Want::Alarm, Want::Alarm]),
    ("0 - X - -", [Want::Ok, Want::Ok, Want::Alarm, Want::Ok]),
    ("- - - - 0", [Want::Ok, Want::Ok, Want::Alarm, Want::Ok]),
    ("- - - - X", [Want::Insufficient, Want::Retain, Want::Alarm, Want::Ok]),
];

fn check_table(table: &[(&str, [Want; 4])], n: u32, m: u32) {
    for (row, wants) in table {
        for (treat, want) in TREATMENTS.iter().zip(wants) {
            assert_eq!(decide(&points(row), n, m, *treat), want.outcome(), "{m} of {n}, row {row}, {treat:?}");
        }
    }
}

#[test]
fn missing_data_table_3_of_3() {
    check_table(&TABLE_3_OF_3, 3, 3);
}

#[test]
fn missing_data_table_2_of_3() {
    check_table(&TABLE_2_OF_3, 3, 2);
}

/// The page's explanation of the first table's second row: "The next time this alarm is
/// evaluated, if the data is still missing it will go to ALARM, as that non-breaching data point
/// will no longer be among the 5 most recent data points retrieved."
#[test]
fn missing_data_second_row_next_evaluation() {
    assert_eq!(decide(&points("0 - - - -"), 3, 3, TreatMissing::Breaching), Outcome::To(State::Ok));
    assert_eq!(decide(&points("- - - - -"), 3, 3, TreatMissing::Breaching), Outcome::To(State::Alarm));
}

/// "Using Amazon CloudWatch alarms", Evaluating an alarm: "The breaching data points do not
/// have to be consecutive, they just must all be within the last number of data points equal to
/// Evaluation Period"; with 3 of 3, a single non-breaching period among the last three is OK.
#[test]
fn m_out_of_n_counts_the_most_recent_n() {
    let cases = [
        // (row, N, M, want)
        ("0 0 X X X", 3, 3, State::Alarm),
        ("0 X X X 0", 3, 3, State::Ok),
        ("X X X 0 0", 3, 3, State::Ok),
        ("X 0 X 0 X", 5, 3, State::Alarm),
        ("X 0 0 X X 0", 5, 3, State::Ok),
        ("0 0 X 0 X", 5, 2, State::Alarm),
        ("X X X X 0", 5, 4, State::Alarm),
        ("X X X 0 0", 5, 4, State::Ok),
        ("0 0 0 0 X", 1, 1, State::Alarm),
        ("0 0 0 X 0", 1, 1, State::Ok),
    ];
    for (row, n, m, want) in cases {
        for treat in TREATMENTS {
            assert_eq!(decide(&points(row), n, m, treat), Outcome::To(want), "{m} of {n}, {row}, {treat:?}");
        }
    }
}

/// "…the number of existing data points retrieved is equal to or more than the alarm's
/// Evaluation Periods, CloudWatch evaluates the alarm state based on the most recent existing
/// data points": gaps are skipped, not filled.
#[test]
fn enough_real_datapoints_skip_the_gaps() {
    for treat in TREATMENTS {
        assert_eq!(decide(&points("X - X - X"), 3, 3, treat), Outcome::To(State::Alarm), "{treat:?}");
        assert_eq!(decide(&points("0 X - X -"), 2, 2, treat), Outcome::To(State::Alarm), "{treat:?}");
    }
}

/// The Knowledge Center's single-breach rule with `missing`: ALARM when the oldest breaching
/// point is at least Datapoints-to-Alarm periods old and nothing newer is non-breaching.
#[test]
fn single_breaching_point_ages_into_alarm() {
    let cases =
        [("- - - - X", State::InsufficientData), ("- - - X -", State::InsufficientData), ("- - X - -", State::Alarm)];
    for (row, want) in cases {
        assert_eq!(decide(&points(row), 3, 3, TreatMissing::Missing), Outcome::To(want), "{row}");
    }
}

// ------------------------------------------------------------------------------------------
// Through the evaluator and a store
// ------------------------------------------------------------------------------------------

fn metric() -> MetricId {
    MetricId::new("punctual/drill", "X", &[("Function", "sender")])
}

fn alarm(name: &str, n: u32, m: u32, period: u32, treat: TreatMissing) -> MetricAlarm {
    MetricAlarm {
        logical_id: name.to_string(),
        name: name.to_string(),
        description: String::new(),
        actions_enabled: true,
        actions: vec!["arn:aws:sns:us-east-1:123456789012:page".into()],
        ok_actions: vec!["arn:aws:sns:us-east-1:123456789012:ok".into()],
        insufficient_data_actions: Vec::new(),
        evaluation_periods: n,
        datapoints_to_alarm: m,
        threshold: 1.0,
        comparison: Comparison::GreaterThanOrEqualToThreshold,
        treat_missing: treat,
        source: Source::Metric { metric: metric(), stat: Stat::Sum, period },
    }
}

/// Every row of the first table, as samples in a store evaluated with a 5-minute period: the
/// evaluation range is the 5 periods before `now` (N + 2 for N = 3).
#[test]
fn missing_data_table_through_the_store() {
    let now = 10_000 * 60;
    for (row, wants) in TABLE_3_OF_3 {
        for (treat, want) in TREATMENTS.iter().zip(wants) {
            let mut store = MetricStore::new();
            for (i, p) in points(row).iter().enumerate() {
                // Datapoint i covers [now - (5 - i)·300, now - (4 - i)·300).
                let at = now - (5 - i as i64) * 300 + 17;
                match p {
                    Point::Breaching => store.put_many(&metric(), at, &[0.5, 0.5]),
                    Point::NotBreaching => store.put(&metric(), at, 0.0),
                    Point::Missing => {}
                }
            }
            let alarms = Alarms { metric: vec![alarm("A", 3, 3, 300, *treat)], composite: Vec::new() };
            let mut evaluator = Evaluator::new(&alarms).unwrap();
            evaluator.evaluate(now, &store).unwrap();
            let want = match want {
                Want::Ok => State::Ok,
                Want::Alarm => State::Alarm,
                Want::Insufficient | Want::Retain => State::InsufficientData,
            };
            assert_eq!(evaluator.state("A"), Some(want), "row {row}, {treat:?}");
        }
    }
}

/// End to end: Sum of X ≥ 1 in 3 of 5 one-minute periods, notBreaching, evaluated every
/// minute. X is written every minute 0–4 (0), then 1 at minutes 5, 7 and 9, 0 at minute 8,
/// nothing from minute 10 on. Minute 10's evaluation sees minutes 3–9; its last 5 real
/// datapoints (4, 5, 7, 8, 9) hold 3 breaching: ALARM. At minutes 11 and 12 fewer than 5 real
/// datapoints remain in the 7-minute range, so missing ones are filled with not-breaching and
/// the 3 real breaching ones still count ("any real data points in the evaluation range, no
/// matter when they were reported, are included"); at minute 13 minute 5 has left the range:
/// OK.
#[test]
fn three_of_five_not_breaching_minute_by_minute() {
    let mut store = MetricStore::new();
    for minute in 0..5 {
        store.put(&metric(), minute * 60 + 10, 0.0);
    }
    store.put_many(&metric(), 5 * 60 + 5, &[0.25, 0.75]);
    store.put(&metric(), 7 * 60 + 59, 1.0);
    store.put(&metric(), 8 * 60, 0.0);
    store.put(&metric(), 9 * 60 + 30, 3.0);

    let alarms =
        Alarms { metric: vec![alarm("ThreeOfFive", 5, 3, 60, TreatMissing::NotBreaching)], composite: Vec::new() };
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut changes = Vec::new();
    for minute in 1..=30 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            changes.push((minute, t.from, t.to, t.actions));
        }
    }
    assert_eq!(
        changes,
        vec![
            (1, State::InsufficientData, State::Ok, vec!["arn:aws:sns:us-east-1:123456789012:ok".to_string()]),
            (10, State::Ok, State::Alarm, vec!["arn:aws:sns:us-east-1:123456789012:page".to_string()]),
            (13, State::Alarm, State::Ok, vec!["arn:aws:sns:us-east-1:123456789012:ok".to_string()]),
        ]
    );
}

/// `breaching` on a metric that stops: a 1-period 5-minute alarm (OldestDueUndeliveredAlarm's
/// shape) fires only once its whole evaluation range (N + 2 = 3 periods) is empty.
#[test]
fn breaching_alarm_fires_when_the_range_is_empty() {
    let mut store = MetricStore::new();
    for minute in 0..20 {
        store.put(&metric(), minute * 60, 0.0);
    }
    let alarms = Alarms { metric: vec![alarm("Stops", 1, 1, 300, TreatMissing::Breaching)], composite: Vec::new() };
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut alarm_at = None;
    for minute in 1..=60 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            if t.to == State::Alarm {
                alarm_at = Some(minute);
            }
        }
    }
    // Last sample at minute 19: the range [now - 15 min, now) is empty from minute 35.
    assert_eq!(alarm_at, Some(35));
    assert_eq!(evaluator.state("Stops"), Some(State::Alarm));
    let mut short = Evaluator::new(&alarms).unwrap().with_extra_datapoints(0);
    let mut short_at = None;
    for minute in 1..=60 {
        if short.evaluate(minute * 60, &store).unwrap().iter().any(|t| t.to == State::Alarm) {
            short_at.get_or_insert(minute);
        }
    }
    assert_eq!(short_at, Some(25));
}

#[test]
fn ignore_keeps_the_state_and_actions_follow_the_new_state() {
    let mut store = MetricStore::new();
    store.put(&metric(), 30, 5.0);
    let mut a = alarm("Ign", 1, 1, 60, TreatMissing::Ignore);
    a.insufficient_data_actions = vec!["insufficient".into()];
    let alarms = Alarms { metric: vec![a], composite: Vec::new() };
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let t = evaluator.evaluate(60, &store).unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].from, t[0].to), (State::InsufficientData, State::Alarm));
    assert_eq!(t[0].datapoints, vec![None, None, Some(5.0)]);
    // Nothing after minute 0: the datapoint stays in range two more minutes, then all is missing.
    for minute in 2..=10 {
        assert!(evaluator.evaluate(minute * 60, &store).unwrap().is_empty(), "minute {minute}");
    }
    assert_eq!(evaluator.state("Ign"), Some(State::Alarm));
    assert_eq!(evaluator.state("nope"), None);
}

#[test]
fn disabled_actions_are_not_carried() {
    let mut store = MetricStore::new();
    store.put(&metric(), 30, 5.0);
    let mut a = alarm("Quiet", 1, 1, 60, TreatMissing::Missing);
    a.actions_enabled = false;
    let mut evaluator = Evaluator::new(&Alarms { metric: vec![a], composite: Vec::new() }).unwrap();
    let t = evaluator.evaluate(60, &store).unwrap();
    assert_eq!(t[0].to, State::Alarm);
    assert!(t[0].actions.is_empty());
}

/// Composites are evaluated after the metric alarms of the same instant, over their new
/// states, and a composite reading a composite sees its new state too.
#[test]
fn composites_follow_the_metric_alarms_of_the_same_instant() {
    let mut store = MetricStore::new();
    let other = MetricId::new("punctual/drill", "Y", &[]);
    store.put(&metric(), 30, 5.0);
    let mut b = alarm("B", 1, 1, 60, TreatMissing::NotBreaching);
    b.source = Source::Metric { metric: other.clone(), stat: Stat::Sum, period: 60 };
    let both = CompositeAlarm {
        logical_id: "Both".into(),
        name: "Both".into(),
        description: String::new(),
        rule: crate::rule::parse("ALARM(A) AND ALARM(B)").unwrap(),
        actions_enabled: true,
        actions: vec!["page".into()],
        ok_actions: Vec::new(),
        insufficient_data_actions: Vec::new(),
        suppressor: None,
    };
    let outer = CompositeAlarm {
        logical_id: "Outer".into(),
        name: "Outer".into(),
        rule: crate::rule::parse("NOT OK(Both)").unwrap(),
        actions: vec!["outer".into()],
        ..both.clone()
    };
    // Outer is listed first: the order follows the rules, not the template.
    let alarms =
        Alarms { metric: vec![alarm("A", 1, 1, 60, TreatMissing::NotBreaching), b], composite: vec![outer, both] };
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let t = evaluator.evaluate(60, &store).unwrap();
    let summary: Vec<(&str, bool, State)> = t.iter().map(|t| (t.alarm.as_str(), t.composite, t.to)).collect();
    assert_eq!(
        summary,
        vec![
            ("A", false, State::Alarm),
            ("B", false, State::Ok),
            ("Both", true, State::Ok),
            ("Outer", true, State::Ok)
        ]
    );
    store.put(&other, 90, 2.0);
    let t = evaluator.evaluate(120, &store).unwrap();
    let summary: Vec<(&str, State, Vec<String>)> =
        t.iter().map(|t| (t.alarm.as_str(), t.to, t.actions.clone())).collect();
    assert_eq!(
        summary,
        vec![
            ("B", State::Alarm, vec!["arn:aws:sns:us-east-1:123456789012:page".to_string()]),
            ("Both", State::Alarm, vec!["page".to_string()]),
            ("Outer", State::Alarm, vec!["outer".to_string()]),
        ]
    );
    let cyclic = Alarms {
        metric: Vec::new(),
        composite: vec![CompositeAlarm {
            rule: Rule::Not(Box::new(crate::rule::parse("OK(Both)").unwrap())),
            ..alarms.composite[1].clone()
        }],
    };
    assert!(matches!(Evaluator::new(&cyclic), Err(EvalError::Alarms(TemplateError::RuleCycle { .. }))));
}

/// A metric math alarm: each MetricStat fetched over the same datapoints, the expression
/// evaluated per timestamp, the returned series compared with the threshold.
#[test]
fn metric_math_alarm_from_a_template() {
    let template = r#"
Resources:
  Ratio:
    Type: AWS::CloudWatch::Alarm
    Properties:
      EvaluationPeriods: 3
      DatapointsToAlarm: 2
      Threshold: 0.01
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching
      Metrics:
        - Id: throttled
          ReturnData: false
          MetricStat:
            Metric: {Namespace: punctual/drill, MetricName: Provider429, Dimensions: [{Name: Function, Value: sender}]}
            Period: 60
            Stat: Sum
        - Id: attempts
          ReturnData: false
          MetricStat:
            Metric: {Namespace: punctual/drill, MetricName: ProviderAttempts, Dimensions: [{Name: Function, Value: sender}]}
            Period: 60
            Stat: Sum
        - Id: ratio
          Expression: "IF(FILL(attempts, 0) > 0, FILL(throttled, 0) / FILL(attempts, 0), 0)"
"#;
    let alarms = load(template, &crate::Options::default()).unwrap();
    let throttled = MetricId::new("punctual/drill", "Provider429", &[("Function", "sender")]);
    let attempts = MetricId::new("punctual/drill", "ProviderAttempts", &[("Function", "sender")]);
    let run = |throttled_minutes: &[(i64, f64)]| {
        let mut store = MetricStore::new();
        for minute in 0..10 {
            store.put(&attempts, minute * 60, 100.0);
        }
        for (minute, count) in throttled_minutes {
            store.put(&throttled, minute * 60, *count);
        }
        let mut evaluator = Evaluator::new(&alarms).unwrap();
        let mut changes = Vec::new();
        for minute in 1..=15 {
            for t in evaluator.evaluate(minute * 60, &store).unwrap() {
                changes.push((minute, t.to));
            }
        }
        changes
    };
    // 5 % at minute 3, 1 % (not above 0.01) at 5, 2 % at 6. FILL makes every datapoint real,
    // so the last 3 decide: minutes 3 and 6 never share a 3-minute window.
    assert_eq!(run(&[(3, 5.0), (5, 1.0), (6, 2.0)]), vec![(1, State::Ok)]);
    // A third breach at minute 7: minutes 6 and 7 are 2 of the 3 before minute 8 and 9; at 10
    // only minute 7 is left.
    assert_eq!(
        run(&[(3, 5.0), (5, 1.0), (6, 2.0), (7, 3.0)]),
        vec![(1, State::Ok), (8, State::Alarm), (10, State::Ok)]
    );
}

/// An actions suppressor, read from a template: `Effect` pages only when `Cause` is not already
/// paging. By the evaluations' minutes: Cause is in ALARM 2–8 and Effect from 3 (suppressed);
/// Cause clears at 9, and the 120 s extension ends at 11 with Effect still in ALARM (paged late,
/// once; its all-clear at 13). Effect alone from 21: the 120 s wait ends at 23 with no Cause
/// (paged). Effect at 31, Cause at 32 within the wait (suppressed); both clear at 36: no page,
/// so no all-clear either (nor for the first OK, at 1).
#[test]
fn an_actions_suppressor_holds_a_consequence_while_its_cause_pages() {
    let template = r#"
Resources:
  Cause:
    Type: AWS::CloudWatch::Alarm
    Properties: {Namespace: n, MetricName: C, Statistic: Sum, Period: 60, EvaluationPeriods: 1, Threshold: 1,
      ComparisonOperator: GreaterThanOrEqualToThreshold, TreatMissingData: notBreaching, AlarmActions: [page]}
  Effect:
    Type: AWS::CloudWatch::Alarm
    Properties: {Namespace: n, MetricName: E, Statistic: Sum, Period: 60, EvaluationPeriods: 1, Threshold: 1,
      ComparisonOperator: GreaterThanOrEqualToThreshold, TreatMissingData: notBreaching}
  EffectPage:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmRule: ALARM(Effect)
      AlarmActions: [page]
      OKActions: [ok]
      ActionsSuppressor: arn:aws:cloudwatch:us-east-1:123456789012:alarm:Cause
      ActionsSuppressorWaitPeriod: 120
      ActionsSuppressorExtensionPeriod: 120
"#;
    let alarms = load(template, &crate::Options::default()).unwrap();
    assert_eq!(alarms.composite[0].suppressor.as_ref().map(|s| s.alarm.as_str()), Some("Cause"));
    let (c, e) = (MetricId::new("n", "C", &[]), MetricId::new("n", "E", &[]));
    let mut store = MetricStore::new();
    for (id, minutes) in
        [(&c, vec![1, 2, 3, 4, 5, 31, 32]), (&e, vec![2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22, 23, 24, 30, 31, 32])]
    {
        for m in minutes {
            store.put(id, m * 60 + 5, 1.0);
        }
    }
    let mut evaluator = Evaluator::new(&alarms).unwrap();
    let mut seen = Vec::new();
    for minute in 1..=40 {
        for t in evaluator.evaluate(minute * 60, &store).unwrap() {
            if t.alarm == "EffectPage" && !t.actions.is_empty() {
                seen.push((minute, t.from, t.to, t.actions[0].clone()));
            }
        }
    }
    let (a, ok) = (State::Alarm, State::Ok);
    assert_eq!(
        seen,
        vec![
            (11, a, a, "page".to_string()),
            (13, a, ok, "ok".to_string()),
            (23, a, a, "page".to_string()),
            (28, a, ok, "ok".to_string()),
        ],
        "paged late after its cause cleared (11), after a wait with no cause (23), never while its cause paged (31–36)"
    );
    let missing = template.replace("      ActionsSuppressorExtensionPeriod: 120\n", "");
    assert!(matches!(
        load(&missing, &crate::Options::default()),
        Err(TemplateError::MissingProperty { property: "ActionsSuppressorExtensionPeriod", .. })
    ));
    let unknown = template.replace("alarm:Cause", "alarm:Nothing");
    assert!(load(&unknown, &crate::Options::default()).is_err(), "a suppressor names an alarm of the template");
}
