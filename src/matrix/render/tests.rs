use super::*;

fn m3() -> LatencyMatrix {
    let mut m = LatencyMatrix::from_fn(vec![0, 1, 4], |i, j| (i * 10 + j) as f64 + 5.0);
    m.latency_ns.set(2, 1, None);
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
fn a_matrix_of_one_figure_has_one_legend_not_a_range_from_it_to_itself() {
    let m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 26.4);
    for svg in [
        svg_heatmap(&m, "flat").unwrap(),
        svg_heatmap_embedded(&m, "flat").unwrap(),
    ] {
        assert!(svg.contains("all 26.4 ns"), "{svg}");
        assert_eq!(svg.matches("26.4 ns").count(), 1, "{svg}");
    }
    let spread = svg_heatmap(&m3(), "cas, 3 CPUs").unwrap();
    assert!(!spread.contains("all "), "{spread}");
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

fn unbase64(text: &str) -> Vec<u8> {
    const ABC: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let digits: Vec<u32> = text
        .bytes()
        .filter(|&b| b != b'=')
        .map(|b| ABC.find(b as char).unwrap() as u32)
        .collect();
    for q in digits.chunks(4) {
        let v = q
            .iter()
            .enumerate()
            .fold(0, |v, (k, d)| v | d << (18 - 6 * k));
        out.extend(v.to_be_bytes()[1..q.len()].iter());
    }
    out
}

#[test]
fn base64_pads_as_the_rfc_says() {
    assert_eq!(base64(b"Man"), "TWFu");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(base64(b"M"), "TQ==");
    assert_eq!(base64(b""), "");
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(unbase64(&base64(&bytes)), bytes);
}

/// The chunks of the first PNG embedded in `svg` (the cells), CRCs checked.
fn embedded_png(svg: &str) -> Vec<(String, Vec<u8>)> {
    let key = "href=\"data:image/png;base64,";
    let at = svg.find(key).unwrap() + key.len();
    let png = unbase64(&svg[at..at + svg[at..].find('"').unwrap()]);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let mut chunks = Vec::new();
    let mut pos = 8;
    while pos < png.len() {
        let len = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = String::from_utf8(png[pos + 4..pos + 8].to_vec()).unwrap();
        let data = png[pos + 8..pos + 8 + len].to_vec();
        let mut crc = flate2::Crc::new();
        crc.update(&png[pos + 4..pos + 8 + len]);
        let stored = u32::from_be_bytes(png[pos + 8 + len..pos + 12 + len].try_into().unwrap());
        assert_eq!(crc.sum(), stored, "{kind} CRC");
        chunks.push((kind, data));
        pos += 12 + len;
    }
    chunks
}

/// The image's rows of palette indices (filter bytes dropped), from its chunks.
fn pixels(chunks: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    use std::io::Read as _;
    let ihdr = &chunks[0].1;
    let w = u32::from_be_bytes(ihdr[..4].try_into().unwrap()) as usize;
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&chunks[2].1[..])
        .read_to_end(&mut raw)
        .unwrap();
    raw.chunks(w + 1)
        .map(|row| {
            assert_eq!(row[0], 0, "filter 0");
            row[1..].to_vec()
        })
        .collect()
}

/// A figure for every pair of `n` CPUs, symmetric, spread evenly over 5 to 505 ns
/// by a seeded hash: no two neighbouring cells alike, the worst case for the
/// image's compression.
pub(crate) fn noisy(n: usize, seed: u64) -> LatencyMatrix {
    LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
        let (lo, hi) = (i.min(j) as u64, i.max(j) as u64);
        let mut x = seed ^ (lo << 32 | hi);
        // splitmix64's finaliser.
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        5.0 + (x % 50_000) as f64 / 100.0
    })
}

#[test]
fn the_embedded_heatmap_of_4096_noisy_cpus_is_1024_pixels_a_side_within_its_bound() {
    let svg = svg_heatmap_embedded(&noisy(4096, 7), "cas, 4096 CPUs").unwrap();
    assert!(
        svg.len() <= HEATMAP_BOUND,
        "the heatmap of 4,096 noisy CPUs is {} bytes, over {HEATMAP_BOUND}",
        svg.len()
    );
    let chunks = embedded_png(&svg);
    assert_eq!(chunks[0].1[..8], [0, 0, 4, 0, 0, 0, 4, 0], "1024 × 1024");
    assert!(
        svg.contains("each pixel is 4×4 CPUs, coloured by its slowest pair"),
        "the scale is said"
    );
    // A label every 32 CPUs: the first and the last labelled, not the one after.
    for (cpu, labelled) in [(0, true), (4064, true), (4065, false), (4095, false)] {
        let text = format!(">\n{cpu}\n</text>");
        assert_eq!(svg.contains(&text), labelled, "CPU {cpu}");
    }
    // Drawn at 2 px a block: the picture is as wide as a 1,024-CPU one.
    assert_eq!(embedded_geometry(4096).side(), 2048);
    assert_eq!(embedded_geometry(4096).width, heatmap_geometry(1024).width);
}

/// One embedded heatmap's bound in bytes: 1 Mi pixels that do not compress, base64,
/// the colour bar and 256 labels (benches/README.md, "The report page").
const HEATMAP_BOUND: usize = 3 << 19;

