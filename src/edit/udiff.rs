//! Applying a unified diff (as a model writes it) to one file's text: recognising a diff,
//! parsing its hunks tolerantly and locating each hunk in the file.
//!
//! The lines of a hunk are trusted, not its counts: a hunk runs until the next `@@` header, the
//! next file header or the end of the diff. File names in `---`/`+++`/`diff --git` headers are
//! ignored (the caller decides which file is patched), but a diff that names two different
//! files is refused. Each hunk's old side (context and `-` lines) is looked for first exactly at
//! its stated line (corrected by how far the previous hunk had moved), then at the nearest
//! position with exactly equal lines, then at the nearest position where the lines are equal
//! apart from trailing whitespace. Hunks never overlap. Either every hunk applies or none does.

/// Whether `s` looks like a unified diff: at least one `@@ -a(,b)? +c(,d)? @@` hunk header
/// followed by a line starting with ' ', '+' or '-'. File headers are optional.
pub fn looks_like_unified_diff(s: &str) -> bool {
    let lines = split_lines(s);
    lines.iter().enumerate().any(|(i, l)| {
        parse_header(l).is_some()
            && lines
                .get(i + 1)
                .is_some_and(|n| n.starts_with([' ', '+', '-']))
    })
}

/// Applies every hunk of `diff` to `original` and returns the new text, or an error (written
/// for the model) naming the first hunk that does not apply; then nothing is applied.
pub fn apply(original: &str, diff: &str) -> Result<String, String> {
    let hunks = parse(diff)?;
    if hunks.is_empty() {
        return Err(
            "the diff contains no hunks: a unified diff needs `@@ -a,b +c,d @@` \
                    headers, each followed by the hunk's lines starting with ' ' (unchanged), \
                    '-' (removed) or '+' (added)."
                .to_string(),
        );
    }
    let orig = split_lines(original);
    let n = orig.len();
    // Where each hunk's old side starts in the original: (position, hunk index).
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(hunks.len());
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut shift: isize = 0;
    let mut prev_end = 0usize;
    for (k, h) in hunks.iter().enumerate() {
        let old: Vec<&str> = h.old_lines().collect();
        let stated = match h.old_start {
            // `-5,0` inserts after line 5; `-5,3` starts at line 5.
            Some(a) if old.is_empty() => a,
            Some(a) => a.saturating_sub(1),
            None => prev_end,
        };
        let corrected = stated.saturating_add_signed(shift).min(n);
        let pos = if old.is_empty() {
            Some(corrected.min(n))
        } else {
            locate(&orig, &old, &[stated, corrected], &taken)
        };
        let Some(pos) = pos else {
            return Err(not_found(&orig, h, k, hunks.len(), &old, corrected));
        };
        shift = pos as isize - stated as isize;
        prev_end = pos + old.len();
        taken.push((pos, pos + old.len()));
        placed.push((pos, k));
    }
    placed.sort_by_key(|&(pos, k)| (pos, hunks[k].old_lines().count() > 0, k));

    let mut eol = original.ends_with('\n') || original.is_empty();
    let mut out: Vec<&str> = Vec::with_capacity(n);
    let mut cursor = 0;
    for &(pos, k) in &placed {
        let h = &hunks[k];
        if pos < cursor {
            return Err(format!(
                "hunk {} (`{}`) would insert inside the lines changed by another hunk, so no \
                 hunk was applied. Merge the overlapping hunks into one, or fix the line \
                 numbers of the insertion.",
                k + 1,
                h.header
            ));
        }
        out.extend_from_slice(&orig[cursor..pos]);
        let mut o = pos;
        for l in &h.lines {
            match l.kind {
                Kind::Context => {
                    // The file's own line, in case only its trailing whitespace differed.
                    out.push(orig[o]);
                    o += 1;
                }
                Kind::Del => o += 1,
                Kind::Add => out.push(l.text),
            }
        }
        if o == n {
            if h.new_no_eol {
                eol = false;
            } else if h.old_no_eol {
                eol = true;
            }
        }
        cursor = o;
    }
    out.extend_from_slice(&orig[cursor..]);
    let mut text = out.join("\n");
    if eol && !out.is_empty() {
        text.push('\n');
    }
    Ok(text)
}

