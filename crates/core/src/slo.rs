//! The deadline SLO (docs/design.md#the-deadline-slo-and-reconciliation): over **every due reminder**, not over attempts. A reminder is
//! *met* when the provider accepted it before `deliver_by` and at most `within` after
//! `deliver_after`; *breached* when it was accepted later, expired, dead-lettered, lost, or is
//! still waiting past `deliver_after + within`; *excluded* when its renewal was cancelled or
//! paid; *pending* while it waits and can still make it (not yet counted either way). Attainment
//! is met ÷ (met + breached); the error budget is the `1 − target` share of the same
//! denominator.
//!
//! The functions publish the same verdicts as they happen (the scheduler counts the due at
//! release, the sender met/breached/excluded at its decision: [`verdict_of`]); `punctual
//! reconcile` and `status` judge the population after the fact ([`judge`]); the simulator and
//! `forecast` judge projected endings with the same [`judge`]. One definition everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::accounting::{Ending, Outcome};
use crate::clock::add;
use crate::decision::Disposition;

/// The SLO's configuration (`SLO_TARGET`, `SLO_WITHIN_SECS`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SloPolicy {
    /// The share of due reminders that must be met, in (0, 1).
    pub target: f64,
    /// How long after `deliver_after` a delivery still meets it.
    pub within: Duration,
}

impl Default for SloPolicy {
    /// 99 % within five minutes of `deliver_after` (the runbook's figure).
    fn default() -> Self {
        Self { target: 0.99, within: Duration::from_secs(300) }
    }
}

/// A bad SLO setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SloError {
    /// The target is not a fraction strictly between 0 and 1.
    #[error("SLO_TARGET {0:?} must be a fraction strictly between 0 and 1, e.g. 0.99")]
    Target(String),
    /// The window is not a whole number of seconds from 1 to 86,400.
    #[error("SLO_WITHIN_SECS {0:?} must be whole seconds from 1 to 86400, e.g. 300")]
    Within(String),
}

impl SloPolicy {
    /// The policy from the two settings, each defaulting when absent. A target of 1 is refused:
    /// it leaves no error budget, so every burn-rate alarm would divide by zero.
    pub fn parse(target: Option<&str>, within: Option<&str>) -> Result<Self, SloError> {
        let d = Self::default();
        let target = match target.map(str::trim) {
            None | Some("") => d.target,
            Some(t) => {
                t.parse::<f64>().ok().filter(|v| *v > 0.0 && *v < 1.0).ok_or_else(|| SloError::Target(t.into()))?
            }
        };
        let within = match within.map(str::trim) {
            None | Some("") => d.within,
            Some(w) => w
                .parse::<u64>()
                .ok()
                .filter(|v| (1..=86_400).contains(v))
                .map(Duration::from_secs)
                .ok_or_else(|| SloError::Within(w.into()))?,
        };
        Ok(Self { target, within })
    }

    /// The latest instant a reminder due at `deliver_after` (with deadline `deliver_by`) can
    /// be accepted and still meet the SLO.
    pub fn met_by(&self, deliver_after: DateTime<Utc>, deliver_by: DateTime<Utc>) -> DateTime<Utc> {
        add(deliver_after, self.within).min(deliver_by)
    }
}

/// One reminder against the SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Accepted in time.
    Met,
    /// Missed: accepted late, expired, dead-lettered, lost, or still waiting past its time.
    Breached,
    /// Not part of the due population: the renewal was cancelled or paid.
    Excluded,
    /// Still waiting and can still meet it.
    Pending,
}

/// The sender's verdict on one decision about a reminder released by the scheduler (`None`:
/// no verdict yet — deferred, or acknowledged without a new effect). A redriven copy gets none:
/// its reminder was judged when it was dead-lettered. `delivery_lag` is the acceptance's time
/// after `deliver_after` and `slack` what was left to `deliver_by` at it (zero at or past it):
/// the sender never calls after `deliver_by`, but a call in flight at the deadline can be
/// accepted just after it, and [`judge`] calls that breached too.
pub fn verdict_of(
    disposition: &Disposition,
    delivery_lag: Option<Duration>,
    slack: Option<Duration>,
    policy: &SloPolicy,
) -> Option<Verdict> {
    match disposition {
        Disposition::Delivered { .. } => {
            let in_time = slack.is_some_and(|s| !s.is_zero());
            let within = delivery_lag.is_some_and(|lag| lag <= policy.within);
            Some(if in_time && within { Verdict::Met } else { Verdict::Breached })
        }
        Disposition::Expire { .. } | Disposition::Quarantine { .. } => Some(Verdict::Breached),
        Disposition::Cancel { .. } => Some(Verdict::Excluded),
        // A stale copy: the renewal's current version is the one judged.
        Disposition::Defer { .. } | Disposition::Acknowledge { .. } | Disposition::Rescheduled { .. } => None,
    }
}

