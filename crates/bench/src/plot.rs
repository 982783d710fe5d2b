//! PNG line charts of experiment results.
use std::path::Path;

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

const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws `panels` side by side with a log2 x axis and a log10 y axis.
pub fn draw(
    path: &Path,
    caption: &str,
    x_label: &str,
    y_label: &str,
    panels: &[Panel],
) -> Result<(), Box<dyn std::error::Error>> {
    let width = 420 * panels.len() as u32;
    let root = BitMapBackend::new(path, (width.max(420), 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(caption, ("sans-serif", 22))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let xs = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0));
        let ys = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1));
        let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (y_min, y_max) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(
                (x_min.max(1.0)..x_max.max(2.0)).log_scale(),
                ((y_min / 2.0).max(1.0)..(y_max * 2.0).max(10.0)).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .draw()?;
        for (i, line) in panel.lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(line.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                });
            chart.draw_series(
                line.points
                    .iter()
                    .map(|p| Circle::new(*p, 3, colour.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
