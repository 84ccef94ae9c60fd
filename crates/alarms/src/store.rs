//! The metric store: raw samples per metric (namespace, name, dimensions) and CloudWatch's
//! statistics over a half-open time range `[start, end)`.
//!
//! A metric is identified exactly as CloudWatch identifies it: namespace, metric name and the
//! complete set of dimensions ("each unique combination of dimensions is a separate metric",
//! Amazon CloudWatch concepts — Dimensions,
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html#Dimension>).
//! A range without any sample has no datapoint (`None`): it is *missing*, not zero.
//!
//! Percentiles use the **nearest-rank** method over the raw samples: the `p`-th percentile of `n`
//! sorted samples is the sample at rank `ceil(p / 100 × n)` (at least 1). CloudWatch computes
//! percentiles approximately; nearest-rank is exact on what the store holds and never
//! interpolates a value that was not sampled.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// One metric: namespace, metric name and dimensions (name → value).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MetricId {
    /// Namespace, e.g. `AWS/Lambda` or `punctual/drill`.
    pub namespace: String,
    /// Metric name, e.g. `Invocations`.
    pub name: String,
    /// Dimensions, e.g. `FunctionName = SchedulerFunction`.
    pub dimensions: BTreeMap<String, String>,
}

impl MetricId {
    /// A metric from its namespace, name and `(dimension, value)` pairs.
    pub fn new(namespace: &str, name: &str, dimensions: &[(&str, &str)]) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            dimensions: dimensions.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }
}

impl fmt::Display for MetricId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.dimensions.is_empty() {
            let dims: Vec<String> = self.dimensions.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, "{{{}}}", dims.join(","))?;
        }
        Ok(())
    }
}

/// A statistic over one period: CloudWatch's `Statistic` values and the `pNN` form of
/// `ExtendedStatistic` (PutMetricAlarm,
/// <https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html>).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Stat {
    /// Sum of the samples.
    Sum,
    /// Mean of the samples.
    Average,
    /// Smallest sample.
    Minimum,
    /// Largest sample.
    Maximum,
    /// Number of samples.
    SampleCount,
    /// Percentile in `[0, 100]` (`p99` = 99.0, `p99.9` = 99.9); nearest-rank.
    Percentile(f64),
}

impl Stat {
    /// Parses a statistic name as CloudWatch spells it (`Sum`, `Average`, `Minimum`,
    /// `Maximum`, `SampleCount`, `p99`, `p99.9`); `None` for anything else (trimmed means,
    /// `IQM`, `TC`… are not supported).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "Sum" => Some(Self::Sum),
            "Average" => Some(Self::Average),
            "Minimum" => Some(Self::Minimum),
            "Maximum" => Some(Self::Maximum),
            "SampleCount" => Some(Self::SampleCount),
            _ => {
                let rest = text.strip_prefix('p').or_else(|| text.strip_prefix('P'))?;
                let value: f64 = rest.parse().ok()?;
                (value.is_finite() && (0.0..=100.0).contains(&value)).then_some(Self::Percentile(value))
            }
        }
    }

    /// The statistic of `samples` (in any order); `None` when there are none.
    pub fn of(&self, samples: &[f64]) -> Option<f64> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        Some(match self {
            Self::Sum => samples.iter().sum(),
            Self::Average => samples.iter().sum::<f64>() / n,
            Self::Minimum => samples.iter().copied().fold(f64::INFINITY, f64::min),
            Self::Maximum => samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Self::SampleCount => n,
            Self::Percentile(p) => {
                let mut sorted = samples.to_vec();
                sorted.sort_by(f64::total_cmp);
                // Nearest rank: ceil(p/100 × n), at least 1, at most n.
                let rank = ((p / 100.0) * n).ceil().max(1.0).min(n) as usize;
                sorted.get(rank - 1).copied().unwrap_or(f64::NAN)
            }
        })
    }
}

impl fmt::Display for Stat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sum => f.write_str("Sum"),
            Self::Average => f.write_str("Average"),
            Self::Minimum => f.write_str("Minimum"),
            Self::Maximum => f.write_str("Maximum"),
            Self::SampleCount => f.write_str("SampleCount"),
            Self::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

/// The samples of one metric at one second, with their running aggregates (so Sum, Average,
/// Minimum, Maximum and SampleCount never copy the samples).
#[derive(Debug, Clone, Default)]
struct Bucket {
    sum: f64,
    min: f64,
    max: f64,
    values: Vec<f64>,
}

