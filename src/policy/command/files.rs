//! Commands that create, change or delete files (`cp`, `mv`, `touch`, `mkdir`, `tee`, `ln`,
//! `install`, `truncate`, `dd`, `split`, `rm`, `chmod`, …) and read-only tools with options
//! that write (`sort -o`, `uniq IN OUT`, `xxd IN OUT`, `tree -o`, `yq -i`, `file -C`).

use super::Class;
use super::models::{Facts, Inv};
use super::scan::{self, Getopt, Item};

/// The operands of `inv` read with `g`, and its options.
fn split(inv: &Inv, g: &Getopt) -> (Vec<Item>, Vec<String>) {
    let (items, _) = scan::getopt(inv.args(), g);
    let operands = items
        .iter()
        .filter_map(|i| match i {
            Item::Operand(k) => Some(inv.args()[*k].text.clone()),
            _ => None,
        })
        .collect();
    (items, operands)
}

/// The value of a short or long option among `items`.
fn value_of(items: &[Item], short: char, long: &str) -> Option<String> {
    items.iter().find_map(|i| match i {
        Item::Short { c, value } if *c == short => Some(scan::text(value).to_string()),
        Item::Long { name, value } if !long.is_empty() && scan::is_long(name, long) => {
            Some(scan::text(value).to_string())
        }
        _ => None,
    })
}

fn join(dir: &str, name: &str) -> String {
    let base = name
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(name);
    format!("{}/{base}", dir.trim_end_matches('/'))
}

fn shown(targets: &[String]) -> String {
    if targets.is_empty() {
        return "the files it is given".to_string();
    }
    let list: Vec<String> = targets.iter().take(4).map(|t| format!("`{t}`")).collect();
    let more = targets.len().saturating_sub(4);
    if more > 0 {
        format!("{} and {more} more", list.join(", "))
    } else {
        list.join(", ")
    }
}

pub(crate) fn judge(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    match name {
        "cp" | "mv" | "ln" | "install" => copy_like(inv, f),
        "touch" => {
            let g = Getopt {
                short_arg: "dtr",
                short_opt: "",
                long_arg: &["date", "reference", "time"],
                stop_at_operand: false,
            };
            let (_, ops) = split(inv, &g);
            f.writes(
                ops.clone(),
                format!("`touch` creates or changes {}", shown(&ops)),
            );
        }
        "mkdir" => {
            let g = Getopt {
                short_arg: "m",
                short_opt: "",
                long_arg: &["mode", "context"],
                stop_at_operand: false,
            };
            let (_, ops) = split(inv, &g);
            f.writes(ops.clone(), format!("`mkdir` creates {}", shown(&ops)));
        }
        "mkfifo" | "mknod" => {
            let ops: Vec<String> = inv
                .texts()
                .filter(|w| !w.starts_with('-'))
                .take(1)
                .map(str::to_string)
                .collect();
            f.writes(ops.clone(), format!("`{name}` creates {}", shown(&ops)));
        }
        "tee" => {
            let g = Getopt {
                short_arg: "",
                short_opt: "",
                long_arg: &["output-error"],
                stop_at_operand: false,
            };
            let (_, ops) = split(inv, &g);
            let ops: Vec<String> = ops
                .into_iter()
                .filter(|o| !super::parse::is_harmless_target(o))
                .collect();
            if ops.is_empty() {
                f.allow(Class::ReadOnly, "`tee` without files only copies its input");
            } else {
                f.writes(ops.clone(), format!("`tee` writes {}", shown(&ops)));
            }
        }
        "truncate" => {
            let g = Getopt {
                short_arg: "sr",
                short_opt: "",
                long_arg: &["size", "reference"],
                stop_at_operand: false,
            };
            let (_, ops) = split(inv, &g);
            f.writes(
                ops.clone(),
                format!("`truncate` changes the size of {}", shown(&ops)),
            );
        }
        "dd" => {
            let mut outs = Vec::new();
            for w in inv.texts() {
                if let Some(o) = w.strip_prefix("of=") {
                    outs.push(o.to_string());
                } else if let Some(i) = w.strip_prefix("if=") {
                    f.read(i);
                }
            }
            let outs: Vec<String> = outs
                .into_iter()
                .filter(|o| !super::parse::is_harmless_target(o))
                .collect();
            if outs.is_empty() {
                f.allow(
                    Class::ReadOnly,
                    "`dd` without of= only copies to its output",
                );
            } else {
                f.writes(outs.clone(), format!("`dd` writes {}", shown(&outs)));
            }
        }
        "split" | "csplit" => {
            let g = if name == "split" {
                Getopt {
                    short_arg: "abClnt",
                    short_opt: "",
                    long_arg: &[
                        "suffix-length",
                        "additional-suffix",
                        "bytes",
                        "line-bytes",
                        "lines",
                        "number",
                        "separator",
                        "filter",
                        "numeric-suffixes",
                        "hex-suffixes",
                    ],
                    stop_at_operand: false,
                }
            } else {
                Getopt {
                    short_arg: "bfn",
                    short_opt: "",
                    long_arg: &["suffix-format", "prefix", "digits"],
                    stop_at_operand: false,
                }
            };
            let (items, ops) = split(inv, &g);
            if items
                .iter()
                .any(|i| matches!(i, Item::Long { name, .. } if scan::is_long(name, "filter")))
            {
                f.ask(
                    Class::Executes,
                    "`split --filter` runs a shell command for every piece",
                );
            }
            let prefix = if name == "split" {
                ops.get(1).cloned().unwrap_or_else(|| "x".into())
            } else {
                value_of(&items, 'f', "prefix").unwrap_or_else(|| "xx".into())
            };
            if let Some(input) = ops.first() {
                f.read(input);
            }
            f.writes(
                vec![prefix.clone()],
                format!("`{name}` writes its pieces as files named `{prefix}…`"),
            );
        }
        "rm" | "rmdir" | "unlink" | "shred" => {
            let ops: Vec<String> = inv
                .texts()
                .filter(|w| !w.starts_with('-') || *w == "-")
                .map(str::to_string)
                .collect();
            f.deletes(ops.clone(), format!("`{name}` deletes {}", shown(&ops)));
        }
        "chmod" | "chown" | "chgrp" => {
            let g = Getopt {
                short_arg: "",
                short_opt: "",
                long_arg: &["reference", "from"],
                stop_at_operand: false,
            };
            let (items, ops) = split(inv, &g);
            let has_ref = items
                .iter()
                .any(|i| matches!(i, Item::Long { name, .. } if scan::is_long(name, "reference")));
            // chmod accepts modes such as -x, which look like options.
            let mode_taken = !has_ref;
            let files: Vec<String> = if name == "chmod"
                && inv.texts().any(|w| {
                    w.starts_with('-')
                        && w.len() > 1
                        && w[1..].chars().all(|c| "rwxXst".contains(c))
                }) {
                ops.clone()
            } else if mode_taken {
                ops.iter().skip(1).cloned().collect()
            } else {
                ops.clone()
            };
            f.writes(
                files.clone(),
                format!(
                    "`{name}` changes the permissions or owner of {}",
                    shown(&files)
                ),
            );
        }
        "patch" => {
            f.writes_unknown("`patch` changes the files its patch names");
        }
        "mktemp" => {
            if inv.has_flag('u', "dry-run") {
                f.allow(Class::ReadOnly, "`mktemp -u` only prints a name");
            } else {
                f.allow(
                    Class::ReadOnly,
                    "`mktemp` creates an empty file or folder in the temporary folder",
                );
            }
        }
        _ => return false,
    }
    true
}

