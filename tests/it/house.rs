//! Keeps the house one-way: every module of `src/` imports only from layers below its own.
//!
//! The layer order is written once, in ARCHITECTURE.md (the fenced `layers` block, top layer first); this test
//! reads it and every file of `src/`, resolves each `crate::…` and `super::…` path to the top-level module
//! it names, and fails with the file, the line and both layers when an arrow points up or sideways (modules of
//! one layer do not import each other). A module that is not in any layer fails too, so a new module has to
//! be placed before it can land. In the spirit of rust-analyzer's tidy tests. The modules src/lib.rs builds
//! with feature `daemon` only are checked the same way: no module of the library without it imports one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, bottom first: `layers[i]` holds the modules of layer `i`.
fn parse_layers(architecture: &str) -> Result<Vec<Vec<String>>, String> {
    let start = architecture.find("```layers\n").ok_or("ARCHITECTURE.md has no ```layers block")?;
    let body = &architecture[start + "```layers\n".len()..];
    let end = body.find("```").ok_or("the ```layers block is not closed")?;
    let mut layers: Vec<Vec<String>> = body[..end]
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .collect();
    layers.reverse();
    Ok(layers)
}

/// A module path as written in one file: its components below the crate root.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem);
        }
    }
    parts
}

/// Removes comments and the contents of string literals, keeping line breaks (so line numbers stay right).
fn strip_comments_and_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    in_string = false;
                    out.push('"');
                }
                '\n' => out.push('\n'),
                _ => {}
            }
            continue;
        }
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                in_string = true;
                out.push('"');
            }
            // A char literal like '"' must not open a string.
            '\'' => {
                out.push('\'');
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("\"'") || rest.starts_with("\\\"") {
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every top-level module a file's code names, with the line where it does.
fn imports_of(module: &[String], code: &str) -> Vec<(String, usize)> {
    let code = strip_comments_and_strings(code);
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = find_path_start(rest) {
            let (resolved, tail) = resolve(module, &rest[at..]);
            for name in resolved {
                found.push((name, number + 1));
            }
            rest = tail;
        }
    }
    found
}

/// The next `crate::` or `super::` that starts a path (not part of a longer identifier).
fn find_path_start(text: &str) -> Option<usize> {
    let candidates = ["crate::", "super::"];
    let mut best: Option<usize> = None;
    for pattern in candidates {
        let mut from = 0;
        while let Some(i) = text[from..].find(pattern) {
            let at = from + i;
            let before = text[..at].chars().last();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                best = Some(best.map_or(at, |b| b.min(at)));
                break;
            }
            from = at + pattern.len();
        }
    }
    best
}

/// Resolves a path that starts with `crate::` or `super::` (possibly `super::super::`) to the top-level
/// modules it reaches (several for `crate::{a, b}`); returns them and the text after the path's head.
fn resolve<'a>(module: &[String], text: &'a str) -> (Vec<String>, &'a str) {
    let mut base: Vec<String> = module.to_vec();
    let mut rest = text;
    if let Some(tail) = rest.strip_prefix("crate::") {
        base.clear();
        rest = tail;
    } else {
        while let Some(tail) = rest.strip_prefix("super::") {
            base.pop();
            rest = tail;
        }
    }
    if !base.is_empty() {
        // Still inside a top-level module: that module itself.
        return (vec![base[0].clone()], rest);
    }
    if let Some(group) = rest.strip_prefix('{') {
        // `crate::{a, b::c, d as e}`: the first identifier of each top-level item.
        let mut names = Vec::new();
        let mut depth = 0;
        let mut item_start = true;
        let mut end = group.len();
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && (c.is_alphanumeric() || c == '_') => {
                    let ident: String = group[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    names.push(ident);
                    item_start = false;
                }
                _ => {}
            }
        }
        return (names, &group[end.min(group.len())..]);
    }
    let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    let tail = &rest[ident.len()..];
    if ident.is_empty() || ident == "self" { (Vec::new(), tail) } else { (vec![ident], tail) }
}

