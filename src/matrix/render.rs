//! Pictures of a latency matrix: a coloured terminal heatmap and an SVG heatmap (the
//! domains' picture, `domains::picture`, shares its error), its cells as rectangles or,
//! for the report's page, as one embedded image of a pixel per cell.
//!
//! Both put CPU ids on both axes and colour each cell on one scale from the matrix's
//! minimum to its maximum; a pair without a figure is drawn blank (terminal) or grey
//! (SVG). Past [`EMBEDDED_PIXELS_MAX`] CPUs the embedded image's pixel is a block of
//! CPUs coloured by its slowest pair, so the page's image has a bounded size whatever
//! the figures. Must not touch: measurement or files (the caller writes the SVG text).

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

use super::LatencyMatrix;

/// Above this many CPUs the terminal heatmap drops the numbers and shows one coloured
/// block per cell.
const TERMINAL_NUMBERS_MAX: usize = 32;
/// Above this many CPUs the SVG heatmap does not print values inside cells.
const SVG_NUMBERS_MAX: usize = 24;

fn range(m: &LatencyMatrix) -> (f64, f64) {
    let (lo, hi) = m
        .latency_ns
        .pairs()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, _, v)| {
            (lo.min(v), hi.max(v))
        });
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
            .latency_ns
            .pairs()
            .map(|(_, _, v)| format!("{v:.0}").len())
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

/// The most pixels a side of the embedded heatmap's image has: past this many CPUs a
/// pixel is a block of `block` × `block` CPUs (the fewest that keep the side within
/// it: 2 at 2,048 CPUs, 4 at 4,096, 8 at 8,192), so an image is at most 1 Mi pixels,
/// about 1.4 MB in the page (1 byte a pixel, base64) however poorly noisy figures
/// compress.
pub const EMBEDDED_PIXELS_MAX: usize = 1024;

/// Where [`svg_heatmap`] draws: the cell of row `i`, column `j` has its top left
/// corner at (`left + j / block * cell`, `top + i / block * cell`), a cell being
/// `block` × `block` CPUs (1 but in the embedded image of a large matrix); the
/// picture is `width` × `height`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatmapGeometry {
    pub left: i32,
    pub top: i32,
    pub cell: i32,
    /// CPUs a side of a cell.
    pub block: usize,
    /// Cells a side of the heatmap.
    pub cells: usize,
    pub width: u32,
    pub height: u32,
}

impl HeatmapGeometry {
    /// The offset, from the heatmap's left (top) edge, of the cell holding the CPU at
    /// index `i` of the matrix.
    pub fn offset(&self, i: usize) -> i32 {
        (i / self.block) as i32 * self.cell
    }

    /// The heatmap's side in pixels of the picture.
    pub fn side(&self) -> i32 {
        self.cells as i32 * self.cell
    }
}

/// The geometry of the heatmap of an `n`-CPU matrix, a rectangle per cell.
pub fn heatmap_geometry(n: usize) -> HeatmapGeometry {
    geometry(n.max(1), 1)
}

/// The geometry of the embedded heatmap of an `n`-CPU matrix ([`svg_heatmap_embedded`]):
/// [`heatmap_geometry`]'s up to [`EMBEDDED_PIXELS_MAX`] CPUs, past it a cell is a block
/// of CPUs.
pub fn embedded_geometry(n: usize) -> HeatmapGeometry {
    let n = n.max(1);
    geometry(n, n.div_ceil(EMBEDDED_PIXELS_MAX))
}

fn geometry(n: usize, block: usize) -> HeatmapGeometry {
    let cells = n.div_ceil(block);
    let cell = if cells <= SVG_NUMBERS_MAX {
        36
    } else {
        (900 / cells).max(2)
    } as i32;
    let (left, top, bar_w) = (60i32, 70i32, 110i32);
    HeatmapGeometry {
        left,
        top,
        cell,
        block,
        cells,
        width: (left + cell * cells as i32 + bar_w + 20) as u32,
        height: (top + cell * cells as i32 + 40) as u32,
    }
}

