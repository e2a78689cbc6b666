//! What a command may read: the whole file system except the denied paths (toolpilot's state
//! folder and the home folder's credential stores), as a list of Landlock grants.
//!
//! Landlock only grants, and a grant on a folder covers everything beneath it, so "all of `/`
//! except `/home/me/.ssh`" has to be spelled as a complement: every entry of `/` but `home` gets
//! a read grant, `home` is replaced by its entries but `me`, `me` by its entries but `.ssh`.
//! The folders on the way (`/`, `/home`, `/home/me`) get only the right to be listed. Landlock
//! extends that right to everything beneath them too, so the *names* inside a denied folder can
//! be listed (`ls ~/.ssh` works) while none of its files can be opened (`cat ~/.ssh/id_rsa` is
//! refused); `ls ~` and `ls /` keep working.
//!
//! Nothing here opens files for Landlock (the caller does, without following links); this
//! module only lists folders and decides. Entries that are symbolic links get no grant of their
//! own: following one leads to its target, which is judged by the target's own place.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A folder on the way to a denied path with more entries than this is not expanded: only the
/// way through it is kept, and its other entries are not readable by commands (see
/// [`Plan::crowded`]). Each entry costs one open and one Landlock rule per command; 4096
/// entries cost about 10 ms.
pub const MAX_ENTRIES: usize = 4096;

/// The read grants for one command.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Files and folders readable with everything beneath them.
    pub read: Vec<PathBuf>,
    /// Folders on the way to a denied path: listable (with everything beneath), not readable.
    pub list: Vec<PathBuf>,
    /// The denied paths, as found (canonical).
    pub denied: Vec<PathBuf>,
    /// Denied paths that stay readable, and why (inside a writable folder; `/` itself).
    pub not_denied: Vec<(PathBuf, String)>,
    /// Folders with more than [`MAX_ENTRIES`] entries on the way to a denied path: only the way
    /// through them is readable.
    pub crowded: Vec<PathBuf>,
}

/// Lists a folder: its entries' names and kinds (at most `MAX_ENTRIES + 1`), `None` if it
/// cannot be listed.
pub type Lister<'a> = dyn Fn(&Path) -> Option<Vec<(std::ffi::OsString, Kind)>> + 'a;

/// The kind of a folder entry, as far as the plan cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Link,
    Other,
}

/// Plans the read grants: all of `/` but `deny`. `writable` are the command's writable folders
/// (granted separately, in full): a denied path inside one cannot be hidden without taking
/// writes away from that folder, so it stays readable and is reported. A writable folder
/// inside a denied path (the command's temporary and cache folders inside the state folder)
/// keeps its own grant: it is carved back in.
///
/// Paths that do not exist are left out: there is nothing to hide.
pub fn plan(deny: &[PathBuf], writable: &[PathBuf]) -> Plan {
    plan_with(
        deny,
        writable,
        &|p: &Path| std::fs::canonicalize(p).ok(),
        &list_dir,
    )
}

/// [`plan`] with the file system behind two functions (canonical path of an existing path;
/// a folder's entries, at most `MAX_ENTRIES + 1`), for tests.
pub fn plan_with(
    deny: &[PathBuf],
    writable: &[PathBuf],
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
    list: &Lister<'_>,
) -> Plan {
    let mut out = Plan::default();
    let writable: Vec<PathBuf> = writable.iter().filter_map(|w| canonical(w)).collect();
    let mut denied = BTreeSet::new();
    for d in deny {
        let Some(c) = canonical(d) else { continue };
        if c.parent().is_none() {
            out.not_denied
                .push((c, "the root folder cannot be hidden".to_string()));
        } else if let Some(w) = writable.iter().find(|w| c.starts_with(w)) {
            out.not_denied.push((
                c,
                format!(
                    "it is inside {}, which commands may write (hiding it would take the \
                     writes away)",
                    w.display()
                ),
            ));
        } else {
            denied.insert(c);
        }
    }
    // A denied path inside another denied path adds nothing.
    let denied: Vec<PathBuf> = denied
        .iter()
        .filter(|d| {
            !denied
                .iter()
                .any(|other| other != *d && d.starts_with(other))
        })
        .cloned()
        .collect();
    if denied.is_empty() {
        out.read.push(PathBuf::from("/"));
        return out;
    }
    expand(Path::new("/"), &denied, list, &mut out);
    out.read.sort();
    out.list.sort();
    out.denied = denied;
    out
}

