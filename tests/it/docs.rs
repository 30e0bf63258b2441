//! The documents themselves: every relative link and anchor in `README.md`,
//! `CONTRIBUTING.md` and `docs/` resolves, the README stays short enough to read in five
//! minutes, no document of the repository names a path outside it (a clone has
//! nothing beside it), and every command sample is run by trycmd and compared with what
//! the document shows (a ```` ```console ```` block), or run by the VM test (the README's
//! walk-through), or says, where the reader sees it, that it is not machine-checked.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

/// The README is the newcomer's page: at most this many lines.
const README_MAX_LINES: usize = 300;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md`, `CONTRIBUTING.md` and every `*.md` under `docs/`, relative to the repo.
fn linked_documents() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    out.extend(markdown_under(&repo(), Path::new("docs")));
    out
}

/// Every `*.md` of the repository outside build output.
fn every_document() -> Vec<PathBuf> {
    markdown_under(&repo(), Path::new(""))
}

fn markdown_under(root: &Path, rel: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))
        .unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = rel.join(&name);
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            if name.starts_with('.') || name == "target" {
                continue;
            }
            out.extend(markdown_under(root, &path));
        } else if kind.is_file() && name.ends_with(".md") {
            out.push(path);
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its inline code spans (`` `…` ``).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images on one line: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].trim();
        // `[x](url "title")`: the title is not part of the target.
        let target = target.split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and `_` kept, spaces
/// made `-`, everything else dropped; link text stands in for a link.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](target) → text
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a markdown file offers: one per heading, repeats numbered `-1`, `-2`…
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start_matches('#');
        if trimmed.len() == line.len() || !trimmed.starts_with(' ') {
            continue;
        }
        let base = slug(trimmed.trim());
        let n = seen.entry(base.clone()).or_insert(0);
        let anchor = if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        *n += 1;
        out.insert(anchor);
    }
    out
}

/// `rel` joined to `dir` with `..` applied; `None` when it climbs above the repository.
fn resolve(dir: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = dir.components().collect();
    for c in Path::new(rel).components() {
        match c {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            other => parts.push(other),
        }
    }
    Some(parts.iter().collect())
}

/// Every broken relative link or anchor of `doc` (relative to the repository).
fn broken_links(doc: &Path) -> Vec<String> {
    let root = repo();
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                Some(doc.to_path_buf())
            } else {
                resolve(dir, path)
            };
            let Some(file) = file else {
                broken.push(format!(
                    "{}:{n}: {target}: outside the repository",
                    doc.display()
                ));
                continue;
            };
            let full = root.join(&file);
            if !full.exists() {
                broken.push(format!("{}:{n}: {target}: no such file", doc.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let have = if full.extension().is_some_and(|e| e == "md") {
                    anchors(&std::fs::read_to_string(&full).unwrap())
                } else {
                    BTreeSet::new()
                };
                if !have.contains(anchor) {
                    broken.push(format!(
                        "{}:{n}: {target}: no heading with the anchor #{anchor} in {}",
                        doc.display(),
                        file.display()
                    ));
                }
            }
        }
    }
    broken
}

/// Paths written as `../…` in `doc`, anywhere (code blocks too), that lead outside the
/// repository from the document's directory, or to nothing in it (`../shared/x` from
/// `docs/` is still not part of the repository). A wildcard ends the part checked.
fn paths_outside(doc: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("../") {
            // The whole path token: back to the last separator before it, on to the end.
            let start = rest[..at]
                .rfind(|c: char| c.is_whitespace() || "`([<'\"=".contains(c))
                .map_or(0, |s| s + 1);
            let end = rest[at..]
                .find(|c: char| c.is_whitespace() || "`)]>'\",;".contains(c))
                .map_or(rest.len(), |e| at + e);
            let token = &rest[start..end];
            let path = token.split('#').next().unwrap_or(token);
            let path = path.trim_end_matches(['.', ':']);
            let fixed = match path.find(['*', '…', '{', '<']) {
                Some(w) => &path[..path[..w].rfind('/').map_or(0, |s| s + 1)],
                None => path,
            };
            if !resolve(dir, fixed).is_some_and(|p| repo().join(p).exists()) {
                out.push(format!("{}:{}: {token}", doc.display(), i + 1));
            }
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let docs = linked_documents();
    assert!(docs.len() >= 10, "{docs:?}");
    let broken: Vec<String> = docs.iter().flat_map(|d| broken_links(d)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_at_most_300_lines() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines; move the detail into docs/ (docs/README.md says where)"
    );
}

#[test]
fn no_document_names_a_path_outside_the_repository() {
    let docs = every_document();
    assert!(docs.iter().any(|d| d == Path::new("README.md")), "{docs:?}");
    let outside: Vec<String> = docs.iter().flat_map(|d| paths_outside(d)).collect();
    assert!(
        outside.is_empty(),
        "paths outside the repository (copy what the documents need into it):\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_checker_finds_what_it_looks_for() {
    // Anchors as GitHub makes them.
    assert_eq!(
        slug("Why: CPU numbers lie about distance"),
        "why-cpu-numbers-lie-about-distance"
    );
    assert_eq!(
        slug("Time model for 128/256/512 CPUs (target: 512 CPUs ≤ 5 min in rounds)"),
        "time-model-for-128256512-cpus-target-512-cpus--5-min-in-rounds"
    );
    assert_eq!(
        slug("`pinnerd compare` on the build VM"),
        "pinnerd-compare-on-the-build-vm"
    );
    assert_eq!(
        slug("See [the map](docs/README.md) here"),
        "see-the-map-here"
    );
    let a = anchors("# A\n```\n# not a heading\n```\n## A\n### B c\n#notone\n");
    assert_eq!(a, ["a", "a-1", "b-c"].map(String::from).into());
    // Links outside code, with titles and anchors; none inside code spans.
    assert_eq!(
        link_targets("see [x](a.md#b) and ![p](i.svg \"t\") but not `[y](z.md)`"),
        vec!["a.md#b", "i.svg"]
    );
    assert_eq!(
        resolve(Path::new("docs"), "../README.md"),
        Some("README.md".into())
    );
    assert_eq!(resolve(Path::new("docs"), "../../shared/x.csv"), None);
    assert_eq!(resolve(Path::new(""), "../shared/c2c-data"), None);
}

/// The words that mark a command sample as not run by the tests, in the paragraph right
/// above it, where a reader sees them.
const NOT_CHECKED: &str = "not machine-checked";

/// The words that mark a sample of the README's walk-through as run by the VM test
/// (`tests/vm/guest/checks.sh`, check `readme-walkthrough`), which needs the package
/// installed, the daemon running and root.
const VM_CHECKED: &str = "checked in the vm test";

/// The one document whose samples the VM test runs, and how many it expects.
const VM_CHECKED_IN: &str = "README.md";
const VM_CHECKED_SAMPLES: usize = 3;

/// A fenced code block of a document.
struct Block {
    /// Where its opening fence is: `FILE:LINE`.
    at: String,
    /// The info string after the opening fence (`console`, `text`, `console,ignore`…).
    info: String,
    body: Vec<String>,
    /// The prose paragraph right above the fence, joined into one line.
    before: String,
}

/// What the tests make of a block that shows commands.
#[derive(Debug, PartialEq)]
enum SampleKind {
    /// A ```` ```console ```` block: trycmd runs every command in it and compares.
    Checked,
    /// Any other block, with [`NOT_CHECKED`] in the paragraph above it.
    Marked,
    /// A ```` ```console,ignore ```` block with [`VM_CHECKED`] in the paragraph above it.
    VmChecked,
    /// Neither: a sample nobody checks and nothing says so.
    Unchecked,
    /// Both run and marked as not run: the mark is wrong.
    CheckedButMarked,
}

impl Block {
    /// `None` for a block without a `$ ` command line (a file, a diagram, bare output).
    fn sample_kind(&self) -> Option<SampleKind> {
        if !self.body.iter().any(|l| l.starts_with("$ ")) {
            return None;
        }
        let checked = self.info == "console" || self.info == "trycmd";
        let before = self.before.to_lowercase();
        let marked = before.contains(NOT_CHECKED);
        let in_vm = self.info == "console,ignore" && before.contains(VM_CHECKED);
        Some(match (checked, marked, in_vm) {
            (true, false, _) => SampleKind::Checked,
            (true, true, _) => SampleKind::CheckedButMarked,
            (false, true, _) => SampleKind::Marked,
            (false, false, true) => SampleKind::VmChecked,
            (false, false, false) => SampleKind::Unchecked,
        })
    }
}

/// Every fenced block of `text` (the document `doc`), in order.
fn blocks(doc: &Path, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    // The paragraph being read, and the last one ended by a blank line.
    let mut paragraph: Vec<&str> = Vec::new();
    let mut last: Vec<&str> = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (Some(_), true) => out.push(open.take().unwrap()),
            (Some(b), false) => b.body.push(line.to_string()),
            (None, true) => {
                let before = if paragraph.is_empty() {
                    &last
                } else {
                    &paragraph
                };
                open = Some(Block {
                    at: format!("{}:{}", doc.display(), i + 1),
                    info: line.trim_start().trim_start_matches('`').trim().to_string(),
                    body: Vec::new(),
                    before: before.join(" "),
                });
                paragraph.clear();
                last.clear();
            }
            (None, false) if line.trim().is_empty() => {
                if !paragraph.is_empty() {
                    last = std::mem::take(&mut paragraph);
                }
            }
            (None, false) => paragraph.push(line.trim()),
        }
    }
    out
}

