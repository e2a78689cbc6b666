//! The SEARCH/REPLACE block syntax of `search_and_replace_in_file`:
//!
//! ```text
//! ------- SEARCH
//! [exact content to find]
//! =======
//! [new content to replace with]
//! +++++++ REPLACE
//! ```
//!
//! A marker is a whole line, exactly: three or more `-`, one space and `SEARCH`; three or more
//! `=`; three or more `+`, one space and `REPLACE` (aider's `<<<<<<< SEARCH` and
//! `>>>>>>> REPLACE` are accepted too). A line that is almost a marker (`-------SEARCH`, a
//! `=======` with trailing spaces, `+++ replace`) is an error naming its line and the marker
//! expected, so that nothing is applied from a misread block. A line indented by whitespace is
//! content, never a marker. Bodies keep their lines exactly.
//!
//! A block that a new `SEARCH` marker interrupts before its `REPLACE` marker is skipped, as
//! Continue does, and reported; an unfinished block at the end is an error.

/// One block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub search: String,
    pub replace: String,
}

/// The blocks of one `diffs` entry, and the unfinished blocks that were skipped (a sentence
/// each, for the result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub blocks: Vec<Block>,
    pub skipped: Vec<String>,
}

/// What a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Start,
    Divider,
    End,
    Text,
}

const START: &str = "------- SEARCH";
const DIVIDER: &str = "=======";
const END: &str = "+++++++ REPLACE";

/// The grammar, for error messages.
const GRAMMAR: &str = "Each block is exactly:\n------- SEARCH\n<the exact lines to find>\n=======\n\
                       <the lines to put instead>\n+++++++ REPLACE\n(markers on lines of their \
                       own: three or more `-`, `=` or `+`, a single space before SEARCH and \
                       REPLACE, nothing else on the line)";

fn run_then(line: &str, ch: char, word: &str) -> bool {
    let run = line.chars().take_while(|&c| c == ch).count();
    run >= 3 && line[run..].strip_prefix(' ') == Some(word)
}

/// Classifies a line: a marker exactly, text, or (Err) almost a marker, with the marker it
/// should have been.
fn classify(line: &str) -> Result<Line, &'static str> {
    if run_then(line, '-', "SEARCH") || run_then(line, '<', "SEARCH") {
        return Ok(Line::Start);
    }
    if line.len() >= 3 && line.chars().all(|c| c == '=') {
        return Ok(Line::Divider);
    }
    if run_then(line, '+', "REPLACE") || run_then(line, '>', "REPLACE") {
        return Ok(Line::End);
    }
    if line.starts_with(char::is_whitespace) {
        return Ok(Line::Text);
    }
    // Almost a marker: a run of three or more marker characters followed by nothing but
    // whitespace, or by SEARCH / REPLACE in any spacing and case.
    let run = line
        .chars()
        .take_while(|c| matches!(c, '-' | '=' | '+' | '<' | '>'))
        .count();
    if run < 3 {
        return Ok(Line::Text);
    }
    let rest = line[run..].trim();
    let word: String = rest
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_uppercase();
    let tail_ok = rest[word.len()..]
        .chars()
        .all(|c| !c.is_alphanumeric() && c != '_');
    match word.as_str() {
        "SEARCH" if tail_ok => Err(START),
        "REPLACE" if tail_ok => Err(END),
        "" if rest.is_empty() && line[..run].chars().all(|c| c == '=') => Err(DIVIDER),
        _ => Ok(Line::Text),
    }
}

