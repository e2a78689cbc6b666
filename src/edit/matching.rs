//! Finding `old_string` in a file: a ladder of ever more tolerant rungs.
//!
//! 1. exact;
//! 2. trailing whitespace ignored (whole lines);
//! 3. indentation-relative (whole lines, one consistent indent shift; the replacement is
//!    re-indented by the same shift);
//! 4. all whitespace ignored (character level, so re-wrapped lines match too);
//! 5. Unicode punctuation normalised (curly quotes, dashes, ellipsis, odd spaces) and
//!    whitespace ignored.
//!
//! The first rung with a match decides. Several matches are an error listing their lines
//! unless `replace_all`; no match is an error showing the closest region of the file. Texts
//! are `\n`-only (see `textfile`).

use std::fmt::Write as _;

/// Which rung matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rung {
    Exact,
    TrailingWhitespace,
    Indentation,
    Whitespace,
    Punctuation,
}

impl Rung {
    pub const ALL: [Rung; 5] = [
        Rung::Exact,
        Rung::TrailingWhitespace,
        Rung::Indentation,
        Rung::Whitespace,
        Rung::Punctuation,
    ];

    /// How the match was made, for the model.
    pub fn describe(self) -> &'static str {
        match self {
            Rung::Exact => "matched exactly",
            Rung::TrailingWhitespace => "matched after ignoring trailing whitespace",
            Rung::Indentation => {
                "matched with different indentation; the replacement was re-indented to the file"
            }
            Rung::Whitespace => "matched after ignoring whitespace differences",
            Rung::Punctuation => {
                "matched after normalising Unicode punctuation (quotes, dashes, spaces) and whitespace"
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Rung::Exact => "exact",
            Rung::TrailingWhitespace => "ignoring trailing whitespace",
            Rung::Indentation => "ignoring indentation",
            Rung::Whitespace => "ignoring all whitespace",
            Rung::Punctuation => "normalising punctuation",
        }
    }
}

/// One place `old` matched: a byte range of the text, and how to indent the replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    /// Columns to add (positive) or remove (negative) from each replacement line.
    shift: isize,
    /// Indent unit of the file at the match (tab or space).
    tab: bool,
    /// The match starts inside a line: the replacement's first line is not re-indented.
    inline: bool,
}

/// The result of one replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub text: String,
    pub rung: Rung,
    /// 1-based line numbers (in the text before the edit) where replacements happened.
    pub lines: Vec<usize>,
}

/// Replaces `old` by `new` in `text` using the ladder.
pub fn replace(text: &str, old: &str, new: &str, replace_all: bool) -> Result<Replaced, String> {
    if old.trim().is_empty() {
        // Continue's "emptySearch": insert at the top of the file.
        return Ok(Replaced {
            text: format!("{new}{text}"),
            rung: Rung::Exact,
            lines: vec![1],
        });
    }
    for rung in Rung::ALL {
        let spans = find(text, old, rung);
        if spans.is_empty() {
            continue;
        }
        let lines: Vec<usize> = spans.iter().map(|s| line_of(text, s.start)).collect();
        if spans.len() > 1 && !replace_all {
            return Err(format!(
                "old_string appears {} times in the file ({}, at lines {}). Include more of the \
                 surrounding lines in old_string to make it unique, or set replace_all to true to \
                 change every occurrence.",
                spans.len(),
                rung.describe(),
                list(&lines)
            ));
        }
        let mut out = String::with_capacity(text.len() + new.len());
        let mut last = 0;
        for s in &spans {
            out.push_str(&text[last..s.start]);
            out.push_str(&reindent(new, s.shift, s.tab, s.inline));
            last = s.end;
        }
        out.push_str(&text[last..]);
        return Ok(Replaced {
            text: out,
            rung,
            lines,
        });
    }
    Err(not_found(text, old))
}

