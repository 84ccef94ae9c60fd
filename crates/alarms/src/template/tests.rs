#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::math::MathError;
use crate::rule::State;

fn opts(params: &[(&str, &str)]) -> Options {
    Options {
        parameters: params.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        ..Options::default()
    }
}

/// A template with one metric alarm whose properties are `props` (YAML, indented 6).
fn one_alarm(extra_sections: &str, props: &str) -> String {
    format!(
        "{extra_sections}\nResources:\n  Topic:\n    Type: AWS::SNS::Topic\n  Queue:\n    Type: AWS::SQS::Queue\n  A:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n{props}"
    )
}

const BASE: &str = "      Namespace: ns
      MetricName: M
      Statistic: Sum
      Period: 60
      EvaluationPeriods: 3
      Threshold: 1
      ComparisonOperator: GreaterThanThreshold
";

#[test]
fn defaults_of_a_plain_alarm() {
    let alarms = load(&one_alarm("", BASE), &Options::default()).unwrap();
    let a = &alarms.metric[0];
    assert_eq!(a.name, "A");
    assert_eq!(a.logical_id, "A");
    assert_eq!(a.datapoints_to_alarm, 3, "DatapointsToAlarm defaults to EvaluationPeriods");
    assert_eq!(a.treat_missing, TreatMissing::Missing, "TreatMissingData defaults to missing");
    assert!(a.actions_enabled);
    assert!(a.actions.is_empty() && a.description.is_empty());
    assert_eq!(a.source, Source::Metric { metric: MetricId::new("ns", "M", &[]), stat: Stat::Sum, period: 60 });
    assert!(alarms.composite.is_empty());
}

/// Long-form intrinsics, in a JSON template: Ref, Fn::Sub (both forms, with `${!Literal}`),
/// Fn::GetAtt (list form), Fn::If, Fn::Equals, Fn::Join, Fn::Select, Fn::Split, Condition.
#[test]
fn long_form_intrinsics_in_json() {
    let template = r#"{
      "Parameters": {
        "Env": {"Type": "String", "Default": "prod"},
        "Limit": {"Type": "Number", "Default": 7},
        "Names": {"Type": "CommaDelimitedList", "Default": "a, b, c"}
      },
      "Conditions": {
        "IsProd": {"Fn::Equals": [{"Ref": "Env"}, "prod"]},
        "ProdAndB": {"Fn::And": [{"Condition": "IsProd"}, {"Fn::Equals": [{"Fn::Select": [1, {"Ref": "Names"}]}, "b"]}]}
      },
      "Resources": {
        "Queue": {"Type": "AWS::SQS::Queue"},
        "Fn": {"Type": "AWS::Serverless::Function"},
        "A": {
          "Type": "AWS::CloudWatch::Alarm",
          "Properties": {
            "AlarmName": {"Fn::Join": ["-", [{"Ref": "AWS::StackName"}, {"Ref": "Env"}, "age"]]},
            "AlarmDescription": {"Fn::Sub": ["${Who} on ${Queue} in ${AWS::Region}, not ${!Literal}", {"Who": {"Ref": "Env"}}]},
            "Namespace": {"Fn::Sub": "app/${AWS::StackName}"},
            "MetricName": {"Fn::Select": ["2", {"Fn::Split": [",", "x,y,Age"]}]},
            "Dimensions": [
              {"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}},
              {"Name": "Fn", "Value": {"Fn::GetAtt": ["Fn", "Arn"]}}
            ],
            "Statistic": "Maximum",
            "Period": 60,
            "EvaluationPeriods": {"Ref": "Limit"},
            "Threshold": {"Fn::If": ["ProdAndB", 300, 900]},
            "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": {"Fn::If": [{"Ref": "AWS::NoValue"}, "x", "y"]}
          }
        }
      }
    }"#;
    // Fn::If's first argument must be a condition's name.
    assert!(matches!(
        load(template, &Options::default()),
        Err(TemplateError::MalformedIntrinsic { ref alarm, ref function, .. }) if alarm == "A" && function == "Fn::If"
    ));
    let template = template.replace(
        r#""TreatMissingData": {"Fn::If": [{"Ref": "AWS::NoValue"}, "x", "y"]}"#,
        r#""TreatMissingData": "breaching""#,
    );
    let alarms = load(&template, &Options::default()).unwrap();
    let a = &alarms.metric[0];
    assert_eq!(a.name, "drill-prod-age");
    assert_eq!(a.description, "prod on Queue in us-east-1, not ${Literal}");
    assert_eq!(a.evaluation_periods, 7);
    assert_eq!(a.threshold, 300.0);
    assert_eq!(a.treat_missing, TreatMissing::Breaching);
    let Source::Metric { metric, stat, .. } = &a.source else { panic!("{:?}", a.source) };
    assert_eq!(metric.namespace, "app/drill");
    assert_eq!(metric.name, "Age");
    assert_eq!(metric.dimensions["QueueName"], "Queue");
    assert_eq!(metric.dimensions["Fn"], "arn:aws:lambda:us-east-1:123456789012:Fn");
    assert_eq!(*stat, Stat::Maximum);
    let staging = load(&template, &opts(&[("Env", "staging")])).unwrap();
    assert_eq!(staging.metric[0].threshold, 900.0);
    assert_eq!(staging.metric[0].name, "drill-staging-age");
}

