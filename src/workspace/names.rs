//! File names the way the file systems that will later open them see them.
//!
//! A workspace on Linux may be a folder that macOS (HFS+/APFS) or Windows (NTFS, also through
//! WSL or a network share) opens too, and names that differ byte for byte can be the same
//! file there: `.GIT`, `.g\u{200c}it` (HFS+ ignores some zero-width code points), `.git.` and
//! `.git ` (NTFS drops trailing dots and spaces), `.git::$INDEX_ALLOCATION` (an NTFS stream of
//! the folder) and `GIT~1` (its 8.3 short name). Git refuses all of these as `.git`
//! (`is_hfs_dotgit`, `is_ntfs_dotgit`); the protected-path and sensitive-file checks compare
//! names after the same folding, so none of these spellings passes where `.git` would not.

use std::path::{Component, Path, PathBuf};

/// Code points HFS+ ignores when it compares names (git's list in `utf8.c`).
fn hfs_ignorable(c: char) -> bool {
    matches!(c,
        '\u{200c}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{206a}'..='\u{206f}'
        | '\u{feff}')
}

/// One name folded for comparison: ignorable code points removed, an NTFS stream suffix
/// (`:…`) removed, trailing dots and spaces removed (unless nothing else is left: `.` and `..`
/// stay), lower-cased.
pub fn fold_name(name: &str) -> String {
    let cleaned: String = name.chars().filter(|&c| !hfs_ignorable(c)).collect();
    let base = match cleaned.split_once(':') {
        Some((head, _)) if !head.is_empty() => head,
        _ => cleaned.as_str(),
    };
    let trimmed = base.trim_end_matches(['.', ' ']);
    let kept = if trimmed.is_empty() { base } else { trimmed };
    kept.to_lowercase()
}

/// Whether `name` (folded) has the shape of an 8.3 short name: up to six characters, `~`, a
/// number, and an optional extension of up to three characters (`git~1`, `agents~1.md`).
fn short_name_parts(name: &str) -> Option<(&str, &str)> {
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, e),
        _ => (name, ""),
    };
    let (prefix, number) = stem.rsplit_once('~')?;
    let ok = !prefix.is_empty()
        && prefix.chars().count() <= 6
        && !prefix.contains(['.', ' '])
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && ext.chars().count() <= 3;
    ok.then_some((prefix, ext))
}

/// Whether `short` (folded) could be Windows' 8.3 short name of `long` (folded): the long
/// name without leading dots, its stem's dots and spaces removed, cut to six characters,
/// then `~N`, then the first three characters of its extension.
pub fn is_short_name_of(short: &str, long: &str) -> bool {
    let Some((prefix, ext)) = short_name_parts(short) else {
        return false;
    };
    let bare = long.trim_start_matches('.');
    let (stem, long_ext) = match bare.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, e),
        _ => (bare, ""),
    };
    let stem: String = stem.chars().filter(|&c| c != '.' && c != ' ').collect();
    let want_prefix: String = stem.chars().take(prefix.chars().count()).collect();
    let want_ext: String = long_ext.chars().take(3).collect();
    // The prefix is the start of the stem: all of it when the stem is short, else six
    // characters (Windows may use fewer when many names collide; accept any prefix of two).
    let prefix_ok = prefix == want_prefix
        && (prefix.chars().count() == stem.chars().count().min(6) || prefix.chars().count() >= 2);
    prefix_ok && ext == want_ext
}

/// A relative path with every component folded; an 8.3 short name that stands for one of
/// `long_names` (folded) is replaced by that name. `.` components are dropped.
pub fn fold_path(rel: &Path, long_names: &[String]) -> PathBuf {
    let mut out = PathBuf::new();
    for c in rel.components() {
        if let Component::Normal(n) = c {
            let folded = fold_name(&n.to_string_lossy());
            let long = long_names
                .iter()
                .find(|l| is_short_name_of(&folded, l))
                .cloned();
            out.push(long.unwrap_or(folded));
        }
    }
    out
}

/// The literal names in a glob pattern that an 8.3 short name could stand for: components
/// without wildcards (`.git`, `.vscode`, `AGENTS.md`), folded.
pub fn literal_names(pattern: &str) -> Vec<String> {
    pattern
        .split('/')
        .filter(|c| !c.is_empty() && !c.contains(['*', '?', '[', '{', '!']))
        .map(fold_name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fold_the_way_git_compares_dotgit() {
        for spelling in [
            ".git",
            ".GIT",
            ".Git",
            ".g\u{200c}it",
            "\u{feff}.git",
            ".git.",
            ".git ",
            ".git. . ",
            ".git::$INDEX_ALLOCATION",
            ".gi\u{200d}t",
        ] {
            assert_eq!(fold_name(spelling), ".git", "{spelling:?}");
        }
        assert_eq!(fold_name("."), ".");
        assert_eq!(fold_name(".."), "..");
        assert_eq!(fold_name("Übung.TXT"), "übung.txt");
        assert_eq!(fold_name(".gitx"), ".gitx");
    }

    #[test]
    fn short_names_stand_for_the_protected_long_names() {
        assert!(is_short_name_of("git~1", ".git"));
        assert!(is_short_name_of("git~12", ".git"));
        assert!(is_short_name_of("vscode~1", ".vscode"));
        assert!(is_short_name_of("github~1", ".github"));
        assert!(is_short_name_of("agents~1.md", "agents.md"));
        assert!(is_short_name_of("devcon~1", ".devcontainer"));
        assert!(!is_short_name_of("git~", ".git"));
        assert!(!is_short_name_of("git", ".git"));
        assert!(!is_short_name_of("gi~1", ".vscode"));
        assert!(!is_short_name_of("agents~1.txt", "agents.md"));
        let long = vec![".git".to_string(), ".vscode".to_string()];
        assert_eq!(
            fold_path(Path::new("GIT~1/hooks/pre-commit"), &long),
            PathBuf::from(".git/hooks/pre-commit")
        );
        assert_eq!(
            fold_path(Path::new("sub/.G\u{200c}IT./Config"), &long),
            PathBuf::from("sub/.git/config")
        );
        assert_eq!(literal_names("**/.git/**"), [".git"]);
        assert_eq!(
            literal_names(".github/workflows/**"),
            [".github", "workflows"]
        );
        assert!(literal_names("*.code-workspace").is_empty());
    }
}
