//! ARCHITECTURE.md, checked against the code.
//!
//! The module graph points one way: a module of `src/` uses only modules of lower layers. The
//! layers are written once, in ARCHITECTURE.md (the numbered list between the
//! `<!-- layers -->` markers, lowest first); these tests read that list and every `crate::…`
//! path in `src/` (tests included), so a new import that points back up, or sideways within a
//! layer, fails here with the file and line. `lib.rs` (the module list) and `main.rs` (the
//! binary) are above every layer.
//!
//! The invariants that are absences (no axum here, no file I/O there, one caller of
//! `Policy::decide`) are greps over the code, below the layer tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The top-level modules, by layer (0 = lowest), as ARCHITECTURE.md lists them.
fn layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let list = doc
        .split_once("<!-- layers -->")
        .and_then(|(_, rest)| rest.split_once("<!-- /layers -->"))
        .map(|(list, _)| list)
        .expect("ARCHITECTURE.md has no `<!-- layers -->` … `<!-- /layers -->` list");
    parse_layers(list)
}

/// `3. \`config\` — …` lines: the backticked names before the dash are the layer's modules.
fn parse_layers(list: &str) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    let mut n = 0;
    for line in list.lines() {
        let Some((number, rest)) = line.trim().split_once(". ") else {
            continue;
        };
        if number.parse::<usize>().is_err() {
            continue;
        }
        let names = rest.split(" — ").next().unwrap_or_default();
        for name in names.split(|c: char| c == ',' || c.is_whitespace()) {
            let name = name.trim_matches('`');
            if !name.is_empty() {
                let earlier = layers.insert(name.to_string(), n);
                assert!(
                    earlier.is_none(),
                    "{name} is listed twice in ARCHITECTURE.md"
                );
            }
        }
        n += 1;
    }
    layers
}

/// The top-level modules: `src/x.rs` and `src/x/mod.rs`.
fn modules() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(Path::new(ROOT).join("src")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() && path.join("mod.rs").exists()
            || path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main"
        {
            out.insert(name);
        }
    }
    out
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a file's code names, with line numbers: the first segment of every
/// `crate::x…` path and of every path in a `crate::{…}` group, and the module a `super::`
/// chain climbs to when it leaves the file's own top-level module. Comment lines are skipped.
fn uses(rel: &str, text: &str, modules: &BTreeSet<String>) -> Vec<(usize, String)> {
    // How deep the file's own module is below its top-level module (`agent/run.rs`: 1).
    let slashes = rel.matches('/').count();
    let depth = slashes - usize::from(slashes > 0 && rel.ends_with("/mod.rs"));
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::B, c}`: the first segment of each item at the top level.
                let mut level = 0;
                let mut item_start = true;
                for (k, c) in group.char_indices() {
                    match c {
                        '{' => level += 1,
                        '}' if level == 0 => break,
                        '}' => level -= 1,
                        ',' if level == 0 => item_start = true,
                        c if item_start && !c.is_whitespace() => {
                            item_start = false;
                            out.push((i + 1, ident(&group[k..])));
                        }
                        _ => {}
                    }
                }
            } else {
                out.push((i + 1, ident(rest)));
            }
        }
        // `super::super::x` in a file `depth` modules below its top-level module reaches the
        // crate root at `depth + 1` supers (one more inside an inline `mod tests`, where the
        // name is then the top-level module's own child: rare, and only counted when it is
        // another top-level module's name).
        let mut rest = line;
        while let Some(at) = rest.find("super::") {
            let mut supers = 0;
            let mut tail = &rest[at..];
            while let Some(t) = tail.strip_prefix("super::") {
                supers += 1;
                tail = t;
            }
            let name = ident(tail);
            if supers > depth && modules.contains(&name) {
                out.push((i + 1, name));
            }
            rest = tail;
        }
    }
    out
}

/// Every use of a module that is not on a lower layer than the module using it.
fn violations(
    files: &[(String, String)],
    layers: &BTreeMap<String, usize>,
    modules: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let own = rel.split(['/', '.']).next().unwrap_or_default();
        let Some(&own_layer) = layers.get(own) else {
            continue; // lib.rs, main.rs
        };
        for (line, used) in uses(rel, text, modules) {
            if used == own || !modules.contains(&used) {
                continue; // the module itself, or an item of the crate root
            }
            let used_layer = layers[&used];
            if used_layer >= own_layer {
                out.push(format!(
                    "src/{rel}:{line}: {own} (layer {}) uses {used} (layer {}){}",
                    own_layer + 1,
                    used_layer + 1,
                    if used_layer == own_layer {
                        ", on the same layer"
                    } else {
                        ", above it"
                    }
                ));
            }
        }
    }
    out
}

fn source_files() -> Vec<(String, String)> {
    let src = Path::new(ROOT).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_string_lossy().to_string();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn every_module_is_on_exactly_one_layer() {
    let layers = layers();
    let listed: BTreeSet<String> = layers.keys().cloned().collect();
    let modules = modules();
    let missing: Vec<_> = modules.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&modules).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's layer list is out of date: not listed {missing:?}, no such \
         module {stale:?}"
    );
}

#[test]
fn imports_point_down_the_layers() {
    let layers = layers();
    let modules = modules();
    let found = violations(&source_files(), &layers, &modules);
    assert!(
        found.is_empty(),
        "imports that point up (or sideways) the layers of ARCHITECTURE.md; move the item \
         down to a module both can use, or the code up, instead of importing upward:\n{}",
        found.join("\n")
    );
}

/// The checker itself: a back edge, a sideways edge, a group and a `super::` chain that
/// leaves the module are found; downward paths, comments and other crates' paths are not.
#[test]
fn the_check_finds_what_points_back_up() {
    let layers = parse_layers(
        "1. `text` — leaf\n2. `config`, `bounded` — settings\n3. `policy` — decisions\n",
    );
    let modules: BTreeSet<String> = ["text", "config", "bounded", "policy"]
        .into_iter()
        .map(String::from)
        .collect();
    let file = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let found = violations(
        &[
            file(
                "config/policy.rs",
                "use crate::text::group;\nuse crate::policy::Level;\n// crate::policy::x\n",
            ),
            file("config/mod.rs", "use crate::{text, bounded::read};\n"),
            file(
                "text.rs",
                "fn f() { super::config::x(); my_crate::policy::y(); }\n",
            ),
            file(
                "policy/mod.rs",
                "use crate::config::Level;\nuse super::x;\n",
            ),
        ],
        &layers,
        &modules,
    );
    assert_eq!(
        found,
        [
            "src/config/policy.rs:2: config (layer 2) uses policy (layer 3), above it",
            "src/config/mod.rs:1: config (layer 2) uses bounded (layer 2), on the same layer",
            "src/text.rs:1: text (layer 1) uses config (layer 2), above it",
        ]
    );
}

/// The lines of `src/` files that are code: comment lines left out, and the file's test
/// module (from `#[cfg(test)]` on) too when `tests` is false.
fn code_lines(tests: bool) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for (rel, text) in source_files() {
        for (i, line) in text.lines().enumerate() {
            if !tests && line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if !line.trim_start().starts_with("//") {
                out.push((rel.clone(), i + 1, line.to_string()));
            }
        }
    }
    out
}