/// Splits text into lines without their `\n`; a final `\n` does not start another line.
fn split_lines(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    s.strip_suffix('\n').unwrap_or(s).split('\n').collect()
}

/// Shortens a line for quoting in a message.
fn quote(s: &str) -> String {
    if s.chars().count() <= 70 {
        s.to_string()
    } else {
        let head: String = s.chars().take(67).collect();
        format!("{head}…")
    }
}

/// Parses `@@ -a(,b)? +c(,d)? @@...` into the old start line `a`.
fn parse_header(l: &str) -> Option<usize> {
    fn range(s: &str) -> Option<usize> {
        let (start, count) = match s.split_once(',') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(start) || count.is_some_and(|c| !digits(c)) {
            return None;
        }
        start.parse().ok()
    }
    let rest = l.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    range(new)?;
    range(old)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Context,
    Del,
    Add,
}

#[derive(Debug)]
struct HunkLine<'a> {
    kind: Kind,
    text: &'a str,
    /// An empty line without the leading space (models drop it); dropped at a hunk's end.
    bare: bool,
}

#[derive(Debug)]
struct Hunk<'a> {
    header: &'a str,
    /// The stated first old line (1-based), if the header had numbers.
    old_start: Option<usize>,
    lines: Vec<HunkLine<'a>>,
    /// `\ No newline at end of file` after the last old-side line.
    old_no_eol: bool,
    /// `\ No newline at end of file` after the last new-side line.
    new_no_eol: bool,
}

impl<'a> Hunk<'a> {
    fn old_lines(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.lines
            .iter()
            .filter(|l| l.kind != Kind::Add)
            .map(|l| l.text)
    }

    fn finish(mut self, out: &mut Vec<Hunk<'a>>) {
        while self.lines.last().is_some_and(|l| l.bare) {
            self.lines.pop();
        }
        if !self.lines.is_empty() {
            out.push(self);
        }
    }
}

/// Whether a diff line continues a hunk.
fn is_hunk_line(l: &str) -> bool {
    l.starts_with([' ', '+', '-', '\\'])
}

fn parse(diff: &str) -> Result<Vec<Hunk<'_>>, String> {
    let lines = split_lines(diff);
    let mut hunks = Vec::new();
    let mut cur: Option<Hunk> = None;
    let mut file: Option<&str> = None;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with("@@") {
            if let Some(h) = cur.take() {
                h.finish(&mut hunks);
            }
            cur = Some(Hunk {
                header: l,
                old_start: parse_header(l),
                lines: Vec::new(),
                old_no_eol: false,
                new_no_eol: false,
            });
            i += 1;
            continue;
        }
        let file_header =
            l.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "));
        if file_header || l.starts_with("diff --git ") {
            if let Some(h) = cur.take() {
                h.finish(&mut hunks);
            }
            if file_header {
                let name = lines[i + 1][4..].split('\t').next().unwrap_or("").trim();
                let name = name.strip_prefix("b/").unwrap_or(name);
                match file {
                    Some(f) if f != name => {
                        return Err(format!(
                            "the diff changes more than one file (`{f}` and `{name}`); send \
                             one diff per file, containing only the hunks for that file."
                        ));
                    }
                    _ => file = Some(name),
                }
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        let Some(h) = cur.as_mut() else {
            i += 1; // preamble: `index ...`, mode lines, prose
            continue;
        };
        let (kind, text, bare) = match l.as_bytes().first() {
            Some(b' ') => (Kind::Context, &l[1..], false),
            Some(b'-') => (Kind::Del, &l[1..], false),
            Some(b'+') => (Kind::Add, &l[1..], false),
            None => (Kind::Context, "", true),
            Some(b'\\') => {
                match h.lines.last().map(|x| x.kind) {
                    Some(Kind::Del) => h.old_no_eol = true,
                    Some(Kind::Add) => h.new_no_eol = true,
                    Some(Kind::Context) => {
                        h.old_no_eol = true;
                        h.new_no_eol = true;
                    }
                    None => {}
                }
                i += 1;
                continue;
            }
            Some(_) => {
                // Trailing prose ends the hunk; a stray line in the middle of one is an error.
                let more = lines[i + 1..]
                    .iter()
                    .take_while(|x| !x.starts_with("@@") && !x.starts_with("diff --git "))
                    .any(|x| is_hunk_line(x) && !x.starts_with("--- ") && !x.starts_with("+++ "));
                if more {
                    return Err(format!(
                        "line {} of the diff (`{}`), inside hunk `{}`, does not start with ' ', \
                         '+' or '-'. Every line of a hunk needs one of these prefixes: a space \
                         for an unchanged line (also an empty one), '-' for a removed line, '+' \
                         for an added line.",
                        i + 1,
                        quote(l),
                        h.header
                    ));
                }
                if let Some(h) = cur.take() {
                    h.finish(&mut hunks);
                }
                i += 1;
                continue;
            }
        };
        h.lines.push(HunkLine { kind, text, bare });
        i += 1;
    }
    if let Some(h) = cur.take() {
        h.finish(&mut hunks);
    }
    Ok(hunks)
}