/// `!If` with a condition (short tags), an override flipping it, and `AWS::NoValue` removing a
/// list element and a whole property.
#[test]
fn if_with_a_condition_and_no_value() {
    let sections = "Parameters:
  Env:
    Type: String
    Default: staging
  Pager:
    Type: String
    Default: arn:aws:sns:us-east-1:123456789012:pager
Conditions:
  IsProd: !Equals [!Ref Env, prod]
  NotProd: !Not [!Condition IsProd]
  Either: !Or [!Condition IsProd, !Condition NotProd]";
    let props = "      Namespace: ns
      MetricName: M
      Statistic: Sum
      Period: 60
      EvaluationPeriods: 3
      DatapointsToAlarm: !If [IsProd, 2, !Ref AWS::NoValue]
      Threshold: !If [IsProd, 5, 50]
      ComparisonOperator: GreaterThanThreshold
      AlarmActions:
        - !Ref Topic
        - !If [IsProd, !Ref Pager, !Ref AWS::NoValue]
      OKActions: !If [Either, [!GetAtt Topic.Arn], []]
";
    let template = one_alarm(sections, props);
    let staging = &load(&template, &Options::default()).unwrap().metric[0];
    assert_eq!(staging.threshold, 50.0);
    assert_eq!(staging.datapoints_to_alarm, 3, "NoValue removed DatapointsToAlarm: the default applies");
    assert_eq!(staging.actions, vec!["Topic"], "NoValue removed the pager");
    assert_eq!(staging.ok_actions, vec!["arn:aws:sns:us-east-1:123456789012:Topic"]);
    let prod = &load(&template, &opts(&[("Env", "prod")])).unwrap().metric[0];
    assert_eq!(prod.threshold, 5.0);
    assert_eq!(prod.datapoints_to_alarm, 2);
    assert_eq!(prod.actions, vec!["Topic", "arn:aws:sns:us-east-1:123456789012:pager"]);
}

#[test]
fn a_resource_whose_condition_is_false_does_not_exist() {
    let sections =
        "Parameters:\n  On: {Type: String, Default: 'false'}\nConditions:\n  Enabled: !Equals [!Ref On, 'true']";
    let template = one_alarm(sections, BASE).replacen(
        "  A:\n    Type: AWS::CloudWatch::Alarm\n",
        "  A:\n    Type: AWS::CloudWatch::Alarm\n    Condition: Enabled\n",
        1,
    );
    assert!(load(&template, &Options::default()).unwrap().metric.is_empty());
    assert_eq!(load(&template, &opts(&[("On", "true")])).unwrap().metric.len(), 1);
}