/// An SVG heatmap: CPU ids on both axes, cells coloured on the viridis scale (dark is
/// near), values printed inside the cells of small matrices, missing pairs grey, a
/// colour bar with the range, and a title naming the primitive and the CPU count. One
/// rectangle per cell up to [`EMBEDDED_PIXELS_MAX`] CPUs: for the files `measure --svg`
/// and `topology --svg` write. Past it, [`svg_heatmap_embedded`]'s image of blocks: a
/// rectangle per cell is markup for each of n² cells (16.8 M at 4,096 CPUs).
pub fn svg_heatmap(m: &LatencyMatrix, title: &str) -> Result<String, SvgError> {
    if m.len() > EMBEDDED_PIXELS_MAX {
        return svg_heatmap_embedded(m, title);
    }
    draw_heatmap(m, title, Cells::Rects)
}

/// [`svg_heatmap`] with the cells as one embedded image of a pixel per cell (a PNG in
/// a `data:` URI, drawn unsmoothed) and the colour bar as another: the size grows with
/// the cells, not their markup (at most about 1.4 bytes a cell), so a 1,024-CPU
/// heatmap is at most 1.5 MB and a browser draws it at once. Nothing is fetched.
/// Past [`EMBEDDED_PIXELS_MAX`] CPUs a pixel is a block of CPUs ([`embedded_geometry`])
/// coloured by its slowest pair, so one odd slow pair still shows (a fast one may not),
/// a line under the heatmap says so, and a label names the first CPU of every 8th
/// block instead of every CPU: the heatmap stays within about 1.5 MB at any size.
pub fn svg_heatmap_embedded(m: &LatencyMatrix, title: &str) -> Result<String, SvgError> {
    draw_heatmap(m, title, Cells::Image)
}

/// How [`draw_heatmap`] draws the cells and the colour bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cells {
    Rects,
    Image,
}

/// The drawing surface of [`draw_heatmap`].
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn svg_error(e: DrawingAreaErrorKind<std::io::Error>) -> SvgError {
    SvgError(e.to_string())
}

/// The heatmap of `m`: the title, the labelled rows and their cells, the colour bar and
/// its range; with [`Cells::Image`], the cells and the bar are images put in after.
fn draw_heatmap(m: &LatencyMatrix, title: &str, cells: Cells) -> Result<String, SvgError> {
    let g = match cells {
        Cells::Rects => heatmap_geometry(m.len()),
        Cells::Image => embedded_geometry(m.len()),
    };
    let (lo, hi) = range(m);
    let bar = ColourBar {
        x: g.left + g.side() + 20,
        height: g.side().max(60),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (g.width, g.height)).into_drawing_area();
        root.fill(&WHITE).map_err(svg_error)?;
        let title_style = ("sans-serif", 18).into_font().color(&BLACK);
        root.draw(&Text::new(title.to_string(), (g.left, 20), title_style))
            .map_err(svg_error)?;
        if g.block > 1 {
            draw_blocks(&root, m, &g)?;
        } else {
            draw_rows(&root, m, &g, (lo, hi), cells)?;
        }
        if cells == Cells::Rects {
            draw_colour_bar(&root, &g, &bar)?;
        }
        draw_range(&root, &g, &bar, (lo, hi))?;
        root.present().map_err(svg_error)?;
    }
    if cells == Cells::Image {
        embed_images(&mut svg, m, &g, &bar, (lo, hi));
    }
    Ok(svg)
}

/// Where the colour bar stands: its left edge and its height, from the heatmap's top.
struct ColourBar {
    x: i32,
    height: i32,
}

