//! `pinnerd report`: the page of a published dual-socket matrix rendered in a real
//! browser (headless Chromium: no console messages, a screenshot that is not blank,
//! every CPU in the topology and both heatmaps, the plan rows equal to `pinnerd plan
//! --json`), the page of a captured machine, `--compare` on this machine, bad input,
//! an output directory another user prepared, and the page size of 1,024 CPUs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn pinnerd() -> Command {
    super::helper::pinnerd_command()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(out: Output) -> String {
    assert!(!out.status.success(), "should fail: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Chromium's output for `page` with `args`: (stdout, stderr). CI installs the Debian
/// package `chromium` (.ci/run).
fn chromium(page: &Path, args: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect(
            "headless Chromium (Debian package chromium) must be installed: .ci/run installs it",
        );
    assert!(out.status.success(), "chromium failed: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Console messages (errors, CSP violations, failed loads) in Chromium's log.
fn console_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// Width, height, bytes per pixel and 8-bit RGB(A) rows of a PNG as Chromium writes it.
fn decode_png(bytes: &[u8]) -> (usize, usize, usize, Vec<Vec<u8>>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG");
    assert!(!reader.info().interlaced, "not interlaced");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG of a sane size")];
    let frame = reader.next_frame(&mut buf).expect("a PNG's pixels");
    assert_eq!(frame.bit_depth, png::BitDepth::Eight, "8-bit samples");
    let bpp = match frame.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        t => panic!("colour type {t:?}"),
    };
    let rows = buf[..frame.buffer_size()]
        .chunks(frame.line_size)
        .map(<[u8]>::to_vec)
        .collect();
    (frame.width as usize, frame.height as usize, bpp, rows)
}

/// Distinct colours and the share of pixels that are not white.
fn pixel_variety(png: &[u8]) -> (usize, f64) {
    let (w, h, bpp, rows) = decode_png(png);
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    for row in &rows {
        for px in row.chunks(bpp) {
            let rgb = (px[0], px[1], px[2]);
            colours.insert(rgb);
            inked += (rgb != (255, 255, 255)) as usize;
        }
    }
    (colours.len(), inked as f64 / (w * h) as f64)
}

/// The `data-cpu` values inside the element that starts at `marker`, up to `end`.
fn cpus_between(dom: &str, marker: &str, end: &str) -> Vec<u32> {
    let start = dom
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in the page"));
    let rest = &dom[start..];
    let stop = rest.find(end).unwrap_or(rest.len());
    let mut cpus: Vec<u32> = rest[..stop]
        .split("data-cpu=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect();
    cpus.sort_unstable();
    cpus
}

#[test]
fn chromium_sees_console_messages_and_blank_pages() {
    // The checks below are only worth something if they can fail: a page that loads
    // from the network and runs a script is caught; a white page has no variety.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head>\
<body><img src=\"http://192.0.2.1/x.png\"><script>console.error('boom')</script></body></html>",
    )
    .unwrap();
    let shot = dir.path().join("bad.png");
    let (_, log) = chromium(
        &bad,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=400,300",
        ],
    );
    assert!(!console_lines(&log).is_empty(), "{log}");
    let (colours, inked) = pixel_variety(&std::fs::read(&shot).unwrap());
    assert!(inked < 0.01, "{colours} colours, {inked} inked");
}

#[test]
fn published_dual_socket_report_renders_in_chromium() {
    let matrix = fixture("c2c-data/nviennot/Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let said = ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&matrix)
        .output()
        .unwrap());
    assert!(said.contains("report.html"), "{said}");
    let page = out.join("report.html");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["this_machine"], false);
    assert_eq!(json["topology_from"], "matrix");
    let all: Vec<u32> = (0..64).collect();

    // No console message of any kind; a screenshot with a picture on it.
    let shot = dir.path().join("shot.png");
    let (_, log) = chromium(
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,4000",
        ],
    );
    assert!(console_lines(&log).is_empty(), "{:?}", console_lines(&log));
    let (colours, inked) = pixel_variety(&std::fs::read(&shot).unwrap());
    assert!(colours >= 100, "only {colours} colours in the screenshot");
    assert!(
        inked > 0.05,
        "only {:.1}% of the screenshot is not white",
        inked * 100.0
    );

    // The page as the browser parsed it.
    let (dom, _) = chromium(&page, &["--dump-dom"]);
    let order = [
        "id=\"machine\"",
        "id=\"topology\"",
        "id=\"heatmaps\"",
        "id=\"plans\"",
        "id=\"quality\"",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|m| dom.find(m).unwrap_or_else(|| panic!("{m} missing")))
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "sections out of order: {at:?}"
    );
    assert!(!dom.contains("<script"), "no script needed");
    // Nothing fetched: the only references are the heatmaps' images, carried in the
    // page itself (two each: the cells and the colour bar).
    for link in ["src=", "url(", "@import"] {
        assert!(!dom.contains(link), "nothing fetched: {link}");
    }
    let hrefs: Vec<&str> = dom.split("href=\"").skip(1).collect();
    assert_eq!(hrefs.len(), 4, "the heatmaps' images");
    for h in hrefs {
        assert!(
            h.starts_with("data:image/png;base64,"),
            "nothing fetched: {}",
            &h[..40.min(h.len())]
        );
    }
    assert_eq!(
        cpus_between(&dom, "id=\"topology\"", "id=\"heatmaps\""),
        all
    );
    assert_eq!(
        cpus_between(&dom, "id=\"heatmap-cpu-order-rows\"", "</g>"),
        all
    );
    assert_eq!(
        cpus_between(&dom, "id=\"heatmap-domain-order-rows\"", "</g>"),
        all
    );
    assert!(dom.contains("stroke=\"#e8175d\""), "level boundaries drawn");

    // Every plan row is what `pinnerd plan --json` says for the same input.
    let rows: Vec<&str> = dom.split("<tr class=\"plan\" ").skip(1).collect();
    assert_eq!(rows.len(), 6, "K = 2, 4, 8, compact and spread");
    for row in rows {
        let attr = |name: &str| -> String {
            let key = format!("{name}=\"");
            let s = &row[row.find(&key).unwrap() + key.len()..];
            s[..s.find('"').unwrap()].to_string()
        };
        let (k, policy) = (attr("data-k"), attr("data-policy"));
        let plan: Value = serde_json::from_str(&ok(pinnerd()
            .args(["plan", "--json", "-k", &k, "--policy", &policy, "--matrix"])
            .arg(&matrix)
            .output()
            .unwrap()))
        .unwrap();
        let cpus: Vec<String> = plan["cpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(attr("data-cpus"), cpus.join(","), "K={k} {policy}");
        assert_eq!(
            attr("data-worst-ns"),
            plan["worst_latency_ns"].to_string(),
            "K={k} {policy}"
        );
        assert_eq!(
            attr("data-mean-ns"),
            plan["mean_latency_ns"].to_string(),
            "K={k} {policy}"
        );
    }
    // The same facts in report.json.
    let plans = json["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 6);
    assert_eq!(plans[0]["autopilot_cpus"], serde_json::json!([0, 1]));
    assert_eq!(json["cpu_order"].as_array().unwrap().len(), 64);
    assert_eq!(json["domain_order"].as_array().unwrap().len(), 64);
}

#[test]
fn a_captured_machine_is_drawn_from_sysfs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--sysfs")
        .arg(fixture("sysfs/xeon-2s-nic-nvme"))
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["this_machine"], true);
    assert_eq!(json["topology_from"], "sysfs");
    assert!(
        json["source"].as_str().unwrap().contains("topology alone"),
        "{}",
        json["source"]
    );
    let top = &json["topology"];
    assert!(
        top["children"].as_array().unwrap().len() >= 2,
        "two packages: {top}"
    );
    let first = top["children"][0]["label"].as_str().unwrap();
    assert_eq!(
        first, "package = llc = die = node 0",
        "equal levels are one box"
    );
    assert_eq!(top["children"][0]["children"][0]["label"], "core 0");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("No latency matrix: nothing to draw."));
    assert!(
        json["machine"]["model"].as_str().is_some(),
        "{}",
        json["machine"]
    );
}