#[test]
fn unknown_math_function_is_named() {
    let props = "      EvaluationPeriods: 1
      Threshold: 1
      ComparisonOperator: GreaterThanThreshold
      Metrics:
        - Id: m1
          ReturnData: false
          MetricStat: {Metric: {Namespace: ns, MetricName: M}, Period: 60, Stat: Sum}
        - Id: band
          Expression: ANOMALY_DETECTION_BAND(m1, 2)
";
    let err = load(&one_alarm("", props), &Options::default()).unwrap_err();
    match &err {
        TemplateError::Expression { alarm, query, source } => {
            assert_eq!((alarm.as_str(), query.as_str()), ("A", "band"));
            assert_eq!(*source, MathError::UnsupportedFunction("ANOMALY_DETECTION_BAND".into()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.to_string(), "A: query band: unsupported metric math function ANOMALY_DETECTION_BAND");
}

#[test]
fn unknown_parameter_is_named() {
    let props = BASE.replace("Threshold: 1", "Threshold: !Ref Nope");
    let err = load(&one_alarm("", &props), &Options::default()).unwrap_err();
    assert!(
        matches!(&err, TemplateError::UnknownReference { alarm, name } if alarm == "A" && name == "Nope"),
        "{err:?}"
    );
    assert!(err.to_string().contains("Nope"));
    let err = load(&one_alarm("", BASE), &opts(&[("Nope", "1")])).unwrap_err();
    assert!(matches!(&err, TemplateError::UnknownParameter { parameter } if parameter == "Nope"), "{err:?}");
}

#[test]
fn a_needed_parameter_without_default_or_override_is_named() {
    let sections = "Parameters:\n  Topic2:\n    Type: String\n  Unused:\n    Type: String\n";
    let props = format!("{BASE}      AlarmActions: [!Ref Topic2]\n");
    let err = load(&one_alarm(sections, &props), &Options::default()).unwrap_err();
    assert!(
        matches!(&err, TemplateError::MissingParameter { alarm, parameter } if alarm == "A" && parameter == "Topic2"),
        "{err:?}"
    );
    // `Unused` has no default either, but no alarm needs it.
    let alarms = load(&one_alarm(sections, &props), &opts(&[("Topic2", "arn:t")])).unwrap();
    assert_eq!(alarms.metric[0].actions, vec!["arn:t"]);
}

#[test]
fn unsupported_comparison_operator_is_named() {
    let props = BASE.replace("GreaterThanThreshold", "LessThanLowerOrGreaterThanUpperThreshold");
    let err = load(&one_alarm("", &props), &Options::default()).unwrap_err();
    assert!(
        matches!(&err, TemplateError::UnsupportedComparison { alarm, operator }
            if alarm == "A" && operator == "LessThanLowerOrGreaterThanUpperThreshold"),
        "{err:?}"
    );
}

#[test]
fn numbers_from_string_parameters_and_errors_naming_the_property() {
    let sections = "Parameters:\n  Limit:\n    Type: Number\n    Default: 0.25\n";
    let props = BASE.replace("Threshold: 1", "Threshold: !Ref Limit");
    assert_eq!(load(&one_alarm(sections, &props), &Options::default()).unwrap().metric[0].threshold, 0.25);
    let err = load(&one_alarm(sections, &props), &opts(&[("Limit", "lots")])).unwrap_err();
    assert!(
        matches!(&err, TemplateError::NotANumber { alarm, property, value }
            if alarm == "A" && property == "Threshold" && value == "lots"),
        "{err:?}"
    );
    let props = BASE.replace("Period: 60", "Period: 90");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::InvalidProperty { ref property, .. }) if property == "Period"
    ));
    let props = BASE.replace("EvaluationPeriods: 3", "EvaluationPeriods: 3\n      DatapointsToAlarm: 4");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::InvalidProperty { ref property, .. }) if property == "DatapointsToAlarm"
    ));
}

#[test]
fn statistics() {
    let props = BASE.replace("Statistic: Sum", "ExtendedStatistic: p99.9");
    let Source::Metric { stat, .. } =
        load(&one_alarm("", &props), &Options::default()).unwrap().metric[0].source.clone()
    else {
        panic!()
    };
    assert_eq!(stat, Stat::Percentile(99.9));
    for (from, to) in [("Statistic: Sum", "ExtendedStatistic: tm99"), ("Statistic: Sum", "Statistic: p99")] {
        let props = BASE.replace(from, to);
        let err = load(&one_alarm("", &props), &Options::default()).unwrap_err();
        assert!(matches!(&err, TemplateError::UnsupportedStatistic { alarm, .. } if alarm == "A"), "{to}: {err:?}");
    }
}