/// Replaces the folder `dir` (an ancestor of a denied path) by its entries.
fn expand(dir: &Path, denied: &[PathBuf], list: &Lister<'_>, out: &mut Plan) {
    out.list.push(dir.to_path_buf());
    // The entries of `dir` on the way to a denied path (or denied themselves).
    let on_the_way: BTreeSet<PathBuf> = denied
        .iter()
        .filter_map(|d| {
            let rest = d.strip_prefix(dir).ok()?;
            Some(dir.join(rest.components().next()?))
        })
        .collect();
    let entries = match list(dir) {
        Some(e) if e.len() <= MAX_ENTRIES => Some(e),
        Some(_) => {
            out.crowded.push(dir.to_path_buf());
            None
        }
        // Unlistable (it vanished, or no permission): keep only the way through.
        None => None,
    };
    let entries: Vec<(PathBuf, Kind)> = match entries {
        Some(e) => e.into_iter().map(|(n, k)| (dir.join(n), k)).collect(),
        None => on_the_way
            .iter()
            .map(|p| (p.clone(), Kind::Other))
            .collect(),
    };
    for (path, kind) in entries {
        if kind == Kind::Link {
            continue;
        }
        if denied.contains(&path) {
            continue;
        }
        if on_the_way.contains(&path) {
            expand(&path, denied, list, out);
        } else {
            out.read.push(path);
        }
    }
}

