//! Splitting a file into the pieces the index ranks: one chunk per top-level item (a long
//! impl or class is split into its methods), the code between items, and line windows for
//! files in languages toolpilot does not parse (or parts too long for one chunk).

use std::path::Path;

use super::symbols::{self, Lang};

/// Longest chunk, in lines; longer items are cut into windows of this size.
pub const MAX_CHUNK_LINES: usize = 80;
/// Window size for unparsed text.
const WINDOW_LINES: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// 1-based, inclusive.
    pub start: usize,
    pub end: usize,
    /// Names of the symbols the chunk holds (`Config`, `load`).
    pub symbols: Vec<String>,
    pub text: String,
}

/// The chunks of a file (`text` with `\n` line ends).
pub fn chunks(path: &Path, text: &str) -> Vec<Chunk> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return Vec::new();
    }
    let mut regions: Vec<(usize, usize, Vec<String>)> = Vec::new();
    if let Some(lang) = Lang::of(path) {
        let syms = symbols::symbols(lang, text);
        let mut i = 0;
        while i < syms.len() {
            let s = &syms[i];
            let children: Vec<&symbols::Symbol> = syms[i + 1..]
                .iter()
                .take_while(|c| c.depth > s.depth)
                .collect();
            let span = s.end_line - s.start_line + 1;
            if s.depth == 0 {
                if span > MAX_CHUNK_LINES && !children.is_empty() {
                    // The header (up to the first method) carries the type's name.
                    let first = children[0].start_line;
                    if first > s.start_line {
                        regions.push((s.start_line, first - 1, vec![s.name.clone()]));
                    }
                    for c in &children {
                        regions.push((
                            c.start_line,
                            c.end_line,
                            vec![s.name.clone(), c.name.clone()],
                        ));
                    }
                } else {
                    let mut names = vec![s.name.clone()];
                    names.extend(children.iter().map(|c| c.name.clone()));
                    regions.push((s.start_line, s.end_line, names));
                }
            }
            i += 1 + children.len();
        }
    }
    regions.sort_by_key(|r| r.0);
    // Comments, doc comments, attributes and decorators right above an item belong to it.
    let mut prev_end = 0;
    for r in regions.iter_mut() {
        while r.0 > prev_end + 1 && r.0 >= 2 && is_preamble(lines[r.0 - 2]) {
            r.0 -= 1;
        }
        prev_end = r.1;
    }
    // Fill the gaps (imports, constants, statements) and cut long regions.
    let mut out = Vec::new();
    let mut next = 1;
    let total = lines.len();
    let push_window =
        |start: usize, end: usize, names: &[String], out: &mut Vec<Chunk>, step: usize| {
            let mut a = start;
            while a <= end {
                let b = (a + step - 1).min(end);
                let text = lines[a - 1..b].join("\n");
                if text.chars().any(char::is_alphanumeric) {
                    out.push(Chunk {
                        start: a,
                        end: b,
                        symbols: names.to_vec(),
                        text,
                    });
                }
                a = b + 1;
            }
        };
    for (start, end, names) in regions {
        let start = start.max(next);
        let end = end.min(total);
        if start > end {
            continue;
        }
        if start > next {
            push_window(next, start - 1, &[], &mut out, WINDOW_LINES);
        }
        push_window(start, end, &names, &mut out, MAX_CHUNK_LINES);
        next = end + 1;
    }
    if next <= total {
        push_window(next, total, &[], &mut out, WINDOW_LINES);
    }
    out
}

/// A line that introduces the item below it: a comment, doc comment, attribute or
/// decorator.
fn is_preamble(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty()
        && ["//", "/*", "*", "#[", "#!", "@", "--"]
            .iter()
            .any(|p| t.starts_with(p))
        || (t.starts_with('#') && !t.starts_with("#include") && !t.starts_with("#define"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_items_and_fill_gaps() {
        let mut src =
            String::from("use a;\nuse b;\n\nfn one() {\n    1\n}\n\nstruct S;\nimpl S {\n");
        for i in 0..50 {
            src.push_str(&format!("    fn m{i}() {{\n        {i}\n    }}\n"));
        }
        src.push_str("}\n");
        let c = chunks(Path::new("x.rs"), &src);
        assert_eq!((c[0].start, c[0].end, c[0].symbols.len()), (1, 3, 0));
        assert_eq!((c[1].start, c[1].end), (4, 6));
        assert_eq!(c[1].symbols, ["one"]);
        assert_eq!(c[2].symbols, ["S"]);
        // The impl is longer than a chunk: one chunk per method, named by type and method.
        assert_eq!(c[3].symbols, ["S"]); // the `impl S {` header line
        assert_eq!(c[4].symbols, ["S", "m0"]);
        // The impl's closing brace alone is not worth a chunk.
        assert_eq!(c.last().unwrap().end, src.lines().count() - 1);
        let plain = chunks(Path::new("notes.txt"), &"line\n".repeat(120));
        assert_eq!(
            plain.iter().map(|c| (c.start, c.end)).collect::<Vec<_>>(),
            [(1, 50), (51, 100), (101, 120)]
        );
    }
}