#[test]
fn unsupported_intrinsics_and_properties_are_named() {
    let props = BASE.replace("Threshold: 1", "Threshold: !FindInMap [Limits, prod, x]");
    let err = load(&one_alarm("", &props), &Options::default()).unwrap_err();
    assert!(
        matches!(&err, TemplateError::UnsupportedIntrinsic { alarm, function } if alarm == "A" && function == "Fn::FindInMap"),
        "{err:?}"
    );
    let props = BASE.replace("Threshold: 1", "Threshold: {\"Fn::ImportValue\": x}");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnsupportedIntrinsic { ref function, .. }) if function == "Fn::ImportValue"
    ));
    let props = format!("{BASE}      ThresholdMetricId: ad1\n");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnsupportedProperty { ref alarm, ref property }) if alarm == "A" && property == "ThresholdMetricId"
    ));
    let props = format!("{BASE}      EvaluationWindow: {{WallClockWindow: {{}}}}\n");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnsupportedProperty { .. })
    ));
    let props = format!("{BASE}      EvaluationWindow: {{SlidingWindow: {{}}}}\n      Unit: Count\n");
    assert!(load(&one_alarm("", &props), &Options::default()).is_ok());
    let props = format!("{BASE}      EvaluateLowSampleCountPercentile: ignore\n");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnsupportedProperty { .. })
    ));
    let props = BASE.replace("Threshold: 1", "Threshold: !Sub '${Queue.Arn'");
    assert!(matches!(load(&one_alarm("", &props), &Options::default()), Err(TemplateError::MalformedIntrinsic { .. })));
    let props = BASE.replace("Statistic: Sum", "Statistic: !GetAtt Nowhere.Stat");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnknownReference { ref name, .. }) if name == "Nowhere"
    ));
    let sections = "Conditions:\n  Loop: !Not [!Condition Loop]\n";
    let props = BASE.replace("Threshold: 1", "Threshold: !If [Loop, 1, 2]");
    assert!(matches!(load(&one_alarm(sections, &props), &Options::default()), Err(TemplateError::TooDeep { .. })));
    let props = BASE.replace("Threshold: 1", "Threshold: !If [Missing, 1, 2]");
    assert!(matches!(
        load(&one_alarm("", &props), &Options::default()),
        Err(TemplateError::UnknownCondition { ref condition, .. }) if condition == "Missing"
    ));
}

fn math_alarm(queries: &str) -> String {
    one_alarm(
        "",
        &format!(
            "      EvaluationPeriods: 1\n      Threshold: 1\n      ComparisonOperator: GreaterThanThreshold\n      Metrics:\n{queries}"
        ),
    )
}

const M1: &str = "        - Id: m1\n          ReturnData: false\n          MetricStat: {Metric: {Namespace: ns, MetricName: M}, Period: 60, Stat: Sum}\n";

#[test]
fn math_alarm_rules() {
    let ok = load(
        &math_alarm(&format!("{M1}        - Id: e1\n          Expression: m1 * 2\n          Label: twice\n")),
        &Options::default(),
    )
    .unwrap();
    let Source::Math { queries } = &ok.metric[0].source else { panic!() };
    assert_eq!(queries.len(), 2);
    assert_eq!(queries[1].label.as_deref(), Some("twice"));
    assert!(queries[1].return_data && !queries[0].return_data);
    assert_eq!(ok.metric[0].period(), 60);

    let cases: [(String, &str); 6] = [
        (format!("{M1}        - Id: e1\n          Expression: m1 * 2\n          ReturnData: false\n"), "ReturnData"),
        (
            format!("{M1}        - Id: e1\n          Expression: m1\n        - Id: e2\n          Expression: m1\n"),
            "ReturnData",
        ),
        (format!("{M1}        - Id: e1\n          Expression: m2 * 2\n"), "UnknownQueryId"),
        (
            format!(
                "{M1}        - Id: e1\n          Expression: e2\n          ReturnData: false\n        - Id: e2\n          Expression: e1\n"
            ),
            "QueryCycle",
        ),
        (
            format!(
                "{M1}        - Id: m2\n          ReturnData: false\n          MetricStat: {{Metric: {{Namespace: ns, MetricName: N}}, Period: 300, Stat: Sum}}\n        - Id: e1\n          Expression: m1 + m2\n"
            ),
            "MixedPeriods",
        ),
        (format!("{M1}        - Id: e1\n          Expression: SUM(m1)\n"), "Expression"),
    ];
    for (queries, want) in cases {
        let err = load(&math_alarm(&queries), &Options::default()).unwrap_err();
        let got = match &err {
            TemplateError::ReturnData { .. } => "ReturnData",
            TemplateError::UnknownQueryId { .. } => "UnknownQueryId",
            TemplateError::QueryCycle { .. } => "QueryCycle",
            TemplateError::MixedPeriods { .. } => "MixedPeriods",
            TemplateError::Expression { source: MathError::NotATimeSeries(_), .. } => "Expression",
            _ => "other",
        };
        assert_eq!(got, want, "{queries}: {err:?}");
        assert!(err.to_string().starts_with("A: "), "{err}");
    }
    let both = format!("      Namespace: ns\n{}", math_alarm(M1).split("Properties:\n").nth(1).unwrap());
    let template = one_alarm("", &both);
    assert!(matches!(load(&template, &Options::default()), Err(TemplateError::UnsupportedProperty { .. })));
}

