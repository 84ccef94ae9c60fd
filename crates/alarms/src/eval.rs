//! The alarm evaluator: every alarm's state over simulated time, evaluated every 60 s against a
//! [`MetricStore`], with CloudWatch's documented semantics.
//!
//! Sources (CloudWatch User Guide):
//! - "Using Amazon CloudWatch alarms" / "Alarm evaluation"
//!   (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html>,
//!   <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html>):
//!   **Period** is the length of each datapoint; **Evaluation Periods** (N) "the number of the
//!   most recent periods, or data points, to evaluate"; **Datapoints to Alarm** (M) the number
//!   of them that must breach, "not … consecutive", an "M out of N" alarm.
//! - "Configuring how CloudWatch alarms treat missing data"
//!   (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html>;
//!   source text `awsdocs/amazon-cloudwatch-user-guide`, `doc_source/AlarmThatSendsEmail.md`,
//!   section "How alarm state is evaluated when data is missing"): CloudWatch retrieves **more**
//!   datapoints than N (the *evaluation range*). If none is missing, the most recent N decide.
//!   If some are missing but at least N exist, the most recent N *existing* ones decide and
//!   `TreatMissingData` is not used. If fewer than N exist, the missing ones are filled with the
//!   `TreatMissingData` result, "any real data points in the evaluation range, no matter when
//!   they were reported, are included", and missing points are used "as few times as possible":
//!   N points are evaluated; fewer than M breaching is OK, else ALARM. `missing`: all missing is
//!   INSUFFICIENT_DATA; `ignore`: the current state is kept. The page's two tables (3 of 3 and
//!   2 of 3, five datapoints retrieved) are this module's tests, row by row.
//! - "Why did my CloudWatch alarm send me a notification after a single breached data point?"
//!   (AWS Knowledge Center,
//!   <https://aws.amazon.com/premiumsupport/knowledge-center/cloudwatch-alarm-single-data-point/>): with `missing`,
//!   an alarm whose only existing datapoints are breaching goes to ALARM "when the oldest
//!   available breaching data point in the alarm's evaluation range is at least as old as the
//!   value of Datapoints to Alarm, and all other more recent data points are breaching or
//!   missing" — the table's `X - - - -` row. A datapoint's age counts the newest as 1.
//! - "Alarm evaluation window"
//!   (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation-window.html>):
//!   the default `SlidingWindow` "advances each time the alarm is evaluated, forming a rolling
//!   time window".
//!
//! What the pages leave open, and the choices:
//! - **Which datapoints**: the sliding window ends at the evaluation instant: at `now` the newest
//!   datapoint covers `[now − Period, now)`, the one before `[now − 2·Period, now − Period)`, and so
//!   on (whole seconds; the drill evaluates at whole minutes). No datapoint is aligned to a
//!   multiple of its period, and none waits for late data (the store holds what was put).
//! - **How many extra datapoints**: "depends on the length of the alarm period"; the only number
//!   given is 5 for N = 3. The evaluation range here is N + 2 datapoints
//!   ([`Evaluator::with_extra_datapoints`] changes the 2). So a `breaching` alarm on a metric
//!   that stops fires only once the whole range is empty: N + 2 periods after the last datapoint
//!   (3 × 300 s for a one-period 5-minute alarm), as the page's second row describes.
//! - **`missing`/`ignore` with some but fewer than N existing datapoints** (rows `0 - - - -`,
//!   `0 - X - -`, `- - - - 0`, `- - - - X`, `X - - - -`): M existing breaching datapoints are ALARM
//!   whatever the missing ones are; otherwise any existing non-breaching datapoint makes it OK
//!   (the missing ones are not considered); otherwise (only breaching ones, fewer than M)
//!   `missing` is ALARM by the Knowledge Center rule above or else INSUFFICIENT_DATA, and
//!   `ignore` keeps the state. Every documented row comes out as the tables say.
//! - **Metric math alarms**: each `MetricStat` query is fetched over the same datapoints, the
//!   expressions are evaluated per timestamp (functions that summarise a whole series, such as
//!   `SUM(m1)`, see the whole evaluation range — the metric math page warns of exactly that),
//!   and the returned series is compared with the threshold like a metric's.
//! - **Composite alarms** are evaluated after the metric alarms of the same instant, over their
//!   new states, in an order where each composite follows the composites its rule reads: ALARM
//!   when the rule is true, OK when false. Every alarm starts in INSUFFICIENT_DATA.