/// Finds where `old` occurs in `orig` outside the `taken` ranges: exactly at one of `preferred`
/// positions, else exactly at the position nearest to the last preferred one, else ignoring
/// trailing whitespace at the nearest position.
fn locate(
    orig: &[&str],
    old: &[&str],
    preferred: &[usize],
    taken: &[(usize, usize)],
) -> Option<usize> {
    let m = old.len();
    let n = orig.len();
    if m > n {
        return None;
    }
    let last = n - m; // highest possible start
    let free = |p: usize| taken.iter().all(|&(a, b)| p + m <= a || p >= b);
    let exact = |p: usize| orig[p..p + m] == *old;
    let loose = |p: usize| {
        orig[p..p + m]
            .iter()
            .zip(old)
            .all(|(a, b)| a.trim_end() == b.trim_end())
    };
    let center = preferred.last().copied().unwrap_or(0).min(last);
    let nearest = |ok: &dyn Fn(usize) -> bool| {
        (0..=last).find_map(|d| {
            let below = center.checked_sub(d).filter(|&p| ok(p) && free(p));
            below.or_else(|| {
                let p = center + d;
                (d > 0 && p <= last && ok(p) && free(p)).then_some(p)
            })
        })
    };
    preferred
        .iter()
        .copied()
        .find(|&p| p <= last && free(p) && exact(p))
        .or_else(|| nearest(&exact))
        .or_else(|| nearest(&loose))
}