/// The places in the files under `dirs` (prefixes of paths below `src/`) whose code names
/// one of `words`.
fn naming(dirs: &[&str], words: &[&str], tests: bool) -> Vec<String> {
    code_lines(tests)
        .into_iter()
        .filter(|(rel, _, _)| dirs.iter().any(|d| rel.starts_with(d)))
        .filter_map(|(rel, n, line)| {
            // A leading blank, so that " static " also finds `static` at the start of a line.
            let line = format!(" {line}");
            let word = words.iter().find(|w| line.contains(*w))?;
            Some(format!("src/{rel}:{n}: {word}"))
        })
        .collect()
}

#[track_caller]
fn assert_none(found: Vec<String>, what: &str) {
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

/// Only the HTTP layer knows axum: `server/`, `error.rs` and the mock upstream (a server).
#[test]
fn only_the_http_modules_use_axum() {
    let everything_else: Vec<String> = source_files()
        .into_iter()
        .map(|(rel, _)| rel)
        .filter(|rel| {
            !(rel.starts_with("server/") || rel == "error.rs" || rel.starts_with("mock/"))
        })
        .collect();
    let dirs: Vec<&str> = everything_else.iter().map(String::as_str).collect();
    assert_none(
        naming(&dirs, &["axum"], true),
        "axum outside server/, error.rs and mock/",
    );
}

/// No file, network or process I/O where ARCHITECTURE.md says there is none: the wire types,
/// the edits, the model client's filesystem side.
#[test]
fn pure_modules_do_no_io() {
    const FILES: &[&str] = &[
        "std::fs",
        "tokio::fs",
        "cap_std",
        "crate::bounded",
        "crate::workspace",
    ];
    const NET: &[&str] = &["reqwest", "std::net", "tokio::net"];
    const PROCESSES: &[&str] = &["std::process", "tokio::process"];
    let all: Vec<&str> = [FILES, NET, PROCESSES].concat();
    assert_none(
        naming(&["openai.rs", "openai/"], &all, false),
        "the wire types (openai.rs, openai/) do I/O",
    );
    assert_none(
        naming(
            &["openai.rs", "openai/"],
            &[" static ", "OnceLock", "Mutex", "RwLock", "thread_local!"],
            false,
        ),
        "the wire types (openai.rs, openai/) keep state",
    );
    assert_none(
        naming(&["edit/"], &all, false),
        "the edit transformations (edit/) do I/O",
    );
    assert_none(
        naming(&["upstream/"], &[FILES, PROCESSES].concat(), false),
        "the model client (upstream/) touches the filesystem",
    );
}

/// Tools reach the network only through `web::`, and `code/` makes no HTTP calls (the agent
/// implements `Embedder` with the upstream).
#[test]
fn only_web_and_upstream_open_connections() {
    assert_none(
        naming(
            &["tools/", "code/"],
            &["reqwest", "std::net", "tokio::net"],
            false,
        ),
        "network access in tools/ or code/",
    );
}

/// `tools::registry` is the only caller of `Policy::decide`: tools decide no permissions.
#[test]
fn only_the_registry_asks_the_policy() {
    let found: Vec<String> = naming(&[""], &[".decide("], false)
        .into_iter()
        .filter(|place| {
            !(place.starts_with("src/tools/registry.rs:") || place.starts_with("src/policy/"))
        })
        .collect();
    assert_none(found, "Policy::decide called outside tools::registry");
}

/// The shadow repository runs git with its own `GIT_DIR`: one place builds the command, and
/// it sets the shadow's directories, so the workspace's `.git` is never used.
#[test]
fn checkpoints_run_git_only_on_the_shadow_repository() {
    let found = naming(&["checkpoint/"], &["Command::new("], false);
    assert_eq!(found.len(), 1, "{found:?}");
    let tree = std::fs::read_to_string(Path::new(ROOT).join("src/checkpoint/tree.rs")).unwrap();
    let at = tree.find("Command::new(\"git\")").unwrap();
    let setup = &tree[at..at + 600];
    assert!(
        setup.contains(".env(\"GIT_DIR\", &self.git_dir)")
            && setup.contains(".env(\"GIT_WORK_TREE\", &self.work_tree)"),
        "{setup}"
    );
}
