//! Reading alarms from a CloudFormation/SAM template: every `AWS::CloudWatch::Alarm` and
//! `AWS::CloudWatch::CompositeAlarm` resource, its intrinsics resolved, checked and turned into
//! [`MetricAlarm`]s and [`CompositeAlarm`]s.
//!
//! Intrinsics, short-tag (`!Ref X`) or long form (`{"Ref": "X"}`): `Ref` (a parameter's value —
//! its override, else its `Default`, else an error naming it —, a pseudo parameter from
//! [`Options`], a resource's logical id; `AWS::NoValue` removes the property or list element),
//! `Fn::Sub` (string or `[string, variables]`; `${X.Attr}` as `Fn::GetAtt`, `${!Literal}`
//! escaped), `Fn::GetAtt` (`X.QueueName` → `X`, `X.Arn` → `arn:{partition}:{service}:{region}:{account}:X`,
//! anything else → `X.Attr`), `Fn::If`, `Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`,
//! `Condition`, `Fn::Join`, `Fn::Select`, `Fn::Split`; the `Conditions` section is evaluated
//! from the parameter values. Any other intrinsic is an error naming the alarm and the
//! function.
//!
//! Properties are those of the resource reference
//! (AWS::CloudWatch::Alarm, <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-alarm.html>;
//! AWS::CloudWatch::CompositeAlarm, <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-compositealarm.html>)
//! with PutMetricAlarm's rules
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html>):
//! `DatapointsToAlarm` defaults to `EvaluationPeriods`, `TreatMissingData` to `missing`;
//! `Statistic` or `ExtendedStatistic` with `Period`, or a `Metrics` array in which exactly one
//! query returns data and every `MetricStat` has the same period ("Alarms on math expressions"
//! in the user guide's "Using Amazon CloudWatch alarms"). An alarm's name is its `AlarmName`,
//! else its logical id (the drill's physical names). A resource whose `Condition` is false does
//! not exist.
//!
//! Accepted and without effect here: `Unit` (the store has no units), `Tags`,
//! `EvaluateLowSampleCountPercentile: evaluate` (the store always evaluates), `EvaluationWindow`
//! with `SlidingWindow` (the default). Every other property, value or intrinsic the reader
//! cannot honour is an error naming the alarm and the construct, never a silent skip.

mod intrinsics;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value as J;
use serde_norway::Value as Y;
use thiserror::Error;

use crate::math::{self, Expr, MathError};
use crate::rule::{self, Rule, RuleError};
use crate::store::{MetricId, Stat};
use intrinsics::{Param, Resolver, scalar_string};

/// How the template is instantiated: parameter overrides and pseudo parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Parameter values that replace the `Default`s (`sam deploy --parameter-overrides`).
    pub parameters: BTreeMap<String, String>,
    /// `AWS::StackName`.
    pub stack_name: String,
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::AccountId`.
    pub account_id: String,
    /// `AWS::Partition`.
    pub partition: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            parameters: BTreeMap::new(),
            stack_name: "drill".into(),
            region: "us-east-1".into(),
            account_id: "123456789012".into(),
            partition: "aws".into(),
        }
    }
}

/// Every alarm of a template, in template order.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Alarms {
    /// `AWS::CloudWatch::Alarm` resources.
    pub metric: Vec<MetricAlarm>,
    /// `AWS::CloudWatch::CompositeAlarm` resources.
    pub composite: Vec<CompositeAlarm>,
}

impl Alarms {
    /// The metric alarm named `name`.
    pub fn metric_alarm(&self, name: &str) -> Option<&MetricAlarm> {
        self.metric.iter().find(|a| a.name == name)
    }

    /// The composite alarm named `name`.
    pub fn composite_alarm(&self, name: &str) -> Option<&CompositeAlarm> {
        self.composite.iter().find(|a| a.name == name)
    }
}

/// How a datapoint is compared with the threshold (`ComparisonOperator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Comparison {
    /// `GreaterThanThreshold`
    GreaterThanThreshold,
    /// `GreaterThanOrEqualToThreshold`
    GreaterThanOrEqualToThreshold,
    /// `LessThanThreshold`
    LessThanThreshold,
    /// `LessThanOrEqualToThreshold`
    LessThanOrEqualToThreshold,
}

impl Comparison {
    /// Parses a static-threshold operator; the anomaly-band operators and anything else are
    /// `None`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "GreaterThanThreshold" => Self::GreaterThanThreshold,
            "GreaterThanOrEqualToThreshold" => Self::GreaterThanOrEqualToThreshold,
            "LessThanThreshold" => Self::LessThanThreshold,
            "LessThanOrEqualToThreshold" => Self::LessThanOrEqualToThreshold,
            _ => return None,
        })
    }

    /// Whether `value` breaches `threshold`.
    pub fn breaches(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::GreaterThanThreshold => value > threshold,
            Self::GreaterThanOrEqualToThreshold => value >= threshold,
            Self::LessThanThreshold => value < threshold,
            Self::LessThanOrEqualToThreshold => value <= threshold,
        }
    }
}

/// `TreatMissingData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum TreatMissing {
    /// `missing` (the default).
    #[default]
    Missing,
    /// `ignore`: the current state is kept.
    Ignore,
    /// `breaching`
    Breaching,
    /// `notBreaching`
    NotBreaching,
}

impl TreatMissing {
    /// Parses CloudWatch's spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "missing" => Self::Missing,
            "ignore" => Self::Ignore,
            "breaching" => Self::Breaching,
            "notBreaching" => Self::NotBreaching,
            _ => return None,
        })
    }
}

