//! Finding and searching: `find`, `fd`, `rg`, `ag`, `ack`. They read; some options run
//! programs (`-exec`, `--pre`, `--pager`) or write and delete (`-fprint`, `-delete`).

use super::Class;
use super::models::{Facts, Inv};
use super::scan;

pub(crate) fn find(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "-exec or -delete");
    let args = inv.args();
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                f.ask(
                    Class::Executes,
                    format!("`find {t}` runs a command for the files it finds"),
                );
            }
            "-delete" => f.deletes(Vec::new(), "`find -delete` deletes the files it finds"),
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                let target = args.get(i + 1).map(|w| w.text.clone()).unwrap_or_default();
                f.writes(
                    vec![target.clone()],
                    format!("`find {t}` writes `{target}`"),
                );
                i += 1;
            }
            "-files0-from" => {
                if let Some(w) = args.get(i + 1) {
                    f.read(&w.text);
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn fd(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "--exec");
    let exec = inv.texts().any(|w| {
        if let Some(long) = w.strip_prefix("--") {
            let n = long.split('=').next().unwrap_or("");
            scan::is_long(n, "exec") && n.len() >= 3
                || scan::is_long(n, "exec-batch") && n.len() >= 5
        } else {
            w.starts_with('-') && w[1..].contains(['x', 'X'])
        }
    });
    if exec {
        f.ask(
            Class::Executes,
            "`fd --exec` / `--exec-batch` runs a command for the files it finds",
        );
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn rg(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "--pre");
    let args = inv.args();
    for (i, w) in args.iter().enumerate() {
        let t = w.text.as_str();
        if t == "--" {
            break;
        }
        let Some(long) = t.strip_prefix("--") else {
            continue;
        };
        let n = long.split('=').next().unwrap_or("");
        if n == "pre" {
            f.ask(
                Class::Executes,
                "`rg --pre` runs the program it names on every file it searches",
            );
        } else if n == "hostname-bin" {
            f.ask(
                Class::Executes,
                "`rg --hostname-bin` runs the program it names",
            );
        } else if matches!(n, "file" | "ignore-file")
            && !long.contains('=')
            && let Some(v) = args.get(i + 1)
        {
            f.read(&v.text);
        }
    }
    f.read_args(args);
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn ag(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "--pager");
    if inv
        .texts()
        .any(|w| w == "--pager" || w.starts_with("--pager="))
    {
        f.ask(Class::Executes, "`ag --pager` runs the program it names");
    }
    f.read_args(inv.args());
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

pub(crate) fn ack(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "--pager");
    let noenv = inv.texts().any(|w| w == "--noenv");
    if inv
        .texts()
        .any(|w| w.starts_with("--pager") || w.starts_with("--ackrc") || w.starts_with("--pa"))
    {
        f.ask(
            Class::Executes,
            "`ack --pager` / `--ackrc` runs the pager it names",
        );
    } else if !noenv {
        f.ask(
            Class::Executes,
            "ack reads the project's .ackrc (and ACK_OPTIONS), which can name a pager program \
             it runs; with --noenv it reads neither",
        );
    }
    f.read_args(inv.args());
    f.allow(Class::ReadOnly, "a read-only command");
    true
}