fn list(lines: &[usize]) -> String {
    let shown: Vec<String> = lines.iter().take(20).map(usize::to_string).collect();
    let mut s = shown.join(", ");
    if lines.len() > 20 {
        let _ = write!(s, " and {} more", lines.len() - 20);
    }
    s
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

fn find(text: &str, old: &str, rung: Rung) -> Vec<Span> {
    match rung {
        Rung::Exact => text
            .match_indices(old)
            .map(|(i, m)| Span {
                start: i,
                end: i + m.len(),
                shift: 0,
                tab: false,
                inline: true,
            })
            .collect(),
        Rung::TrailingWhitespace => find_lines(text, old, false),
        Rung::Indentation => find_lines(text, old, true),
        Rung::Whitespace => find_mapped(text, old, |c, out| {
            if !c.is_whitespace() {
                out.push(c);
            }
        }),
        Rung::Punctuation => find_mapped(text, old, |c, out| {
            let c = normalize_punct(c);
            match c {
                Some('…') => out.push_str("..."),
                Some(c) if !c.is_whitespace() => out.push(c),
                _ => {}
            }
        }),
    }
}

struct Line<'a> {
    start: usize,
    /// End, without the newline.
    end: usize,
    text: &'a str,
}

fn lines_of(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            out.push(Line {
                start,
                end: i,
                text: &text[start..i],
            });
            start = i + 1;
        }
    }
    if start < text.len() {
        out.push(Line {
            start,
            end: text.len(),
            text: &text[start..],
        });
    }
    out
}

fn indent_width(line: &str) -> usize {
    line.chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

/// Whole-line matching: trailing whitespace ignored; with `shift`, one consistent indentation
/// shift allowed as well.
fn find_lines(text: &str, old: &str, allow_shift: bool) -> Vec<Span> {
    let old_lines: Vec<&str> = old.trim_matches('\n').split('\n').collect();
    let file = lines_of(text);
    let k = old_lines.len();
    if k == 0 || k > file.len() {
        return Vec::new();
    }
    let mut spans = Vec::new();
    let mut i = 0;
    while i + k <= file.len() {
        if let Some((shift, tab)) = lines_match(&file[i..i + k], &old_lines, allow_shift) {
            // old_string ending in a newline covers the last line's newline too.
            let mut end = file[i + k - 1].end;
            if old.ends_with('\n') && text[end..].starts_with('\n') {
                end += 1;
            }
            spans.push(Span {
                start: file[i].start,
                end,
                shift,
                tab,
                inline: false,
            });
            i += k;
        } else {
            i += 1;
        }
    }
    spans
}

fn lines_match(window: &[Line<'_>], old: &[&str], allow_shift: bool) -> Option<(isize, bool)> {
    let mut shift: Option<isize> = None;
    let mut tab = false;
    for (f, o) in window.iter().zip(old) {
        let (ft, ot) = (f.text.trim_end(), o.trim_end());
        if !allow_shift {
            if ft != ot {
                return None;
            }
            continue;
        }
        if ft.trim_start() != ot.trim_start() {
            return None;
        }
        if ft.is_empty() {
            continue;
        }
        let d = indent_width(ft) as isize - indent_width(ot) as isize;
        match shift {
            None => {
                shift = Some(d);
                tab = ft.starts_with('\t');
            }
            Some(s) if s != d => return None,
            Some(_) => {}
        }
    }
    let shift = shift.unwrap_or(0);
    if allow_shift && shift == 0 {
        // Same indentation: rung 2 would have matched; nothing new here.
        return None;
    }
    Some((shift, tab))
}

/// Character-level matching through a transformation (whitespace dropped, punctuation
/// normalised), mapped back to byte offsets of the original.
fn find_mapped(text: &str, old: &str, f: impl Fn(char, &mut String)) -> Vec<Span> {
    let mut needle = String::new();
    for c in old.chars() {
        f(c, &mut needle);
    }
    if needle.is_empty() {
        return Vec::new();
    }
    let mut hay = String::with_capacity(text.len());
    // For each byte of `hay`: the original byte range of the char that produced it.
    let mut map: Vec<(usize, usize)> = Vec::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        let before = hay.len();
        f(c, &mut hay);
        for _ in before..hay.len() {
            map.push((i, i + c.len_utf8()));
        }
    }
    let first_line_indent = |s: &str| -> usize {
        indent_width(s.split('\n').find(|l| !l.trim().is_empty()).unwrap_or(""))
    };
    let old_indent = first_line_indent(old);
    let mut spans = Vec::new();
    for (i, m) in hay.match_indices(&needle) {
        let mut start = map[i].0;
        let mut end = map[i + m.len() - 1].1;
        // Whole lines when the match covers them up to whitespace.
        let line_start = text[..start].rfind('\n').map_or(0, |p| p + 1);
        let inline = !text[line_start..start].trim().is_empty();
        if !inline {
            start = line_start;
        }
        let line_end = text[end..].find('\n').map_or(text.len(), |p| end + p);
        if text[end..line_end].trim().is_empty() {
            end = line_end;
        }
        let here = &text[start..];
        let shift = first_line_indent(here) as isize - old_indent as isize;
        let tab = here.trim_start_matches('\n').starts_with('\t');
        // Keep spans disjoint after widening.
        if spans.last().is_some_and(|s: &Span| s.end > start) {
            continue;
        }
        spans.push(Span {
            start,
            end,
            shift,
            tab,
            inline,
        });
    }
    spans
}

/// Maps look-alike punctuation and spaces to ASCII (None drops the char).
fn normalize_punct(c: char) -> Option<char> {
    Some(match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{02BC}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}'
        | '\u{00BB}' => '"',
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2212}' => '-',
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{FEFF}' => return None,
        other => other,
    })
}