/// Every arrow that points up or sideways, as a readable line each.
fn violations(layers: &[Vec<String>], files: &[(PathBuf, String)]) -> Vec<String> {
    let layer_of: BTreeMap<&str, usize> =
        layers.iter().enumerate().flat_map(|(i, names)| names.iter().map(move |n| (n.as_str(), i))).collect();
    let mut problems = Vec::new();
    for (path, code) in files {
        let module = module_of(path);
        let Some(top) = module.first() else { continue };
        let Some(&own) = layer_of.get(top.as_str()) else {
            problems.push(format!("src/{}: module `{top}` is in no layer of ARCHITECTURE.md", path.display()));
            continue;
        };
        for (name, line) in imports_of(&module, code) {
            if name == *top {
                continue;
            }
            // Names that are not our modules (macros, `crate::` in a doc example) are not arrows.
            let Some(&theirs) = layer_of.get(name.as_str()) else { continue };
            if theirs >= own {
                let how = if theirs == own { "a module of its own layer" } else { "a layer above it" };
                problems.push(format!(
                    "src/{}:{line}: `{top}` (layer {own}) imports `{name}` (layer {theirs}), {how}",
                    path.display()
                ));
            }
        }
    }
    problems
}

fn source_files(root: &Path) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push((relative, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    // lib.rs is the module map and main.rs the binary's edge: they may name every module.
    out.retain(|(path, _)| path != Path::new("lib.rs") && path != Path::new("main.rs"));
    out
}

#[test]
fn every_module_imports_only_from_layers_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let layers = parse_layers(&architecture).unwrap_or_else(|e| panic!("{e}"));
    assert!(layers.len() >= 5, "the layers block looks empty: {layers:?}");
    let files = source_files(&root.join("src"));
    assert!(files.len() > 40, "found only {} files under src/", files.len());
    let mut problems = violations(&layers, &files);
    // The block stays true the other way too: every module it names exists.
    for name in layers.iter().flatten() {
        let src = root.join("src");
        if !src.join(format!("{name}.rs")).exists() && !src.join(name).join("mod.rs").exists() {
            problems.push(format!("ARCHITECTURE.md names a module `{name}` that src/ does not have"));
        }
    }
    assert!(problems.is_empty(), "imports that point up the house:\n{}", problems.join("\n"));
}