impl Bucket {
    fn add(&mut self, value: f64) {
        if self.values.is_empty() {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.sum += value;
        self.values.push(value);
    }
}

/// Raw samples of every metric, by time (unix seconds).
#[derive(Debug, Clone, Default)]
pub struct MetricStore {
    samples: BTreeMap<MetricId, BTreeMap<i64, Bucket>>,
    /// Samples at or after this instant are not visible yet (see [`MetricStore::ingested_before`]).
    cutoff: Option<i64>,
}

impl MetricStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hides every sample at or after `cutoff` from the reads until called again (`None`: all
    /// visible). CloudWatch ingests a datapoint some time after it happened; an evaluation at
    /// `now` with an ingestion delay `d` sees the store as of `now − d`, while its windows still
    /// end at `now` — the newest period is partial or missing, as it is on AWS.
    pub fn ingested_before(&mut self, cutoff: Option<i64>) {
        self.cutoff = cutoff;
    }

    fn visible_end(&self, end: i64) -> i64 {
        self.cutoff.map_or(end, |c| end.min(c))
    }

    /// Records one sample of `id` at `at` (unix seconds). Any number of samples may share a
    /// second or a minute.
    pub fn put(&mut self, id: &MetricId, at: i64, value: f64) {
        self.put_many(id, at, &[value]);
    }

    /// Records several samples of `id` at `at` (an EMF document's array of values).
    pub fn put_many(&mut self, id: &MetricId, at: i64, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        let by_time = match self.samples.get_mut(id) {
            Some(by_time) => by_time,
            None => self.samples.entry(id.clone()).or_default(),
        };
        let bucket = by_time.entry(at).or_default();
        for value in values {
            bucket.add(*value);
        }
    }

    /// The samples of `id` in `[start, end)`, oldest first.
    pub fn samples(&self, id: &MetricId, start: i64, end: i64) -> Vec<f64> {
        let end = self.visible_end(end);
        if start >= end {
            return Vec::new();
        }
        self.samples
            .get(id)
            .map(|by_time| by_time.range(start..end).flat_map(|(_, b)| b.values.iter().copied()).collect())
            .unwrap_or_default()
    }

    /// The statistic of `id` over `[start, end)`; `None` (a missing datapoint) when the range
    /// holds no sample.
    pub fn statistic(&self, id: &MetricId, stat: Stat, start: i64, end: i64) -> Option<f64> {
        if let Stat::Percentile(_) = stat {
            return stat.of(&self.samples(id, start, end));
        }
        let end = self.visible_end(end);
        if start >= end {
            return None;
        }
        let buckets = self.samples.get(id)?.range(start..end).map(|(_, b)| b);
        let (mut sum, mut count, mut min, mut max) = (0.0, 0usize, f64::INFINITY, f64::NEG_INFINITY);
        for b in buckets {
            sum += b.sum;
            count += b.values.len();
            min = min.min(b.min);
            max = max.max(b.max);
        }
        if count == 0 {
            return None;
        }
        Some(match stat {
            Stat::Sum => sum,
            Stat::Average => sum / count as f64,
            Stat::Minimum => min,
            Stat::Maximum => max,
            Stat::SampleCount => count as f64,
            Stat::Percentile(_) => return None,
        })
    }

    /// `count` consecutive datapoints of `period` seconds ending at `end` (exclusive), oldest
    /// first: datapoint `i` covers `[end − (count − i)·period, end − (count − i − 1)·period)`.
    pub fn datapoints(&self, id: &MetricId, stat: Stat, period: u32, end: i64, count: usize) -> Vec<Option<f64>> {
        let period = i64::from(period);
        (0..count)
            .map(|i| {
                let start = end - (count - i) as i64 * period;
                self.statistic(id, stat, start, start + period)
            })
            .collect()
    }

    /// Every metric the store holds a sample of.
    pub fn metrics(&self) -> impl Iterator<Item = &MetricId> {
        self.samples.keys()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn id() -> MetricId {
        MetricId::new("punctual/drill", "SloDue", &[("Function", "scheduler")])
    }

    #[test]
    fn statistics_over_a_half_open_range() {
        let mut store = MetricStore::new();
        store.put_many(&id(), 60, &[4.0, 1.0]);
        store.put(&id(), 90, 7.0);
        store.put(&id(), 119, 2.0);
        store.put(&id(), 120, 100.0); // outside [60, 120)
        let cases = [
            (Stat::Sum, 14.0),
            (Stat::Average, 3.5),
            (Stat::Minimum, 1.0),
            (Stat::Maximum, 7.0),
            (Stat::SampleCount, 4.0),
            (Stat::Percentile(50.0), 2.0),
            (Stat::Percentile(99.0), 7.0),
            (Stat::Percentile(0.0), 1.0),
        ];
        for (stat, want) in cases {
            assert_eq!(store.statistic(&id(), stat, 60, 120), Some(want), "{stat}");
        }
    }

    #[test]
    fn a_range_without_samples_is_missing_not_zero() {
        let mut store = MetricStore::new();
        store.put(&id(), 0, 1.0);
        assert_eq!(store.statistic(&id(), Stat::Sum, 60, 120), None);
        assert_eq!(store.statistic(&id(), Stat::SampleCount, 60, 120), None);
        let other = MetricId::new("punctual/drill", "SloDue", &[("Function", "sender")]);
        assert_eq!(store.statistic(&other, Stat::Sum, 0, 60), None, "dimensions are part of the identity");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(Stat::Percentile(99.0).of(&samples), Some(99.0));
        assert_eq!(Stat::Percentile(99.9).of(&samples), Some(100.0));
        assert_eq!(Stat::Percentile(50.0).of(&samples), Some(50.0));
        assert_eq!(Stat::Percentile(100.0).of(&samples), Some(100.0));
        assert_eq!(Stat::Percentile(90.0).of(&[3.0, 1.0, 2.0]), Some(3.0));
    }

    #[test]
    fn datapoints_end_at_the_given_instant() {
        let mut store = MetricStore::new();
        store.put(&id(), 0, 1.0);
        store.put(&id(), 130, 2.0);
        // Three one-minute datapoints ending at 180: [0,60) [60,120) [120,180).
        assert_eq!(store.datapoints(&id(), Stat::Sum, 60, 180, 3), vec![Some(1.0), None, Some(2.0)]);
    }

    /// The running aggregates give what the raw samples give, for every range.
    #[test]
    fn aggregates_match_the_samples() {
        let mut store = MetricStore::new();
        for i in 0..200i64 {
            let value = ((i * 37) % 23) as f64 - 11.5;
            store.put_many(&id(), i % 50, &[value, value * 2.0]);
        }
        let stats = [Stat::Sum, Stat::Average, Stat::Minimum, Stat::Maximum, Stat::SampleCount, Stat::Percentile(90.0)];
        for (start, end) in [(0, 50), (3, 4), (10, 37), (49, 60), (60, 70)] {
            for stat in stats {
                let want = stat.of(&store.samples(&id(), start, end));
                assert_eq!(store.statistic(&id(), stat, start, end), want, "{stat} [{start}, {end})");
            }
        }
    }

    #[test]
    fn parses_statistic_names() {
        assert_eq!(Stat::parse("Sum"), Some(Stat::Sum));
        assert_eq!(Stat::parse("SampleCount"), Some(Stat::SampleCount));
        assert_eq!(Stat::parse("p99"), Some(Stat::Percentile(99.0)));
        assert_eq!(Stat::parse("p99.9"), Some(Stat::Percentile(99.9)));
        assert_eq!(Stat::parse("p101"), None);
        assert_eq!(Stat::parse("tm99"), None);
        assert_eq!(Stat::parse("sum"), None);
    }

    #[test]
    fn samples_not_yet_ingested_are_missing_and_the_newest_period_partial() {
        let id = MetricId::new("ns", "m", &[]);
        let mut store = MetricStore::new();
        for minute in 0..5 {
            store.put(&id, minute * 60 + 10, 1.0);
            store.put(&id, minute * 60 + 50, 1.0);
        }
        store.ingested_before(Some(4 * 60 + 30));
        assert_eq!(store.datapoints(&id, Stat::Sum, 60, 300, 3), vec![Some(2.0), Some(2.0), Some(1.0)]);
        store.ingested_before(Some(4 * 60));
        assert_eq!(store.datapoints(&id, Stat::Sum, 60, 300, 2), vec![Some(2.0), None]);
        store.ingested_before(None);
        assert_eq!(store.datapoints(&id, Stat::Sum, 60, 300, 1), vec![Some(2.0)]);
    }
}