/// What a metric alarm watches.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Source {
    /// One metric, one statistic per period.
    Metric {
        /// The metric.
        metric: MetricId,
        /// `Statistic` or `ExtendedStatistic`.
        stat: Stat,
        /// `Period`, seconds.
        period: u32,
    },
    /// A metric math alarm: the `Metrics` array.
    Math {
        /// The queries, in template order.
        queries: Vec<Query>,
    },
}

/// One query of a metric math alarm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Query {
    /// `Id`.
    pub id: String,
    /// `ReturnData` (default true).
    pub return_data: bool,
    /// A metric statistic or an expression.
    pub kind: QueryKind,
    /// `Label`.
    pub label: Option<String>,
}

/// A query's definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum QueryKind {
    /// `MetricStat`.
    Stat {
        /// The metric.
        metric: MetricId,
        /// `Stat`.
        stat: Stat,
        /// `Period`, seconds.
        period: u32,
    },
    /// `Expression`, parsed.
    Expression(Expr),
}

/// An `AWS::CloudWatch::Alarm`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricAlarm {
    /// Logical id in the template.
    pub logical_id: String,
    /// `AlarmName`, else the logical id.
    pub name: String,
    /// `AlarmDescription` (empty when absent).
    pub description: String,
    /// `ActionsEnabled` (default true): when false, no transition carries actions.
    pub actions_enabled: bool,
    /// `AlarmActions`.
    pub actions: Vec<String>,
    /// `OKActions`.
    pub ok_actions: Vec<String>,
    /// `InsufficientDataActions`.
    pub insufficient_data_actions: Vec<String>,
    /// `EvaluationPeriods` (N).
    pub evaluation_periods: u32,
    /// `DatapointsToAlarm` (M), default N.
    pub datapoints_to_alarm: u32,
    /// `Threshold`.
    pub threshold: f64,
    /// `ComparisonOperator`.
    pub comparison: Comparison,
    /// `TreatMissingData`.
    pub treat_missing: TreatMissing,
    /// The metric or the metric math it watches.
    pub source: Source,
}

impl MetricAlarm {
    /// The period of each datapoint: the metric's, or the (common) period of the `MetricStat`
    /// queries.
    pub fn period(&self) -> u32 {
        match &self.source {
            Source::Metric { period, .. } => *period,
            Source::Math { queries } => queries
                .iter()
                .find_map(|q| match q.kind {
                    QueryKind::Stat { period, .. } => Some(period),
                    QueryKind::Expression(_) => None,
                })
                .unwrap_or(60),
        }
    }
}

/// An `AWS::CloudWatch::CompositeAlarm`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompositeAlarm {
    /// Logical id in the template.
    pub logical_id: String,
    /// `AlarmName`, else the logical id.
    pub name: String,
    /// `AlarmDescription` (empty when absent).
    pub description: String,
    /// `AlarmRule`, every reference bound to an alarm's name.
    pub rule: Rule,
    /// `ActionsEnabled` (default true).
    pub actions_enabled: bool,
    /// `AlarmActions`.
    pub actions: Vec<String>,
    /// `OKActions`.
    pub ok_actions: Vec<String>,
    /// `InsufficientDataActions`.
    pub insufficient_data_actions: Vec<String>,
    /// `ActionsSuppressor` with its two periods: while that alarm is in ALARM this one's
    /// actions wait ([`crate::Evaluator`] says how).
    pub suppressor: Option<Suppressor>,
}

/// A composite alarm's `ActionsSuppressor`, `ActionsSuppressorWaitPeriod` and
/// `ActionsSuppressorExtensionPeriod`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suppressor {
    /// The suppressing alarm's name (bound like a rule's reference: a name, a logical id, or an
    /// ARN ending in either).
    pub alarm: String,
    /// Seconds the composite, gone to ALARM, waits for the suppressor to go to ALARM before it
    /// acts.
    pub wait_seconds: u32,
    /// Seconds the composite, suppressed, waits after the suppressor leaves ALARM before it acts.
    pub extension_seconds: u32,
}