/// Judges one reminder's ending as of `as_of`.
pub fn judge(e: &Ending, policy: &SloPolicy, as_of: DateTime<Utc>) -> Verdict {
    let met_by = e.deliver_after.map(|after| policy.met_by(after, e.deliver_by));
    match &e.outcome {
        // Sent before it was due (a copy of an earlier version, say) is not a met reminder.
        Outcome::Delivered { at } if e.deliver_after.is_some_and(|after| *at < after) => Verdict::Breached,
        Outcome::Delivered { at } => match met_by {
            Some(by) if *at <= by && *at < e.deliver_by => Verdict::Met,
            None if *at < e.deliver_by => Verdict::Met,
            _ => Verdict::Breached,
        },
        Outcome::Expired | Outcome::DeadLettered { .. } | Outcome::Lost => Verdict::Breached,
        Outcome::Cancelled => Verdict::Excluded,
        // Pending while an acceptance now could still meet it: not past `deliver_after +
        // within`, and before `deliver_by`.
        Outcome::Waiting => match met_by {
            Some(by) if as_of <= by && as_of < e.deliver_by => Verdict::Pending,
            None if as_of < e.deliver_by => Verdict::Pending,
            _ => Verdict::Breached,
        },
    }
}

/// Met, breached, excluded and pending counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SloCounts {
    /// Met.
    pub met: u64,
    /// Breached.
    pub breached: u64,
    /// Excluded (cancelled, paid).
    pub excluded: u64,
    /// Waiting, still able to meet it.
    pub pending: u64,
}

impl SloCounts {
    /// Adds one verdict.
    pub fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Met => self.met += 1,
            Verdict::Breached => self.breached += 1,
            Verdict::Excluded => self.excluded += 1,
            Verdict::Pending => self.pending += 1,
        }
    }

    /// Met ÷ (met + breached); `None` before anything was decided.
    pub fn attainment(&self) -> Option<f64> {
        let decided = self.met + self.breached;
        (decided > 0).then(|| self.met as f64 / decided as f64)
    }
}

/// One tenant's figures in a summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantSlo {
    /// The tenant.
    pub tenant_id: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: SloCounts,
    /// Its attainment.
    pub attainment: Option<f64>,
}

/// The SLO over a population (JSON keys are a contract: `reconcile`, `status`, `run`,
/// `simulate` and `forecast` print this).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloSummary {
    /// `SLO_TARGET`.
    pub target: f64,
    /// `SLO_WITHIN_SECS`.
    pub within_seconds: u64,
    /// Every tenant together.
    #[serde(flatten)]
    pub counts: SloCounts,
    /// Met ÷ (met + breached), `None` when nothing was decided.
    pub attainment: Option<f64>,
    /// The error budget left: 1 − breached ÷ ((1 − target) × (met + breached)); negative
    /// once overspent. `None` when nothing was decided.
    pub budget_left: Option<f64>,
    /// False only when the attainment is known and below the target.
    pub meets_target: bool,
    /// The tenants with the most breaches (at most [`WORST_TENANTS`], most breaches first).
    pub worst_tenants: Vec<TenantSlo>,
}

/// Tenants listed in [`SloSummary::worst_tenants`].
pub const WORST_TENANTS: usize = 5;

/// Counts verdicts overall and per tenant.
#[derive(Debug, Clone, Default)]
pub struct SloTally {
    all: SloCounts,
    tenants: BTreeMap<String, SloCounts>,
}

impl SloTally {
    /// An empty tally.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one reminder of `tenant`.
    pub fn add(&mut self, tenant: &str, v: Verdict) {
        self.all.add(v);
        self.tenants.entry(tenant.to_owned()).or_default().add(v);
    }

