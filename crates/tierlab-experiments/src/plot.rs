//! SVG charts for `tierlab reproduce` outputs (plotters, SVG backend only:
//! no font or image libraries; the browser renders the text). The CSV next
//! to each chart holds the same numbers, so a chart is only a view of data a
//! user can re-plot.

use std::io;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One named line.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: &'a [(f64, f64)],
}

/// Axes and title of a line chart.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Logarithmic x axis (latency CDFs); points with x <= 0 are skipped.
    pub log_x: bool,
}

const WIDTH_PX: u32 = 900;
const HEIGHT_PX: u32 = 500;

fn plot_error(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: cannot draw chart: {e}", path.display()))
}

/// Range of finite values, widened when empty or flat so an axis can be drawn.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    if lo == hi {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.05 };
        return (lo - pad, hi + pad);
    }
    (lo, hi)
}

/// Writes a line chart with one line per series and a legend.
pub fn line_chart_svg(path: &Path, chart: &Chart, series: &[Series]) -> io::Result<()> {
    let keep = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite() && (!chart.log_x || x > 0.0);
    let all = || series.iter().flat_map(|s| s.points.iter().filter(keep));
    let (x_lo, x_hi) = span(all().map(|p| p.0));
    let (y_lo, y_hi) = span(all().map(|p| p.1));
    // The y axis starts at 0 for non-negative data: IOPS, ratios, bytes.
    let y_lo = if y_lo >= 0.0 { 0.0 } else { y_lo };
    let y_hi = y_hi + (y_hi - y_lo) * 0.05;

    let root = SVGBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    if chart.log_x {
        let (x_lo, x_hi) = if x_lo <= 0.0 {
            (1e-3, x_hi.max(1.0))
        } else {
            (x_lo, x_hi)
        };
        draw(
            &root,
            chart,
            series,
            (x_lo..x_hi).log_scale(),
            y_lo..y_hi,
            &keep,
        )
    } else {
        draw(&root, chart, series, x_lo..x_hi, y_lo..y_hi, &keep)
    }
    .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}