/// A folder's entries (at most `MAX_ENTRIES + 1`), links told apart without following them.
fn list_dir(dir: &Path) -> Option<Vec<(std::ffi::OsString, Kind)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let kind = match e.file_type() {
            Ok(t) if t.is_symlink() => Kind::Link,
            Ok(_) => Kind::Other,
            // Unknown type: treat as a link (no grant); following it is judged at its target.
            Err(_) => Kind::Link,
        };
        out.push((e.file_name(), kind));
        if out.len() > MAX_ENTRIES {
            break;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake file system: folder → entries; every listed path exists and is canonical.
    struct Fs(BTreeMap<&'static str, Vec<(&'static str, Kind)>>);

    impl Fs {
        fn plan(&self, deny: &[&str], writable: &[&str]) -> Plan {
            let exists = |p: &Path| -> bool {
                p == Path::new("/")
                    || p.parent().is_some_and(|parent| {
                        self.0.get(parent.to_str().unwrap_or("")).is_some_and(|es| {
                            es.iter()
                                .any(|(n, _)| Some(std::ffi::OsStr::new(n)) == p.file_name())
                        })
                    })
            };
            let canonical = |p: &Path| exists(p).then(|| p.to_path_buf());
            let list = |p: &Path| {
                self.0.get(p.to_str()?).map(|es| {
                    es.iter()
                        .map(|(n, k)| (std::ffi::OsString::from(n), *k))
                        .collect()
                })
            };
            let deny: Vec<PathBuf> = deny.iter().map(PathBuf::from).collect();
            let writable: Vec<PathBuf> = writable.iter().map(PathBuf::from).collect();
            plan_with(&deny, &writable, &canonical, &list)
        }
    }

    fn fs() -> Fs {
        use Kind::*;
        Fs(BTreeMap::from([
            (
                "/",
                vec![
                    ("usr", Other),
                    ("home", Other),
                    ("tmp", Other),
                    ("lib", Link),
                ],
            ),
            ("/home", vec![("me", Other), ("you", Other)]),
            (
                "/home/me",
                vec![
                    (".ssh", Other),
                    (".netrc", Other),
                    (".bashrc", Other),
                    ("proj", Other),
                    ("dots", Link),
                    (".local", Other),
                ],
            ),
            ("/home/me/.local", vec![("state", Other), ("bin", Other)]),
            ("/home/me/.local/state", vec![("toolpilot", Other)]),
            ("/home/me/.local/state/toolpilot", vec![("ws", Other)]),
            ("/home/me/.local/state/toolpilot/ws", vec![("tmp", Other)]),
            ("/home/me/.ssh", vec![("id_rsa", Other)]),
            ("/tmp", vec![("x", Other)]),
        ]))
    }

    fn paths(v: &[PathBuf]) -> Vec<&str> {
        v.iter().map(|p| p.to_str().unwrap()).collect()
    }

    #[test]
    fn nothing_denied_reads_everything() {
        let p = fs().plan(&[], &[]);
        assert_eq!(paths(&p.read), ["/"]);
        assert!(p.list.is_empty());
        // Missing paths deny nothing.
        assert_eq!(
            fs().plan(&["/home/me/.aws"], &[]).read,
            [PathBuf::from("/")]
        );
    }

    #[test]
    fn the_complement_goes_down_to_each_denied_path() {
        let p = fs().plan(
            &[
                "/home/me/.ssh",
                "/home/me/.netrc",
                "/home/me/.local/state/toolpilot",
            ],
            &["/home/me/proj", "/home/me/.local/state/toolpilot/ws/tmp"],
        );
        assert_eq!(
            paths(&p.list),
            [
                "/",
                "/home",
                "/home/me",
                "/home/me/.local",
                "/home/me/.local/state"
            ]
        );
        // Links (/lib, ~/dots) get no grant of their own.
        assert_eq!(
            paths(&p.read),
            [
                "/home/me/.bashrc",
                "/home/me/.local/bin",
                "/home/me/proj",
                "/home/you",
                "/tmp",
                "/usr"
            ]
        );
        assert_eq!(
            paths(&p.denied),
            [
                "/home/me/.local/state/toolpilot",
                "/home/me/.netrc",
                "/home/me/.ssh"
            ]
        );
        assert!(p.not_denied.is_empty() && p.crowded.is_empty());
    }

    #[test]
    fn a_denied_path_inside_a_writable_folder_stays_readable() {
        let p = fs().plan(&["/home/me/.ssh", "/home/me/proj"], &["/home/me"]);
        assert_eq!(paths(&p.read), ["/"]);
        assert_eq!(p.not_denied.len(), 2);
        assert!(
            p.not_denied[0]
                .1
                .contains("inside /home/me, which commands may write"),
            "{:?}",
            p.not_denied
        );
        let p = fs().plan(&["/"], &[]);
        assert_eq!(paths(&p.read), ["/"]);
        assert_eq!(p.not_denied[0].1, "the root folder cannot be hidden");
    }

    #[test]
    fn nested_denied_paths_collapse_into_the_outer_one() {
        let p = fs().plan(&["/home/me/.ssh/id_rsa", "/home/me/.ssh"], &[]);
        assert_eq!(paths(&p.denied), ["/home/me/.ssh"]);
        assert_eq!(paths(&p.list), ["/", "/home", "/home/me"]);
    }

    #[test]
    fn a_crowded_folder_keeps_only_the_way_through() {
        let mut f = fs();
        let many: Vec<(&'static str, Kind)> = (0..=MAX_ENTRIES)
            .map(|i| (&*Box::leak(format!("f{i}").into_boxed_str()), Kind::Other))
            .chain([("me", Kind::Other), ("you", Kind::Other)])
            .collect();
        f.0.insert("/home", many);
        let p = f.plan(&["/home/me/.ssh"], &[]);
        assert_eq!(paths(&p.crowded), ["/home"]);
        assert!(!p.read.iter().any(|r| r.starts_with("/home/f1")));
        assert!(p.read.contains(&PathBuf::from("/home/me/proj")));
        assert!(!p.read.contains(&PathBuf::from("/home/you")));
    }
}
