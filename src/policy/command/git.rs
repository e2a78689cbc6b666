//! `git`: global options that name programs or other repositories (`-c`, `--config-env`,
//! `--exec-path=`, `--git-dir`, `--work-tree`, `-p`), and per subcommand what reads, what
//! changes the repository, what reaches the network, and the options that write files
//! (`--output`) or run programs (`--ext-diff`, `--textconv`, `grep -O`, `help -w`).

use super::models::{Facts, Inv};
use super::scan;
use super::{Class, plainly_relative};

/// Subcommands that only read (with the per-option checks below).
const READ: &[&str] = &[
    "status",
    "diff",
    "log",
    "show",
    "rev-parse",
    "ls-files",
    "ls-tree",
    "blame",
    "annotate",
    "describe",
    "shortlog",
    "grep",
    "cat-file",
    "rev-list",
    "merge-base",
    "whatchanged",
    "name-rev",
    "check-ignore",
    "check-attr",
    "check-ref-format",
    "version",
    "count-objects",
    "for-each-ref",
    "show-ref",
    "show-branch",
    "cherry",
    "range-diff",
    "diff-tree",
    "diff-files",
    "diff-index",
    "verify-commit",
    "verify-tag",
    "fsck",
    "var",
    "ls-remote-local",
    "show-index",
    "get-tar-commit-id",
    "column",
    "stripspace",
    "interpret-trailers",
    "patch-id",
    "mailinfo",
    "fmt-merge-msg",
    "merge-tree",
];

/// Reading subcommands that print the content of the files they name.
const PRINTS_CONTENT: &[&str] = &[
    "diff",
    "log",
    "show",
    "blame",
    "annotate",
    "grep",
    "cat-file",
    "whatchanged",
    "range-diff",
    "diff-tree",
    "diff-files",
    "diff-index",
];

/// Subcommands that change the repository's state.
const STATE: &[&str] = &[
    "add",
    "commit",
    "reset",
    "clean",
    "rebase",
    "merge",
    "checkout",
    "switch",
    "restore",
    "cherry-pick",
    "revert",
    "am",
    "apply",
    "filter-branch",
    "filter-repo",
    "gc",
    "prune",
    "repack",
    "rm",
    "mv",
    "init",
    "worktree",
    "update-ref",
    "update-index",
    "update-server-info",
    "replace",
    "notes",
    "rerere",
    "maintenance",
    "sparse-checkout",
    "read-tree",
    "write-tree",
    "commit-tree",
    "mktree",
    "mktag",
    "unpack-objects",
    "pack-refs",
    "pack-objects",
    "index-pack",
    "checkout-index",
    "merge-file",
    "merge-index",
    "bisect",
    "symbolic-ref",
    "stash",
    "reflog",
    "branch",
    "tag",
    "config",
    "remote",
    "hash-object",
    "prune-packed",
    "multi-pack-index",
    "commit-graph",
];

const NETWORK: &[&str] = &[
    "push",
    "pull",
    "fetch",
    "clone",
    "ls-remote",
    "submodule",
    "send-email",
    "send-pack",
    "fetch-pack",
    "request-pull",
    "daemon",
    "http-backend",
    "http-fetch",
    "http-push",
    "upload-pack",
    "receive-pack",
    "upload-archive",
    "svn",
    "p4",
    "cvsimport",
    "cvsexportcommit",
    "cvsserver",
    "imap-send",
    "archimport",
    "quiltimport",
];

const EXECUTES: &[&str] = &[
    "difftool",
    "mergetool",
    "instaweb",
    "web--browse",
    "gui",
    "citool",
    "gitk",
    "shell",
    "credential",
    "credential-cache",
    "credential-store",
    "askpass",
    "sh-setup",
    "sh-i18n",
    "run-command",
    "hook",
    "jump",
];