/// Parses one `diffs` entry (`index` is its position, for messages).
pub fn parse(diff: &str, index: usize) -> Result<Parsed, String> {
    enum State {
        Outside,
        /// In a SEARCH part since line `.0`.
        Search(usize, Vec<String>),
        Replace(usize, Vec<String>, Vec<String>),
    }
    let mut state = State::Outside;
    let mut blocks = Vec::new();
    let mut skipped = Vec::new();
    let lines: Vec<&str> = diff
        .strip_suffix('\n')
        .unwrap_or(diff)
        .split('\n')
        .collect();
    for (n, line) in lines.iter().enumerate() {
        let n = n + 1;
        let kind = classify(line).map_err(|expected| {
            format!(
                "diffs[{index}] line {n}: `{line}` is not a block marker; expected `{expected}`. \
                 No block was applied and the file is unchanged. {GRAMMAR}"
            )
        })?;
        state = match (state, kind) {
            (State::Outside, Line::Start) => State::Search(n, Vec::new()),
            (State::Outside, Line::Divider | Line::End) => {
                return Err(format!(
                    "diffs[{index}] line {n}: `{line}` comes before any `{START}` marker. No \
                     block was applied and the file is unchanged. {GRAMMAR}"
                ));
            }
            (State::Outside, Line::Text) => State::Outside,
            (State::Search(from, _) | State::Replace(from, ..), Line::Start) => {
                skipped.push(format!(
                    "diffs[{index}] lines {from}-{}: a block without its `{END}` marker was \
                     skipped, since a new `{START}` starts at line {n}",
                    n - 1
                ));
                State::Search(n, Vec::new())
            }
            (State::Search(from, s), Line::Divider) => State::Replace(from, s, Vec::new()),
            (State::Search(..), Line::End) => {
                return Err(format!(
                    "diffs[{index}] line {n}: `{line}` comes before the `{DIVIDER}` divider of \
                     its block. No block was applied and the file is unchanged. {GRAMMAR}"
                ));
            }
            (State::Search(from, mut s), Line::Text) => {
                s.push(line.to_string());
                State::Search(from, s)
            }
            (State::Replace(..), Line::Divider) => {
                return Err(format!(
                    "diffs[{index}] line {n}: a second `{DIVIDER}` in one block; expected \
                     `{END}` to close it. No block was applied and the file is unchanged. \
                     {GRAMMAR}"
                ));
            }
            (State::Replace(_, s, r), Line::End) => {
                blocks.push(Block {
                    search: s.join("\n"),
                    replace: r.join("\n"),
                });
                State::Outside
            }
            (State::Replace(from, s, mut r), Line::Text) => {
                r.push(line.to_string());
                State::Replace(from, s, r)
            }
        };
    }
    match state {
        State::Outside if blocks.is_empty() => Err(format!(
            "diffs[{index}] has no complete block; nothing was applied. {GRAMMAR}"
        )),
        State::Outside => Ok(Parsed { blocks, skipped }),
        State::Search(from, _) | State::Replace(from, ..) => Err(format!(
            "diffs[{index}]: the block starting at line {from} is not closed with `{END}` \
             (the diff may have been cut off). No block was applied and the file is unchanged."
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(s: &str, r: &str) -> Block {
        Block {
            search: s.into(),
            replace: r.into(),
        }
    }

    #[track_caller]
    fn check(diff: &str, expected: Result<(Vec<Block>, usize), &str>) {
        match (parse(diff, 0), expected) {
            (Ok(p), Ok((blocks, skipped))) => {
                assert_eq!(p.blocks, blocks);
                assert_eq!(p.skipped.len(), skipped, "{:?}", p.skipped);
            }
            (Err(e), Err(want)) => assert!(e.contains(want), "{e:?} lacks {want:?}"),
            (got, want) => panic!("parse({diff:?}) = {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn parses_blocks() {
        check(
            "------- SEARCH\nfn a() {}\n=======\nfn a() { x }\n+++++++ REPLACE\n\n--- SEARCH\none\ntwo\n===\n+++ REPLACE\n",
            Ok((
                vec![block("fn a() {}", "fn a() { x }"), block("one\ntwo", "")],
                0,
            )),
        );
        check(
            "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE",
            Ok((vec![block("x", "y")], 0)),
        );
        // Indented marker-like lines are content (an underline in a docstring).
        check(
            "------- SEARCH\n    Title\n    =====\n=======\n    Title\n    -----\n+++++++ REPLACE",
            Ok((
                vec![block("    Title\n    =====", "    Title\n    -----")],
                0,
            )),
        );
        // Text that merely starts with dashes.
        check(
            "------- SEARCH\n-- search the index\n---\n=======\n--- Searching\n+++++++ REPLACE",
            Ok((vec![block("-- search the index\n---", "--- Searching")], 0)),
        );
    }

    #[test]
    fn almost_markers_are_errors_naming_the_line_and_the_marker() {
        for (diff, want) in [
            (
                "-------SEARCH\nx\n=======\ny\n+++++++ REPLACE",
                "diffs[0] line 1: `-------SEARCH` is not a block marker; expected `------- SEARCH`",
            ),
            (
                "------- SEARCH\nx\n=======  \ny\n+++++++ REPLACE",
                "diffs[0] line 3: `=======  ` is not a block marker; expected `=======`",
            ),
            (
                "------- SEARCH \nx\n=======\ny\n+++++++ REPLACE",
                "line 1: `------- SEARCH ` is not a block marker",
            ),
            (
                "------- SEARCH\nx\n=======\ny\n+++++++  REPLACE",
                "line 5: `+++++++  REPLACE` is not a block marker; expected `+++++++ REPLACE`",
            ),
            (
                "------- search\nx\n=======\ny\n+++++++ REPLACE",
                "expected `------- SEARCH`",
            ),
            (
                "------- SEARCH\nx\n=======\ny\n------- REPLACE",
                "line 5: `------- REPLACE` is not a block marker; expected `+++++++ REPLACE`",
            ),
            ("------- SEARCH:\nx\n=======\ny\n+++++++ REPLACE", "line 1"),
        ] {
            check(diff, Err(want));
            check(diff, Err("No block was applied and the file is unchanged"));
        }
    }

    #[test]
    fn an_unfinished_block_before_a_complete_one_is_skipped() {
        check(
            "------- SEARCH\nabandoned\n------- SEARCH\nx\n=======\ny\n+++++++ REPLACE",
            Ok((vec![block("x", "y")], 1)),
        );
        check(
            "------- SEARCH\na\n=======\nb\n------- SEARCH\nx\n=======\ny\n+++++++ REPLACE",
            Ok((vec![block("x", "y")], 1)),
        );
        let p = parse(
            "------- SEARCH\nabandoned\n------- SEARCH\nx\n=======\ny\n+++++++ REPLACE",
            3,
        )
        .unwrap();
        assert_eq!(
            p.skipped,
            [
                "diffs[3] lines 1-2: a block without its `+++++++ REPLACE` marker was skipped, \
              since a new `------- SEARCH` starts at line 3"
            ]
        );
    }

    #[test]
    fn explains_malformed_blocks() {
        check("=======\n", Err("line 1: `=======` comes before any"));
        check(
            "------- SEARCH\nx\n+++++++ REPLACE",
            Err("before the `=======` divider"),
        );
        check(
            "------- SEARCH\nx\n=======\ny\n=======\n+++++++ REPLACE",
            Err("line 5: a second `=======`"),
        );
        check(
            "------- SEARCH\nx\n=======\ny\n",
            Err("the block starting at line 1 is not closed"),
        );
        check("just text", Err("has no complete block"));
    }
}