/// Every CPU labelled on both axes, and (unless they are one image) its row of cells,
/// with values inside the cells of small matrices. The labels are as tall as a cell
/// (11 px at most), and those over the columns stand upright once a cell is too narrow
/// for a number written across it. Small on a large matrix, but there to zoom into.
fn draw_rows(
    root: &Area<'_>,
    m: &LatencyMatrix,
    g: &HeatmapGeometry,
    (lo, hi): (f64, f64),
    cells: Cells,
) -> Result<(), SvgError> {
    let (left, top, cell) = (g.left, g.top, g.cell);
    let n = m.len().max(1);
    let label_px = (cell - 1).clamp(2, 11);
    let row_font = ("sans-serif", label_px).into_font().color(&BLACK);
    let upright = n > SVG_NUMBERS_MAX;
    let column_font = if upright {
        row_font.clone().transform(FontTransform::Rotate270)
    } else {
        row_font.clone()
    };
    let value_font = ("sans-serif", 10).into_font();
    for i in 0..m.len() {
        let y = top + i as i32 * cell;
        root.draw(&Text::new(
            m.cpus[i].to_string(),
            (8, y + (cell - label_px) / 2),
            row_font.clone(),
        ))
        .map_err(svg_error)?;
        let column = if upright {
            (left + i as i32 * cell + (cell - label_px) / 2, top - 4)
        } else {
            (left + i as i32 * cell + 2, top - 16)
        };
        root.draw(&Text::new(
            m.cpus[i].to_string(),
            column,
            column_font.clone(),
        ))
        .map_err(svg_error)?;
        if cells == Cells::Image && n > SVG_NUMBERS_MAX {
            continue;
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
            if cells == Cells::Rects {
                root.draw(&Rectangle::new(
                    [(x, y), (x + cell, y + cell)],
                    fill.filled(),
                ))
                .map_err(svg_error)?;
            }
            if let (Some(v), true) = (value, n <= SVG_NUMBERS_MAX) {
                let dark = norm(v, lo, hi) < 0.6;
                let color = if dark { WHITE } else { BLACK };
                root.draw(&Text::new(
                    format!("{v:.0}"),
                    (x + 4, y + cell / 2 - 5),
                    value_font.clone().color(&color),
                ))
                .map_err(svg_error)?;
            }
        }
    }
    Ok(())
}

/// Labelled blocks between labels of [`draw_blocks`].
const BLOCKS_PER_LABEL: usize = 8;

/// The axes of a heatmap whose cells are blocks of CPUs: the first CPU of every
/// [`BLOCKS_PER_LABEL`]th block labelled on both axes (11 px, upright over the columns),
/// and under the heatmap what a pixel is.
fn draw_blocks(root: &Area<'_>, m: &LatencyMatrix, g: &HeatmapGeometry) -> Result<(), SvgError> {
    let label_px = 11;
    let row_font = ("sans-serif", label_px).into_font().color(&BLACK);
    let column_font = row_font.clone().transform(FontTransform::Rotate270);
    for p in (0..g.cells).step_by(BLOCKS_PER_LABEL) {
        let cpu = m.cpus[p * g.block].to_string();
        let at = p as i32 * g.cell;
        root.draw(&Text::new(cpu.clone(), (8, g.top + at), row_font.clone()))
            .map_err(svg_error)?;
        root.draw(&Text::new(
            cpu,
            (g.left + at, g.top - 4),
            column_font.clone(),
        ))
        .map_err(svg_error)?;
    }
    let b = g.block;
    root.draw(&Text::new(
        format!(
            "each pixel is {b}×{b} CPUs, coloured by its slowest pair; a label every {} CPUs",
            BLOCKS_PER_LABEL * b
        ),
        (g.left, g.top + g.side() + 8),
        row_font,
    ))
    .map_err(svg_error)?;
    Ok(())
}

/// The colour bar as rectangles: 0 (near) at the top to 1 (far) at the bottom.
fn draw_colour_bar(root: &Area<'_>, g: &HeatmapGeometry, bar: &ColourBar) -> Result<(), SvgError> {
    let (bx, top, bh) = (bar.x, g.top, bar.height);
    for k in 0..bh {
        let c = ViridisRGB::get_color(k as f64 / (bh - 1).max(1) as f64);
        root.draw(&Rectangle::new(
            [(bx, top + k), (bx + 16, top + k + 1)],
            c.filled(),
        ))
        .map_err(svg_error)?;
    }
    Ok(())
}

/// The range beside the colour bar (one figure when every pair has the same), and the
/// axes' "CPU".
fn draw_range(
    root: &Area<'_>,
    g: &HeatmapGeometry,
    bar: &ColourBar,
    (lo, hi): (f64, f64),
) -> Result<(), SvgError> {
    let (bx, top, bh) = (bar.x, g.top, bar.height);
    let label_font = ("sans-serif", 11).into_font().color(&BLACK);
    let label = |text: String, at| {
        root.draw(&Text::new(text, at, label_font.clone()))
            .map_err(svg_error)
    };
    if hi > lo {
        label(format!("{lo:.1} ns"), (bx + 20, top))?;
        label(format!("{hi:.1} ns"), (bx + 20, top + bh - 12))?;
    } else {
        // One figure for every pair: no range to read off the bar.
        label(format!("all {lo:.1} ns"), (bx + 20, top))?;
    }
    label("CPU".to_string(), (8, top - 16))
}

