//! The edit corpus: `tests/edit_corpus/*.case`, each an edit a model might send and the file
//! it must produce (or the error it must get). Every case must pass; the README reports the
//! count. Format:
//!
//! ```text
//! # what the case is about
//! tool: single_find_and_replace      (or multi_edit, search_and_replace_in_file, edit_existing_file)
//! replace_all: true                  (optional; for multi_edit it applies to every edit)
//! crlf: true                         (optional: original and expected use CRLF)
//! bom: true                          (optional: both start with a BOM)
//! path: src/a.rs                     (optional: the case also runs with this file name, whose
//!                                     extension lets edit_existing_file place by the syntax tree)
//! === original
//! …file lines…
//! === old_string / === new_string    (repeated for multi_edit; no final newline)
//! === diff                           (repeated: one SEARCH/REPLACE entry each)
//! === changes                        (edit_existing_file)
//! === expected                       (or === expected_error: a substring of the error)
//! ```

use serde_json::{Map, Value, json};
use toolpilot::tools::args::Args;
use toolpilot::tools::edit::transform;

struct Case {
    name: String,
    tool: String,
    flags: Vec<(String, String)>,
    sections: Vec<(String, String)>,
}

fn parse(name: &str, text: &str) -> Case {
    let mut case = Case {
        name: name.to_string(),
        tool: String::new(),
        flags: Vec::new(),
        sections: Vec::new(),
    };
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in text.split('\n') {
        if let Some(h) = line.strip_prefix("=== ") {
            if let Some((n, l)) = current.take() {
                case.sections.push((n, l.join("\n")));
            }
            current = Some((h.trim().to_string(), Vec::new()));
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line);
        } else if let Some((k, v)) = line.split_once(": ")
            && !k.starts_with('#')
        {
            if k == "tool" {
                case.tool = v.trim().to_string();
            } else {
                case.flags
                    .push((k.trim().to_string(), v.trim().to_string()));
            }
        }
    }
    if let Some((n, l)) = current.take() {
        case.sections.push((n, l.join("\n")));
    }
    case
}

impl Case {
    fn flag(&self, k: &str) -> bool {
        self.flags.iter().any(|(f, v)| f == k && v == "true")
    }
    fn all(&self, name: &str) -> Vec<String> {
        self.sections
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .collect()
    }
    fn one(&self, name: &str) -> Option<String> {
        self.all(name).into_iter().next()
    }
    /// A file section: its lines, each ending in a newline (CRLF/BOM if flagged).
    fn file(&self, name: &str) -> Option<Vec<u8>> {
        let t = self.one(name)?;
        let mut text = t.trim_end_matches('\n').to_string();
        if !self.flag("no_final_newline") && !text.is_empty() {
            text.push('\n');
        }
        if self.flag("crlf") {
            text = text.replace('\n', "\r\n");
        }
        let mut bytes = Vec::new();
        if self.flag("bom") {
            bytes.extend_from_slice(b"\xEF\xBB\xBF");
        }
        bytes.extend_from_slice(text.as_bytes());
        Some(bytes)
    }

    fn args(&self, filepath: &str) -> Args {
        let mut m = Map::new();
        m.insert("filepath".into(), json!(filepath));
        let all = self.flag("replace_all");
        match self.tool.as_str() {
            "single_find_and_replace" => {
                m.insert(
                    "old_string".into(),
                    json!(self.one("old_string").unwrap_or_default()),
                );
                m.insert(
                    "new_string".into(),
                    json!(self.one("new_string").unwrap_or_default()),
                );
                if all {
                    m.insert("replace_all".into(), json!(true));
                }
            }
            "multi_edit" => {
                let edits: Vec<Value> = self
                    .all("old_string")
                    .into_iter()
                    .zip(self.all("new_string"))
                    .map(|(o, n)| json!({"old_string": o, "new_string": n, "replace_all": all}))
                    .collect();
                m.insert("edits".into(), json!(edits));
            }
            "search_and_replace_in_file" => {
                m.insert("diffs".into(), json!(self.all("diff")));
            }
            "edit_existing_file" => {
                m.insert(
                    "changes".into(),
                    json!(self.one("changes").unwrap_or_default()),
                );
            }
            other => panic!("{}: unknown tool {other:?}", self.name),
        }
        Args::from_map(m)
    }

    /// Runs the case as `file` (no syntax known), and as its `path:` when it has one.
    fn run(&self) -> Result<(), String> {
        let mut names = vec!["file".to_string()];
        names.extend(
            self.flags
                .iter()
                .filter(|(k, _)| k == "path")
                .map(|(_, v)| v.clone()),
        );
        for name in names {
            self.run_as(&name).map_err(|e| format!("(as {name}) {e}"))?;
        }
        Ok(())
    }

    fn run_as(&self, filepath: &str) -> Result<(), String> {
        let original = self.file("original").ok_or("no === original section")?;
        let got = transform(&self.tool, &self.args(filepath), &original);
        match (got, self.file("expected"), self.one("expected_error")) {
            (Ok((bytes, _)), Some(expected), _) if bytes == expected => Ok(()),
            (Ok((bytes, _)), Some(expected), _) => Err(format!(
                "wrong result\n--- expected\n{}\n--- got\n{}",
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&bytes)
            )),
            (Err(e), _, Some(needle)) if e.contains(needle.trim()) => Ok(()),
            (Err(e), _, Some(needle)) => Err(format!("error {e:?} lacks {:?}", needle.trim())),
            (Err(e), Some(_), None) => Err(format!("unexpected error: {e}")),
            (Ok((bytes, _)), None, Some(_)) => Err(format!(
                "expected an error, got\n{}",
                String::from_utf8_lossy(&bytes)
            )),
            _ => Err("the case needs === expected or === expected_error".into()),
        }
    }
}

#[test]
fn every_case_of_the_edit_corpus_passes() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/edit_corpus");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "case"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 40,
        "the corpus has only {} cases",
        paths.len()
    );
    let mut failures = Vec::new();
    for p in &paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let case = parse(&name, &std::fs::read_to_string(p).unwrap());
        if let Err(e) = case.run() {
            failures.push(format!("{name}: {e}"));
        }
    }
    eprintln!(
        "edit corpus: {}/{} cases pass",
        paths.len() - failures.len(),
        paths.len()
    );
    assert!(
        failures.is_empty(),
        "failing cases:\n\n{}",
        failures.join("\n\n")
    );
}
