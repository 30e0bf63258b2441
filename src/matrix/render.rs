//! Pictures of a latency matrix: a coloured terminal heatmap and an SVG heatmap (the
//! domains' picture, `domains::picture`, shares its error).
//!
//! Both put CPU ids on both axes and colour each cell on one scale from the matrix's
//! minimum to its maximum; a pair without a figure is drawn blank (terminal) or grey
//! (SVG). Must not touch: measurement or files (the caller writes the SVG text).

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

use super::LatencyMatrix;

/// Above this many CPUs the terminal heatmap drops the numbers and shows one coloured
/// block per cell.
const TERMINAL_NUMBERS_MAX: usize = 32;
/// Above this many CPUs the SVG heatmap does not print values inside cells.
const SVG_NUMBERS_MAX: usize = 24;

fn range(m: &LatencyMatrix) -> (f64, f64) {
    let cells = m.cells();
    let lo = cells.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = cells.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 0.0)
    }
}

fn norm(v: f64, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// xterm-256 colour from green (near) through yellow to red (far).
fn ansi256(t: f64) -> u8 {
    // The 6x6x6 cube: index 16 + 36r + 6g + b, components 0..=5.
    let (r, g) = if t < 0.5 {
        ((t * 2.0 * 5.0).round() as u8, 5)
    } else {
        (5, ((1.0 - (t - 0.5) * 2.0) * 5.0).round() as u8)
    };
    16 + 36 * r + 6 * g
}

/// The heatmap as text: CPU ids along the top and down the left, one cell per pair with
/// its latency in ns (rounded) on a coloured background when `color` is set. Large
/// matrices get one two-character block per cell instead of numbers.
pub fn terminal_heatmap(m: &LatencyMatrix, color: bool) -> String {
    let n = m.len();
    let (lo, hi) = range(m);
    let numbers = n <= TERMINAL_NUMBERS_MAX;
    let id_w = m
        .cpus
        .iter()
        .map(|c| c.to_string().len())
        .max()
        .unwrap_or(1);
    let cell_w = if numbers {
        let widest = m
            .cells()
            .iter()
            .map(|v| format!("{v:.0}").len())
            .max()
            .unwrap_or(1);
        widest.max(id_w) + 1
    } else {
        2
    };
    let mut out = String::new();
    // Header: CPU ids (every one when numbers are shown, else every 8th).
    out.push_str(&" ".repeat(id_w + 1));
    for (j, cpu) in m.cpus.iter().enumerate() {
        if numbers {
            out.push_str(&format!("{cpu:>cell_w$}"));
        } else if j % 8 == 0 {
            let label = cpu.to_string();
            let width = (cell_w * 8).min(cell_w * (n - j));
            out.push_str(&format!("{label:<width$}"));
        }
    }
    out.push('\n');
    for i in 0..n {
        out.push_str(&format!("{:>id_w$} ", m.cpus[i]));
        for j in 0..n {
            let v = m.at(i, j);
            let text = match (numbers, v) {
                (true, Some(v)) => format!("{:>cell_w$}", format!("{v:.0}")),
                (true, None) if i == j => format!("{:>cell_w$}", "·"),
                (true, None) => format!("{:>cell_w$}", "?"),
                (false, Some(_)) => "  ".to_string(),
                (false, None) if i == j => "··".to_string(),
                (false, None) => "??".to_string(),
            };
            match v {
                Some(v) if color => {
                    let bg = ansi256(norm(v, lo, hi));
                    out.push_str(&format!("\x1b[30;48;5;{bg}m{text}\x1b[0m"));
                }
                Some(_) if !numbers => out.push_str(shade(norm(v.unwrap_or(0.0), lo, hi))),
                _ => out.push_str(&text),
            }
        }
        out.push('\n');
    }
    if color && hi > lo {
        out.push_str(&format!(
            "{:id_w$} scale: \x1b[30;48;5;{}m {lo:.1} ns \x1b[0m … \x1b[30;48;5;{}m {hi:.1} ns \x1b[0m\n",
            "",
            ansi256(0.0),
            ansi256(1.0)
        ));
    }
    out
}

/// A two-character block whose density follows `t`, for large matrices without colour.
fn shade(t: f64) -> &'static str {
    match (t * 4.0).round() as u8 {
        0 => "  ",
        1 => "░░",
        2 => "▒▒",
        3 => "▓▓",
        _ => "██",
    }
}

/// Failure to draw an SVG picture (plotters' error rendered as text).
#[derive(Debug, thiserror::Error)]
#[error("drawing an SVG picture: {0}")]
pub struct SvgError(pub(crate) String);

/// Where [`svg_heatmap`] draws: the cell of row `i`, column `j` has its top left
/// corner at (`left + j * cell`, `top + i * cell`); the picture is `width` × `height`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatmapGeometry {
    pub left: i32,
    pub top: i32,
    pub cell: i32,
    pub width: u32,
    pub height: u32,
}

/// The geometry of the heatmap of an `n`-CPU matrix.
pub fn heatmap_geometry(n: usize) -> HeatmapGeometry {
    let n = n.max(1);
    let cell = if n <= SVG_NUMBERS_MAX {
        36
    } else {
        (900 / n).max(2)
    } as i32;
    let (left, top, bar_w) = (60i32, 70i32, 110i32);
    HeatmapGeometry {
        left,
        top,
        cell,
        width: (left + cell * n as i32 + bar_w + 20) as u32,
        height: (top + cell * n as i32 + 40) as u32,
    }
}