/// The cells and the colour bar as two images, over the background and under every
/// text (the values of small matrices): the title is the first text drawn.
fn embed_images(
    svg: &mut String,
    m: &LatencyMatrix,
    g: &HeatmapGeometry,
    bar: &ColourBar,
    (lo, hi): (f64, f64),
) {
    let side = g.side();
    let levels: Vec<Vec<u8>> = (0..VIRIDIS_LEVELS).map(|k| vec![FIRST_LEVEL + k]).collect();
    let images = format!(
        "{}{}",
        svg_image(
            g.left,
            g.top,
            side,
            side,
            "pixelated",
            &png(&cell_indices(m, g.block, lo, hi))
        ),
        svg_image(bar.x, g.top, 16, bar.height, "auto", &png(&levels)),
    );
    match svg.find("<text") {
        Some(at) => svg.insert_str(at, &images),
        None => match svg.rfind("</svg>") {
            Some(at) => svg.insert_str(at, &images),
            None => svg.push_str(&images),
        },
    }
}

/// Palette entries of the embedded image: white (the diagonal), grey (a missing pair),
/// then the viridis scale in [`VIRIDIS_LEVELS`] steps.
const FIRST_LEVEL: u8 = 2;
const VIRIDIS_LEVELS: u8 = 254;

/// The palette index of every cell of `m` in blocks of `block` × `block` CPUs, a row
/// per block of rows: the block's slowest pair; white when the block is the diagonal
/// alone, grey when it has no figure otherwise. A block of one CPU is its cell.
fn cell_indices(m: &LatencyMatrix, block: usize, lo: f64, hi: f64) -> Vec<Vec<u8>> {
    let n = m.len();
    let block = block.max(1);
    let span = |p: usize| p * block..((p + 1) * block).min(n);
    (0..n.div_ceil(block))
        .map(|p| {
            (0..n.div_ceil(block))
                .map(|q| {
                    let (mut worst, mut off_diagonal) = (None::<f64>, false);
                    for i in span(p) {
                        for j in span(q) {
                            match m.at(i, j) {
                                Some(v) => worst = Some(worst.map_or(v, |w| w.max(v))),
                                None => off_diagonal |= i != j,
                            }
                        }
                    }
                    match worst {
                        Some(v) => {
                            let k = (norm(v, lo, hi) * f64::from(VIRIDIS_LEVELS - 1)).round();
                            FIRST_LEVEL + k as u8
                        }
                        None if !off_diagonal => 0,
                        None => 1,
                    }
                })
                .collect()
        })
        .collect()
}

/// An 8-bit palette PNG of `rows` (palette indices, equal lengths) in the palette
/// above: filter 0 on every row, zlib-compressed.
fn png(rows: &[Vec<u8>]) -> Vec<u8> {
    use std::io::Write as _;
    let (w, h) = (rows.first().map_or(0, Vec::len), rows.len());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8; 4], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    };
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(h as u32).to_be_bytes());
    // 8 bits, palette, deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    let mut plte = vec![255, 255, 255, 190, 190, 190];
    for k in 0..VIRIDIS_LEVELS {
        let RGBColor(r, g, b) = ViridisRGB::get_color(f64::from(k) / f64::from(VIRIDIS_LEVELS - 1));
        plte.extend_from_slice(&[r, g, b]);
    }
    chunk(b"PLTE", &plte);
    let mut z = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(h * (w + 1) / 4),
        flate2::Compression::best(),
    );
    for row in rows {
        // Writing into a Vec cannot fail.
        let _ = z.write_all(&[0]);
        let _ = z.write_all(row);
    }
    let idat = z.finish().unwrap_or_default();
    chunk(b"IDAT", &idat);
    chunk(b"IEND", &[]);
    out
}

/// An SVG `<image>` of `png` at (`x`, `y`), `w` × `h`, stretched to fill it;
/// `rendering` `pixelated` keeps each cell a sharp square when scaled up.
fn svg_image(x: i32, y: i32, w: i32, h: i32, rendering: &str, png: &[u8]) -> String {
    format!(
        "<image x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" preserveAspectRatio=\"none\" style=\"image-rendering:{rendering}\" href=\"data:image/png;base64,{}\"/>",
        base64(png)
    )
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[(v >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