/// Why a template's alarms could not be read. Every case tied to an alarm names it (its
/// logical id) and the construct.
#[derive(Debug, Error)]
pub enum TemplateError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The text is not YAML (or JSON).
    #[error("the template is not YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    /// A top-level section is missing or of the wrong shape.
    #[error("the template's {section} section is missing or not a mapping")]
    Section {
        /// `Resources`, `Parameters`, `Conditions`, or the document itself.
        section: &'static str,
    },
    /// An override names no parameter of the template (CloudFormation refuses those too).
    #[error("parameter override {parameter} names no parameter of the template")]
    UnknownParameter {
        /// The override's name.
        parameter: String,
    },
    /// A parameter's declaration cannot be used.
    #[error("parameter {parameter}: {reason}")]
    InvalidParameter {
        /// The parameter.
        parameter: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An alarm needs a parameter that has neither a `Default` nor an override.
    #[error("{alarm}: parameter {parameter} has no Default and no override")]
    MissingParameter {
        /// The alarm.
        alarm: String,
        /// The parameter.
        parameter: String,
    },
    /// `Ref`/`Fn::GetAtt`/`${…}` of a name that is no parameter, pseudo parameter or resource.
    #[error("{alarm}: {name} is no parameter, pseudo parameter or resource of the template")]
    UnknownReference {
        /// The alarm.
        alarm: String,
        /// The name referenced.
        name: String,
    },
    /// A condition that the `Conditions` section does not define.
    #[error("{alarm}: condition {condition} is not defined in Conditions")]
    UnknownCondition {
        /// The alarm.
        alarm: String,
        /// The condition.
        condition: String,
    },
    /// An intrinsic function the reader does not implement.
    #[error("{alarm}: unsupported intrinsic function {function}")]
    UnsupportedIntrinsic {
        /// The alarm.
        alarm: String,
        /// `Fn::FindInMap`, `Fn::ImportValue`, …
        function: String,
    },
    /// An intrinsic function whose arguments do not fit it.
    #[error("{alarm}: malformed {function}: {reason}")]
    MalformedIntrinsic {
        /// The alarm.
        alarm: String,
        /// The function.
        function: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Intrinsics nested beyond reason (a condition that refers to itself).
    #[error("{alarm}: intrinsic functions nest too deeply (a condition that refers to itself?)")]
    TooDeep {
        /// The alarm.
        alarm: String,
    },
    /// A required property is absent.
    #[error("{alarm}: property {property} is required")]
    MissingProperty {
        /// The alarm.
        alarm: String,
        /// The property.
        property: &'static str,
    },
    /// A property of the wrong shape or out of range.
    #[error("{alarm}: property {property} must be {expected}")]
    InvalidProperty {
        /// The alarm.
        alarm: String,
        /// The property (`Metrics[2].Id` for a query's).
        property: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A property that must be a number is not one.
    #[error("{alarm}: property {property} is {value:?}, not a number")]
    NotANumber {
        /// The alarm.
        alarm: String,
        /// The property.
        property: String,
        /// Its value.
        value: String,
    },
    /// A property (or property value) this evaluator does not implement.
    #[error("{alarm}: property {property} is not supported")]
    UnsupportedProperty {
        /// The alarm.
        alarm: String,
        /// The property, with the value when only that value is unsupported.
        property: String,
    },
    /// An anomaly-band (or unknown) comparison operator.
    #[error("{alarm}: ComparisonOperator {operator} is not supported")]
    UnsupportedComparison {
        /// The alarm.
        alarm: String,
        /// The operator.
        operator: String,
    },
    /// A statistic other than the five standard ones and `pNN`.
    #[error("{alarm}: statistic {statistic} is not supported")]
    UnsupportedStatistic {
        /// The alarm.
        alarm: String,
        /// The statistic.
        statistic: String,
    },
    /// Not exactly one query of a metric math alarm returns data.
    #[error("{alarm}: {count} queries have ReturnData true; exactly one must")]
    ReturnData {
        /// The alarm.
        alarm: String,
        /// How many do.
        count: usize,
    },
    /// A query's expression cannot be parsed or does not yield a time series.
    #[error("{alarm}: query {query}: {source}")]
    Expression {
        /// The alarm.
        alarm: String,
        /// The query's id.
        query: String,
        /// Why.
        source: MathError,
    },
    /// An expression reads an id that is no query of the alarm.
    #[error("{alarm}: query {query} reads {id}, which is no query of the alarm")]
    UnknownQueryId {
        /// The alarm.
        alarm: String,
        /// The query's id.
        query: String,
        /// The id read.
        id: String,
    },
    /// Expressions read each other in a cycle.
    #[error("{alarm}: query {query} reads itself through other queries")]
    QueryCycle {
        /// The alarm.
        alarm: String,
        /// A query on the cycle.
        query: String,
    },
    /// The `MetricStat` queries of one alarm have different periods.
    #[error("{alarm}: its MetricStat queries have different periods")]
    MixedPeriods {
        /// The alarm.
        alarm: String,
    },
    /// A composite's `AlarmRule` cannot be parsed, or names an alarm that does not exist.
    #[error("{alarm}: AlarmRule: {source}")]
    Rule {
        /// The composite alarm.
        alarm: String,
        /// Why.
        source: RuleError,
    },
    /// Composite alarms reference each other in a cycle.
    #[error("{alarm}: its AlarmRule reaches itself through other composite alarms")]
    RuleCycle {
        /// A composite alarm on the cycle.
        alarm: String,
    },
    /// Two alarms have the same name.
    #[error("two alarms are named {name}")]
    DuplicateName {
        /// The name.
        name: String,
    },
}

/// Reads the alarms of a template file (see [`load`]).
pub fn load_path(path: &Path, opts: &Options) -> Result<Alarms, TemplateError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| TemplateError::Io { path: path.to_path_buf(), source })?;
    load(&text, opts)
}

/// The names of the template's `Parameters` (so a caller can give a value only to the
/// parameters the template declares: CloudFormation refuses a value for an undeclared one).
pub fn parameter_names(text: &str) -> Result<Vec<String>, TemplateError> {
    let doc: Y = serde_norway::from_str(text)?;
    let Y::Mapping(doc) = doc else {
        return Err(TemplateError::Section { section: "document" });
    };
    Ok(match doc.get("Parameters") {
        Some(Y::Mapping(m)) => m.keys().filter_map(|k| k.as_str().map(str::to_owned)).collect(),
        None => Vec::new(),
        Some(_) => return Err(TemplateError::Section { section: "Parameters" }),
    })
}

/// Reads every `AWS::CloudWatch::Alarm` and `AWS::CloudWatch::CompositeAlarm` of a template
/// (YAML or JSON), its intrinsics resolved with `opts`.
pub fn load(text: &str, opts: &Options) -> Result<Alarms, TemplateError> {
    with_resolver(text, opts, load_alarms)
}