/// An SVG heatmap: CPU ids on both axes, cells coloured on the viridis scale (dark is
/// near), values printed inside the cells of small matrices, missing pairs grey, a
/// colour bar with the range, and a title naming the primitive and the CPU count.
pub fn svg_heatmap(m: &LatencyMatrix, title: &str) -> Result<String, SvgError> {
    let n = m.len().max(1);
    let HeatmapGeometry {
        left,
        top,
        cell,
        width,
        height,
    } = heatmap_geometry(m.len());
    let (lo, hi) = range(m);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| SvgError(e.to_string());
        root.fill(&WHITE).map_err(e)?;
        let title_style = ("sans-serif", 18).into_font().color(&BLACK);
        root.draw(&Text::new(title.to_string(), (left, 20), title_style))
            .map_err(e)?;
        let label_every = n.div_ceil(32).max(1);
        let label_font = ("sans-serif", 11).into_font().color(&BLACK);
        let value_font = ("sans-serif", 10).into_font();
        for i in 0..m.len() {
            let y = top + i as i32 * cell;
            if i % label_every == 0 {
                root.draw(&Text::new(
                    m.cpus[i].to_string(),
                    (8, y + cell / 2 - 6),
                    label_font.clone(),
                ))
                .map_err(e)?;
                root.draw(&Text::new(
                    m.cpus[i].to_string(),
                    (left + i as i32 * cell + 2, top - 16),
                    label_font.clone(),
                ))
                .map_err(e)?;
            }
            for j in 0..m.len() {
                let x = left + j as i32 * cell;
                let (fill, value) = match m.at(i, j) {
                    Some(v) => {
                        let c = ViridisRGB::get_color(norm(v, lo, hi));
                        (c, Some(v))
                    }
                    None if i == j => (RGBColor(255, 255, 255), None),
                    None => (RGBColor(190, 190, 190), None),
                };
                root.draw(&Rectangle::new(
                    [(x, y), (x + cell, y + cell)],
                    fill.filled(),
                ))
                .map_err(e)?;
                if let (Some(v), true) = (value, n <= SVG_NUMBERS_MAX) {
                    let dark = norm(v, lo, hi) < 0.6;
                    let color = if dark { WHITE } else { BLACK };
                    root.draw(&Text::new(
                        format!("{v:.0}"),
                        (x + 4, y + cell / 2 - 5),
                        value_font.clone().color(&color),
                    ))
                    .map_err(e)?;
                }
            }
        }
        // Colour bar: 0 (near) at the top to 1 (far) at the bottom.
        let bx = left + cell * n as i32 + 20;
        let bh = (cell * n as i32).max(60);
        for k in 0..bh {
            let c = ViridisRGB::get_color(k as f64 / (bh - 1).max(1) as f64);
            root.draw(&Rectangle::new(
                [(bx, top + k), (bx + 16, top + k + 1)],
                c.filled(),
            ))
            .map_err(e)?;
        }
        root.draw(&Text::new(
            format!("{lo:.1} ns"),
            (bx + 20, top),
            label_font.clone(),
        ))
        .map_err(e)?;
        root.draw(&Text::new(
            format!("{hi:.1} ns"),
            (bx + 20, top + bh - 12),
            label_font.clone(),
        ))
        .map_err(e)?;
        root.draw(&Text::new(
            "CPU".to_string(),
            (8, top - 16),
            label_font.clone(),
        ))
        .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m3() -> LatencyMatrix {
        let mut m = LatencyMatrix::from_fn(vec![0, 1, 4], |i, j| (i * 10 + j) as f64 + 5.0);
        m.latency_ns[2][1] = None;
        m.latency_ns[1][2] = None;
        m
    }

    #[test]
    fn terminal_shows_ids_values_and_gaps() {
        let text = terminal_heatmap(&m3(), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].ends_with("  0  1  4"), "{text}");
        assert_eq!(lines[1], "0   · 15 25", "{text}");
        assert_eq!(lines[3], "4  25  ?  ·", "{text}");
        let colored = terminal_heatmap(&m3(), true);
        assert!(colored.contains("\x1b[30;48;5;"), "{colored}");
        assert!(colored.contains("scale:"), "{colored}");
    }

    #[test]
    fn terminal_large_matrix_uses_blocks() {
        let m = LatencyMatrix::from_fn((0..40).collect(), |i, j| (i + j) as f64);
        let text = terminal_heatmap(&m, false);
        assert_eq!(text.lines().count(), 41);
        assert!(text.contains("██"), "{text}");
        assert!(text.lines().nth(1).unwrap().starts_with(" 0 ··"), "{text}");
    }

    #[test]
    fn svg_has_cells_labels_and_title() {
        let svg = svg_heatmap(&m3(), "cas, 3 CPUs").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("cas, 3 CPUs"));
        assert!(svg.contains(">\n4\n</text>"), "CPU id 4 labelled: {svg}");
        assert!(svg.contains(">\n25\n</text>"), "value printed: {svg}");
        // 9 cells + background + colour bar rows.
        assert!(svg.matches("<rect").count() > 9 + 60);
        // The missing pair is grey.
        assert!(svg.contains("#BEBEBE"), "missing pair drawn grey");
    }
}
