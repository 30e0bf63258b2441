//! The documents themselves: every relative link and anchor in `README.md`,
//! `CONTRIBUTING.md` and `docs/` resolves, the README stays short enough to read in five
//! minutes, and no document of the repository names a path outside it (a clone has
//! nothing beside it).

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

/// A `$ pinnerd …` sample of the documents with the output printed under it, in a
/// `text` block: the command's words, its output, where it is.
struct Sample {
    at: String,
    args: Vec<String>,
    output: String,
    /// The lines of the document (0-based, end excluded) that hold the output.
    lines: std::ops::Range<usize>,
}

fn samples(doc: &Path) -> Vec<Sample> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let mut out = Vec::new();
    let mut in_text = false;
    let mut current: Option<Sample> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            if let Some(s) = current.take() {
                out.push(s);
            }
            in_text = !in_text && line == "```text";
            continue;
        }
        if !in_text {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ pinnerd ") {
            if let Some(s) = current.take() {
                out.push(s);
            }
            let cmd = cmd.split(" #").next().unwrap();
            current = Some(Sample {
                at: format!("{}:{}", doc.display(), i + 1),
                args: cmd.split_whitespace().map(String::from).collect(),
                output: String::new(),
                lines: i + 1..i + 1,
            });
        } else if line.starts_with("$ ") {
            if let Some(s) = current.take() {
                out.push(s);
            }
        } else if let Some(s) = &mut current {
            s.output.push_str(line);
            s.output.push('\n');
            s.lines.end = i + 1;
        }
    }
    out
}

/// Where a sample runs from: the repository root when every path it names is there,
/// else the directory of the published matrices when every file it names is there
/// (the fleet samples name them bare); `None` for a sample of a live system (a
/// process, `/etc/pinnerd.d`, a file of the reader's), which only a real machine shows.
fn runs_in(s: &Sample) -> Option<PathBuf> {
    let paths: Vec<&String> = s
        .args
        .iter()
        .filter(|a| !a.starts_with('-') && (a.contains('/') || a.contains('.')))
        .collect();
    if paths.is_empty() {
        return None;
    }
    [repo(), repo().join("tests/fixtures/c2c-data/nviennot")]
        .into_iter()
        .find(|dir| {
            paths
                .iter()
                .all(|p| !p.starts_with('/') && dir.join(p).exists())
        })
}

/// Every sample of the documents that runs on files of the repository (fixtures,
/// published matrices) prints what the document shows, exactly: a changed output fails
/// here until the document is updated (`PINNERD_BLESS=1` writes the outputs into the
/// documents; review the diff).
#[test]
fn every_sample_on_the_repositorys_files_prints_what_the_document_shows() {
    let bless = std::env::var_os("PINNERD_BLESS").is_some();
    let mut checked = Vec::new();
    let mut differ = Vec::new();
    for doc in linked_documents() {
        let mut blessed: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        for s in samples(&doc) {
            let Some(dir) = runs_in(&s) else { continue };
            let out = super::helper::pinnerd_command()
                .args(&s.args)
                .current_dir(&dir)
                .env("NO_COLOR", "1")
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&out.stdout);
            let trim = |t: &str| t.lines().map(str::trim_end).collect::<Vec<_>>().join("\n");
            if trim(&got).trim_end() != trim(&s.output).trim_end() {
                if bless {
                    blessed.push((s.lines.clone(), trim(&got).trim_end().to_string()));
                    continue;
                }
                differ.push(format!(
                    "{}: `pinnerd {}` prints:\n{got}\nthe document shows:\n{}",
                    s.at,
                    s.args.join(" "),
                    s.output
                ));
            }
            checked.push(s.at);
        }
        if !blessed.is_empty() {
            let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            for (range, got) in blessed.into_iter().rev() {
                lines.splice(range, got.lines().map(String::from));
            }
            std::fs::write(repo().join(&doc), lines.join("\n") + "\n").unwrap();
        }
    }
    assert!(
        checked.len() >= 3,
        "only {} samples found: {checked:?}",
        checked.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n---\n"));
}