/// Parses `text` and hands its resources to `each` with a resolver for `opts`.
fn with_resolver<R>(
    text: &str,
    opts: &Options,
    each: impl FnOnce(&Resolver<'_>, &serde_norway::Mapping) -> Result<R, TemplateError>,
) -> Result<R, TemplateError> {
    let doc: Y = serde_norway::from_str(text)?;
    let Y::Mapping(doc) = doc else {
        return Err(TemplateError::Section { section: "document" });
    };
    let section = |name: &'static str, required: bool| -> Result<Option<&serde_norway::Mapping>, TemplateError> {
        match doc.get(name) {
            Some(Y::Mapping(m)) => Ok(Some(m)),
            None if !required => Ok(None),
            _ => Err(TemplateError::Section { section: name }),
        }
    };
    let resources = section("Resources", true)?.ok_or(TemplateError::Section { section: "Resources" })?;
    let parameters_section = section("Parameters", false)?;
    let conditions = section("Conditions", false)?;

    let mut parameters = BTreeMap::new();
    for (name, decl) in parameters_section.into_iter().flatten() {
        let name = name.as_str().ok_or(TemplateError::Section { section: "Parameters" })?;
        let kind = decl.get("Type").and_then(Y::as_str).unwrap_or("String");
        let list = kind == "CommaDelimitedList" || kind.starts_with("List<");
        parameters.insert(name.to_string(), Param { default: decl.get("Default"), list });
    }
    if let Some(unknown) = opts.parameters.keys().find(|k| !parameters.contains_key(*k)) {
        return Err(TemplateError::UnknownParameter { parameter: unknown.clone() });
    }

    let mut types = BTreeMap::new();
    for (id, resource) in resources {
        let id = id.as_str().ok_or(TemplateError::Section { section: "Resources" })?;
        types.insert(id.to_string(), resource.get("Type").and_then(Y::as_str).map(str::to_string));
    }
    let resolver = Resolver { opts, parameters, conditions, resources: types };
    each(&resolver, resources)
}

/// A resource the template creates, its intrinsics resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Its logical id.
    pub logical_id: String,
    /// Its `Type`.
    pub kind: Option<String>,
    /// Its `Properties`, every intrinsic resolved.
    pub properties: Option<J>,
}

/// Every resource the template creates for `opts` (its `Condition` holds), with its
/// `Properties` resolved ([`intrinsics`]'s rules: a `Ref` of a resource is its logical id). What
/// a test reads to feed a function's `Environment` to that function's own configuration parser.
pub fn resources(text: &str, opts: &Options) -> Result<Vec<Resource>, TemplateError> {
    with_resolver(text, opts, |resolver, resources| {
        let mut out = Vec::new();
        for (id, resource) in resources {
            let Some(id) = id.as_str() else { continue };
            let kind = resource.get("Type").and_then(Y::as_str).map(str::to_string);
            if created(resolver, id, resource)? {
                let properties = resource.get("Properties").map(|p| resolver.resolve(id, p)).transpose()?.flatten();
                out.push(Resource { logical_id: id.to_string(), kind, properties });
            }
        }
        Ok(out)
    })
}

/// Whether `resource` (logical id `id`) is created: it has no `Condition`, or its holds.
fn created(resolver: &Resolver<'_>, id: &str, resource: &Y) -> Result<bool, TemplateError> {
    let Some(condition) = resource.get("Condition") else { return Ok(true) };
    let name = condition.as_str().ok_or_else(|| TemplateError::InvalidProperty {
        alarm: id.to_string(),
        property: "Condition".into(),
        expected: "a condition's name",
    })?;
    resolver.condition(id, name)
}

fn load_alarms(resolver: &Resolver<'_>, resources: &serde_norway::Mapping) -> Result<Alarms, TemplateError> {
    let mut alarms = Alarms::default();
    let mut rules = Vec::new();
    for (id, resource) in resources {
        let Some(id) = id.as_str() else { continue };
        let kind = resource.get("Type").and_then(Y::as_str);
        if kind != Some("AWS::CloudWatch::Alarm") && kind != Some("AWS::CloudWatch::CompositeAlarm") {
            continue;
        }
        if !created(resolver, id, resource)? {
            continue;
        }
        let props = match resource.get("Properties") {
            Some(p) => resolver.resolve(id, p)?,
            None => None,
        };
        let props = match props {
            Some(J::Object(map)) => Props { alarm: id, map: map.into_iter().collect() },
            _ => return Err(TemplateError::MissingProperty { alarm: id.to_string(), property: "Properties" }),
        };
        if kind == Some("AWS::CloudWatch::Alarm") {
            alarms.metric.push(metric_alarm(id, &props)?);
        } else {
            let (alarm, rule) = composite_alarm(id, &props)?;
            alarms.composite.push(alarm);
            rules.push(rule);
        }
    }

    // Names are unique; rules are bound to names (a reference may be a name, a logical id, or
    // an ARN ending in either).
    let mut names = BTreeSet::new();
    let mut by_reference = BTreeMap::new();
    for (logical_id, name) in alarms
        .metric
        .iter()
        .map(|a| (&a.logical_id, &a.name))
        .chain(alarms.composite.iter().map(|a| (&a.logical_id, &a.name)))
    {
        if !names.insert(name.clone()) {
            return Err(TemplateError::DuplicateName { name: name.clone() });
        }
        by_reference.entry(logical_id.clone()).or_insert_with(|| name.clone());
    }
    for name in &names {
        by_reference.insert(name.clone(), name.clone());
    }
    let resolve = |reference: &str| by_reference.get(reference).cloned();
    for (alarm, rule) in alarms.composite.iter_mut().zip(rules) {
        alarm.rule =
            rule.bind(&resolve).map_err(|source| TemplateError::Rule { alarm: alarm.logical_id.clone(), source })?;
        if let Some(s) = &mut alarm.suppressor {
            let reference = s.alarm.rsplit(':').next().unwrap_or(&s.alarm).to_owned();
            s.alarm = resolve(&reference).ok_or_else(|| TemplateError::InvalidProperty {
                alarm: alarm.logical_id.clone(),
                property: "ActionsSuppressor".into(),
                expected: "an alarm of the template",
            })?;
        }
    }
    composite_order(&alarms)?;
    Ok(alarms)
}

