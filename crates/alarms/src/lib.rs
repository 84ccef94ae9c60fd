//! CloudWatch alarms as a CloudFormation/SAM template declares them, evaluated with
//! CloudWatch's documented semantics over a metric store: what `punctual drill` uses to tell
//! which alarm would fire, at which minute, for a simulated incident.
//!
//! - [`template`]: every `AWS::CloudWatch::Alarm` and `AWS::CloudWatch::CompositeAlarm` of a
//!   template, intrinsics resolved ([`load`], [`load_path`]).
//! - [`math`]: metric math expressions (parse, evaluate over time series).
//! - [`rule`]: alarm states and composite alarm rules.
//! - [`store`]: the metric store and its statistics.
//! - [`eval`]: the evaluator, minute by minute ([`Evaluator`]).
//!
//! ```
//! use punctual_alarms::{Evaluator, MetricId, MetricStore, Options, State, load};
//!
//! let template = r#"
//! Resources:
//!   Errors:
//!     Type: AWS::CloudWatch::Alarm
//!     Properties:
//!       Namespace: app
//!       MetricName: Errors
//!       Statistic: Sum
//!       Period: 60
//!       EvaluationPeriods: 1
//!       Threshold: 1
//!       ComparisonOperator: GreaterThanOrEqualToThreshold
//!       TreatMissingData: notBreaching
//! "#;
//! let alarms = load(template, &Options::default())?;
//! let mut evaluator = Evaluator::new(&alarms)?;
//! let mut store = MetricStore::new();
//! store.put(&MetricId::new("app", "Errors", &[]), 30, 2.0);
//! let transitions = evaluator.evaluate(60, &store)?;
//! assert_eq!(transitions[0].to, State::Alarm);
//! assert_eq!(evaluator.state("Errors"), Some(State::Alarm));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod eval;
pub mod math;
pub mod rule;
pub mod store;
pub mod template;

pub use eval::{EvalError, Evaluator, Outcome, Point, Transition, decide};
pub use math::{Expr, MathError};
pub use rule::{Rule, RuleError, State};
pub use store::{MetricId, MetricStore, Stat};
pub use template::{
    Alarms, Comparison, CompositeAlarm, MetricAlarm, Options, Query, QueryKind, Resource, Source, Suppressor,
    TemplateError, TreatMissing, load, load_path, resources,
};