/// The documents with at least one sample trycmd runs, relative to the repository.
fn documents_with_checked_samples() -> Vec<(PathBuf, usize)> {
    every_document()
        .into_iter()
        .filter_map(|doc| {
            let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
            let n = blocks(&doc, &text)
                .iter()
                .filter(|b| b.sample_kind() == Some(SampleKind::Checked))
                .count();
            (n > 0).then_some((doc, n))
        })
        .collect()
}

/// Every ```` ```console ```` sample of the documents prints what the document shows:
/// trycmd runs each `$ pinnerd …` line with the built binary, from the repository's root
/// (or from `DOC.in/` beside a document that has one), and compares standard output and
/// error together with the lines under it (`[..]` and `...` elide, `? N` is the exit
/// status). A changed output fails here until the document is updated:
/// `SNAPSHOTS=overwrite cargo test --test it docs::every_console` writes the outputs into
/// the documents (review the diff).
#[test]
fn every_console_sample_prints_what_the_document_shows() {
    let docs = documents_with_checked_samples();
    let samples: usize = docs.iter().map(|(_, n)| n).sum();
    assert!(samples >= 5, "only {samples} checked samples: {docs:?}");
    if super::snapshots::overwrite() {
        // trycmd reads its own switch only. Set while other tests may run, which only a
        // deliberate overwrite run does; std's own environment reads are locked.
        std::env::set_var("TRYCMD", "overwrite");
    }
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("pinnerd", trycmd::cargo::cargo_bin("pinnerd"))
        .env("NO_COLOR", "1");
    for (doc, _) in &docs {
        cases.case(repo().join(doc));
    }
    cases.run();
}