/// The composite alarms in an order where each comes after every composite its rule reads;
/// a cycle is an error.
pub(crate) fn composite_order(alarms: &Alarms) -> Result<Vec<usize>, TemplateError> {
    let index: BTreeMap<&str, usize> = alarms.composite.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();
    let mut order = Vec::new();
    // 0 = unvisited, 1 = on the path, 2 = done.
    let mut mark = vec![0u8; alarms.composite.len()];
    fn visit(
        i: usize,
        alarms: &Alarms,
        index: &BTreeMap<&str, usize>,
        mark: &mut [u8],
        order: &mut Vec<usize>,
    ) -> Result<(), TemplateError> {
        match mark.get(i) {
            Some(2) | None => return Ok(()),
            Some(1) => {
                let alarm = alarms.composite.get(i).map(|a| a.logical_id.clone()).unwrap_or_default();
                return Err(TemplateError::RuleCycle { alarm });
            }
            _ => {}
        }
        if let Some(m) = mark.get_mut(i) {
            *m = 1;
        }
        if let Some(alarm) = alarms.composite.get(i) {
            for name in alarm.rule.alarms() {
                if let Some(&j) = index.get(name) {
                    visit(j, alarms, index, mark, order)?;
                }
            }
        }
        if let Some(m) = mark.get_mut(i) {
            *m = 2;
        }
        order.push(i);
        Ok(())
    }
    for i in 0..alarms.composite.len() {
        visit(i, alarms, &index, &mut mark, &mut order)?;
    }
    Ok(order)
}

/// An alarm's resolved properties.
struct Props<'a> {
    alarm: &'a str,
    map: BTreeMap<String, J>,
}

impl Props<'_> {
    fn invalid(&self, property: &str, expected: &'static str) -> TemplateError {
        TemplateError::InvalidProperty { alarm: self.alarm.to_string(), property: property.to_string(), expected }
    }

    fn check_known(&self, known: &[&str]) -> Result<(), TemplateError> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => {
                Err(TemplateError::UnsupportedProperty { alarm: self.alarm.to_string(), property: unknown.clone() })
            }
            None => Ok(()),
        }
    }

    fn string(&self, property: &str) -> Result<Option<String>, TemplateError> {
        self.map.get(property).map(|v| scalar_string(v).ok_or_else(|| self.invalid(property, "a string"))).transpose()
    }

    fn required_string(&self, property: &'static str) -> Result<String, TemplateError> {
        self.string(property)?.ok_or_else(|| TemplateError::MissingProperty { alarm: self.alarm.to_string(), property })
    }

    fn number(&self, property: &str) -> Result<Option<f64>, TemplateError> {
        self.map.get(property).map(|v| as_f64(self.alarm, property, v)).transpose()
    }

    fn whole(&self, property: &str) -> Result<Option<u32>, TemplateError> {
        self.map.get(property).map(|v| as_u32(self.alarm, property, v)).transpose()
    }

    fn boolean(&self, property: &str) -> Result<Option<bool>, TemplateError> {
        self.map.get(property).map(|v| as_bool(v).ok_or_else(|| self.invalid(property, "true or false"))).transpose()
    }

    fn strings(&self, property: &str) -> Result<Vec<String>, TemplateError> {
        match self.map.get(property) {
            None => Ok(Vec::new()),
            Some(J::Array(items)) => items
                .iter()
                .map(|v| scalar_string(v).ok_or_else(|| self.invalid(property, "a list of strings")))
                .collect(),
            Some(_) => Err(self.invalid(property, "a list of strings")),
        }
    }
}