fn draw<X>(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &Chart,
    series: &[Series],
    x_range: X,
    y_range: std::ops::Range<f64>,
    keep: &dyn Fn(&&(f64, f64)) -> bool,
) -> Result<(), Box<dyn std::error::Error>>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    <X as plotters::coord::ranged1d::AsRangedCoord>::CoordDescType:
        plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let mut ctx = ChartBuilder::on(root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, y_range)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        ctx.draw_series(LineSeries::new(
            s.points.iter().filter(keep).copied(),
            color.stroke_width(2),
        ))?
        .label(s.name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    if series.len() > 1 || series.first().is_some_and(|s| !s.name.is_empty()) {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

/// A grid of non-negative values to draw as a heat map: `values[x * rows +
/// y]` is the cell in column `x` (left to right) and row `y` (bottom to
/// top); the columns split `x_range` evenly, the rows `y_range`.
pub struct Heatmap<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub columns: usize,
    pub rows: usize,
    pub values: &'a [f64],
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
}

/// Yellow → orange → red → dark red (ColorBrewer YlOrRd stops).
const HEAT_STOPS: [(u8, u8, u8); 4] =
    [(255, 237, 160), (253, 141, 60), (227, 26, 28), (128, 0, 38)];

/// The colour of `t` in [0, 1], interpolated between the stops.
fn heat_color(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0) * (HEAT_STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(HEAT_STOPS.len() - 2);
    let f = t - i as f64;
    let (a, b) = (HEAT_STOPS[i], HEAT_STOPS[i + 1]);
    let mix = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Writes a heat map. Zero cells stay white; the others are coloured by
/// ln(1 + v) / ln(1 + max): IO counts span orders of magnitude, and on a
/// linear scale everything but the hottest cells would look empty.
pub fn heatmap_svg(path: &Path, map: &Heatmap) -> io::Result<()> {
    if map.values.len() != map.columns * map.rows {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: heat map has {} values for {} x {} cells",
                path.display(),
                map.values.len(),
                map.columns,
                map.rows
            ),
        ));
    }
    let max = map
        .values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (x_lo, x_hi) = span([map.x_range.0, map.x_range.1].into_iter());
    let (y_lo, y_hi) = span([map.y_range.0, map.y_range.1].into_iter());
    let root = SVGBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let caption = format!("{} (colour: log scale, max {max})", map.title);
        let mut ctx = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?;
        ctx.configure_mesh()
            .disable_mesh()
            .x_desc(map.x_label)
            .y_desc(map.y_label)
            .draw()?;
        let dx = (x_hi - x_lo) / map.columns.max(1) as f64;
        let dy = (y_hi - y_lo) / map.rows.max(1) as f64;
        let scale = (1.0 + max).ln();
        let cells = map.values.iter().enumerate().filter_map(|(i, &v)| {
            if !(v.is_finite() && v > 0.0) {
                return None;
            }
            let (x, y) = ((i / map.rows) as f64, (i % map.rows) as f64);
            let color = heat_color((1.0 + v).ln() / scale);
            Some(Rectangle::new(
                [
                    (x_lo + dx * x, y_lo + dy * y),
                    (x_lo + dx * (x + 1.0), y_lo + dy * (y + 1.0)),
                ],
                color.filled(),
            ))
        });
        ctx.draw_series(cells)?;
        Ok(())
    };
    draw().map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series_in_the_legend() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let a = [(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)];
        let b = [(0.0, 0.5), (2.0, 0.5)];
        line_chart_svg(
            &path,
            &Chart {
                title: "IOPS over time",
                x_label: "time (s)",
                y_label: "IOPS",
                log_x: false,
            },
            &[
                Series {
                    name: "tenant A",
                    points: &a,
                },
                Series {
                    name: "tenant B",
                    points: &b,
                },
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for text in ["IOPS over time", "tenant A", "tenant B", "time (s)"] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        // Data lines and legend marks are the 2-px strokes; the mesh is 1 px.
        let thick: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains("<polyline") && l.contains("stroke-width=\"2\""))
            .collect();
        assert_eq!(thick.len(), 2 + 2, "two lines + two legend marks");
        let points = |l: &str| {
            l.split("points=\"")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .filter(|t| t.contains(','))
                .count()
        };
        assert_eq!(points(thick[0]), 3, "tenant A has 3 points: {}", thick[0]);
    }

    #[test]
    fn log_axis_skips_non_positive_x_and_empty_series_still_draw() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cdf.svg");
        let cdf = [(0.0, 0.0), (10.0, 0.5), (1000.0, 1.0)];
        let chart = Chart {
            title: "latency CDF",
            x_label: "latency (µs)",
            y_label: "fraction of IOs",
            log_x: true,
        };
        line_chart_svg(
            &path,
            &chart,
            &[Series {
                name: "all",
                points: &cdf,
            }],
        )
        .unwrap();
        line_chart_svg(
            &path,
            &chart,
            &[Series {
                name: "empty",
                points: &[],
            }],
        )
        .unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("latency CDF")
        );
    }
    #[test]
    fn heatmap_colours_non_zero_cells_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.svg");
        // 3 columns x 2 rows; two zero cells stay white.
        let values = [0.0, 1.0, 2.0, 3.0, 9.0, 0.0];
        heatmap_svg(
            &path,
            &Heatmap {
                title: "IOs per sub-LUN per minute",
                x_label: "minute",
                y_label: "sub-LUN",
                columns: 3,
                rows: 2,
                values: &values,
                x_range: (0.0, 3.0),
                y_range: (0.0, 2.0),
            },
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in ["IOs per sub-LUN per minute", "max 9", "minute", "sub-LUN"] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        let hottest = format!("{:?}", heat_color(1.0));
        let cells: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains("<rect") && !l.contains("#FFFFFF"))
            .collect();
        assert_eq!(cells.len(), 4, "{cells:#?}");
        // The largest value gets the last stop's colour, the smallest the
        // lightest of the four.
        assert_eq!(heat_color(1.0), RGBColor(128, 0, 38), "{hottest}");
        assert_eq!(
            cells.iter().filter(|l| l.contains("#800026")).count(),
            1,
            "{cells:#?}"
        );
        let mismatch = heatmap_svg(
            &path,
            &Heatmap {
                values: &values[..5],
                title: "",
                x_label: "",
                y_label: "",
                columns: 3,
                rows: 2,
                x_range: (0.0, 3.0),
                y_range: (0.0, 2.0),
            },
        );
        assert!(mismatch.is_err());
    }
}