pub(crate) fn judge(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "-c or --output");
    let args = inv.args();
    let mut i = 0;
    let mut dirs: Vec<String> = Vec::new();
    // Global options.
    while i < args.len() {
        let t = args[i].text.as_str();
        if !t.starts_with('-') {
            break;
        }
        match t {
            "-C" => {
                if let Some(d) = args.get(i + 1) {
                    dirs.push(d.text.clone());
                }
                i += 2;
                continue;
            }
            "-c" => {
                let kv = args.get(i + 1).map_or("", |w| w.text.as_str());
                f.ask(
                    Class::Executes,
                    format!(
                        "`git -c {kv}` sets configuration for this command, which can name \
                         programs git runs (core.pager, core.fsmonitor, diff.external, …)"
                    ),
                );
                i += 2;
                continue;
            }
            "-p" | "--paginate" => {
                f.ask(
                    Class::Executes,
                    "`git -p` runs the pager program even without a terminal",
                );
            }
            "-P"
            | "--no-pager"
            | "--bare"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-advice"
            | "--no-lazy-fetch"
            | "--html-path"
            | "--man-path"
            | "--info-path"
            | "--exec-path" => {}
            "--version" | "--help" | "-v" | "-h" => {
                f.allow(Class::ReadOnly, "prints its version or help");
                return true;
            }
            _ if t.starts_with("-c") => {
                f.ask(
                    Class::Executes,
                    format!(
                        "`git {t}` sets configuration for this command, which can name programs \
                         git runs"
                    ),
                );
            }
            _ if t.starts_with("--config-env") => {
                f.ask(
                    Class::Executes,
                    "`git --config-env` sets configuration from a variable, which can name \
                     programs git runs",
                );
                if !t.contains('=') {
                    i += 1;
                }
            }
            _ if t.starts_with("--exec-path=") => {
                f.ask(
                    Class::Executes,
                    "`git --exec-path=DIR` runs git's subcommands from another folder",
                );
            }
            _ if t.starts_with("--git-dir")
                || t.starts_with("--work-tree")
                || t.starts_with("--namespace")
                || t.starts_with("--super-prefix")
                || t.starts_with("--attr-source") =>
            {
                f.ask(
                    Class::Executes,
                    format!(
                        "`git {t}` points git at another repository or tree, whose \
                         configuration can name programs git runs"
                    ),
                );
                if !t.contains('=') {
                    i += 1;
                }
            }
            _ if t.starts_with("--list-cmds") => {}
            _ => {
                f.ask(
                    Class::Unknown,
                    format!("`git {t}` is a global option toolpilot does not know"),
                );
            }
        }
        i += 1;
    }
    for d in &dirs {
        if !plainly_relative(d) {
            f.ask(
                Class::Executes,
                format!(
                    "`git -C {d}` works in a repository outside the workspace, whose \
                     configuration can name programs git runs"
                ),
            );
        }
    }
    let Some(sub_word) = args.get(i) else {
        f.allow(Class::ReadOnly, "`git` alone prints its usage");
        return true;
    };
    if sub_word.dynamic {
        f.ask(Class::Unknown, "the git subcommand comes from an expansion");
        return true;
    }
    let sub = sub_word.text.as_str();
    let rest = &args[i + 1..];
    let rest_texts: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
    let has = |o: &str| rest_texts.contains(&o);
    let has_long = |full: &str, min: usize| {
        rest_texts.iter().take_while(|w| **w != "--").any(|w| {
            w.strip_prefix("--").is_some_and(|n| {
                let n = n.split('=').next().unwrap_or("");
                n.len() >= min && scan::is_long(n, full)
            })
        })
    };
    let positional: Vec<&str> = rest_texts
        .iter()
        .copied()
        .filter(|w| !w.starts_with('-'))
        .collect();
    if rest_texts.iter().any(|w| *w == "--help" || *w == "-h")
        && !matches!(
            sub,
            "grep" | "ls-files" | "cat-file" | "ls-tree" | "show-ref" | "branch" | "tag"
        )
    {
        f.ask(
            Class::Executes,
            "`git … --help` opens the manual with man (or the viewer in help.format), which runs \
             other programs",
        );
        return true;
    }
    // Options of reading subcommands that write files or run programs.
    let generic = |f: &mut Facts| {
        for (k, w) in rest_texts.iter().enumerate() {
            if *w == "--" {
                break;
            }
            if let Some(long) = w.strip_prefix("--") {
                let (n, v) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (long, None),
                };
                if n.len() >= 3 && scan::is_long(n, "output") {
                    let target = v
                        .or_else(|| rest_texts.get(k + 1).map(|s| s.to_string()))
                        .unwrap_or_default();
                    f.writes(
                        vec![target.clone()],
                        format!("`git {sub} --output` writes `{target}`"),
                    );
                } else if n.len() >= 3 && scan::is_long(n, "ext-diff") {
                    f.ask(
                        Class::Executes,
                        format!("`git {sub} --ext-diff` runs the external diff program configured for the files"),
                    );
                } else if n.len() >= 5 && scan::is_long(n, "textconv") {
                    f.ask(
                        Class::Executes,
                        format!("`git {sub} --textconv` runs the text conversion programs configured for the files"),
                    );
                } else if n.len() >= 3 && (scan::is_long(n, "open-files-in-pager")) {
                    f.ask(
                        Class::Executes,
                        format!("`git {sub} --open-files-in-pager` runs a pager program"),
                    );
                } else if scan::is_long(n, "exec") && n.len() >= 3
                    || scan::is_long(n, "upload-pack") && n.len() >= 3
                    || scan::is_long(n, "receive-pack") && n.len() >= 3
                    || n.starts_with("filters") && sub == "cat-file"
                {
                    f.ask(Class::Executes, format!("`git {sub} --{n}` runs a program"));
                }
            } else if sub == "grep" && w.starts_with("-O") {
                f.ask(
                    Class::Executes,
                    "`git grep -O` opens the matching files in a pager program",
                );
            }
        }
    };
    match sub {
        "help" => {
            let web = rest_texts
                .iter()
                .any(|w| matches!(*w, "-w" | "--web" | "-i" | "--info" | "-m" | "--man"));
            if web || !positional.is_empty() {
                f.ask(
                    Class::Executes,
                    "`git help COMMAND` opens the manual with man, a web browser or info, which \
                     runs other programs",
                );
            } else {
                f.allow(Class::ReadOnly, "`git help` printing its lists");
            }
        }
        "diff" if has("--no-index") => {
            generic(f);
            for p in &positional {
                f.read(p);
            }
            f.allow(
                Class::ReadOnly,
                "`git diff --no-index` compares files (read like any file argument)",
            );
        }
        "grep" if has("--no-index") || has("--untracked") => {
            generic(f);
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        "cat-file" if has("--filters") || has("--textconv") => {
            f.ask(
                Class::Executes,
                "`git cat-file --filters` / `--textconv` runs the filter programs configured for \
                 the file",
            );
        }
        "branch" => {
            let changes = rest_texts.iter().any(|w| {
                matches!(
                    *w,
                    "-d" | "-D"
                        | "-m"
                        | "-M"
                        | "-c"
                        | "-C"
                        | "-u"
                        | "-f"
                        | "-t"
                        | "--delete"
                        | "--move"
                        | "--copy"
                        | "--force"
                        | "--track"
                        | "--no-track"
                        | "--unset-upstream"
                        | "--edit-description"
                        | "--create-reflog"
                ) || w.starts_with("--set-upstream")
                    || w.starts_with("--track=")
                    || (w.starts_with('-')
                        && !w.starts_with("--")
                        && w[1..].chars().any(|c| "dDmMcCuft".contains(c)))
            });
            let lists = rest_texts.iter().any(|w| *w == "-l" || *w == "--list");
            let value_opts = [
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
                "--color",
                "--column",
            ];
            let mut named = false;
            let mut k = 0;
            while k < rest_texts.len() {
                let w = rest_texts[k];
                if value_opts.contains(&w) {
                    k += 2;
                    continue;
                }
                if !w.starts_with('-') {
                    named = true;
                }
                k += 1;
            }
            if changes || (named && !lists) {
                f.ask(
                    Class::GitState,
                    "`git branch` creating, deleting, moving or re-tracking a branch changes the \
                     repository",
                );
            } else {
                f.allow(
                    Class::ReadOnly,
                    "a read-only git command (listing branches)",
                );
            }
        }
        "tag" => {
            let lists = rest_texts
                .iter()
                .any(|w| *w == "-l" || *w == "--list" || *w == "-n" || w.starts_with("-n"));
            let value_opts = [
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
                "--color",
                "--column",
            ];
            let mut named = false;
            let mut changes = false;
            let mut k = 0;
            while k < rest_texts.len() {
                let w = rest_texts[k];
                if value_opts.contains(&w) {
                    k += 2;
                    continue;
                }
                if matches!(
                    w,
                    "-d" | "-a"
                        | "-s"
                        | "-f"
                        | "-m"
                        | "-F"
                        | "-u"
                        | "-e"
                        | "--delete"
                        | "--annotate"
                        | "--sign"
                        | "--force"
                        | "--edit"
                ) || w.starts_with("--message")
                    || w.starts_with("--file")
                    || w.starts_with("--local-user")
                {
                    changes = true;
                }
                if w == "-v" || w == "--verify" {
                    // verifying reads
                } else if !w.starts_with('-') {
                    named = true;
                }
                k += 1;
            }
            let verify = rest_texts.iter().any(|w| *w == "-v" || *w == "--verify");
            if changes || (named && !lists && !verify) {
                f.ask(
                    Class::GitState,
                    "`git tag` creating or deleting a tag changes the repository",
                );
            } else {
                f.allow(Class::ReadOnly, "a read-only git command (listing tags)");
            }
        }
        "reflog" => match positional.first().copied() {
            None | Some("show") | Some("exists") | Some("list") => {
                generic(f);
                f.allow(Class::ReadOnly, "a read-only git command");
            }
            Some(_) => f.ask(
                Class::GitState,
                "`git reflog expire` / `delete` changes the repository's history records",
            ),
        },
        "remote" => match positional.first().copied() {
            None | Some("get-url") => f.allow(Class::ReadOnly, "a read-only git command"),
            Some("show") if has("-n") => f.allow(
                Class::ReadOnly,
                "`git remote show -n` reads the configuration",
            ),
            Some("show") => f.ask(
                Class::Network,
                "`git remote show` contacts the remote (use -n to stay offline)",
            ),
            Some("update") | Some("prune") => f.ask(
                Class::Network,
                "`git remote update` / `prune` contacts the remotes",
            ),
            Some("add") if has("-f") || has("--fetch") => f.ask(
                Class::Network,
                "`git remote add -f` fetches from the new remote",
            ),
            Some("set-head") if has("-a") || has("--auto") => f.ask(
                Class::Network,
                "`git remote set-head --auto` contacts the remote",
            ),
            Some(_) => f.ask(
                Class::GitState,
                "`git remote add` / `set-url` / `rename` / `remove` changes the repository's \
                 configuration",
            ),
        },
        "stash" => match positional.first().copied() {
            Some("list") | Some("show") => {
                generic(f);
                f.allow(Class::ReadOnly, "a read-only git command");
            }
            _ => f.ask(
                Class::GitState,
                "`git stash` changes the working tree and the stash",
            ),
        },
        "worktree" if positional.first() == Some(&"list") => {
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        "notes"
            if matches!(
                positional.first().copied(),
                None | Some("list") | Some("show")
            ) =>
        {
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        "sparse-checkout" if positional.first() == Some(&"list") => {
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        "symbolic-ref" if positional.len() <= 1 && !has("-d") && !has("--delete") => {
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        "config" => {
            let reads = rest_texts.iter().any(|w| {
                matches!(
                    *w,
                    "--get"
                        | "--get-all"
                        | "--get-regexp"
                        | "--get-urlmatch"
                        | "-l"
                        | "--list"
                        | "--get-color"
                        | "--get-colorbool"
                )
            }) || matches!(positional.first().copied(), Some("get") | Some("list"))
                || (positional.len() == 1
                    && !rest_texts.iter().any(|w| {
                        matches!(
                            *w,
                            "--unset"
                                | "--unset-all"
                                | "--add"
                                | "--replace-all"
                                | "--remove-section"
                                | "--rename-section"
                                | "-e"
                                | "--edit"
                        )
                    }));
            let edits = rest_texts.iter().any(|w| *w == "-e" || *w == "--edit");
            for (k, w) in rest_texts.iter().enumerate() {
                if *w == "-f" || *w == "--file" {
                    if let Some(x) = rest_texts.get(k + 1) {
                        f.read(x);
                    }
                } else if let Some(x) = w.strip_prefix("--file=") {
                    f.read(x);
                }
            }
            if reads && !edits {
                f.allow(Class::ReadOnly, "`git config` reading configuration");
            } else {
                f.ask(
                    Class::GitState,
                    "`git config` changing configuration, which can name programs git runs",
                );
            }
        }
        "hash-object" => {
            if has("-w") {
                f.ask(
                    Class::GitState,
                    "`git hash-object -w` writes objects into the repository",
                );
            } else {
                for p in &positional {
                    f.read(p);
                }
                f.allow(Class::ReadOnly, "a read-only git command");
            }
        }
        "archive" => {
            if has_long("remote", 3) {
                f.ask(Class::Network, "`git archive --remote` contacts a remote");
            }
            if has_long("exec", 3) {
                f.ask(Class::Executes, "`git archive --exec` runs a program");
            }
            let mut out = None;
            for (k, w) in rest_texts.iter().enumerate() {
                if *w == "-o" {
                    out = rest_texts.get(k + 1).map(|s| s.to_string());
                } else if let Some(x) = w.strip_prefix("--output=") {
                    out = Some(x.to_string());
                } else if w.starts_with("-o") && w.len() > 2 {
                    out = Some(w[2..].to_string());
                }
            }
            match out {
                Some(o) => f.writes(vec![o.clone()], format!("`git archive -o` writes `{o}`")),
                None => f.allow(Class::ReadOnly, "`git archive` writing to its output"),
            }
        }
        "format-patch" => {
            let mut dir = ".".to_string();
            for (k, w) in rest_texts.iter().enumerate() {
                if *w == "-o" || *w == "--output-directory" {
                    dir = rest_texts.get(k + 1).map_or(dir.clone(), |s| s.to_string());
                } else if let Some(x) = w.strip_prefix("--output-directory=") {
                    dir = x.to_string();
                }
            }
            if has("--stdout") {
                f.allow(
                    Class::ReadOnly,
                    "`git format-patch --stdout` prints patches",
                );
            } else {
                f.writes(
                    vec![dir.clone()],
                    format!("`git format-patch` writes patch files into `{dir}`"),
                );
            }
        }
        "bundle" => {
            if positional.first() == Some(&"create") {
                let out = positional.get(1).map(|s| s.to_string()).unwrap_or_default();
                f.writes(
                    vec![out.clone()],
                    format!("`git bundle create` writes `{out}`"),
                );
            } else {
                f.allow(Class::ReadOnly, "a read-only git command");
            }
        }
        _ if READ.contains(&sub) => {
            generic(f);
            if PRINTS_CONTENT.contains(&sub) {
                // `git show HEAD:.env`, `git diff .env`: the content of a secret.
                for p in &positional {
                    f.read(p);
                    if let Some((_, path)) = p.split_once(':') {
                        f.read(path);
                    }
                }
            }
            f.allow(Class::ReadOnly, "a read-only git command");
        }
        _ if NETWORK.contains(&sub) => f.ask(Class::Network, "network access (git remotes)"),
        _ if EXECUTES.contains(&sub) => {
            f.ask(Class::Executes, format!("`git {sub}` runs other programs"))
        }
        _ if sub == "rebase" && (has("-x") || has_long("exec", 3))
            || sub == "bisect" && positional.first() == Some(&"run") =>
        {
            f.ask(
                Class::Executes,
                format!("`git {sub}` runs the command it is given"),
            )
        }
        _ if STATE.contains(&sub) => f.ask(
            Class::GitState,
            "git commands that commit, rewrite history, discard work or change configuration \
             change the repository",
        ),
        _ => f.ask(
            Class::Unknown,
            format!(
                "`git {sub}` is not a git command toolpilot knows; it may be an alias, which can \
                 run any program"
            ),
        ),
    }
    true
}
