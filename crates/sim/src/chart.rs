//! The `punctual simulate --chart` picture: punctual and the baseline on the same axes.

use std::path::Path;

use punctual_chart::{BASELINE, ChartError, Line, PUNCTUAL, Panel, REFERENCE, draw as draw_panels};

use crate::simulate::SimReport;

/// Draws backlog, delivered/s against the quota, and cumulative late reminders; the baseline,
/// if any, under its name (`naive`, `shared`).
pub fn draw(
    path: &Path,
    title: &str,
    punctual: &SimReport,
    baseline: Option<(&str, &SimReport)>,
) -> Result<(), ChartError> {
    let line =
        |label: &str, points: &[(f64, f64)], color| Line { label: label.to_owned(), points: points.to_vec(), color };
    let mut backlog = vec![line("punctual", &punctual.timeline.backlog, PUNCTUAL)];
    let mut rate = vec![
        line("punctual", &punctual.timeline.delivered_per_second, PUNCTUAL),
        line("quota", &punctual.timeline.quota, REFERENCE),
    ];
    let mut late = vec![line("punctual", &punctual.timeline.late_cumulative, PUNCTUAL)];
    if let Some((name, b)) = baseline {
        backlog.push(line(name, &b.timeline.backlog, BASELINE));
        rate.push(line(name, &b.timeline.delivered_per_second, BASELINE));
        late.push(line(name, &b.timeline.late_cumulative, BASELINE));
    }
    // The interesting span: until the last run's backlog is gone.
    let x_max =
        backlog.iter().chain(rate.iter()).flat_map(|l| l.points.iter().map(|(x, _)| *x)).fold(1.0_f64, f64::max);
    let rate: Vec<Line> = rate
        .into_iter()
        .map(|mut l| {
            l.points.retain(|(x, _)| *x <= x_max);
            l
        })
        .collect();
    draw_panels(
        path,
        title,
        &[
            Panel { title: "backlog (messages on the queue)".into(), lines: backlog },
            Panel { title: "delivered per second".into(), lines: rate },
            Panel { title: "late reminders (cumulative)".into(), lines: late },
        ],
        Some(x_max),
    )
}
