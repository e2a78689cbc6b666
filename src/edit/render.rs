//! The unified diff an edit tool returns, with a line number on every line.
//!
//! ```text
//! src/a.rs: 1 line changed, 1 added (+2 -1)
//! @@ -10,3 +10,4 @@
//!    10| fn a() {
//! -  11|     old();
//! +  11|     new();
//! +  12|     more();
//!    13| }
//! ```
//!
//! Context and added lines carry their number in the new file, removed lines their number in
//! the old one. A diff longer than the budget keeps whole hunks from the top and says how many
//! were left out.

use std::fmt::Write as _;

use similar::{ChangeTag, TextDiff};

/// Counts of a diff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub added: usize,
    pub removed: usize,
    pub hunks: usize,
}

/// Renders the diff from `old` to `new` for `path`, within `budget` bytes.
pub fn diff(path: &str, old: &str, new: &str, budget: usize) -> (String, Stats) {
    let d = TextDiff::from_lines(old, new);
    let mut stats = Stats::default();
    let mut hunks: Vec<String> = Vec::new();
    for group in d.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        let mut h = format!(
            "@@ -{},{} +{},{} @@\n",
            old_range.start + 1,
            old_range.len(),
            new_range.start + 1,
            new_range.len()
        );
        for op in &group {
            for change in d.iter_changes(op) {
                let (sign, no) = match change.tag() {
                    ChangeTag::Equal => (' ', change.new_index().unwrap_or(0)),
                    ChangeTag::Delete => {
                        stats.removed += 1;
                        ('-', change.old_index().unwrap_or(0))
                    }
                    ChangeTag::Insert => {
                        stats.added += 1;
                        ('+', change.new_index().unwrap_or(0))
                    }
                };
                let text = change.value();
                let text = text.strip_suffix('\n').unwrap_or(text);
                let _ = writeln!(h, "{sign}{:>5}| {text}", no + 1);
                if !change.value().ends_with('\n') {
                    h.push_str("\\ No newline at end of file\n");
                }
            }
        }
        hunks.push(h);
    }
    stats.hunks = hunks.len();
    let mut out = format!("{path}: {}\n", summary(&stats));
    let mut shown = 0;
    for h in &hunks {
        if out.len() + h.len() > budget && shown > 0 {
            break;
        }
        if out.len() + h.len() > budget {
            // Even the first hunk is too big: show its head.
            let cut = crate::text::floor_char_boundary(h, budget.saturating_sub(out.len()));
            let cut = h[..cut].rfind('\n').map_or(0, |p| p + 1);
            out.push_str(&h[..cut]);
            out.push_str("[hunk cut at the output budget]\n");
            shown += 1;
            break;
        }
        out.push_str(h);
        shown += 1;
    }
    if shown < hunks.len() {
        let _ = writeln!(
            out,
            "[{} more hunks not shown ({} hunks in all); read the file to see the result]",
            hunks.len() - shown,
            hunks.len()
        );
    }
    (out, stats)
}

fn summary(s: &Stats) -> String {
    if s.added == 0 && s.removed == 0 {
        return "no changes".into();
    }
    let lines = |n: usize| if n == 1 { "line" } else { "lines" };
    format!(
        "+{} -{} {} in {} {}",
        s.added,
        s.removed,
        lines(s.added.max(s.removed)),
        s.hunks,
        if s.hunks == 1 { "hunk" } else { "hunks" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_every_line() {
        let old = "a\nb\nc\nd\n";
        let new = "a\nB\nc\nd\ne\n";
        let (text, stats) = diff("f.txt", old, new, 10_000);
        assert_eq!(
            stats,
            Stats {
                added: 2,
                removed: 1,
                hunks: 1
            }
        );
        assert_eq!(
            text,
            "f.txt: +2 -1 lines in 1 hunk\n@@ -1,4 +1,5 @@\n     1| a\n-    2| b\n+    2| B\n     3| c\n     4| d\n+    5| e\n"
        );
    }

    #[test]
    fn missing_final_newline_is_shown() {
        let (text, _) = diff("f", "a\n", "a\nb", 10_000);
        assert!(
            text.ends_with("+    2| b\n\\ No newline at end of file\n"),
            "{text}"
        );
    }

    #[test]
    fn large_diffs_keep_whole_hunks_and_say_so() {
        let old: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..200)
            .map(|i| {
                if i % 20 == 0 {
                    format!("changed {i}\n")
                } else {
                    format!("line {i}\n")
                }
            })
            .collect();
        let (text, stats) = diff("f", &old, &new, 400);
        assert_eq!(stats.hunks, 10);
        assert!(text.len() < 600, "{}", text.len());
        assert!(
            text.contains("more hunks not shown (10 hunks in all)"),
            "{text}"
        );
    }
}
