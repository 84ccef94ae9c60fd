//! PNG charts of a run: stacked panels sharing a time axis. The font is bundled
//! (`assets/DejaVuSans.ttf`, license beside it) and rendered with ab_glyph, so a machine
//! without any system font draws the same chart.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// One line of a panel.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend label.
    pub label: String,
    /// (x, y) points, x in seconds.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub color: RGBColor,
}

/// One panel.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Panel title (also the y axis meaning).
    pub title: String,
    /// Lines.
    pub lines: Vec<Line>,
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("could not draw {path}: {detail}")]
pub struct ChartError {
    /// The file.
    pub path: String,
    /// Why.
    pub detail: String,
}

static FONT: Once = Once::new();

/// punctual's line colour; the baseline's.
pub const PUNCTUAL: RGBColor = RGBColor(31, 119, 180);
/// The baseline's colour.
pub const BASELINE: RGBColor = RGBColor(214, 39, 40);
/// Reference lines (quota).
pub const REFERENCE: RGBColor = RGBColor(90, 90, 90);

/// Draws `panels` stacked into a PNG at `path`. The time axis ends at `x_max` when given
/// (points past it are drawn at the edge), else at the last point.
pub fn draw(path: &Path, title: &str, panels: &[Panel], x_max: Option<f64>) -> Result<(), ChartError> {
    let err = |detail: String| ChartError { path: path.display().to_string(), detail };
    FONT.call_once(|| {
        let _ =
            plotters::style::register_font("sans-serif", FontStyle::Normal, include_bytes!("../assets/DejaVuSans.ttf"));
    });
    let height = 60 + 280 * panels.len() as u32;
    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (top, body) = root.split_vertically(50);
    top.titled(title, ("sans-serif", 24)).map_err(|e| err(e.to_string()))?;
    let areas = body.split_evenly((panels.len().max(1), 1));
    let x_max = x_max.unwrap_or_else(|| {
        panels
            .iter()
            .flat_map(|p| p.lines.iter().flat_map(|l| l.points.iter().map(|(x, _)| *x)))
            .fold(1.0_f64, f64::max)
    });
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let y_max = panel.lines.iter().flat_map(|l| l.points.iter().map(|(_, y)| *y)).fold(1.0_f64, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for line in &panel.lines {
            let color = line.color;
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().map(|(x, y)| (x.min(x_max), *y)),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(e.to_string()))?
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