#[test]
fn one_slow_pair_shows_in_the_image_of_blocks() {
    let n = 2048;
    let m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| match (i, j) {
        (1502, 1001) => 300.0,
        _ => 20.0 + ((i * 7 + j * 13) % 5) as f64 / 10.0,
    });
    let rows = pixels(&embedded_png(&svg_heatmap_embedded(&m, "cas").unwrap()));
    assert_eq!((rows.len(), rows[0].len()), (1024, 1024));
    let hot: Vec<(usize, usize)> = (0..1024)
        .flat_map(|p| (0..1024).map(move |q| (p, q)))
        .filter(|&(p, q)| rows[p][q] > FIRST_LEVEL + 100)
        .collect();
    // The blocks of 2 × 2 CPUs that hold the pair, at the scale's far end.
    assert_eq!(hot, [(500, 751), (751, 500)]);
    assert_eq!(rows[500][751], FIRST_LEVEL + (VIRIDIS_LEVELS - 1));
    // The diagonal blocks hold a pair of CPUs each: coloured, not white.
    assert!(rows[3][3] >= FIRST_LEVEL, "{}", rows[3][3]);
}

#[test]
fn a_block_without_a_figure_is_grey_and_a_lone_diagonal_cell_white() {
    // 1,025 CPUs: blocks of 2, the last block CPU 1024 alone.
    let mut m = LatencyMatrix::from_fn((0..1025).collect(), |_, _| 30.0);
    for (i, j) in [(0, 2), (0, 3), (1, 2), (1, 3)] {
        m.latency_ns.set(i, j, None);
    }
    m.latency_ns.set(4, 6, None);
    let rows = pixels(&embedded_png(&svg_heatmap_embedded(&m, "cas").unwrap()));
    assert_eq!((rows.len(), rows[0].len()), (513, 513));
    assert_eq!(rows[0][1], 1, "no figure in CPUs 0-1 × 2-3: grey");
    assert_eq!(
        rows[2][3], FIRST_LEVEL,
        "one of four missing: the others' figure"
    );
    assert_eq!(rows[512][512], 0, "CPU 1024 × itself: white");
    assert_eq!(rows[512][0], FIRST_LEVEL);
}

#[test]
fn up_to_1024_cpus_a_pixel_is_a_cell() {
    for n in [1, 3, 24, 25, 1024] {
        assert_eq!(embedded_geometry(n), heatmap_geometry(n), "{n} CPUs");
    }
    assert_eq!(embedded_geometry(1025).block, 2);
    assert_eq!(embedded_geometry(8192).block, 8);
    assert_eq!(embedded_geometry(8192).cells, 1024);
    let g = embedded_geometry(8190);
    assert_eq!((g.block, g.cells, g.offset(8189)), (8, 1024, 2046));
}

#[test]
fn the_embedded_heatmap_is_a_pixel_per_cell_under_the_labels_and_values() {
    use std::io::Read as _;
    let svg = svg_heatmap_embedded(&m3(), "cas, 3 CPUs").unwrap();
    // The background alone is a rectangle; cells and bar are two images, under
    // the title, the labels and the values.
    assert_eq!(svg.matches("<rect").count(), 1, "{svg}");
    assert_eq!(svg.matches("<image").count(), 2, "{svg}");
    assert!(svg.find("<image").unwrap() < svg.find("<text").unwrap());
    assert!(svg.contains(">\n4\n</text>"), "CPU id 4 labelled: {svg}");
    assert!(svg.contains(">\n25\n</text>"), "value printed: {svg}");
    assert!(!svg.contains("each pixel"), "{svg}");
    let key = "href=\"data:image/png;base64,";
    let at = svg.find(key).unwrap() + key.len();
    let png = unbase64(&svg[at..at + svg[at..].find('"').unwrap()]);
    // The chunks: IHDR 3 × 3, palette, the compressed rows, end.
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let mut chunks = Vec::new();
    let mut pos = 8;
    while pos < png.len() {
        let len = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = String::from_utf8(png[pos + 4..pos + 8].to_vec()).unwrap();
        let data = png[pos + 8..pos + 8 + len].to_vec();
        let mut crc = flate2::Crc::new();
        crc.update(&png[pos + 4..pos + 8 + len]);
        let stored = u32::from_be_bytes(png[pos + 8 + len..pos + 12 + len].try_into().unwrap());
        assert_eq!(crc.sum(), stored, "{kind} CRC");
        chunks.push((kind, data));
        pos += 12 + len;
    }
    let kinds: Vec<&str> = chunks.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["IHDR", "PLTE", "IDAT", "IEND"]);
    assert_eq!(chunks[0].1, [0, 0, 0, 3, 0, 0, 0, 3, 8, 3, 0, 0, 0]);
    let plte = &chunks[1].1;
    let colour = |k: u8| plte[3 * k as usize..3 * k as usize + 3].to_vec();
    let mut rows = Vec::new();
    flate2::read::ZlibDecoder::new(&chunks[2].1[..])
        .read_to_end(&mut rows)
        .unwrap();
    // Filter byte 0, then the three cells of each row: 15 ns is the scale's
    // start, 25 its end, the diagonal white, the missing pair grey.
    assert_eq!(rows, [0, 0, 2, 255, 0, 2, 0, 1, 0, 255, 1, 0]);
    assert_eq!(colour(0), [255, 255, 255]);
    assert_eq!(colour(1), [190, 190, 190]);
    let RGBColor(r, g, b) = ViridisRGB::get_color(0.0);
    assert_eq!(colour(2), [r, g, b]);
    let RGBColor(r, g, b) = ViridisRGB::get_color(1.0);
    assert_eq!(colour(255), [r, g, b]);
}