    /// Every tenant together.
    pub fn counts(&self) -> SloCounts {
        self.all
    }

    /// Per tenant.
    pub fn tenants(&self) -> &BTreeMap<String, SloCounts> {
        &self.tenants
    }

    /// The summary under `policy`.
    pub fn summary(&self, policy: &SloPolicy) -> SloSummary {
        let attainment = self.all.attainment();
        let decided = (self.all.met + self.all.breached) as f64;
        // Rounded to 1e-9: at exactly the target the budget is 0, not -2e-16 (and `line()`
        // would print "-0.00 %" beside a target it meets).
        let budget_left = (decided > 0.0).then(|| {
            let left = 1.0 - self.all.breached as f64 / ((1.0 - policy.target) * decided);
            (left * 1e9).round() / 1e9
        });
        let mut worst: Vec<TenantSlo> = self
            .tenants
            .iter()
            .filter(|(_, c)| c.breached > 0)
            .map(|(t, c)| TenantSlo { tenant_id: t.clone(), counts: *c, attainment: c.attainment() })
            .collect();
        worst.sort_by(|a, b| {
            b.counts
                .breached
                .cmp(&a.counts.breached)
                .then_with(|| a.attainment.partial_cmp(&b.attainment).unwrap_or(std::cmp::Ordering::Equal))
        });
        worst.truncate(WORST_TENANTS);
        SloSummary {
            target: policy.target,
            within_seconds: policy.within.as_secs(),
            counts: self.all,
            attainment,
            budget_left,
            meets_target: attainment.is_none_or(|a| a >= policy.target),
            worst_tenants: worst,
        }
    }
}

impl SloSummary {
    /// One line for a human: `SLO 99.2 % met within 300 s (target 99 %): 4,960 met, 40
    /// breached, 12 excluded, 0 pending; budget left 20 %`.
    pub fn line(&self) -> String {
        let pct = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.2} %", v * 100.0));
        format!(
            "SLO {} met within {} s (target {:.2} %{}): {} met, {} breached, {} excluded, {} pending; budget left {}",
            pct(self.attainment),
            self.within_seconds,
            self.target * 100.0,
            if self.meets_target { "" } else { ", MISSED" },
            self.counts.met,
            self.counts.breached,
            self.counts.excluded,
            self.counts.pending,
            pct(self.budget_left),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(1_000_000 + s)
    }

    fn ending(outcome: Outcome) -> Ending {
        Ending { deliver_after: Some(t(0)), deliver_by: t(3600), outcome, ended_at: None }
    }

    #[test]
    fn settings_refuse_what_would_leave_no_budget_or_no_window() {
        assert_eq!(SloPolicy::parse(None, None).unwrap(), SloPolicy::default());
        let p = SloPolicy::parse(Some("0.999"), Some("120")).unwrap();
        assert_eq!((p.target, p.within), (0.999, Duration::from_secs(120)));
        for bad in ["1", "1.0", "0", "99", "-0.5", "abc", "NaN"] {
            assert!(matches!(SloPolicy::parse(Some(bad), None), Err(SloError::Target(_))), "{bad}");
        }
        for bad in ["0", "-1", "86401", "5m", "1.5"] {
            assert!(matches!(SloPolicy::parse(None, Some(bad)), Err(SloError::Within(_))), "{bad}");
        }
    }

    #[test]
    fn the_boundary_of_within_is_met_one_second_past_is_breached() {
        let p = SloPolicy::default();
        let at = |s| judge(&ending(Outcome::Delivered { at: t(s) }), &p, t(9999));
        assert_eq!((at(0), at(300), at(301)), (Verdict::Met, Verdict::Met, Verdict::Breached));
        // Before deliver_after is not in time: it is early (a copy of an earlier version).
        assert_eq!(at(-3600), Verdict::Breached, "a reminder sent an hour early was judged met");
        // A deadline tighter than `within` bounds the SLO too: accepted at deliver_by is late.
        let tight = Ending { deliver_by: t(120), ..ending(Outcome::Delivered { at: t(120) }) };
        assert_eq!(judge(&tight, &p, t(9999)), Verdict::Breached);
        // Waiting: pending until deliver_after + within, breached after (no delivery can meet it).
        let waiting = ending(Outcome::Waiting);
        assert_eq!((judge(&waiting, &p, t(300)), judge(&waiting, &p, t(301))), (Verdict::Pending, Verdict::Breached));
        // At deliver_by nothing can meet it any more, even inside `within`.
        let short = Ending { deliver_by: t(120), ..ending(Outcome::Waiting) };
        assert_eq!((judge(&short, &p, t(119)), judge(&short, &p, t(120))), (Verdict::Pending, Verdict::Breached));
        for o in [Outcome::Expired, Outcome::Lost, Outcome::DeadLettered { reason: "attempt_limit".into() }] {
            assert_eq!(judge(&ending(o), &p, t(0)), Verdict::Breached);
        }
        assert_eq!(judge(&ending(Outcome::Cancelled), &p, t(0)), Verdict::Excluded);
    }