/// The error for a hunk whose old side is not in the file: the first old line that does not
/// match at the most similar position near where the hunk should be.
fn not_found(orig: &[&str], h: &Hunk, k: usize, total: usize, old: &[&str], near: usize) -> String {
    let n = orig.len();
    let prefix = |p: usize| {
        old.iter()
            .zip(&orig[p.min(n)..])
            .take_while(|(a, b)| a.trim_end() == b.trim_end())
            .count()
    };
    // Most leading old lines matched, then nearest to `near`.
    let best = (0..n)
        .map(|p| (prefix(p), p))
        .max_by_key(|&(len, p)| (len, std::cmp::Reverse(p.abs_diff(near))));
    let which = format!(
        "hunk {} of {total} (`{}`) does not apply, so no hunk was applied",
        k + 1,
        h.header
    );
    let advice = "Re-read the file and make the context (' ') and removed ('-') lines match it \
                  exactly, or use single_find_and_replace with the exact text.";
    match best {
        Some((len, p)) if len >= old.len() => format!(
            "{which}: its old lines match only at lines {}-{} of the file, which another hunk \
             already changes. Merge the two hunks into one, with each line of the file at most \
             once.",
            p + 1,
            p + len,
        ),
        Some((len, p)) if len > 0 => {
            let there = match orig.get(p + len) {
                Some(line) => format!("the file has `{}` there", quote(line)),
                None => format!("the file ends at line {n}"),
            };
            format!(
                "{which}: its old line {} `{}` does not match line {} of the file ({there}; the \
                 hunk's first {len} old line(s) match at lines {}-{}). {advice}",
                len + 1,
                quote(old[len]),
                p + len + 1,
                p + 1,
                p + len,
            )
        }
        _ => format!(
            "{which}: its first old line `{}` is not in the file (looked near line {}). {advice}",
            quote(old.first().copied().unwrap_or("")),
            near + 1,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines joined with `\n`, each terminated.
    fn t(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Applies and compares the text, or checks that the error contains each given piece.
    #[track_caller]
    fn check(original: &str, diff: &str, expected: Result<&str, &[&str]>) {
        let got = apply(original, diff);
        match (&got, expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e, "\n--- got:\n{g}\n--- expected:\n{e}"),
            (Err(g), Err(pieces)) => {
                for p in pieces {
                    assert!(g.contains(p), "error {g:?} does not contain {p:?}");
                }
            }
            _ => panic!("apply gave {got:?}, expected {expected:?}"),
        }
    }

    fn ten() -> String {
        (1..=10).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn recognises_unified_diffs() {
        for (s, expected) in [
            ("@@ -1,2 +1,2 @@\n-a\n+b\n c\n", true),
            ("@@ -1 +1 @@\n-a\n+b\n", true),
            (
                "--- a/x.rs\n+++ b/x.rs\n@@ -10,3 +10,4 @@ fn main() {\n     x\n+    y\n",
                true,
            ),
            (
                "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+new\n",
                true,
            ),
            ("Here is the change:\n@@ -3,1 +3,1 @@\n-old\n+new\n", true),
            ("", false),
            ("fn main() {}\n", false),
            ("@@ ... @@\n-a\n+b\n", false),
            ("@@ -1,2 +1,2 @@\n", false),
            ("@@ -1,2 +1,2 @@\nplain text\n", false),
            ("@@ -x,2 +1,2 @@\n-a\n", false),
            ("// ... existing code ...\nfn a() {}\n", false),
            ("--- a/x\n+++ b/x\n-a\n+b\n", false),
        ] {
            assert_eq!(looks_like_unified_diff(s), expected, "{s:?}");
        }
    }

    #[test]
    fn applies_at_the_stated_line_or_the_nearest() {
        let orig = ten();
        let changed = orig.replace("line 5\n", "line five\n");
        // Exactly where stated, with file headers (names are ignored).
        check(
            &orig,
            "--- a/some/other.txt\n+++ b/some/other.txt\n@@ -4,3 +4,3 @@\n line 4\n-line 5\n+line five\n line 6\n",
            Ok(&changed),
        );
        // Line numbers off in either direction, counts wrong.
        check(
            &orig,
            "@@ -1,7 +1,1 @@\n line 4\n-line 5\n+line five\n line 6\n",
            Ok(&changed),
        );
        check(
            &orig,
            "@@ -9,3 +9,3 @@\n line 4\n-line 5\n+line five\n line 6\n",
            Ok(&changed),
        );
        // No context at all.
        check(&orig, "@@ -5 +5 @@\n-line 5\n+line five\n", Ok(&changed));
        // A header without numbers.
        check(&orig, "@@ ... @@\n-line 5\n+line five\n", Ok(&changed));
        // Trailing whitespace differs between the diff and the file; the file's context wins.
        let spaced = orig.replace("line 4\n", "line 4   \n");
        check(
            &spaced,
            "@@ -4,3 +4,3 @@\n line 4\n-line 5 \n+line five\n line 6\n",
            Ok(&spaced.replace("line 5\n", "line five\n")),
        );
    }

    #[test]
    fn repeated_context_goes_to_the_nearest_copy() {
        let orig = t(&["a", "x", "b", "a", "x", "b", "a", "x", "b"]);
        check(
            &orig,
            "@@ -7,3 +7,3 @@\n a\n-x\n+y\n b\n",
            Ok(&t(&["a", "x", "b", "a", "x", "b", "a", "y", "b"])),
        );
        check(
            &orig,
            "@@ -3,3 +3,3 @@\n a\n-x\n+y\n b\n",
            Ok(&t(&["a", "x", "b", "a", "y", "b", "a", "x", "b"])),
        );
    }

    #[test]
    fn several_hunks_with_shifting_offsets() {
        let orig = ten();
        let expected = t(&[
            "line 1", "new a", "new b", "line 2", "line 3", "line 4", "line 5", "line 6", "line 7",
            "LINE 8", "line 9", "line 10",
        ]);
        // Correct old-side numbers.
        check(
            &orig,
            "@@ -1,2 +1,4 @@\n line 1\n+new a\n+new b\n line 2\n@@ -7,3 +9,3 @@\n line 7\n-line 8\n+LINE 8\n line 9\n",
            Ok(&expected),
        );
        // The second hunk numbered as if the first were applied already, and both a line off.
        check(
            &orig,
            "@@ -2,2 +2,4 @@\n line 1\n+new a\n+new b\n line 2\n@@ -10,3 +10,3 @@\n line 7\n-line 8\n+LINE 8\n line 9\n",
            Ok(&expected),
        );
        // Hunks given out of order still land in place.
        check(
            &orig,
            "@@ -7,3 +9,3 @@\n line 7\n-line 8\n+LINE 8\n line 9\n@@ -1,2 +1,4 @@\n line 1\n+new a\n+new b\n line 2\n",
            Ok(&expected),
        );
    }

    #[test]
    fn insertions_and_deletions() {
        // Into an empty file.
        check(
            "",
            "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,3 @@\n+a\n+b\n+c\n",
            Ok("a\nb\nc\n"),
        );
        check(
            "",
            "@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n",
            Ok("a\nb"),
        );
        // `-5,0` inserts after line 5; `-0,0` before the first line.
        let orig = ten();
        check(
            &orig,
            "@@ -5,0 +6,2 @@\n+inserted 1\n+inserted 2\n",
            Ok(&orig.replace("line 5\n", "line 5\ninserted 1\ninserted 2\n")),
        );
        check(
            &orig,
            "@@ -0,0 +1 @@\n+first\n",
            Ok(&format!("first\n{orig}")),
        );
        check(
            &orig,
            "@@ -10,0 +11 @@\n+last\n",
            Ok(&format!("{orig}last\n")),
        );
        // Deleting lines, and the whole file.
        check(
            &orig,
            "@@ -2,3 +2,1 @@\n line 2\n-line 3\n-line 4\n",
            Ok(&orig.replace("line 3\nline 4\n", "")),
        );
        check("a\nb\n", "@@ -1,2 +0,0 @@\n-a\n-b\n", Ok(""));
    }

    #[test]
    fn end_of_file_newlines() {
        // The file has no final newline and keeps not having one.
        check(
            "a\nb",
            "@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n",
            Ok("a\nB"),
        );
        // Without the markers the file's own ending is kept.
        check("a\nb", "@@ -2 +2 @@\n-b\n+B\n", Ok("a\nB"));
        // Adding the final newline.
        check(
            "a\nb",
            "@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+b\n",
            Ok("a\nb\n"),
        );
        // Removing it.
        check(
            "a\nb\n",
            "@@ -2 +2 @@\n-b\n+b\n\\ No newline at end of file\n",
            Ok("a\nb"),
        );
        // Context marker: both sides end without newline.
        check(
            "a\nb",
            "@@ -1,2 +1,3 @@\n+z\n a\n b\n\\ No newline at end of file\n",
            Ok("z\na\nb"),
        );
        // A marker on a hunk that does not reach the end changes nothing.
        check(
            "a\nb\nc\n",
            "@@ -1 +1 @@\n-a\n+A\n\\ No newline at end of file\n",
            Ok("A\nb\nc\n"),
        );
    }

    #[test]
    fn tolerates_what_models_write() {
        let orig = t(&["fn a() {", "", "    x();", "}"]);
        // An empty context line without its space, and blank lines after the hunk.
        check(
            &orig,
            "@@ -1,4 +1,4 @@\n fn a() {\n\n-    x();\n+    y();\n }\n\n\n",
            Ok(&orig.replace("x()", "y()")),
        );
        // Prose after the diff.
        check(
            &orig,
            "```diff\n@@ -3 +3 @@\n-    x();\n+    y();\n```\nThis renames the call.\n",
            Ok(&orig.replace("x()", "y()")),
        );
        // The same file named twice.
        check(
            &orig,
            "--- a/f.rs\n+++ b/f.rs\n@@ -1 +1 @@\n-fn a() {\n+fn b() {\n--- a/f.rs\n+++ b/f.rs\n@@ -3 +3 @@\n-    x();\n+    y();\n",
            Ok(&t(&["fn b() {", "", "    y();", "}"])),
        );
        // A removed SQL comment looks like a file header only when `+++` follows.
        check(
            "select 1;\n-- old\nselect 2;\n",
            "@@ -1,3 +1,2 @@\n select 1;\n--- old\n select 2;\n",
            Ok("select 1;\nselect 2;\n"),
        );
    }

    #[test]
    fn errors_explain_what_did_not_match() {
        let orig = ten();
        check(
            &orig,
            "@@ -4,3 +4,3 @@\n line 4\n-line five\n+line 5\n line 6\n",
            Err(&[
                "hunk 1 of 1 (`@@ -4,3 +4,3 @@`) does not apply, so no hunk was applied",
                "its old line 2 `line five` does not match line 5 of the file",
                "the file has `line 5` there",
                "single_find_and_replace",
            ]),
        );
        // All or nothing: the first hunk applies, the second does not.
        check(
            &orig,
            "@@ -1 +1 @@\n-line 1\n+LINE 1\n@@ -8 +8 @@\n-line eight\n+LINE 8\n",
            Err(&[
                "hunk 2 of 2 (`@@ -8 +8 @@`)",
                "its first old line `line eight` is not in the file (looked near line 8)",
            ]),
        );
        check(
            &orig,
            "@@ -9,3 +9,3 @@\n line 9\n line 10\n-line 11\n",
            Err(&["its old line 3 `line 11`", "the file ends at line 10"]),
        );
        check(
            &orig,
            "@@ -2,3 +2,3 @@\n line 2\nline 3\n-line 4\n+LINE 4\n",
            Err(&["line 3 of the diff (`line 3`), inside hunk `@@ -2,3 +2,3 @@`, does not start"]),
        );
        check(
            &orig,
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-line 1\n+x\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-line 1\n+y\n",
            Err(&["more than one file (`x` and `y`)"]),
        );
        check(&orig, "just some text\n", Err(&["contains no hunks"]));
        check(&orig, "@@ -1,1 +1,1 @@\n", Err(&["contains no hunks"]));
        // The same lines cannot be changed by two hunks.
        check(
            &t(&["a", "b"]),
            "@@ -1 +1 @@\n-a\n+x\n@@ -1 +1 @@\n-a\n+y\n",
            Err(&[
                "hunk 2 of 2",
                "match only at lines 1-1 of the file, which another hunk",
            ]),
        );
    }

    /// Random edits of a file with unique lines, written as a diff with 0-3 lines of context and
    /// line numbers that are right or off by a few: the diff applies to exactly the edit.
    #[test]
    fn random_diffs_apply() {
        let mut rng = fastrand::Rng::with_seed(11);
        for round in 0..500 {
            let n = rng.usize(0..60);
            let orig: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
            let ctx = rng.usize(0..4);
            let skew = if rng.bool() { 0 } else { rng.isize(-4..5) };
            let (mut diff, mut expected) = (String::new(), Vec::new());
            let mut pos = 0; // next original line not yet copied
            let mut shift = 0isize; // new line numbers minus old ones so far
            let mut learned = false; // a hunk with old lines came before
            while pos < n || (n == 0 && diff.is_empty()) {
                let start = pos + rng.usize(0..12);
                if start > n {
                    break;
                }
                let del = rng.usize(0..4).min(n - start);
                let add: Vec<String> = (0..rng.usize(0..4))
                    .map(|k| format!("new {round}.{start}.{k}"))
                    .collect();
                if del == 0 && add.is_empty() {
                    continue;
                }
                let before = start.saturating_sub(ctx).max(pos);
                let after = (start + del + ctx).min(n);
                let old_len = after - before;
                let new_len = old_len - del + add.len();
                let old_start = if old_len == 0 { before } else { before + 1 };
                let new_start = if new_len == 0 {
                    (before as isize + shift) as usize
                } else {
                    (before as isize + shift) as usize + 1
                };
                // A hunk that only inserts, without context, has nothing to correct a wrong
                // line number by but how far an earlier hunk was off.
                let skew = if old_len == 0 && !learned { 0 } else { skew };
                learned |= old_len > 0;
                diff.push_str(&format!(
                    "@@ -{},{old_len} +{new_start},{new_len} @@\n",
                    (old_start as isize + skew).max(0)
                ));
                for l in &orig[before..start] {
                    diff.push_str(&format!(" {l}\n"));
                }
                for l in &orig[start..start + del] {
                    diff.push_str(&format!("-{l}\n"));
                }
                for l in &add {
                    diff.push_str(&format!("+{l}\n"));
                }
                for l in &orig[start + del..after] {
                    diff.push_str(&format!(" {l}\n"));
                }
                expected.extend_from_slice(&orig[pos..start]);
                expected.extend(add.iter().cloned());
                shift += add.len() as isize - del as isize;
                pos = after.max(start + del);
                expected.extend_from_slice(&orig[start + del..pos]);
            }
            if diff.is_empty() {
                continue;
            }
            expected.extend_from_slice(&orig[pos.min(n)..]);
            let original: String = orig.iter().map(|l| format!("{l}\n")).collect();
            let expected: String = expected.iter().map(|l| format!("{l}\n")).collect();
            assert!(looks_like_unified_diff(&diff), "{diff}");
            assert_eq!(
                apply(&original, &diff).as_deref(),
                Ok(expected.as_str()),
                "diff:\n{diff}"
            );
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = fastrand::Rng::with_seed(3);
        let pieces = [
            "@@ -1,2 +1 @@",
            "@@ -0,0 +0,0 @@",
            "@@ -9 +9 @@",
            "@@ x @@",
            " a",
            "-a",
            "+a",
            "-b",
            " b",
            "",
            "\\ No newline at end of file",
            "--- a/f",
            "+++ b/f",
            "+++ b/g",
            "diff --git",
            "text",
            "-",
            "+",
            " ",
        ];
        for _ in 0..3000 {
            let original: String = (0..rng.usize(0..6))
                .map(|_| ["a\n", "b\n", "c\n", "\n"][rng.usize(..4)])
                .collect();
            let original = if rng.bool() {
                original.trim_end().to_string()
            } else {
                original
            };
            let diff: String = (0..rng.usize(0..12))
                .map(|_| format!("{}\n", pieces[rng.usize(..pieces.len())]))
                .collect();
            let _ = looks_like_unified_diff(&diff);
            let _ = apply(&original, &diff);
        }
    }
}