#[test]
fn compare_on_this_machine_measures_the_effect_and_the_plain_ping_pong() {
    let _online = crate::cpus_stay_online();
    let _turn = crate::one_spinner_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    ok(pinnerd()
        .args(["measure", "--idle-threshold", "0", "--out"])
        .arg(&m)
        .output()
        .unwrap());
    let out = dir.path().join("r");
    ok(pinnerd()
        .args(["report", "--compare", "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&m)
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["this_machine"], true);
    let names: Vec<&str> = json["effect"]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["planned", "autopilot", "worst", "unpinned"]);
    for v in json["effect"]["variants"].as_array().unwrap() {
        assert_eq!(v["ops_per_s"].as_array().unwrap().len(), 7);
        assert!(v["median"].as_f64().unwrap() > 0.0, "{v}");
    }
    let q = &json["quality"];
    let a = &q["agreement"];
    assert!(a.is_object(), "{q}");
    assert_eq!(a["rounds"].as_array().unwrap().len(), 5);
    assert!(a["plain_min_ns"].as_f64().unwrap() > 0.0, "{a}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let (e, quality) = (
        html.find("id=\"effect\"").unwrap(),
        html.find("id=\"quality\"").unwrap(),
    );
    assert!(html.find("id=\"plans\"").unwrap() < e && e < quality);
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(
        pinnerd()
            .args(["report", "--budget", "nan", "--out"])
            .arg(dir.path())
            .output()
            .unwrap(),
    );
    assert!(err.contains("--budget"), "{err}");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = fails(
        pinnerd()
            .args(["report", "--matrix"])
            .arg(fixture("c2c/Intel_Core_i5-4590_CPU_at_3.30GHz.csv"))
            .arg("--out")
            .arg(file.join("sub"))
            .output()
            .unwrap(),
    );
    assert!(err.contains("a-file"), "{err}");
    let err = fails(
        pinnerd()
            .args(["report", "--compare", "--out"])
            .arg(dir.path().join("r"))
            .arg("--matrix")
            .arg(fixture(
                "c2c-data/nviennot/Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
            ))
            .output()
            .unwrap(),
    );
    assert!(err.contains("--compare"), "{err}");
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "1,2\nx,y\n").unwrap();
    let err = fails(
        pinnerd()
            .args(["report", "--out"])
            .arg(dir.path().join("r2"))
            .arg("--matrix")
            .arg(&bad)
            .output()
            .unwrap(),
    );
    assert!(err.contains("bad.csv"), "{err}");
}

