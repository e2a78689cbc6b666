//! Lazy edits placed by the syntax tree: `tests/lazy_edits/*.case`, one `edit_existing_file`
//! call each, all sent through the real server in one run and checked byte for byte. Format:
//!
//! ```text
//! # what the case is about
//! path: src/calc.ts                  (the file's name: its extension picks the syntax)
//! === original
//! …file lines…
//! === changes
//! …what the model sends…
//! === expected                       (the file afterwards; the original when nothing may change)
//! === result                         (optional: lines that must each appear in the tool result)
//! ```
//!
//! Sections end at the next `=== ` line; the file sections get a final newline.

use serde_json::{Value, json};

use crate::support::*;

struct Case {
    name: String,
    path: String,
    original: String,
    changes: String,
    expected: String,
    result: Vec<String>,
}

fn parse(name: &str, text: &str) -> Case {
    let mut path = String::new();
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.split('\n') {
        if let Some(h) = line.strip_prefix("=== ") {
            sections.push((h.trim().to_string(), Vec::new()));
        } else if let Some((_, lines)) = sections.last_mut() {
            lines.push(line);
        } else if let Some(p) = line.strip_prefix("path: ") {
            path = p.trim().to_string();
        }
    }
    let section = |n: &str| -> Option<String> {
        sections
            .iter()
            .find(|(h, _)| h == n)
            .map(|(_, l)| l.join("\n").trim_end_matches('\n').to_string())
    };
    let file = |n: &str| {
        let t = section(n).unwrap_or_else(|| panic!("{name}: no === {n} section"));
        if t.is_empty() { t } else { t + "\n" }
    };
    assert!(!path.is_empty(), "{name}: no path: line");
    Case {
        name: name.to_string(),
        path,
        original: file("original"),
        changes: section("changes").unwrap_or_default(),
        expected: file("expected"),
        result: section("result")
            .map(|r| {
                r.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn cases() -> Vec<Case> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lazy_edits");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "case"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            parse(&name, &std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// Edit tools run without approval here.
const ALLOW_EDITS: &str = "[policy.tools]\nedit_existing_file = \"allow\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lazy_edit_case_is_placed_byte_for_byte() {
    let cases = cases();
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    let calls: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"id": format!("c{i}"), "name": "edit_existing_file", "arguments": {
                "filepath": format!("{}/{}", c.name, c.path), "changes": c.changes}})
        })
        .collect();
    let mut b = TestServer::builder()
        .config(ALLOW_EDITS)
        .script(json!({"rounds": [{"tool_calls": calls}, {"text": "done"}]}));
    for c in &cases {
        b = b.file(&format!("{}/{}", c.name, c.path), &c.original);
    }
    let s = b.start().await;
    let r = s.chat(ask("edit")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let result = tool_result(&reqs[1], &format!("c{i}"));
        let got = std::fs::read_to_string(s.path(&format!("{}/{}", c.name, c.path))).unwrap();
        if std::env::var_os("LAZY_EDITS_SHOW").is_some() {
            eprintln!("===== {}\n{result}", c.name);
        }
        let mut why = Vec::new();
        if result.trim().is_empty() {
            why.push("the tool result is empty".to_string());
        }
        if got != c.expected {
            why.push(format!(
                "wrong file\n--- expected\n{}--- got\n{}",
                c.expected, got
            ));
        }
        for want in &c.result {
            if !result.contains(want.as_str()) {
                why.push(format!("the result lacks {want:?}"));
            }
        }
        if !why.is_empty() {
            failures.push(format!(
                "{}: {}\n--- result\n{result}",
                c.name,
                why.join("\n")
            ));
        }
    }
    eprintln!(
        "lazy edits: {}/{} cases pass",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "failing cases:\n\n{}",
        failures.join("\n\n")
    );
}
