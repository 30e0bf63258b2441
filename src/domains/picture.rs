//! A picture of the latency domains: one row per level, coarsest on top, each group a
//! box over its CPUs, coloured by the level's latency on the heatmap's scale (dark is
//! near), the CPU ids along the bottom.
//!
//! The CPUs are ordered by the hierarchy (coarsest group first, then finer groups, then
//! id), so nested groups sit side by side even where the numbering interleaves them
//! (siblings 0 and 8). Must not touch: files (the caller writes the SVG text).

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

use super::Domains;
use crate::matrix::render::SvgError;

const LEFT: i32 = 200;
const TOP: i32 = 50;
const ROW: i32 = 34;

/// The CPUs' indices in drawing order, and for each level (finest first) the group
/// index of each drawn CPU.
fn order(domains: &Domains) -> (Vec<u32>, Vec<Vec<usize>>) {
    let cpus = domains.cpus();
    let levels = domains.levels();
    let group_of = |level: usize, cpu: u32| {
        levels[level]
            .groups
            .iter()
            .position(|g| g.contains(cpu))
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<u32> = cpus.to_vec();
    ordered.sort_by_key(|&cpu| {
        let mut key: Vec<usize> = (0..levels.len()).rev().map(|l| group_of(l, cpu)).collect();
        key.push(cpu as usize);
        key
    });
    let groups = (0..levels.len())
        .map(|l| ordered.iter().map(|&cpu| group_of(l, cpu)).collect())
        .collect();
    (ordered, groups)
}

/// Runs of equal values: `(start, end_exclusive, value)`.
fn runs(values: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        match out.last_mut() {
            Some(last) if last.2 == v && last.1 == i => last.1 = i + 1,
            _ => out.push((i, i + 1, v)),
        }
    }
    out
}