fn as_f64(alarm: &str, property: &str, value: &J) -> Result<f64, TemplateError> {
    let not_a_number = || TemplateError::NotANumber {
        alarm: alarm.to_string(),
        property: property.to_string(),
        value: scalar_string(value).unwrap_or_else(|| value.to_string()),
    };
    let n = match value {
        J::Number(n) => n.as_f64(),
        J::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.filter(|n| n.is_finite()).ok_or_else(not_a_number)
}

fn as_u32(alarm: &str, property: &str, value: &J) -> Result<u32, TemplateError> {
    let n = as_f64(alarm, property, value)?;
    if n.fract() != 0.0 || n < 0.0 || n > f64::from(u32::MAX) {
        return Err(TemplateError::InvalidProperty {
            alarm: alarm.to_string(),
            property: property.to_string(),
            expected: "a whole number",
        });
    }
    Ok(n as u32)
}

fn as_bool(value: &J) -> Option<bool> {
    match value {
        J::Bool(b) => Some(*b),
        J::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        J::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

/// `Period`: 10, 20, 30 or a multiple of 60 (PutMetricAlarm).
fn check_period(alarm: &str, property: &str, period: u32) -> Result<u32, TemplateError> {
    if matches!(period, 10 | 20 | 30) || (period > 0 && period.is_multiple_of(60)) {
        Ok(period)
    } else {
        Err(TemplateError::InvalidProperty {
            alarm: alarm.to_string(),
            property: property.to_string(),
            expected: "10, 20, 30 or a multiple of 60 seconds",
        })
    }
}

fn parse_stat(alarm: &str, text: &str) -> Result<Stat, TemplateError> {
    Stat::parse(text)
        .ok_or_else(|| TemplateError::UnsupportedStatistic { alarm: alarm.to_string(), statistic: text.to_string() })
}

/// `{Namespace, MetricName, Dimensions}` as found in an alarm or a `MetricStat.Metric`.
fn metric_id(alarm: &str, prefix: &str, object: &serde_json::Map<String, J>) -> Result<MetricId, TemplateError> {
    let invalid = |property: &str, expected| TemplateError::InvalidProperty {
        alarm: alarm.to_string(),
        property: format!("{prefix}{property}"),
        expected,
    };
    let text = |property: &'static str| -> Result<String, TemplateError> {
        match object.get(property) {
            Some(v) => scalar_string(v).ok_or_else(|| invalid(property, "a string")),
            None => Err(invalid(property, "present")),
        }
    };
    let mut dimensions = BTreeMap::new();
    match object.get("Dimensions") {
        None => {}
        Some(J::Array(items)) => {
            for item in items {
                let pair = item
                    .as_object()
                    .and_then(|o| Some((scalar_string(o.get("Name")?)?, scalar_string(o.get("Value")?)?)));
                let (name, value) = pair.ok_or_else(|| invalid("Dimensions", "a list of {Name, Value}"))?;
                if dimensions.insert(name, value).is_some() {
                    return Err(invalid("Dimensions", "a list of distinct dimension names"));
                }
            }
        }
        Some(_) => return Err(invalid("Dimensions", "a list of {Name, Value}")),
    }
    Ok(MetricId { namespace: text("Namespace")?, name: text("MetricName")?, dimensions })
}

const METRIC_ALARM_PROPERTIES: &[&str] = &[
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "AlarmActions",
    "OKActions",
    "InsufficientDataActions",
    "ComparisonOperator",
    "DatapointsToAlarm",
    "Dimensions",
    "EvaluateLowSampleCountPercentile",
    "EvaluationPeriods",
    "EvaluationWindow",
    "ExtendedStatistic",
    "MetricName",
    "Metrics",
    "Namespace",
    "Period",
    "Statistic",
    "Threshold",
    "TreatMissingData",
    "Unit",
    "Tags",
];

fn metric_alarm(id: &str, props: &Props<'_>) -> Result<MetricAlarm, TemplateError> {
    props.check_known(METRIC_ALARM_PROPERTIES)?;
    let unsupported = |property: String| TemplateError::UnsupportedProperty { alarm: id.to_string(), property };
    if let Some(value) = props.string("EvaluateLowSampleCountPercentile")?
        && value != "evaluate"
    {
        return Err(unsupported(format!("EvaluateLowSampleCountPercentile: {value}")));
    }
    if let Some(window) = props.map.get("EvaluationWindow")
        && window.as_object().is_none_or(|w| w.keys().any(|k| k != "SlidingWindow"))
    {
        return Err(unsupported("EvaluationWindow (only SlidingWindow)".into()));
    }

    let evaluation_periods = props
        .whole("EvaluationPeriods")?
        .ok_or(TemplateError::MissingProperty { alarm: id.to_string(), property: "EvaluationPeriods" })?;
    if evaluation_periods == 0 {
        return Err(props.invalid("EvaluationPeriods", "at least 1"));
    }
    let datapoints_to_alarm = props.whole("DatapointsToAlarm")?.unwrap_or(evaluation_periods);
    if datapoints_to_alarm == 0 || datapoints_to_alarm > evaluation_periods {
        return Err(props.invalid("DatapointsToAlarm", "between 1 and EvaluationPeriods"));
    }
    let operator = props.required_string("ComparisonOperator")?;
    let comparison = Comparison::parse(&operator)
        .ok_or_else(|| TemplateError::UnsupportedComparison { alarm: id.to_string(), operator: operator.clone() })?;
    let threshold = props
        .number("Threshold")?
        .ok_or(TemplateError::MissingProperty { alarm: id.to_string(), property: "Threshold" })?;
    let treat_missing = match props.string("TreatMissingData")? {
        None => TreatMissing::Missing,
        Some(text) => TreatMissing::parse(&text)
            .ok_or_else(|| props.invalid("TreatMissingData", "missing, ignore, breaching or notBreaching"))?,
    };

    let single = ["Namespace", "MetricName", "Dimensions", "Statistic", "ExtendedStatistic", "Period"];
    let source = match props.map.get("Metrics") {
        Some(metrics) => {
            if let Some(conflict) = single.iter().find(|p| props.map.contains_key(**p)) {
                return Err(unsupported(format!("{conflict} together with Metrics")));
            }
            math_source(id, metrics)?
        }
        None => {
            let object: serde_json::Map<String, J> = props.map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let metric = metric_id(id, "", &object)?;
            let stat = match (props.string("Statistic")?, props.string("ExtendedStatistic")?) {
                (Some(s), None) => match s.as_str() {
                    "Sum" | "Average" | "Minimum" | "Maximum" | "SampleCount" => parse_stat(id, &s)?,
                    _ => return Err(TemplateError::UnsupportedStatistic { alarm: id.to_string(), statistic: s }),
                },
                (None, Some(s)) => match parse_stat(id, &s)? {
                    p @ Stat::Percentile(_) => p,
                    _ => return Err(TemplateError::UnsupportedStatistic { alarm: id.to_string(), statistic: s }),
                },
                (Some(_), Some(_)) => return Err(props.invalid("Statistic", "absent when ExtendedStatistic is set")),
                (None, None) => {
                    return Err(TemplateError::MissingProperty { alarm: id.to_string(), property: "Statistic" });
                }
            };
            let period = props
                .whole("Period")?
                .ok_or(TemplateError::MissingProperty { alarm: id.to_string(), property: "Period" })?;
            Source::Metric { metric, stat, period: check_period(id, "Period", period)? }
        }
    };

    Ok(MetricAlarm {
        logical_id: id.to_string(),
        name: props.string("AlarmName")?.unwrap_or_else(|| id.to_string()),
        description: props.string("AlarmDescription")?.unwrap_or_default(),
        actions_enabled: props.boolean("ActionsEnabled")?.unwrap_or(true),
        actions: props.strings("AlarmActions")?,
        ok_actions: props.strings("OKActions")?,
        insufficient_data_actions: props.strings("InsufficientDataActions")?,
        evaluation_periods,
        datapoints_to_alarm,
        threshold,
        comparison,
        treat_missing,
        source,
    })
}

const QUERY_PROPERTIES: &[&str] = &["Id", "Expression", "MetricStat", "Label", "ReturnData"];
const METRIC_STAT_PROPERTIES: &[&str] = &["Metric", "Period", "Stat", "Unit"];

fn math_source(alarm: &str, metrics: &J) -> Result<Source, TemplateError> {
    let invalid =
        |property: String, expected| TemplateError::InvalidProperty { alarm: alarm.to_string(), property, expected };
    let unsupported = |property: String| TemplateError::UnsupportedProperty { alarm: alarm.to_string(), property };
    let Some(items) = metrics.as_array().filter(|a| !a.is_empty()) else {
        return Err(invalid("Metrics".into(), "a non-empty list of queries"));
    };
    let mut queries = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |property: &str| format!("Metrics[{i}].{property}");
        let Some(object) = item.as_object() else {
            return Err(invalid(format!("Metrics[{i}]"), "a query"));
        };
        if let Some(unknown) = object.keys().find(|k| !QUERY_PROPERTIES.contains(&k.as_str())) {
            return Err(unsupported(at(unknown)));
        }
        let id = object.get("Id").and_then(scalar_string).ok_or_else(|| invalid(at("Id"), "a string"))?;
        if !id.starts_with(|c: char| c.is_ascii_lowercase())
            || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(invalid(at("Id"), "letters, digits and _, starting with a lower-case letter"));
        }
        let return_data = match object.get("ReturnData") {
            None => true,
            Some(v) => as_bool(v).ok_or_else(|| invalid(at("ReturnData"), "true or false"))?,
        };
        let label = object
            .get("Label")
            .map(|v| scalar_string(v).ok_or_else(|| invalid(at("Label"), "a string")))
            .transpose()?;
        let kind = match (object.get("Expression"), object.get("MetricStat")) {
            (Some(expression), None) => {
                let text = scalar_string(expression).ok_or_else(|| invalid(at("Expression"), "a string"))?;
                let expr = math::parse(&text).map_err(|source| TemplateError::Expression {
                    alarm: alarm.to_string(),
                    query: id.clone(),
                    source,
                })?;
                QueryKind::Expression(expr)
            }
            (None, Some(stat)) => {
                let Some(stat) = stat.as_object() else {
                    return Err(invalid(at("MetricStat"), "{Metric, Period, Stat}"));
                };
                if let Some(unknown) = stat.keys().find(|k| !METRIC_STAT_PROPERTIES.contains(&k.as_str())) {
                    return Err(unsupported(at(&format!("MetricStat.{unknown}"))));
                }
                let metric = match stat.get("Metric").and_then(J::as_object) {
                    Some(m) => metric_id(alarm, &at("MetricStat.Metric."), m)?,
                    None => return Err(invalid(at("MetricStat.Metric"), "{Namespace, MetricName, Dimensions}")),
                };
                let period = match stat.get("Period") {
                    Some(v) => {
                        check_period(alarm, &at("MetricStat.Period"), as_u32(alarm, &at("MetricStat.Period"), v)?)?
                    }
                    None => return Err(invalid(at("MetricStat.Period"), "present")),
                };
                let stat = match stat.get("Stat").and_then(scalar_string) {
                    Some(s) => parse_stat(alarm, &s)?,
                    None => return Err(invalid(at("MetricStat.Stat"), "a string")),
                };
                QueryKind::Stat { metric, stat, period }
            }
            _ => return Err(invalid(format!("Metrics[{i}]"), "exactly one of Expression and MetricStat")),
        };
        if queries.iter().any(|q: &Query| q.id == id) {
            return Err(invalid(at("Id"), "unique within the alarm"));
        }
        queries.push(Query { id, return_data, kind, label });
    }

    let returning = queries.iter().filter(|q| q.return_data).count();
    if returning != 1 {
        return Err(TemplateError::ReturnData { alarm: alarm.to_string(), count: returning });
    }
    let periods: BTreeSet<u32> = queries
        .iter()
        .filter_map(|q| match q.kind {
            QueryKind::Stat { period, .. } => Some(period),
            QueryKind::Expression(_) => None,
        })
        .collect();
    if periods.len() > 1 {
        return Err(TemplateError::MixedPeriods { alarm: alarm.to_string() });
    }
    if periods.is_empty() {
        return Err(invalid("Metrics".into(), "at least one MetricStat query"));
    }
    let order = query_order(alarm, &queries)?;
    dry_run(alarm, &queries, &order)?;
    Ok(Source::Math { queries })
}

