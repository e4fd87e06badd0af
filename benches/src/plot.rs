//! `--plot FILE.svg`: bus bandwidth against size (log x), one line per algorithm, drawn with
//! `plotters`' SVG backend.

use plotters::prelude::*;
use std::error::Error;
use std::path::Path;

/// One line of the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text (the algorithm, and which variant).
    pub label: String,
    /// (size in bytes, busbw in GB/s), sizes increasing; sizes of 0 are left out (log axis).
    pub points: Vec<(f64, f64)>,
}

fn size_label(v: f64) -> String {
    let b = v.round() as u64;
    for (unit, s) in [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if b >= s && b.is_multiple_of(s) {
            return format!("{}{unit}", b / s);
        }
    }
    if b >= 1 << 10 {
        format!("{:.1}K", v / 1024.0)
    } else {
        format!("{b}")
    }
}

/// Writes the plot to `path` (SVG). `title` goes on top.
pub fn busbw_svg(path: &Path, title: &str, series: &[Series]) -> Result<(), Box<dyn Error>> {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|&(x, y)| x > 0.0 && y.is_finite())
    };
    let (mut xmin, mut xmax) = pts().fold((f64::INFINITY, 0.0f64), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    if !xmin.is_finite() {
        return Err("nothing to plot: no size above 0 bytes with a bus bandwidth".into());
    }
    if xmax <= xmin {
        xmin /= 2.0;
        xmax *= 2.0;
    }
    let ymax = pts().map(|(_, y)| y).fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };

    // The x axis is log₂(size), labelled with sizes: ticks fall on powers of two (8, 64, 4K…)
    // rather than on the powers of ten of a log-scaled axis.
    let (lo, hi) = (xmin.log2().floor(), xmax.log2().ceil());
    let root = SVGBackend::new(path, (1000, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 26))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("size (bytes, log scale)")
        .y_desc("busbw (GB/s)")
        .x_labels(((hi - lo) as usize + 1).min(32))
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-9 {
                size_label(2f64.powf(v.round()))
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|&&(x, y)| x > 0.0 && y.is_finite())
            .map(|&(x, y)| (x.log2(), y))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_one_line_per_series() {
        let dir = std::env::temp_dir().join(format!("rcomm-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.svg");
        let s = [
            Series {
                label: "ring".into(),
                points: vec![(0.0, 0.0), (8.0, 0.01), (65536.0, 3.0), (16777216.0, 9.0)],
            },
            Series {
                label: "rd".into(),
                points: vec![(8.0, 0.02), (65536.0, 4.0), (16777216.0, 5.0)],
            },
        ];
        busbw_svg(&f, "allreduce float sum, 2 ranks", &s).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(svg.starts_with("<svg"));
        // Each series: its line, its legend mark, and one circle per point above 0 bytes.
        assert!(svg.matches("<polyline").count() >= 4);
        assert_eq!(svg.matches("<circle").count(), 3 + 3);
        let text = |t: &str| {
            svg.split('>')
                .any(|x| x.split('<').next().unwrap().trim() == t)
        };
        assert!(
            text("ring") && text("rd") && text("busbw (GB/s)") && text("size (bytes, log scale)")
        );
        assert!(text("16M") || text("64K"));
        assert!(busbw_svg(&f, "x", &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(8.0), "8");
        assert_eq!(size_label(65536.0), "64K");
        assert_eq!(size_label(16777216.0), "16M");
        assert_eq!(size_label(1536.0), "1.5K");
    }
}