use std::collections::BTreeMap;

use serde::Serialize;
use thiserror::Error;

use crate::math::{self, MathError, Series};
use crate::rule::State;
use crate::store::MetricStore;
use crate::template::{
    Alarms, MetricAlarm, QueryKind, Source, TemplateError, TreatMissing, composite_order, query_order,
};

/// How many datapoints beyond Evaluation Periods are retrieved by default (the documented
/// example retrieves 5 for 3).
pub const DEFAULT_EXTRA_DATAPOINTS: u32 = 2;

/// One datapoint of the evaluation range, compared with the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Point {
    /// Present and breaching (`X` in the documented tables).
    Breaching,
    /// Present and within the threshold (`0`).
    NotBreaching,
    /// No datapoint (`-`).
    Missing,
}

/// What one evaluation decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// The alarm goes to (or stays in) this state.
    To(State),
    /// `ignore`: the current state is kept.
    Retain,
}

/// The state an evaluation range decides (oldest datapoint first), for an alarm that needs `m`
/// breaching datapoints out of `n` (`DatapointsToAlarm`, `EvaluationPeriods`), treating missing
/// data as `treat`. See the module documentation for the documented rules.
pub fn decide(points: &[Point], n: u32, m: u32, treat: TreatMissing) -> Outcome {
    let n = n as usize;
    let m = m as usize;
    let len = points.len();
    // (age, breaching) of the existing datapoints, newest first; the newest has age 1.
    let real: Vec<(usize, bool)> = points
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, p)| match p {
            Point::Breaching => Some((len - i, true)),
            Point::NotBreaching => Some((len - i, false)),
            Point::Missing => None,
        })
        .collect();
    let alarm_if = |breaching: usize| Outcome::To(if breaching >= m { State::Alarm } else { State::Ok });
    if real.len() >= n {
        // Enough real datapoints: the most recent N decide; TreatMissingData is not used.
        return alarm_if(real.iter().take(n).filter(|(_, b)| *b).count());
    }
    let breaching = real.iter().filter(|(_, b)| *b).count();
    let filled = n - real.len();
    if real.is_empty() {
        return match treat {
            TreatMissing::Missing => Outcome::To(State::InsufficientData),
            TreatMissing::Ignore => Outcome::Retain,
            TreatMissing::Breaching => alarm_if(filled),
            TreatMissing::NotBreaching => Outcome::To(State::Ok),
        };
    }
    match treat {
        TreatMissing::Breaching => alarm_if(breaching + filled),
        TreatMissing::NotBreaching => alarm_if(breaching),
        TreatMissing::Missing | TreatMissing::Ignore => {
            if breaching >= m {
                Outcome::To(State::Alarm)
            } else if breaching < real.len() {
                Outcome::To(State::Ok)
            } else if treat == TreatMissing::Ignore {
                Outcome::Retain
            } else {
                let oldest = real.last().map_or(0, |(age, _)| *age);
                Outcome::To(if oldest >= m { State::Alarm } else { State::InsufficientData })
            }
        }
    }
}