/// The SVG text of the domains picture, with `title` on top. Each level's label names
/// it and its typical latency ("unknown" when no trusted matrix gave one).
pub fn svg_domains(domains: &Domains, title: &str) -> Result<String, SvgError> {
    let (ordered, groups) = order(domains);
    let levels = domains.levels();
    let n = ordered.len().max(1);
    let cell = (900 / n as i32).clamp(4, 28);
    let width = (LEFT + cell * n as i32 + 20) as u32;
    let height = (TOP + ROW * levels.len() as i32 + 40) as u32;
    let known: Vec<f64> = levels.iter().filter_map(|l| l.latency_ns).collect();
    let lo = known.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // The box colour and whether it is dark (white text on it), as on the heatmap.
    let shade = |v: Option<f64>, rank: usize| -> (RGBColor, bool) {
        let t = match v {
            Some(v) if hi > lo => (v - lo) / (hi - lo),
            Some(_) => 0.0,
            // No latencies: the level's rank stands in, finest darkest.
            None => rank as f64 / levels.len().max(2).saturating_sub(1) as f64,
        };
        let t = t.clamp(0.0, 1.0);
        (ViridisRGB::get_color(t), t < 0.6)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| SvgError(e.to_string());
        root.fill(&WHITE).map_err(e)?;
        let title_style = ("sans-serif", 18).into_font().color(&BLACK);
        root.draw(&Text::new(title.to_string(), (10, 16), title_style))
            .map_err(e)?;
        let label_font = ("sans-serif", 12).into_font().color(&BLACK);
        let small_font = ("sans-serif", 10).into_font().color(&BLACK);
        // Coarsest level on top.
        for (row, l) in (0..levels.len()).rev().enumerate() {
            let level = &levels[l];
            let y = TOP + row as i32 * ROW;
            let latency = match level.latency_ns {
                Some(v) => format!("{v:.1} ns"),
                None => "unknown".to_string(),
            };
            root.draw(&Text::new(
                format!("{}  {latency}", level.name()),
                (10, y + ROW / 2 - 7),
                label_font.clone(),
            ))
            .map_err(e)?;
            let (fill, dark) = shade(level.latency_ns, l);
            let text_color = if dark { WHITE } else { BLACK };
            for (start, end, g) in runs(&groups[l]) {
                let x0 = LEFT + start as i32 * cell;
                let x1 = LEFT + end as i32 * cell - 1;
                root.draw(&Rectangle::new(
                    [(x0, y + 2), (x1, y + ROW - 3)],
                    fill.filled(),
                ))
                .map_err(e)?;
                root.draw(&Rectangle::new(
                    [(x0, y + 2), (x1, y + ROW - 3)],
                    BLACK.stroke_width(1),
                ))
                .map_err(e)?;
                let text = level
                    .groups
                    .get(g)
                    .map(|set| set.to_string())
                    .unwrap_or_default();
                if (text.len() as i32) * 6 + 6 < x1 - x0 {
                    root.draw(&Text::new(
                        text,
                        (x0 + 4, y + ROW / 2 - 6),
                        small_font.clone().color(&text_color),
                    ))
                    .map_err(e)?;
                }
            }
        }
        // CPU ids along the bottom, as many as fit.
        let y = TOP + ROW * levels.len() as i32 + 4;
        let every = (24 / cell).max(1) as usize;
        root.draw(&Text::new("CPU".to_string(), (10, y), label_font.clone()))
            .map_err(e)?;
        for (i, cpu) in ordered.iter().enumerate() {
            if i % every == 0 {
                root.draw(&Text::new(
                    cpu.to_string(),
                    (LEFT + i as i32 * cell + 1, y),
                    small_font.clone(),
                ))
                .map_err(e)?;
            }
        }
        root.present().map_err(e)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;

    /// Two packages of two cores of two SMT siblings, numbered as Linux numbers them:
    /// siblings i and i+4, package 0 holds 0,1,4,5.
    fn eight() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..8).collect(), |i, j| {
            let (i, j) = (i as u32, j as u32);
            if i % 4 == j % 4 {
                8.0
            } else if (i % 4) / 2 == (j % 4) / 2 {
                20.0 + ((i + j) % 3) as f64 * 0.1
            } else {
                90.0 + ((i * j) % 5) as f64 * 0.1
            }
        })
    }

    #[test]
    fn runs_split_where_the_value_changes() {
        assert_eq!(
            runs(&[0, 0, 1, 1, 1, 0]),
            vec![(0, 2, 0), (2, 5, 1), (5, 6, 0)]
        );
        assert_eq!(runs(&[]), vec![]);
    }

    #[test]
    fn nested_groups_sit_side_by_side_whatever_the_numbering() {
        let d = Domains::from_matrix(&eight()).unwrap();
        let (ordered, groups) = order(&d);
        // Siblings next to each other, each package's CPUs together.
        assert_eq!(ordered, vec![0, 4, 1, 5, 2, 6, 3, 7], "{:?}", d.levels());
        // Every group of every level is one run: the picture draws one box per group.
        for (l, level) in d.levels().iter().enumerate() {
            assert_eq!(runs(&groups[l]).len(), level.groups.len(), "{level:?}");
        }
    }

    #[test]
    fn svg_names_every_level_its_latency_and_every_cpu() {
        let d = Domains::from_matrix(&eight()).unwrap();
        let svg = svg_domains(&d, "domains of eight").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("domains of eight"));
        for l in d.levels() {
            assert!(svg.contains(&l.name()), "{} missing", l.name());
            let ns = format!("{:.1} ns", l.latency_ns.unwrap());
            assert!(svg.contains(&ns), "{ns} missing");
        }
        for cpu in 0..8 {
            assert!(
                svg.contains(&format!(">\n{cpu}\n</text>")),
                "CPU {cpu}: {svg}"
            );
        }
        // Background + one filled and one outlined rectangle per group.
        let boxes: usize = d.levels().iter().map(|l| l.groups.len()).sum();
        assert_eq!(svg.matches("<rect").count(), 1 + 2 * boxes, "{svg}");
    }
}