/// `cp`, `mv`, `ln`, `install`: the destination is the last operand or `-t DIR`.
fn copy_like(inv: &Inv, f: &mut Facts) {
    let name = inv.name();
    let g = Getopt {
        short_arg: "tSgmoZ",
        short_opt: "",
        long_arg: &[
            "target-directory",
            "suffix",
            "backup",
            "reflink",
            "sparse",
            "preserve",
            "no-preserve",
            "group",
            "mode",
            "owner",
            "strip-program",
            "context",
            "update",
            "debug",
        ],
        stop_at_operand: false,
    };
    let (items, ops) = split(inv, &g);
    // `install -s --strip-program=PROG` runs PROG.
    if name == "install"
        && items
            .iter()
            .any(|i| matches!(i, Item::Long { name, .. } if scan::is_long(name, "strip-program")))
    {
        f.ask(
            Class::Executes,
            "`install --strip-program` runs the program it names",
        );
    }
    let dir = value_of(&items, 't', "target-directory");
    let dir_only = name == "install"
        && items.iter().any(|i| {
            matches!(i, Item::Short { c: 'd', .. })
                || matches!(i, Item::Long { name, .. } if scan::is_long(name, "directory"))
        });
    let no_target = items
        .iter()
        .any(|i| matches!(i, Item::Short { c: 'T', .. }));
    let (sources, dest): (Vec<String>, Option<String>) = match (&dir, dir_only) {
        (_, true) => (Vec::new(), None),
        (Some(d), _) => (ops.clone(), Some(d.clone())),
        (None, _) => match ops.split_last() {
            Some((last, rest)) if !rest.is_empty() => (rest.to_vec(), Some(last.clone())),
            // `ln -s target` links into the current folder.
            Some((only, _)) if name == "ln" => (vec![only.clone()], Some(".".into())),
            _ => (Vec::new(), None),
        },
    };
    let mut targets = Vec::new();
    if dir_only {
        targets = ops.clone();
    }
    if let Some(d) = &dest {
        targets.push(d.clone());
        if !no_target {
            for s in &sources {
                targets.push(join(d, s));
            }
        }
    }
    // A link to a secret exposes it as much as a copy does.
    for s in &sources {
        f.read(s);
    }
    if name == "mv" {
        f.touched.extend(sources.iter().cloned());
    }
    let verb = match name {
        "cp" => "copies into",
        "mv" => "moves files to",
        "ln" => "creates links at",
        _ => "installs files to",
    };
    let shown_targets = dest
        .as_ref()
        .map_or_else(|| shown(&targets), |d| format!("`{d}`"));
    f.writes(targets, format!("`{name}` {verb} {shown_targets}"));
}