/// One alarm's change of state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// The alarm's name.
    pub alarm: String,
    /// Whether it is a composite alarm.
    pub composite: bool,
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// The evaluation instant (unix seconds).
    pub at: i64,
    /// The actions of the new state (`AlarmActions`, `OKActions`, `InsufficientDataActions`);
    /// empty when `ActionsEnabled` is false, or while a composite's actions suppressor holds
    /// them. `from == to` (ALARM): no change of state, the composite's held ALARM actions
    /// performed now (its suppressor's wait or extension period ended with it still in ALARM).
    pub actions: Vec<String>,
    /// The evaluation range's values, oldest first (`None` = missing); empty for a composite.
    pub datapoints: Vec<Option<f64>>,
}

/// Why an evaluation failed.
#[derive(Debug, Error)]
pub enum EvalError {
    /// The alarms are inconsistent (hand-built [`Alarms`]: a query cycle, a rule cycle…).
    #[error(transparent)]
    Alarms(#[from] TemplateError),
    /// A metric math expression failed on the data.
    #[error("{alarm}: query {query}: {source}")]
    Math {
        /// The alarm.
        alarm: String,
        /// The query's id.
        query: String,
        /// Why.
        source: MathError,
    },
    /// A math alarm without a query that returns data.
    #[error("{alarm}: no query returns data")]
    NoReturnedQuery {
        /// The alarm.
        alarm: String,
    },
}

/// Every alarm's state, advanced by [`Evaluator::evaluate`].
#[derive(Debug, Clone)]
pub struct Evaluator {
    alarms: Alarms,
    states: BTreeMap<String, State>,
    query_orders: Vec<Vec<usize>>,
    composite_order: Vec<usize>,
    extra: u32,
    /// Composites in ALARM whose ALARM actions an actions suppressor holds, by name.
    held: BTreeMap<String, Held>,
    /// Composites in ALARM whose ALARM actions were performed (their all-clear is sent).
    notified: std::collections::BTreeSet<String>,
}

/// Why a composite's ALARM actions wait ([`Evaluator::evaluate`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Held {
    /// For the suppressor to go to ALARM, until then.
    Waiting { until: i64 },
    /// The suppressor is in ALARM.
    Suppressed,
    /// The suppressor left ALARM; until then.
    Extended { until: i64 },
}