/// Shifts the indentation of every line of `new` after the first by `shift` columns; the
/// first line too when it starts a line of its own.
fn reindent(new: &str, shift: isize, tab: bool, inline: bool) -> String {
    if shift == 0 {
        return new.to_string();
    }
    let unit = if tab { "\t" } else { " " };
    let per = if tab { 4 } else { 1 };
    let mut out = String::with_capacity(new.len() + 64);
    for (i, line) in new.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.trim().is_empty() || (i == 0 && inline) {
            out.push_str(if i == 0 {
                line
            } else {
                line.trim_end_matches([' ', '\t'])
            });
            continue;
        }
        if shift > 0 {
            for _ in 0..(shift as usize / per).max(1) {
                out.push_str(unit);
            }
            out.push_str(line);
        } else {
            let mut remove = (-shift) as usize;
            let mut rest = line;
            while remove > 0 {
                match rest.chars().next() {
                    Some(' ') => {
                        rest = &rest[1..];
                        remove -= 1;
                    }
                    Some('\t') => {
                        rest = &rest[1..];
                        remove = remove.saturating_sub(4);
                    }
                    _ => break,
                }
            }
            out.push_str(rest);
        }
    }
    out
}

/// The "not found" error: the rungs tried and the closest region of the file.
fn not_found(text: &str, old: &str) -> String {
    let tried: Vec<&str> = Rung::ALL.iter().map(|r| r.name()).collect();
    let mut msg = format!(
        "old_string was not found in the file (tried: {}).",
        tried.join(", ")
    );
    if let Some((from, to)) = closest_region(text, old) {
        let file = lines_of(text);
        let lo = from.saturating_sub(2);
        let hi = (to + 2).min(file.len().saturating_sub(1));
        let _ = writeln!(
            msg,
            " The closest part of the file is lines {}-{}:",
            from + 1,
            to + 1
        );
        for (n, l) in file.iter().enumerate().take(hi + 1).skip(lo) {
            let _ = writeln!(msg, "{:>5}| {}", n + 1, l.text);
        }
        msg.push_str(
            "Copy the exact current text from there (without the line numbers) into old_string \
             and try again.",
        );
    } else {
        msg.push_str(" Read the file again to see its current content.");
    }
    msg
}