#[test]
fn the_dual_epyc_page_shows_its_sockets_ccxs_and_numa_home_artefact() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(fixture(
            "c2c-data/nviennot/AMD_EPYC_7R13_48-Core_Processor.csv",
        ))
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    // Two sockets of six CCXs of eight cores of two SMT siblings.
    let top = &json["topology"];
    let sockets = top["children"].as_array().unwrap();
    assert_eq!(sockets.len(), 2, "{}", top["label"]);
    for s in sockets {
        let ccxs = s["children"].as_array().unwrap();
        assert_eq!(ccxs.len(), 6, "{}", s["label"]);
        for c in ccxs {
            assert_eq!(c["children"].as_array().unwrap().len(), 8, "{}", c["label"]);
            let ns = c["latency_ns"].as_f64().unwrap();
            assert!((20.0..26.0).contains(&ns), "inside a CCX: {ns}");
        }
    }
    let groups: std::collections::BTreeSet<u64> = json["cpu_group"]
        .as_object()
        .unwrap()
        .values()
        .map(|g| g.as_u64().unwrap())
        .collect();
    assert_eq!(groups.len(), 12, "CPUs coloured by CCX");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("numa-home: "), "the artefact is named");
    assert!(html.contains("not known (a matrix alone)"));
    // The autopilot pair 0-1 is two cores of one CCX; the plan is an SMT pair.
    let k2 = &json["plans"][0];
    assert_eq!(k2["autopilot_cpus"], serde_json::json!([0, 1]));
    assert!(k2["worst_latency_ns"].as_f64().unwrap() < 11.0, "{k2}");
    assert!(k2["ratio"].as_f64().unwrap() > 2.0, "{k2}");
}