pub(crate) fn sort(inv: &Inv, f: &mut Facts) -> bool {
    let g = Getopt {
        short_arg: "ktoST",
        short_opt: "",
        long_arg: &[
            "key",
            "field-separator",
            "output",
            "buffer-size",
            "temporary-directory",
            "compress-program",
            "files0-from",
            "random-source",
            "batch-size",
            "parallel",
            "sort",
        ],
        stop_at_operand: false,
    };
    let (items, ops) = split(inv, &g);
    f.injection(inv, Class::Executes, "--compress-program");
    for i in &items {
        match i {
            Item::Long { name, .. }
                if scan::is_long(name, "compress-program") && name.len() >= 2 =>
            {
                f.ask(
                    Class::Executes,
                    "`sort --compress-program` runs the program it names",
                );
            }
            Item::Long { name, value }
                if scan::is_long(name, "files0-from") || scan::is_long(name, "random-source") =>
            {
                f.read(scan::text(value));
            }
            _ => {}
        }
    }
    if let Some(out) = value_of(&items, 'o', "output") {
        f.writes(vec![out.clone()], format!("`sort -o` writes `{out}`"));
    }
    for o in &ops {
        f.read(o);
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn uniq(inv: &Inv, f: &mut Facts) -> bool {
    let g = Getopt {
        short_arg: "fsw",
        short_opt: "",
        long_arg: &[
            "skip-fields",
            "skip-chars",
            "check-chars",
            "all-repeated",
            "group",
        ],
        stop_at_operand: false,
    };
    let (_, ops) = split(inv, &g);
    if let Some(i) = ops.first() {
        f.read(i);
    }
    if let Some(out) = ops.get(1) {
        f.writes(vec![out.clone()], format!("`uniq IN OUT` writes `{out}`"));
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn xxd(inv: &Inv, f: &mut Facts) -> bool {
    let g = Getopt {
        short_arg: "cglosn",
        short_opt: "",
        long_arg: &[],
        stop_at_operand: false,
    };
    // xxd's long options are single-dash words (-cols 8): read the words by hand.
    let mut ops = Vec::new();
    let args = inv.args();
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if t.starts_with('-') && t.len() > 1 {
            let takes = matches!(
                t,
                "-c" | "-cols"
                    | "-g"
                    | "-groupsize"
                    | "-l"
                    | "-len"
                    | "-o"
                    | "-offset"
                    | "-s"
                    | "-seek"
                    | "-n"
                    | "-name"
            );
            i += if takes { 2 } else { 1 };
            continue;
        }
        ops.push(t.to_string());
        i += 1;
    }
    let _ = g;
    if let Some(input) = ops.first() {
        f.read(input);
    }
    if let Some(out) = ops.get(1) {
        f.writes(vec![out.clone()], format!("`xxd IN OUT` writes `{out}`"));
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn tree(inv: &Inv, f: &mut Facts) -> bool {
    let g = Getopt {
        short_arg: "LPIoHT",
        short_opt: "",
        long_arg: &[
            "filelimit",
            "timefmt",
            "sort",
            "charset",
            "fromfile",
            "gitfile",
            "infofile",
        ],
        stop_at_operand: false,
    };
    let (items, _) = split(inv, &g);
    f.injection(inv, Class::Writes, "-o FILE");
    if let Some(out) = value_of(&items, 'o', "") {
        f.writes(vec![out.clone()], format!("`tree -o` writes `{out}`"));
    }
    if items
        .iter()
        .any(|i| matches!(i, Item::Short { c: 'R', .. }))
    {
        f.writes_unknown("`tree -R` writes an index file into every folder");
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn yq(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Writes, "-i (edit files in place)");
    let inplace = inv.texts().any(|w| {
        w == "-i"
            || w.starts_with("--inplace")
            || (w.starts_with('-') && !w.starts_with("--") && w.contains('i') && w.len() <= 4)
    });
    let split_files = inv
        .texts()
        .any(|w| w == "-s" || w.starts_with("--split-exp"));
    let ops: Vec<String> = inv
        .texts()
        .filter(|w| !w.starts_with('-'))
        .skip(1)
        .map(str::to_string)
        .collect();
    if inplace {
        f.writes(
            ops.clone(),
            format!("`yq -i` edits {} in place", shown(&ops)),
        );
    }
    if split_files {
        f.writes_unknown("`yq --split-exp` writes a file per document");
    }
    f.read_args(inv.args());
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn file(inv: &Inv, f: &mut Facts) -> bool {
    if inv.has_flag('C', "compile") {
        f.writes_unknown("`file -C` writes a compiled magic file");
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}
