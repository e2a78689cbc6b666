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
//! Markers are whole lines of three or more `-`, `=`, `+` (aider's `<<<<<<< SEARCH` and
//! `>>>>>>> REPLACE` are accepted too). Bodies keep their lines exactly.

/// One block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub search: String,
    pub replace: String,
}

fn is_marker(line: &str, ch: char, word: &str) -> bool {
    let l = line.trim_end();
    let body = l.trim_end_matches(word).trim_end();
    l.ends_with(word) && body.len() >= 3 && body.chars().all(|c| c == ch)
}

fn is_start(line: &str) -> bool {
    is_marker(line, '-', "SEARCH") || is_marker(line, '<', "SEARCH")
}

fn is_end(line: &str) -> bool {
    is_marker(line, '+', "REPLACE") || is_marker(line, '>', "REPLACE")
}

fn is_divider(line: &str) -> bool {
    let l = line.trim_end();
    l.len() >= 3 && l.chars().all(|c| c == '=')
}

/// Parses one `diffs` entry (`index` is its position, for messages).
pub fn parse(diff: &str, index: usize) -> Result<Vec<Block>, String> {
    enum State {
        Outside,
        Search(Vec<String>),
        Replace(Vec<String>, Vec<String>),
    }
    let mut state = State::Outside;
    let mut blocks = Vec::new();
    for (n, line) in diff.split('\n').enumerate() {
        let n = n + 1;
        state = match state {
            State::Outside => {
                if is_start(line) {
                    State::Search(Vec::new())
                } else if is_divider(line) || is_end(line) {
                    return Err(format!(
                        "diffs[{index}] line {n}: `{}` comes before any `------- SEARCH` marker",
                        line.trim_end()
                    ));
                } else {
                    State::Outside
                }
            }
            State::Search(mut s) => {
                if is_divider(line) {
                    State::Replace(s, Vec::new())
                } else if is_end(line) {
                    return Err(format!(
                        "diffs[{index}] line {n}: `{}` comes before the `=======` divider of its block",
                        line.trim_end()
                    ));
                } else if is_start(line) {
                    return Err(format!(
                        "diffs[{index}] line {n}: a new `------- SEARCH` starts before the previous block has its `=======`"
                    ));
                } else {
                    s.push(line.to_string());
                    State::Search(s)
                }
            }
            State::Replace(s, mut r) => {
                if is_end(line) {
                    blocks.push(Block {
                        search: s.join("\n"),
                        replace: r.join("\n"),
                    });
                    State::Outside
                } else if is_start(line) {
                    return Err(format!(
                        "diffs[{index}] line {n}: a new `------- SEARCH` starts before the previous block is closed with `+++++++ REPLACE`"
                    ));
                } else {
                    r.push(line.to_string());
                    State::Replace(s, r)
                }
            }
        };
    }
    match state {
        State::Outside if blocks.is_empty() => Err(format!(
            "diffs[{index}] has no complete block. Each block is:\n------- SEARCH\n<exact lines \
             to find>\n=======\n<replacement lines>\n+++++++ REPLACE"
        )),
        State::Outside => Ok(blocks),
        _ => Err(format!(
            "diffs[{index}]: the last block is not closed with `+++++++ REPLACE`"
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

    #[test]
    fn parses_blocks() {
        let d = "------- SEARCH\nfn a() {}\n=======\nfn a() { x }\n+++++++ REPLACE\n\n--- SEARCH\none\ntwo\n===\n+++ REPLACE\n";
        assert_eq!(
            parse(d, 0).unwrap(),
            vec![block("fn a() {}", "fn a() { x }"), block("one\ntwo", "")]
        );
        let aider = "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE";
        assert_eq!(parse(aider, 0).unwrap(), vec![block("x", "y")]);
    }

    #[test]
    fn explains_malformed_blocks() {
        assert!(
            parse("=======\n", 2)
                .unwrap_err()
                .contains("diffs[2] line 1: `=======` comes before any")
        );
        assert!(
            parse("------- SEARCH\nx\n+++++++ REPLACE", 0)
                .unwrap_err()
                .contains("before the `=======` divider")
        );
        assert!(
            parse("------- SEARCH\nx\n=======\ny\n", 0)
                .unwrap_err()
                .contains("not closed")
        );
        assert!(
            parse("just text", 0)
                .unwrap_err()
                .contains("has no complete block")
        );
    }
}