/// The queries in an order where each expression comes after the queries it reads; unknown
/// ids and cycles are errors.
pub(crate) fn query_order(alarm: &str, queries: &[Query]) -> Result<Vec<usize>, TemplateError> {
    let index: BTreeMap<&str, usize> = queries.iter().enumerate().map(|(i, q)| (q.id.as_str(), i)).collect();
    for q in queries {
        if let QueryKind::Expression(expr) = &q.kind
            && let Some(id) = expr.ids().into_iter().find(|id| !index.contains_key(id))
        {
            return Err(TemplateError::UnknownQueryId {
                alarm: alarm.to_string(),
                query: q.id.clone(),
                id: id.to_string(),
            });
        }
    }
    let mut order = Vec::with_capacity(queries.len());
    let mut mark = vec![0u8; queries.len()];
    // Iterative depth-first search: (query, next dependency to look at).
    for root in 0..queries.len() {
        let mut stack = vec![root];
        while let Some(&i) = stack.last() {
            match mark.get(i).copied() {
                Some(2) | None => {
                    stack.pop();
                    continue;
                }
                Some(0) => {
                    if let Some(m) = mark.get_mut(i) {
                        *m = 1;
                    }
                    let deps: Vec<usize> = match queries.get(i).map(|q| &q.kind) {
                        Some(QueryKind::Expression(expr)) => {
                            expr.ids().iter().filter_map(|id| index.get(id).copied()).collect()
                        }
                        _ => Vec::new(),
                    };
                    for d in deps {
                        match mark.get(d) {
                            Some(1) => {
                                let query = queries.get(d).map(|q| q.id.clone()).unwrap_or_default();
                                return Err(TemplateError::QueryCycle { alarm: alarm.to_string(), query });
                            }
                            Some(0) => stack.push(d),
                            _ => {}
                        }
                    }
                }
                Some(_) => {
                    if let Some(m) = mark.get_mut(i) {
                        *m = 2;
                    }
                    order.push(i);
                    stack.pop();
                }
            }
        }
    }
    Ok(order)
}