impl Evaluator {
    /// An evaluator over `alarms`, every alarm in INSUFFICIENT_DATA (as CloudWatch creates
    /// them).
    pub fn new(alarms: &Alarms) -> Result<Self, EvalError> {
        let query_orders = alarms
            .metric
            .iter()
            .map(|a| match &a.source {
                Source::Math { queries } => query_order(&a.logical_id, queries),
                Source::Metric { .. } => Ok(Vec::new()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let composite_order = composite_order(alarms)?;
        let states = alarms
            .metric
            .iter()
            .map(|a| &a.name)
            .chain(alarms.composite.iter().map(|a| &a.name))
            .map(|name| (name.clone(), State::InsufficientData))
            .collect();
        Ok(Self {
            alarms: alarms.clone(),
            states,
            query_orders,
            composite_order,
            extra: DEFAULT_EXTRA_DATAPOINTS,
            held: BTreeMap::new(),
            notified: std::collections::BTreeSet::new(),
        })
    }

    /// Retrieves `extra` datapoints beyond Evaluation Periods instead of
    /// [`DEFAULT_EXTRA_DATAPOINTS`].
    pub fn with_extra_datapoints(mut self, extra: u32) -> Self {
        self.extra = extra;
        self
    }

    /// The alarms evaluated.
    pub fn alarms(&self) -> &Alarms {
        &self.alarms
    }

    /// The current state of the alarm named `name`; `None` for no such alarm.
    pub fn state(&self, name: &str) -> Option<State> {
        self.states.get(name).copied()
    }

    /// Every alarm's current state, by name.
    pub fn states(&self) -> &BTreeMap<String, State> {
        &self.states
    }

    /// The evaluation range of `alarm` at `now`, oldest first.
    pub fn datapoints(&self, alarm: &MetricAlarm, now: i64, store: &MetricStore) -> Result<Series, EvalError> {
        let index = self.alarms.metric.iter().position(|a| a.name == alarm.name);
        let order = index.and_then(|i| self.query_orders.get(i));
        let range = (alarm.evaluation_periods + self.extra) as usize;
        let period = alarm.period();
        match &alarm.source {
            Source::Metric { metric, stat, period } => Ok(store.datapoints(metric, *stat, *period, now, range)),
            Source::Math { queries } => {
                let order = match order {
                    Some(order) => order.clone(),
                    None => query_order(&alarm.logical_id, queries)?,
                };
                let timestamps: Vec<i64> = (0..range).map(|i| now - (range - i) as i64 * i64::from(period)).collect();
                let mut series = BTreeMap::new();
                for q in order.iter().filter_map(|i| queries.get(*i)) {
                    let values = match &q.kind {
                        QueryKind::Stat { metric, stat, period } => {
                            store.datapoints(metric, *stat, *period, now, range)
                        }
                        QueryKind::Expression(expr) => {
                            math::evaluate_series(expr, &timestamps, &series).map_err(|source| EvalError::Math {
                                alarm: alarm.name.clone(),
                                query: q.id.clone(),
                                source,
                            })?
                        }
                    };
                    series.insert(q.id.clone(), values);
                }
                let returned = queries
                    .iter()
                    .find(|q| q.return_data)
                    .ok_or_else(|| EvalError::NoReturnedQuery { alarm: alarm.name.clone() })?;
                series.remove(&returned.id).ok_or_else(|| EvalError::NoReturnedQuery { alarm: alarm.name.clone() })
            }
        }
    }

    /// Evaluates every alarm at `now` (call it every 60 s of simulated time): metric alarms
    /// first, then composite alarms over the new states. Returns the state changes, metric
    /// alarms in template order, then composites.
    pub fn evaluate(&mut self, now: i64, store: &MetricStore) -> Result<Vec<Transition>, EvalError> {
        let mut transitions = Vec::new();
        for alarm in &self.alarms.metric {
            let values = self.datapoints(alarm, now, store)?;
            let points: Vec<Point> = values
                .iter()
                .map(|v| match v {
                    Some(v) if alarm.comparison.breaches(*v, alarm.threshold) => Point::Breaching,
                    Some(_) => Point::NotBreaching,
                    None => Point::Missing,
                })
                .collect();
            let outcome = decide(&points, alarm.evaluation_periods, alarm.datapoints_to_alarm, alarm.treat_missing);
            let from = self.state(&alarm.name).unwrap_or(State::InsufficientData);
            let to = match outcome {
                Outcome::To(state) => state,
                Outcome::Retain => from,
            };
            if to != from {
                let actions = if alarm.actions_enabled {
                    actions_for(to, &alarm.actions, &alarm.ok_actions, &alarm.insufficient_data_actions)
                } else {
                    Vec::new()
                };
                transitions.push(Transition {
                    alarm: alarm.name.clone(),
                    composite: false,
                    from,
                    to,
                    at: now,
                    actions,
                    datapoints: values,
                });
            }
        }
        // Every metric alarm of this instant is decided before any state changes.
        for t in &transitions {
            self.states.insert(t.alarm.clone(), t.to);
        }
        let first_composite = transitions.len();
        for &i in &self.composite_order {
            let Some(alarm) = self.alarms.composite.get(i) else { continue };
            let states = &self.states;
            let truth = alarm.rule.evaluate(&|name| states.get(name).copied().unwrap_or(State::InsufficientData));
            let to = if truth { State::Alarm } else { State::Ok };
            let from = self.state(&alarm.name).unwrap_or(State::InsufficientData);
            if to != from {
                let actions = if alarm.actions_enabled {
                    actions_for(to, &alarm.actions, &alarm.ok_actions, &alarm.insufficient_data_actions)
                } else {
                    Vec::new()
                };
                transitions.push(Transition {
                    alarm: alarm.name.clone(),
                    composite: true,
                    from,
                    to,
                    at: now,
                    actions,
                    datapoints: Vec::new(),
                });
                self.states.insert(alarm.name.clone(), to);
            }
        }
        self.suppress(now, first_composite, &mut transitions);
        Ok(transitions)
    }

    /// A composite's `ActionsSuppressor`, as CloudWatch documents it, over every state of this
    /// instant: gone to ALARM while its suppressor is in ALARM, the composite's actions are
    /// suppressed; gone to ALARM otherwise, they wait up to the wait period for the suppressor to
    /// go to ALARM (then suppressed) and are performed when it ends with the composite still in
    /// ALARM; suppressed, they are performed when the extension period after the suppressor left
    /// ALARM ends with the composite still in ALARM (a late performance is a transition from
    /// ALARM to ALARM). Two choices where the documentation is silent: a composite whose ALARM
    /// actions were never performed performs no OK actions when it clears (no all-clear for a
    /// page never sent), and a wait or extension period ends at the first evaluation at or after
    /// its end.
    fn suppress(&mut self, now: i64, first_composite: usize, transitions: &mut Vec<Transition>) {
        let in_alarm = |states: &BTreeMap<String, State>, name: &str| states.get(name) == Some(&State::Alarm);
        for alarm in &self.alarms.composite {
            let Some(s) = &alarm.suppressor else {
                continue;
            };
            let suppressor_alarm = in_alarm(&self.states, &s.alarm);
            let changed = transitions[first_composite..].iter_mut().find(|t| t.alarm == alarm.name);
            match changed {
                Some(t) if t.to == State::Alarm => {
                    self.notified.remove(&alarm.name);
                    if suppressor_alarm {
                        self.held.insert(alarm.name.clone(), Held::Suppressed);
                        t.actions.clear();
                    } else if s.wait_seconds > 0 {
                        self.held.insert(alarm.name.clone(), Held::Waiting { until: now + i64::from(s.wait_seconds) });
                        t.actions.clear();
                    } else {
                        self.notified.insert(alarm.name.clone());
                    }
                    continue;
                }
                Some(t) => {
                    // Cleared (or no data): held actions are dropped, and an all-clear only
                    // follows a page that was sent.
                    self.held.remove(&alarm.name);
                    if !self.notified.remove(&alarm.name) {
                        t.actions.clear();
                    }
                    continue;
                }
                None => {}
            }
            let Some(held) = self.held.get(&alarm.name).copied() else { continue };
            let next = match held {
                Held::Waiting { until } if !suppressor_alarm && now >= until => None,
                Held::Extended { until } if !suppressor_alarm && now >= until => None,
                Held::Waiting { .. } | Held::Extended { .. } if suppressor_alarm => Some(Held::Suppressed),
                Held::Suppressed if !suppressor_alarm => {
                    let until = now + i64::from(s.extension_seconds);
                    if s.extension_seconds == 0 { None } else { Some(Held::Extended { until }) }
                }
                other => Some(other),
            };
            match next {
                Some(h) => {
                    self.held.insert(alarm.name.clone(), h);
                }
                None => {
                    self.held.remove(&alarm.name);
                    self.notified.insert(alarm.name.clone());
                    transitions.push(Transition {
                        alarm: alarm.name.clone(),
                        composite: true,
                        from: State::Alarm,
                        to: State::Alarm,
                        at: now,
                        actions: if alarm.actions_enabled { alarm.actions.clone() } else { Vec::new() },
                        datapoints: Vec::new(),
                    });
                }
            }
        }
    }
}

/// The actions of a transition to `to`.
fn actions_for(to: State, alarm: &[String], ok: &[String], insufficient: &[String]) -> Vec<String> {
    match to {
        State::Alarm => alarm.to_vec(),
        State::Ok => ok.to_vec(),
        State::InsufficientData => insufficient.to_vec(),
    }
}

#[cfg(test)]
mod tests;
