//! PNG line charts of experiment results.
use std::path::Path;

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One line of a panel: a label and its (x, y) points.
pub struct Line {
    /// The legend label.
    pub label: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// A panel: a title and its lines.
pub struct Panel {
    /// The title.
    pub title: String,
    /// The lines.
    pub lines: Vec<Line>,
}

/// How a chart's axes are drawn.
#[derive(Clone, Debug)]
pub struct Axes {
    /// A log10 x axis (else linear).
    pub x_log: bool,
    /// A log10 y axis (else linear from 0).
    pub y_log: bool,
    /// x positions of vertical marker lines (events such as a killed replica).
    pub markers: Vec<f64>,
    /// The legend label of the marker lines.
    pub marker_label: String,
}

impl Axes {
    /// Linear x and y, no markers.
    pub fn linear() -> Axes {
        Axes {
            x_log: false,
            y_log: false,
            markers: Vec::new(),
            marker_label: String::new(),
        }
    }

    /// Log x and log y, no markers: what [`draw`] uses.
    pub fn log_log() -> Axes {
        Axes {
            x_log: true,
            y_log: true,
            markers: Vec::new(),
            marker_label: String::new(),
        }
    }
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws `panels` side by side with a log2 x axis and a log10 y axis.
pub fn draw(
    path: &Path,
    caption: &str,
    x_label: &str,
    y_label: &str,
    panels: &[Panel],
) -> DrawResult {
    draw_with(path, caption, x_label, y_label, panels, &Axes::log_log())
}

/// Draws `panels` side by side with the axes `axes` asks for. Points that a log axis cannot
/// show (zero or negative) are left out.
pub fn draw_with(
    path: &Path,
    caption: &str,
    x_label: &str,
    y_label: &str,
    panels: &[Panel],
    axes: &Axes,
) -> DrawResult {
    let width = 420 * panels.len() as u32;
    let root = BitMapBackend::new(path, (width.max(420), 420)).into_drawing_area();
    root.fill(&WHITE)?;
    // A long caption gets a smaller font rather than running off both edges (a glyph of this
    // font is about 0.55 of its size wide on average).
    let caption_px = (f64::from(width.max(420)) / (0.55 * caption.chars().count().max(1) as f64))
        .clamp(12.0, 22.0);
    let root = root.titled(caption, ("sans-serif", caption_px))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let shown = |p: &(f64, f64)| {
            p.0.is_finite()
                && p.1.is_finite()
                && (!axes.x_log || p.0 > 0.0)
                && (!axes.y_log || p.1 > 0.0)
        };
        let points = || {
            panel
                .lines
                .iter()
                .flat_map(|l| l.points.iter().copied().filter(shown))
        };
        let (x_min, x_max) =
            points().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (y_min, y_max) =
            points().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        let (x_min, x_max) = if x_min > x_max {
            (1.0, 2.0)
        } else {
            (x_min, x_max)
        };
        let (y_min, y_max) = if y_min > y_max {
            (1.0, 10.0)
        } else {
            (y_min, y_max)
        };
        let x_lin = {
            let pad = ((x_max - x_min) * 0.03).max(0.5);
            RangedCoordf64::from(x_min - pad..x_max + pad)
        };
        let y_lin = RangedCoordf64::from(0.0..(y_max * 1.15).max(1.0));
        let x_logc: LogCoord<f64> = (x_min.max(1.0)..x_max.max(2.0)).log_scale().into();
        let y_logc: LogCoord<f64> = ((y_min / 2.0).max(1.0)..(y_max * 2.0).max(10.0))
            .log_scale()
            .into();
        let labels = Labels {
            caption: &panel.title,
            x_label,
            y_label,
            axes,
        };
        match (axes.x_log, axes.y_log) {
            (true, true) => draw_panel(area, panel, x_logc, y_logc, &labels, &shown)?,
            (true, false) => draw_panel(area, panel, x_logc, y_lin, &labels, &shown)?,
            (false, true) => draw_panel(area, panel, x_lin, y_logc, &labels, &shown)?,
            (false, false) => draw_panel(area, panel, x_lin, y_lin, &labels, &shown)?,
        }
    }
    root.present()?;
    Ok(())
}

struct Labels<'a> {
    caption: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    axes: &'a Axes,
}

fn draw_panel<X, Y>(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    panel: &Panel,
    x: X,
    y: Y,
    labels: &Labels<'_>,
    shown: &dyn Fn(&(f64, f64)) -> bool,
) -> DrawResult
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let (y_lo, y_hi) = (y.range().start, y.range().end);
    let mut chart = ChartBuilder::on(area)
        .caption(labels.caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x, y)?;
    let y_log = labels.axes.y_log;
    chart
        .configure_mesh()
        .x_desc(labels.x_label)
        .y_desc(labels.y_label)
        .max_light_lines(3)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if y_log || *y >= 100_000.0 {
                format!("{y:.0e}")
            } else {
                format!("{y:.0}")
            }
        })
        .draw()?;
    for (i, marker) in labels.axes.markers.iter().enumerate() {
        let grey = RGBColor(120, 120, 120);
        let series = chart.draw_series(DashedLineSeries::new(
            vec![(*marker, y_lo), (*marker, y_hi)],
            6,
            4,
            grey.stroke_width(1),
        ))?;
        if i == 0 && !labels.axes.marker_label.is_empty() {
            series
                .label(labels.axes.marker_label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], grey.stroke_width(1))
                });
        }
    }
    for (i, line) in panel.lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<(f64, f64)> = line.points.iter().copied().filter(|p| shown(p)).collect();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(line.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, colour.filled())))?;
    }
    let legend = legend_corner(&chart, panel, shown);
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(legend)
        .draw()?;
    Ok(())
}

/// The corner of the plotting area where the legend hides the fewest points (lower left when
/// several hide none), its size guessed from the labels.
fn legend_corner<X, Y>(
    chart: &ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, Y>>,
    panel: &Panel,
    shown: &dyn Fn(&(f64, f64)) -> bool,
) -> SeriesLabelPosition
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let longest = panel
        .lines
        .iter()
        .map(|l| l.label.chars().count())
        .max()
        .unwrap_or(0);
    let (w, h) = (
        7 * longest as i32 + 40,
        20 * (panel.lines.len() as i32 + 1) + 10,
    );
    let corners = [
        (SeriesLabelPosition::LowerLeft, xs.start, ys.end - h),
        (SeriesLabelPosition::LowerRight, xs.end - w, ys.end - h),
        (SeriesLabelPosition::UpperLeft, xs.start, ys.start),
        (SeriesLabelPosition::UpperRight, xs.end - w, ys.start),
    ];
    let hidden = |&(_, x0, y0): &(SeriesLabelPosition, i32, i32)| {
        panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().filter(|p| shown(p)))
            .map(|p| chart.backend_coord(p))
            .filter(|&(x, y)| x >= x0 && x <= x0 + w && y >= y0 && y <= y0 + h)
            .count()
    };
    corners
        .into_iter()
        .min_by_key(hidden)
        .map_or(SeriesLabelPosition::LowerLeft, |c| c.0)
}