/// The window of file lines most similar to `old`'s lines (0-based, inclusive).
fn closest_region(text: &str, old: &str) -> Option<(usize, usize)> {
    let file = lines_of(text);
    let old_lines: Vec<&str> = old.trim_matches('\n').split('\n').map(str::trim).collect();
    let k = old_lines.len().max(1);
    if file.is_empty() {
        return None;
    }
    let sim = |a: &str, b: &str| -> f32 {
        if a == b {
            return 1.0;
        }
        if a.is_empty() || b.is_empty() {
            return 0.0;
        }
        similar::TextDiff::from_chars(a, b).ratio()
    };
    // Candidate starts: lines most like the first non-blank old line.
    let (first_idx, first) = old_lines.iter().enumerate().find(|(_, l)| !l.is_empty())?;
    let mut cands: Vec<(f32, usize)> = file
        .iter()
        .enumerate()
        .filter(|(_, l)| l.text.len() < 2000)
        .map(|(i, l)| (sim(l.text.trim(), first), i))
        .collect();
    cands.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut best: Option<(f32, usize)> = None;
    for &(_, i) in cands.iter().take(5) {
        let start = i.saturating_sub(first_idx);
        let score: f32 = (0..k)
            .map(|j| {
                file.get(start + j)
                    .map_or(0.0, |l| sim(l.text.trim(), old_lines[j]))
            })
            .sum::<f32>()
            / k as f32;
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, start));
        }
    }
    let (score, start) = best?;
    if score < 0.5 {
        return None;
    }
    Some((start, (start + k - 1).min(file.len() - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(text: &str, old: &str, new: &str, all: bool, expected: Result<(&str, Rung), &str>) {
        let got = replace(text, old, new, all);
        match (got, expected) {
            (Ok(r), Ok((t, rung))) => {
                assert_eq!(r.text, t);
                assert_eq!(r.rung, rung);
            }
            (Err(e), Err(needle)) => assert!(e.contains(needle), "{e}"),
            (got, exp) => panic!("got {got:?}, expected {exp:?}"),
        }
    }

    #[test]
    fn exact() {
        check(
            "a\nfoo\nb\n",
            "foo",
            "bar",
            false,
            Ok(("a\nbar\nb\n", Rung::Exact)),
        );
        check(
            "x = 1; y = 1;",
            "= 1",
            "= 2",
            true,
            Ok(("x = 2; y = 2;", Rung::Exact)),
        );
    }

    #[test]
    fn trailing_whitespace() {
        check(
            "fn a() {  \n    x();\t\n}\n",
            "fn a() {\n    x();\n}",
            "fn a() {\n    y();\n}",
            false,
            Ok(("fn a() {\n    y();\n}\n", Rung::TrailingWhitespace)),
        );
    }

    #[test]
    fn indentation_relative_reindents_the_replacement() {
        let text = "impl A {\n        fn f() {\n            one();\n        }\n}\n";
        check(
            text,
            "fn f() {\n    one();\n}",
            "fn f() {\n    two();\n    three();\n}",
            false,
            Ok((
                "impl A {\n        fn f() {\n            two();\n            three();\n        }\n}\n",
                Rung::Indentation,
            )),
        );
        // Tabs in the file, spaces in old_string.
        check(
            "\tif x {\n\t\ty()\n\t}\n",
            "if x {\n    y()\n}",
            "if x {\n    z()\n}",
            false,
            Ok(("\tif x {\n\t    z()\n\t}\n", Rung::Indentation)),
        );
    }

    #[test]
    fn whitespace_insensitive_handles_rewrapping() {
        check(
            "call(a,\n     b);\nnext();\n",
            "call(a, b);",
            "call(a, c);",
            false,
            Ok(("call(a, c);\nnext();\n", Rung::Whitespace)),
        );
    }

    #[test]
    fn punctuation_normalised() {
        check(
            "msg = \"it’s done — really\"\n",
            "msg = \"it's done - really\"",
            "msg = \"finished\"",
            false,
            Ok(("msg = \"finished\"\n", Rung::Punctuation)),
        );
        check(
            "a\u{00A0}=\u{00A0}1\n",
            "a = 1",
            "a = 2",
            false,
            Ok(("a = 2\n", Rung::Whitespace)),
        );
    }

    #[test]
    fn ambiguity_lists_lines() {
        check(
            "x\nfoo\ny\nfoo\n",
            "foo",
            "bar",
            false,
            Err("appears 2 times in the file (matched exactly, at lines 2, 4)"),
        );
        check(
            "x\nfoo\ny\nfoo\n",
            "foo",
            "bar",
            true,
            Ok(("x\nbar\ny\nbar\n", Rung::Exact)),
        );
    }

    #[test]
    fn not_found_shows_the_closest_region() {
        let text = "fn main() {\n    let total = compute(1, 2);\n    println!(\"{total}\");\n}\n";
        let e = replace(text, "let totl = compute(1, 3);", "x", false).unwrap_err();
        assert!(
            e.starts_with("old_string was not found in the file (tried: exact,"),
            "{e}"
        );
        assert!(e.contains("closest part of the file is lines 2-2"), "{e}");
        assert!(e.contains("    2|     let total = compute(1, 2);"), "{e}");
        let e = replace(text, "something else entirely unrelated", "x", false).unwrap_err();
        assert!(e.contains("Read the file again"), "{e}");
    }

    #[test]
    fn a_trailing_newline_in_old_string_covers_the_line_end() {
        check(
            "a  \nb\n",
            "a\n",
            "A\n",
            false,
            Ok(("A\nb\n", Rung::TrailingWhitespace)),
        );
    }

    #[test]
    fn empty_old_string_inserts_at_the_top() {
        check("b\n", "", "a\n", false, Ok(("a\nb\n", Rung::Exact)));
    }
}