/// A command sample is run by the test above, or (the README's walk-through) by the VM
/// test, or says, where the reader sees it, that nothing checks it: there is no fourth
/// kind.
#[test]
fn every_command_sample_is_checked_or_marked_as_not_machine_checked() {
    let mut wrong = Vec::new();
    let mut kinds = Vec::new();
    for doc in every_document() {
        let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
        for b in blocks(&doc, &text) {
            match b.sample_kind() {
                Some(SampleKind::VmChecked) if doc != Path::new(VM_CHECKED_IN) => {
                    wrong.push(format!(
                        "{}: says \"{VM_CHECKED}\", but the VM test runs the samples of \
                         {VM_CHECKED_IN} alone",
                        b.at
                    ))
                }
                Some(SampleKind::Unchecked) => wrong.push(format!(
                    "{}: a ```{} block of commands that nothing runs: make it ```console \
                     (run by docs::every_console_sample) or say \"{NOT_CHECKED}\" and why in \
                     the paragraph above it",
                    b.at, b.info
                )),
                Some(SampleKind::CheckedButMarked) => wrong.push(format!(
                    "{}: run by docs::every_console_sample but marked \"{NOT_CHECKED}\"",
                    b.at
                )),
                Some(kind) => kinds.push(kind),
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(kinds.contains(&SampleKind::Checked), "{kinds:?}");
    assert!(kinds.contains(&SampleKind::Marked), "{kinds:?}");
    // The VM check exists and expects as many samples as the README marks.
    let in_vm = kinds
        .iter()
        .filter(|k| **k == SampleKind::VmChecked)
        .count();
    assert_eq!(in_vm, VM_CHECKED_SAMPLES, "{kinds:?}");
    let checks = std::fs::read_to_string(repo().join("tests/vm/guest/checks.sh")).unwrap();
    assert!(
        checks.contains("run_check readme-walkthrough check_readme_walkthrough")
            && checks.contains(&format!("\"$n\" -eq {VM_CHECKED_SAMPLES} ]")),
        "tests/vm/guest/checks.sh runs no readme-walkthrough check of {VM_CHECKED_SAMPLES} samples"
    );
}

#[test]
fn the_sample_finder_tells_the_kinds_apart() {
    let doc = "x\n\
        ```console\n$ pinnerd topology\nout\n```\n\
        Not machine-checked: needs a daemon.\n\n\
        ```console,ignore\n$ pinnerd status\n```\n\
        Not machine-checked, but a paragraph further up.\n\n\
        A paragraph.\n\n\
        ```text\n$ pinnerd status\n```\n\
        ```sh\npinnerd status\n```\n\
        Not machine-checked, they say.\n\
        ```console\n$ pinnerd status\n```\n\
        Checked in the VM test:\n\
        ```console,ignore\n$ pinnerd status\n```\n\
        Checked in the VM test, but run by nobody:\n\
        ```text\n$ pinnerd status\n```\n";
    let found: Vec<(String, Option<SampleKind>)> = blocks(Path::new("d.md"), doc)
        .into_iter()
        .map(|b| (b.at.clone(), b.sample_kind()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("d.md:2".to_string(), Some(SampleKind::Checked)),
            ("d.md:8".to_string(), Some(SampleKind::Marked)),
            ("d.md:15".to_string(), Some(SampleKind::Unchecked)),
            ("d.md:18".to_string(), None),
            ("d.md:22".to_string(), Some(SampleKind::CheckedButMarked)),
            ("d.md:26".to_string(), Some(SampleKind::VmChecked)),
            ("d.md:30".to_string(), Some(SampleKind::Unchecked)),
        ]
    );
}

/// Code spans naming a repository file (`src/…`, `tests/…`, `benches/…`, `fuzz/…`,
/// `examples/…`, `systemd/…`, `config/…`, `debian/…`), each with the identifiers in the
/// code spans right after it (`path` `test_name`, `other_name`), with its line number.
fn cited_paths(text: &str) -> Vec<(usize, String, Vec<String>)> {
    const ROOTS: &[&str] = &[
        "src/",
        "tests/",
        "benches/",
        "fuzz/",
        "examples/",
        "systemd/",
        "config/",
        "debian/",
    ];
    let mut out = Vec::new();
    for (number, line) in prose_lines(text) {
        let ticks: Vec<usize> = line.match_indices('`').map(|(at, _)| at).collect();
        let mut current: Option<(String, Vec<String>)> = None;
        // A name counts when only `, ` or ` ` stands between it and the path or the
        // name before: `path` `a`, `b`.
        let mut end = 0;
        for pair in ticks.chunks_exact(2) {
            let (open, close) = (pair[0], pair[1]);
            let span = &line[open + 1..close];
            let between = &line[end..open];
            end = close + 1;
            let is_path = ROOTS.iter().any(|r| span.starts_with(r))
                && !span.contains(' ')
                && !span.contains('*')
                && !span.contains('{')
                && !span.split('/').any(placeholder);
            let is_name = span
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && span.contains('_');
            match (&mut current, is_path, is_name) {
                (_, true, _) => {
                    if let Some(done) = current.take() {
                        out.push((number, done.0, done.1));
                    }
                    current = Some((span.to_string(), Vec::new()));
                }
                (Some((_, names)), false, true) if matches!(between.trim(), "" | ",") => {
                    names.push(span.to_string())
                }
                _ => {
                    if let Some(done) = current.take() {
                        out.push((number, done.0, done.1));
                    }
                }
            }
        }
        if let Some(done) = current.take() {
            out.push((number, done.0, done.1));
        }
    }
    out
}

/// A path part that stands for any (`TARGET`, `rootfs-SUITE-KEY.tar`): a word of it in
/// capitals, not one of the repository's capitalised files.
fn placeholder(part: &str) -> bool {
    part.split(['-', '_', '.']).any(|word| {
        word.len() >= 3
            && word.chars().all(|c| c.is_ascii_uppercase())
            && !matches!(
                word,
                "README" | "CONTRIBUTING" | "LICENSE" | "MIT" | "APACHE"
            )
    })
}

/// The text of a file, or of every `.rs` file under a folder.
fn source_text(path: &Path) -> String {
    if path.is_dir() {
        let mut s = String::new();
        for e in std::fs::read_dir(path).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
                s.push_str(&source_text(&p));
            }
        }
        s
    } else {
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

/// A test named by its module path (`promises::after_kill_9_…`,
/// `dbus::placement::tests::a_placement_dict_…`): the files it may be in (an
/// integration test module under `tests/it/`, or the source module under `src/`) and
/// its name. Only a last part with three or more underscores counts: test names are
/// sentences, functions of the API are not.
fn test_by_module(span: &str) -> Option<(Vec<PathBuf>, String)> {
    let parts: Vec<&str> = span.split("::").collect();
    let (name, modules) = parts.split_last()?;
    let word = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if modules.is_empty() || !parts.iter().all(|p| word(p)) || name.matches('_').count() < 3 {
        return None;
    }
    // `x::tests::y` is a `mod tests` inside `x.rs`, or a file `x/tests/y.rs`.
    let inline: Vec<&str> = modules.iter().copied().filter(|m| *m != "tests").collect();
    let mut files = Vec::new();
    for joined in [modules.join("/"), inline.join("/")] {
        files.push(repo().join(format!("src/{joined}.rs")));
        files.push(repo().join(format!("src/{joined}")));
    }
    if modules.len() == 1 {
        files.push(repo().join(format!("tests/it/{}.rs", modules[0])));
    }
    Some((files, name.to_string()))
}

/// Every repository file a document cites exists, and every test named right after it
/// (`src/x.rs` `a_test`) is a function of that file (the reliability table's evidence
/// column names its tests this way).
#[test]
fn every_cited_file_exists_and_holds_the_tests_named_after_it() {
    let mut wrong = Vec::new();
    let mut names_checked = 0;
    for doc in linked_documents() {
        let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
        for (line, path, names) in cited_paths(&text) {
            let full = repo().join(path.trim_end_matches('/'));
            // A path with a `:LINE` or `::item` tail names the file before it.
            let file = path.split(':').next().unwrap();
            let full = if full.exists() {
                full
            } else {
                repo().join(file)
            };
            if !full.exists() {
                wrong.push(format!("{}:{line}: `{path}` does not exist", doc.display()));
                continue;
            }
            let source = source_text(&full);
            for name in names {
                names_checked += 1;
                if !source.contains(&format!("fn {name}("))
                    && !source.contains(&format!("fn {name}<"))
                {
                    wrong.push(format!(
                        "{}:{line}: `{path}` has no function `{name}`",
                        doc.display()
                    ));
                }
            }
        }
    }
    for doc in linked_documents() {
        let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
        for (line, l) in prose_lines(&text) {
            for span in l.split('`').skip(1).step_by(2) {
                let Some((files, name)) = test_by_module(span) else {
                    continue;
                };
                names_checked += 1;
                let found = files.iter().filter(|f| f.exists()).any(|f| {
                    let t = source_text(f);
                    t.contains(&format!("fn {name}(")) || t.contains(&format!("fn {name}<"))
                });
                if !found {
                    wrong.push(format!(
                        "{}:{line}: no test `{name}` where `{span}` says",
                        doc.display()
                    ));
                }
            }
        }
    }
    assert!(names_checked > 50, "only {names_checked} test names found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn cited_paths_are_found_with_the_names_after_them() {
    let found = cited_paths(
        "| a | `src/a.rs` `one_test`, `two_test`; `tests/it/b.rs` `three_x` and `four_y`; `tests/vm/cache/run-SUITE/` |",
    );
    assert_eq!(
        found,
        vec![
            (
                1,
                "src/a.rs".to_string(),
                vec!["one_test".into(), "two_test".into()]
            ),
            (1, "tests/it/b.rs".to_string(), vec!["three_x".into()]),
        ]
    );
}

/// The README's walk-through is typed as written on a minimal Debian, which has no
/// `sudo`: no command it shows starts with it (the VM test runs them as written, as root).
#[test]
fn the_readme_types_no_sudo() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let typed: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            l.trim_start().starts_with("sudo ") || l.contains("$ sudo ") || l.contains("`sudo ")
        })
        .map(|(i, l)| (i + 1, l))
        .collect();
    assert!(typed.is_empty(), "README.md types sudo: {typed:?}");
}
