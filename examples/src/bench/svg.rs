//! Simple SVG line charts, written by hand: one line per series, points
//! marked, axes with ticks, a legend on the right.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend's text.
    pub name: String,
    /// Any SVG color.
    pub color: String,
    /// Drawn dashed (for example p99 next to a solid p50).
    pub dashed: bool,
    /// `(x, y)` points, drawn in this order; non-finite values are skipped.
    pub points: Vec<(f64, f64)>,
}

/// A chart of several series against one x axis.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    /// The title above the plot.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The y axis' label.
    pub y_label: String,
    /// A log₂ x axis (for counts such as 2, 8, 32, 64), ticked at the
    /// x values of the points.
    pub log_x: bool,
    /// A log₁₀ y axis, ticked at powers of ten; else linear from 0.
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

impl Chart {
    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let points: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|&(x, y)| self.usable(x, y))
            .collect();
        let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);

        let fx = |x: f64| if self.log_x { x.log2() } else { x };
        let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let (x0, x1) = match (xs.first(), xs.last()) {
            (Some(&a), Some(&b)) if fx(b) > fx(a) => (fx(a), fx(b)),
            (Some(&a), _) => (fx(a) - 1.0, fx(a) + 1.0),
            _ => (0.0, 1.0),
        };
        let px = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * plot_w;

        let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
        let (y_ticks, fy): (Vec<f64>, Box<dyn Fn(f64) -> f64>) = if self.log_y {
            let y_min = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let lo = if y_min.is_finite() {
                y_min.log10().floor()
            } else {
                0.0
            };
            let hi = if y_max > 0.0 {
                y_max.log10().ceil().max(lo + 1.0)
            } else {
                lo + 1.0
            };
            let ticks = (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect();
            let f = move |y: f64| (y.log10() - lo) / (hi - lo);
            (ticks, Box::new(f))
        } else {
            let step = nice_step(y_max / 5.0);
            let top = (y_max / step).ceil().max(1.0) * step;
            let ticks = (0..=((top / step).round() as usize))
                .map(|i| i as f64 * step)
                .collect();
            (ticks, Box::new(move |y: f64| y / top))
        };
        let py = |y: f64| TOP + plot_h - fy(y) * plot_h;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        // Grid and y ticks.
        for &t in &y_ticks {
            let y = py(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y + 4.0,
                number(t)
            );
        }
        // X ticks at the points' x values.
        for &x in &xs {
            let x_pos = px(x);
            let _ = writeln!(
                svg,
                r##"<line x1="{x_pos:.1}" y1="{TOP}" x2="{x_pos:.1}" y2="{:.1}" stroke="#eee"/><text x="{x_pos:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + plot_h,
                TOP + plot_h + 18.0,
                number(x)
            );
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 16.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        for (i, s) in self.series.iter().enumerate() {
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| self.usable(x, y))
                .map(|(x, y)| (px(x), py(y)))
                .collect();
            let line: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let color = escape(&s.color);
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                line.join(" ")
            );
            for (x, y) in &pts {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"/>"#
                );
            }
            let ly = TOP + 10.0 + i as f64 * 20.0;
            let lx = LEFT + plot_w + 14.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 26.0,
                lx + 32.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn usable(&self, x: f64, y: f64) -> bool {
        x.is_finite()
            && y.is_finite()
            && (!self.log_x || x > 0.0)
            && (!self.log_y || y > 0.0)
            && (self.log_y || y >= 0.0)
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * pow)
}

/// A tick label: integers without decimals, small values with up to two.
fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_y: bool) -> Chart {
        Chart {
            title: "handoffs <per> second".into(),
            x_label: "sessions".into(),
            y_label: "handoffs/s".into(),
            log_x: true,
            log_y,
            series: vec![
                Series {
                    name: "latchkey".into(),
                    color: "#d62728".into(),
                    dashed: false,
                    points: vec![(2.0, 900.0), (8.0, 1200.0), (64.0, f64::NAN)],
                },
                Series {
                    name: "Curator".into(),
                    color: "#1f77b4".into(),
                    dashed: true,
                    points: vec![(2.0, 500.0), (8.0, 640.0), (64.0, 600.0)],
                },
            ],
        }
    }

    #[test]
    fn draws_every_usable_point_and_escapes_text() {
        for log_y in [false, true] {
            let svg = chart(log_y).to_svg();
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
            assert_eq!(svg.matches("<circle").count(), 5, "the NaN is left out");
            assert_eq!(svg.matches("<polyline").count(), 2);
            assert!(svg.contains("handoffs &lt;per&gt; second"));
            assert!(svg.contains("stroke-dasharray"));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
            for tick in ["2", "8", "64"] {
                assert!(svg.contains(&format!(">{tick}</text>")), "{tick}");
            }
        }
    }

    #[test]
    fn empty_chart_is_still_valid() {
        let svg = Chart::default().to_svg();
        assert!(svg.contains("</svg>") && !svg.contains("NaN"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(240.0), 500.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(1000.0), 1000.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