#[test]
fn a_report_directory_another_user_prepared_is_refused_and_no_link_is_followed() {
    use std::os::unix::fs::PermissionsExt;
    // As in /tmp: a sticky directory anyone may write in, where root runs
    // `pinnerd report` with the default `--out` (./pinnerd-report). Another user made
    // that directory first, with links to a file of root's at the report's names.
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = top.path().join("victim");
    std::fs::write(&victim, "root's\n").unwrap();
    let out = top.path().join("pinnerd-report");
    super::metrics::as_nobody("mkdir", &[out.as_os_str()]);
    for name in ["report.html", "report.json", "matrix.json"] {
        super::metrics::as_nobody(
            "ln",
            &[
                "-s".as_ref(),
                victim.as_os_str(),
                out.join(name).as_os_str(),
            ],
        );
    }
    let matrix = fixture("c2c-data/nviennot/Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv");
    let report = || {
        pinnerd()
            .current_dir(top.path())
            .arg("report")
            .arg("--matrix")
            .arg(&matrix)
            .output()
            .unwrap()
    };
    let err = fails(report());
    assert!(
        err.contains("pinnerd-report") && err.contains("owned by uid 65534"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");

    // Root's directory, but one anyone may write in, is refused as well.
    std::os::unix::fs::chown(&out, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = fails(report());
    assert!(
        err.contains("pinnerd-report") && err.contains("writable by others"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");

    // Once it is root's alone, the links left at the names are replaced, not followed.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    ok(report());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
    for name in ["report.html", "report.json"] {
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(meta.is_file(), "{name} is a file of its own");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644, "{name}");
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["cpu_order"].as_array().unwrap().len(), 64);
}

/// A page of 1,024 CPUs (4,096: `big::report_of_4096_cpus_stays_within_its_size_bound`),
/// as two sockets of LLCs of eight cores with SMT siblings i and i+512, every cell with
/// ±3% of noise as measured cells have (equal neighbours would flatter any drawing that
/// merges them).
#[test]
fn the_page_of_a_1024_cpu_machine_stays_within_its_size_bound() {
    let n = 1024usize;
    let half = n / 2;
    let core = |c: usize| c % half;
    let m = pinnerd::LatencyMatrix::from_fn((0..n as u32).collect(), |a, b| {
        let base = if core(a) == core(b) {
            8.0
        } else if core(a) / 8 == core(b) / 8 {
            30.0
        } else if core(a) * 2 / half == core(b) * 2 / half {
            90.0
        } else {
            160.0
        };
        let (lo, hi) = (a.min(b) as u64, a.max(b) as u64);
        let h = (lo * 2_654_435_761 + hi * 40_503) % 1000;
        base * (0.97 + 0.06 * h as f64 / 1000.0)
    });
    let dir = tempfile::tempdir().unwrap();
    let matrix = dir.path().join("m1024.json");
    std::fs::write(&matrix, serde_json::to_string(&m).unwrap()).unwrap();
    let out = dir.path().join("r");
    ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&matrix)
        .output()
        .unwrap());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The bound of benches/README.md ("`pinnerd report`'s page").
    assert!(
        html.len() <= 4 << 20,
        "report.html of 1,024 CPUs is {} bytes, over 4 MiB",
        html.len()
    );
    // Still every CPU in the topology and in each heatmap's rows.
    let all: Vec<u32> = (0..n as u32).collect();
    assert_eq!(
        cpus_between(&html, "id=\"topology\"", "id=\"heatmaps\""),
        all
    );
    for rows in ["heatmap-cpu-order-rows", "heatmap-domain-order-rows"] {
        assert_eq!(
            cpus_between(&html, &format!("id=\"{rows}\""), "</g>"),
            all,
            "{rows}"
        );
    }
}

/// A report with no matrix (a captured machine: only the running one can be measured)
/// gives no matrix figure, only "not measured" and why, and no level the data does not
/// have (the `smt` level of a machine without SMT).
#[test]
fn a_report_without_a_matrix_gives_no_figure_and_no_level_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--sysfs")
        .arg(fixture("sysfs/epyc-vm-2cpu"))
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let q = &json["quality"];
    assert!(
        q["not_measured"]
            .as_str()
            .is_some_and(|w| w.contains("only the running machine can be measured")),
        "{q}"
    );
    assert!(
        q["pairs_total"].is_null() && q["pairs_with_figure"].is_null(),
        "{q}"
    );
    let levels: Vec<&str> = json["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert!(
        !levels.iter().any(|l| l.contains("smt")),
        "no SMT here: {levels:?}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("not measured: no --matrix given for the tree"),
        "{html}"
    );
    for claim in [
        "pairs with a figure",
        "every CPU measured in one run",
        "all (full matrix)",
        "not measured now (stored or imported matrix)",
        "<td>smt</td>",
    ] {
        assert!(!html.contains(claim), "the page claims {claim:?}");
    }
}

/// The page of the published 2× EPYC 7R13: every CPU labelled on both axes of both
/// heatmaps, no ratio for a spread plan, and a finding for the group that is slower
/// inside (200.5 ns) than the machine that holds it (197.2 ns).
#[test]
fn the_dual_7r13_page_labels_every_cpu_gives_spread_no_ratio_and_explains_a_slower_inner_level() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let matrix = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/c2c-data/nviennot/AMD_EPYC_7R13_48-Core_Processor.csv");
    ok(pinnerd()
        .args(["report", "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&matrix)
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    for p in json["plans"].as_array().unwrap() {
        match p["policy"].as_str().unwrap() {
            "spread" => assert!(p["ratio"].is_null(), "{p}"),
            _ => assert!(p["ratio"].as_f64().is_some(), "{p}"),
        }
    }
    let findings: Vec<&str> = json["quality"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(
        findings
            .iter()
            .any(|f| f.starts_with("inner level slower: group 1")
                && f.contains("200.5 ns inside")
                && f.contains("197.2 ns of the machine box")
                && f.contains("NUMA-home")),
        "{findings:?}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let heatmaps: Vec<&str> = html
        .split("<svg id=\"heatmap-")
        .skip(1)
        .map(|s| &s[..s.find("</svg>").unwrap()])
        .collect();
    assert_eq!(heatmaps.len(), 2, "two heatmaps");
    for (h, svg) in heatmaps.iter().enumerate() {
        for cpu in 0..192 {
            let label = format!(">\n{cpu}\n</text>");
            assert_eq!(
                svg.matches(&label).count(),
                2,
                "heatmap {h}: CPU {cpu} is not labelled once on each axis"
            );
        }
    }
}

/// A flat matrix (every pair 50 ns) over this machine's online CPUs, in pinnerd's JSON
/// form: the page is of this machine without a measurement.
pub(crate) fn this_machines_flat_matrix(path: &Path) {
    let online: pinnerd::CpuSet = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cpus: Vec<u32> = online.iter().collect();
    let rows: Vec<Vec<Option<f64>>> = cpus
        .iter()
        .map(|a| cpus.iter().map(|b| (a != b).then_some(50.0)).collect())
        .collect();
    let json = serde_json::json!({"cpus": cpus, "latency_ns": rows});
    std::fs::write(path, json.to_string()).unwrap();
}

/// The page of this machine asks the running daemon for its containers; a daemon that
/// cannot be asked is said, and the page is made all the same.
#[test]
fn the_page_of_this_machine_says_why_the_daemon_could_not_be_asked() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    this_machines_flat_matrix(&m);
    let out = dir.path().join("r");
    let absent = format!("unix:path={}", dir.path().join("no-bus").display());
    ok(pinnerd()
        .args(["report", "--bus", &absent, "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&m)
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["this_machine"], true);
    let error = json["daemon"]["error"].as_str().unwrap();
    assert!(error.contains("no-bus"), "{error}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h2>Containers</h2><p class=\"note\">pinnerd could not be asked: "));

    // Another machine's page asks nothing.
    let other = dir.path().join("o");
    ok(pinnerd()
        .args(["report", "--bus", &absent, "--out"])
        .arg(&other)
        .arg("--sysfs")
        .arg(fixture("sysfs/epyc-vm-2cpu"))
        .output()
        .unwrap());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(other.join("report.json")).unwrap()).unwrap();
    assert!(json.get("daemon").is_none(), "{}", json["daemon"]);
}