    #[test]
    fn the_sender_verdict_matches_the_after_the_fact_judgement() {
        let p = SloPolicy::default();
        let delivered = Disposition::Delivered { attempt: 1, receipt: None };
        let slack = Some(Duration::from_secs(60));
        assert_eq!(verdict_of(&delivered, Some(Duration::from_secs(300)), slack, &p), Some(Verdict::Met));
        assert_eq!(verdict_of(&delivered, Some(Duration::from_secs(301)), slack, &p), Some(Verdict::Breached));
        assert_eq!(
            verdict_of(&delivered, None, slack, &p),
            Some(Verdict::Breached),
            "an unknown lag is not claimed as met"
        );
        // A tight deadline: a call in flight at deliver_by (T+120 s) accepted at T+120.3 s is
        // within 300 s of deliver_after but late; the sender and `judge` must both say breached.
        let lag = Duration::from_millis(120_300);
        assert_eq!(verdict_of(&delivered, Some(lag), Some(Duration::ZERO), &p), Some(Verdict::Breached));
        let tight = Ending {
            deliver_by: t(120),
            ..ending(Outcome::Delivered { at: t(0) + chrono::TimeDelta::milliseconds(120_300) })
        };
        assert_eq!(judge(&tight, &p, t(9999)), Verdict::Breached);
        let defer = Disposition::Defer {
            until: t(5),
            reason: crate::ReasonCode::RateLimited,
            attempts_made: 0,
            provider_status: None,
        };
        assert_eq!(verdict_of(&defer, None, slack, &p), None);
    }

    #[test]
    fn attainment_budget_and_worst_tenants() {
        let p = SloPolicy { target: 0.9, within: Duration::from_secs(300) };
        let mut tally = SloTally::new();
        for _ in 0..95 {
            tally.add("quiet", Verdict::Met);
        }
        for _ in 0..5 {
            tally.add("noisy", Verdict::Breached);
        }
        tally.add("quiet", Verdict::Excluded);
        tally.add("quiet", Verdict::Pending);
        tally.add("mid", Verdict::Breached);
        let s = tally.summary(&p);
        assert_eq!((s.counts.met, s.counts.breached, s.counts.excluded, s.counts.pending), (95, 6, 1, 1));
        assert!((s.attainment.unwrap() - 95.0 / 101.0).abs() < 1e-12);
        // Budget: 10 % of 101 = 10.1 breaches allowed, 6 spent.
        assert!((s.budget_left.unwrap() - (1.0 - 6.0 / 10.1)).abs() < 1e-9);
        assert!(s.meets_target);
        // Exactly at the target: met, and no budget left (not a rounding error below zero).
        let mut exact = SloTally::new();
        (0..90).for_each(|_| exact.add("a", Verdict::Met));
        (0..10).for_each(|_| exact.add("a", Verdict::Breached));
        let e = exact.summary(&p);
        assert!(e.meets_target && e.budget_left == Some(0.0), "{e:?}");
        assert_eq!(s.worst_tenants.iter().map(|t| t.tenant_id.as_str()).collect::<Vec<_>>(), ["noisy", "mid"]);
        assert!(SloTally::new().summary(&p).attainment.is_none(), "nothing decided: no attainment");
        assert!(SloTally::new().summary(&p).meets_target);
        let mut bad = SloTally::new();
        bad.add("x", Verdict::Breached);
        assert!(!bad.summary(&p).meets_target);
        assert!(bad.summary(&p).line().contains("MISSED"));
    }
}