/// Evaluates every expression once over placeholder data, so an expression that cannot
/// yield a time series (`SUM(m1)` as a result, `FILL` of a scalar…) fails at load, naming it.
fn dry_run(alarm: &str, queries: &[Query], order: &[usize]) -> Result<(), TemplateError> {
    let timestamps = [0, 60, 120];
    let mut series = BTreeMap::new();
    for q in order.iter().filter_map(|i| queries.get(*i)) {
        let values = match &q.kind {
            QueryKind::Stat { .. } => vec![Some(1.0), None, Some(2.0)],
            QueryKind::Expression(expr) => math::evaluate_series(expr, &timestamps, &series).map_err(|source| {
                TemplateError::Expression { alarm: alarm.to_string(), query: q.id.clone(), source }
            })?,
        };
        series.insert(q.id.clone(), values);
    }
    Ok(())
}

const COMPOSITE_PROPERTIES: &[&str] = &[
    "AlarmName",
    "AlarmDescription",
    "AlarmRule",
    "ActionsEnabled",
    "AlarmActions",
    "OKActions",
    "InsufficientDataActions",
    "ActionsSuppressor",
    "ActionsSuppressorWaitPeriod",
    "ActionsSuppressorExtensionPeriod",
    "Tags",
];

fn composite_alarm(id: &str, props: &Props<'_>) -> Result<(CompositeAlarm, Rule), TemplateError> {
    props.check_known(COMPOSITE_PROPERTIES)?;
    let text = props.required_string("AlarmRule")?;
    let rule = rule::parse(&text).map_err(|source| TemplateError::Rule { alarm: id.to_string(), source })?;
    let alarm = CompositeAlarm {
        logical_id: id.to_string(),
        name: props.string("AlarmName")?.unwrap_or_else(|| id.to_string()),
        description: props.string("AlarmDescription")?.unwrap_or_default(),
        rule: Rule::False,
        actions_enabled: props.boolean("ActionsEnabled")?.unwrap_or(true),
        actions: props.strings("AlarmActions")?,
        ok_actions: props.strings("OKActions")?,
        insufficient_data_actions: props.strings("InsufficientDataActions")?,
        suppressor: match props.string("ActionsSuppressor")? {
            None => None,
            Some(alarm) => Some(Suppressor {
                alarm,
                // Both required with a suppressor (CloudWatch's PutCompositeAlarm).
                wait_seconds: props.whole("ActionsSuppressorWaitPeriod")?.ok_or_else(|| {
                    TemplateError::MissingProperty { alarm: id.to_string(), property: "ActionsSuppressorWaitPeriod" }
                })?,
                extension_seconds: props.whole("ActionsSuppressorExtensionPeriod")?.ok_or_else(|| {
                    TemplateError::MissingProperty {
                        alarm: id.to_string(),
                        property: "ActionsSuppressorExtensionPeriod",
                    }
                })?,
            }),
        },
    };
    Ok((alarm, rule))
}

#[cfg(test)]
mod tests;