#[test]
fn composite_rules_bind_by_name_logical_id_or_arn() {
    let template = format!(
        "{}      AlarmName: named-a
  B:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmRule: !Sub 'ALARM(\"${{A}}\") OR OK(named-a) OR INSUFFICIENT_DATA(${{A.Arn}})'
      AlarmActions: [!Ref Topic]
  C:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmName: c-name
      AlarmRule: NOT ALARM(B) AND TRUE
",
        one_alarm("", BASE)
    );
    let alarms = load(&template, &Options::default()).unwrap();
    let b = alarms.composite_alarm("B").unwrap();
    assert_eq!(b.rule.to_string(), "(ALARM(named-a) OR OK(named-a)) OR INSUFFICIENT_DATA(named-a)");
    assert_eq!(b.actions, vec!["Topic"]);
    assert_eq!(alarms.composite_alarm("c-name").unwrap().rule.to_string(), "NOT ALARM(B) AND TRUE");
    assert!(alarms.metric_alarm("named-a").is_some());

    let unknown = template.replace("NOT ALARM(B)", "NOT ALARM(Ghost)");
    let err = load(&unknown, &Options::default()).unwrap_err();
    assert!(
        matches!(&err, TemplateError::Rule { alarm, source: RuleError::UnknownAlarm(name) } if alarm == "C" && name == "Ghost"),
        "{err:?}"
    );
    let cycle = template.replace("OK(named-a) OR", "OK(c-name) OR");
    assert!(matches!(load(&cycle, &Options::default()), Err(TemplateError::RuleCycle { .. })));
    let duplicate = template.replace("AlarmName: c-name", "AlarmName: named-a");
    assert!(
        matches!(load(&duplicate, &Options::default()), Err(TemplateError::DuplicateName { ref name }) if name == "named-a")
    );
    let bad = template.replace("NOT ALARM(B) AND TRUE", "ALARM(B) XOR TRUE");
    assert!(matches!(
        load(&bad, &Options::default()),
        Err(TemplateError::Rule { source: RuleError::UnexpectedToken { .. }, .. })
    ));
}

#[test]
fn malformed_documents() {
    assert!(matches!(load("- just a list", &Options::default()), Err(TemplateError::Section { section: "document" })));
    assert!(matches!(
        load("Parameters: {}", &Options::default()),
        Err(TemplateError::Section { section: "Resources" })
    ));
    assert!(matches!(load("Resources: [", &Options::default()), Err(TemplateError::Yaml(_))));
    let err = load_path(Path::new("/nonexistent/template.yaml"), &Options::default()).unwrap_err();
    assert!(matches!(err, TemplateError::Io { .. }));
    let no_props = "Resources:\n  A:\n    Type: AWS::CloudWatch::Alarm\n";
    assert!(matches!(
        load(no_props, &Options::default()),
        Err(TemplateError::MissingProperty { property: "Properties", .. })
    ));
}

#[test]
fn states_serialise_as_cloudwatch_writes_them() {
    assert_eq!(serde_json::to_string(&State::InsufficientData).unwrap(), "\"INSUFFICIENT_DATA\"");
    assert_eq!(State::Alarm.to_string(), "ALARM");
}