/// The modules src/lib.rs declares under a `cfg` that names feature `daemon` (the cfg line right above the
/// `mod` line).
fn daemon_modules(lib_rs: &str) -> Vec<String> {
    let lines: Vec<&str> = lib_rs.lines().map(str::trim).collect();
    let mut names = Vec::new();
    for pair in lines.windows(2) {
        let (attr, item) = (pair[0], pair[1]);
        let Some(declared) = item.strip_prefix("pub mod ").or_else(|| item.strip_prefix("pub(crate) mod ")) else {
            continue;
        };
        let name = declared.trim_end_matches(';').to_string();
        if attr.starts_with("#[cfg(") && attr.contains("feature = \"daemon\"") && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Every import, by a module built without feature `daemon`, of a module built only with it.
fn lean_violations(daemon: &[String], files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, code) in files {
        let module = module_of(path);
        let Some(top) = module.first() else { continue };
        if daemon.contains(top) {
            continue;
        }
        for (name, line) in imports_of(&module, code) {
            if daemon.contains(&name) {
                problems.push(format!(
                    "src/{}:{line}: `{top}` is in the library without default features, but imports `{name}`, which \
                     only feature `daemon` builds",
                    path.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn the_library_without_the_daemon_never_imports_the_daemons_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_rs = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let daemon = daemon_modules(&lib_rs);
    for expected in ["cli", "daemon", "api", "mcp", "queue"] {
        assert!(daemon.iter().any(|m| m == expected), "`{expected}` is not behind feature `daemon`: {daemon:?}");
    }
    for lean in ["library", "attempt", "agent", "model", "task", "record"] {
        assert!(!daemon.iter().any(|m| m == lean), "`{lean}` is behind feature `daemon`: {daemon:?}");
    }
    let problems = lean_violations(&daemon, &source_files(&root.join("src")));
    assert!(problems.is_empty(), "the library without the daemon would not build:\n{}", problems.join("\n"));

    // The check itself: a lean module's import of a daemon module is found, a daemon module's is not.
    let files = vec![
        (PathBuf::from("model/mod.rs"), "use crate::record::Usage;\nuse crate::{task, queue::Lease};\n".into()),
        (PathBuf::from("daemon/worker.rs"), "use crate::queue::Queue;\n".into()),
    ];
    let problems = lean_violations(&["daemon".to_string(), "queue".to_string()], &files);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("src/model/mod.rs:2: `model` is in the library"), "{problems:?}");
}

fn synthetic_layers() -> Vec<Vec<String>> {
    parse_layers("```layers\ncli\nagent\nmodel queue\nrecord screen\n```\n").unwrap_or_default()
}

#[test]
fn a_back_import_is_found_with_its_file_and_line() {
    let files = vec![
        (PathBuf::from("queue/sqlite.rs"), "use crate::record::Event;\n\nuse crate::agent::runner::run;\n".into()),
        (PathBuf::from("agent/runner.rs"), "use crate::{model::Model, queue::Queue};\nuse super::context;\n".into()),
    ];
    let problems = violations(&synthetic_layers(), &files);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("src/queue/sqlite.rs:3: `queue` (layer 1) imports `agent` (layer 2)"),
        "{problems:?}"
    );
}

#[test]
fn peers_grouped_imports_super_paths_and_unplaced_modules_are_checked() {
    let files = vec![
        // A grouped import that names a peer of the same layer.
        (PathBuf::from("model/mod.rs"), "use crate::{record::Usage, queue::Lease};\n".into()),
        // `super::super` from a nested file reaches the crate root.
        (PathBuf::from("record/events/x.rs"), "use super::super::super::cli::main;\n".into()),
        // Comments and strings are not code.
        (PathBuf::from("screen/coords.rs"), "// use crate::cli::x;\nlet s = \"crate::cli\";\n".into()),
        (PathBuf::from("newthing.rs"), "fn f() {}\n".into()),
    ];
    let problems = violations(&synthetic_layers(), &files);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("`model` (layer 1) imports `queue` (layer 1), a module of its own layer"));
    assert!(problems[1].contains("`record` (layer 0) imports `cli` (layer 3)"));
    assert!(problems[2].contains("module `newthing` is in no layer"));
}

/// The text files under `dir` (UTF-8 ones; images and other binary files are not read), `target/` left out.
fn text_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "target" && name != ".git") {
                text_files(&path, out);
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
}

/// Nothing in the repository cites the product contract's section numbers (U+00A7 and a number): a reader of
/// the repository cannot open the contract, so code comments, `--help`, the console, the OpenAPI document and
/// the docs name the page of `docs/` that holds the subject instead. The sign itself is refused in every text file of the
/// code, the tests and the docs (a test that types it writes `\u{a7}`); an RFC's section is "section N".
#[test]
fn no_text_cites_the_contract_by_section_number() {
    let repo = crate::support::repo();
    let mut files = Vec::new();
    for dir in ["src", "providers", "testkit", "tests", "benches", "examples", "config", "scripts", "docs", "packaging"]
    {
        text_files(&repo.join(dir), &mut files);
    }
    for file in ["README.md", "ARCHITECTURE.md", "Cargo.toml"] {
        let path = repo.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        files.push((path, text));
    }
    assert!(files.iter().any(|(path, _)| path.ends_with("src/api/console/app.js")), "the console's assets were read");
    assert!(files.iter().any(|(path, _)| path.ends_with("docs/cli.md")), "docs/ was read");
    let repo = repo.as_path();
    let found: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            text.lines().enumerate().filter(|(_, line)| line.contains('\u{a7}')).map(move |(n, line)| {
                format!("{}:{}: {}", path.strip_prefix(repo).unwrap_or(path).display(), n + 1, line.trim())
            })
        })
        .collect();
    assert!(found.is_empty(), "cite the page of docs/ instead of the contract's section:\n{}", found.join("\n"));
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors_of(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut anchors = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            anchors.push(anchor_of(line.trim_start_matches('#')));
        }
    }
    anchors
}

/// The front page and the reference link only to what is there: every relative link of README.md and
/// docs/*.md names a file of the repository, and a `#fragment` into a Markdown file names one of its headings.
#[test]
fn every_link_of_the_docs_points_at_a_file_and_heading_that_exist() {
    let repo = crate::support::repo();
    let mut pages = vec![repo.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 15, "{docs:?}");
    pages.extend(docs);
    let mut broken = Vec::new();
    let mut links = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            for (i, _) in line.match_indices("](") {
                let rest = &line[i + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = &rest[..end];
                if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                    continue;
                }
                links += 1;
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dir = page.parent().expect("a page's directory");
                let path = if file.is_empty() { page.clone() } else { dir.join(file) };
                let at = format!("{}:{}: {target}", page.strip_prefix(&repo).unwrap_or(page).display(), n + 1);
                if !path.exists() {
                    broken.push(format!("{at}: no such file"));
                } else if !fragment.is_empty() && path.extension().is_some_and(|e| e == "md") {
                    let heading = std::fs::read_to_string(&path).map(|t| anchors_of(&t)).unwrap_or_default();
                    if !heading.iter().any(|a| a == fragment) {
                        broken.push(format!("{at}: no heading #{fragment}"));
                    }
                }
            }
        }
    }
    assert!(links > 100, "only {links} links were found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_heading_anchor_is_githubs() {
    assert_eq!(anchor_of(" Run a task: `agentd run`"), "run-a-task-agentd-run");
    assert_eq!(anchor_of("Asking a human (`ask_human`)"), "asking-a-human-ask_human");
    assert_eq!(anchor_of("Fleet mode: PostgreSQL and S3"), "fleet-mode-postgresql-and-s3");
}

/// The tests of this binary that enter the quiet side of the machine-load room (`support::timing_sensitive`),
/// as `module::function` (the enclosing top-level function of each call; a helper's name stands for the
/// tests that call it, which share its module).
fn timing_sensitive_tests(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (module, code) in files {
        // The room's own module, and this one (its fixtures), call nothing.
        if module == "support" || module == "house" {
            continue;
        }
        let mut function = None;
        for line in code.lines() {
            let head = line.trim_start_matches("pub ").trim_start_matches("async ");
            if let Some(rest) = head.strip_prefix("fn ") {
                function = rest.split(['(', '<']).next().map(str::to_string);
            }
            if line.contains("support::timing_sensitive()") {
                let name = function.as_deref().unwrap_or("(outside any function)");
                found.push(format!("{module}::{name}"));
            }
        }
    }
    found
}

/// The test filter of `.config/nextest.toml`'s override that starts the quiet tests late (the one with
/// `priority = -50`), reduced to what it names in the `it` binary: prefixes (`test(/^x::/)`) and exact names
/// (`test(=x::y)`).
fn late_start_filter(nextest_toml: &str) -> Option<(Vec<String>, Vec<String>)> {
    let block = nextest_toml.split("[[profile.default.overrides]]").find(|b| b.contains("priority = -50"))?;
    let filter = block.lines().find_map(|l| l.trim().strip_prefix("filter = "))?;
    let (mut prefixes, mut exact) = (Vec::new(), Vec::new());
    for predicate in filter.split("test(").skip(1) {
        let body = predicate.split(')').next().unwrap_or_default();
        if let Some(regex) = body.strip_prefix("/^").and_then(|r| r.strip_suffix('/')) {
            prefixes.push(regex.to_string());
        } else if let Some(name) = body.strip_prefix('=') {
            exact.push(name.to_string());
        }
    }
    Some((prefixes, exact))
}

/// A timing-sensitive test waits (in its slot) while any heavy test runs; nextest starts the ones it knows of
/// after the others (`.config/nextest.toml`), so none sits idle in a slot at the start of the run. One that
/// is not named there would: this keeps the list whole.
#[test]
fn every_timing_sensitive_test_starts_late() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let nextest = std::fs::read_to_string(root.join(".config/nextest.toml")).expect(".config/nextest.toml");
    let (prefixes, exact) = late_start_filter(&nextest).expect("an override with priority = -50 and a filter");
    let mut files: Vec<(String, String)> = std::fs::read_dir(root.join("tests/it"))
        .expect("tests/it")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let module = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            (module, std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect();
    files.sort();
    let found = timing_sensitive_tests(&files);
    assert!(found.len() >= 20, "found only {} timing-sensitive tests: {found:?}", found.len());
    let missing: Vec<&String> = found
        .iter()
        .filter(|name| !prefixes.iter().any(|p| name.starts_with(p.as_str())) && !exact.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "timing-sensitive tests that .config/nextest.toml does not start late: {missing:?} (filter prefixes \
         {prefixes:?}, names {exact:?})"
    );
}

#[test]
fn a_timing_sensitive_test_outside_the_filter_is_found() {
    let files = vec![
        ("fidelity".to_string(), "#[test]\nfn a() {\n    let _l = crate::support::timing_sensitive();\n}\n".into()),
        (
            "console".to_string(),
            "#[tokio::test]\nasync fn b() {\n    let _l = crate::support::timing_sensitive();\n}\n".into(),
        ),
    ];
    assert_eq!(timing_sensitive_tests(&files), ["fidelity::a", "console::b"]);
    let toml =
        "[[profile.default.overrides]]\npriority = -50\nfilter = 'binary(it) & (test(/^fidelity::/) | test(=x::y))'\n";
    assert_eq!(late_start_filter(toml), Some((vec!["fidelity::".to_string()], vec!["x::y".to_string()])));
}
