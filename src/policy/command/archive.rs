//! Archives and compressors: `tar`, `zip`, `unzip`, and the in-place compressors (`gzip`,
//! `xz`, `zstd`, …). Listing and testing read; creating writes the archive; extracting writes
//! paths stored in the archive (unknown here); the options that run programs execute.

use super::Class;
use super::models::{Facts, Inv};
use super::scan;

/// tar's long options that run a program.
const TAR_EXEC: &[&str] = &[
    "to-command",
    "use-compress-program",
    "info-script",
    "new-volume-script",
    "rsh-command",
    "rmt-command",
];

#[derive(Default)]
struct TarState {
    mode: Option<char>,
    archive: Option<String>,
    dir: Option<String>,
}

fn tar_short(c: char, value: Option<String>, f: &mut Facts, st: &mut TarState) {
    match c {
        'c' | 'x' | 't' | 'r' | 'u' | 'A' | 'd' => st.mode = Some(c),
        'f' => st.archive = value,
        'C' => st.dir = value,
        'I' => f.ask(
            Class::Executes,
            "`tar -I` (--use-compress-program) runs the program it names",
        ),
        'F' => f.ask(
            Class::Executes,
            "`tar -F` (--info-script) runs the script it names",
        ),
        'g' => {
            if let Some(v) = value {
                f.writes(
                    vec![v.clone()],
                    format!("`tar -g` writes the snapshot file `{v}`"),
                );
            }
        }
        'T' | 'X' => {
            if let Some(v) = value {
                f.read(&v);
            }
        }
        _ => {}
    }
}

pub(crate) fn tar(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(
        inv,
        Class::Executes,
        "--to-command or --checkpoint-action=exec=",
    );
    let args = inv.args();
    let mut operands: Vec<String> = Vec::new();
    let mut i = 0;
    let mut ended = false;
    // Old style: a first word without a dash is a cluster of letters (`tar xzf a.tgz`).
    let mut queue: Vec<char> = Vec::new();
    if let Some(first) = args.first()
        && !first.text.starts_with('-')
        && !first.text.is_empty()
    {
        queue = first.text.chars().collect();
        i = 1;
    }
    let takes_arg = |c: char| "fbCFgIKLNTVXH".contains(c);
    let mut st = TarState::default();
    // Old-style letters take their arguments from the following words, in order.
    for c in std::mem::take(&mut queue) {
        let value = if takes_arg(c) {
            let v = args.get(i).map(|w| w.text.clone());
            i += 1;
            v
        } else {
            None
        };
        tar_short(c, value, f, &mut st);
    }
    while i < args.len() {
        let t = args[i].text.as_str();
        if ended || !t.starts_with('-') || t == "-" {
            operands.push(t.to_string());
            i += 1;
            continue;
        }
        if t == "--" {
            ended = true;
            i += 1;
            continue;
        }
        if let Some(body) = t.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let long_args = [
                "file",
                "directory",
                "files-from",
                "exclude-from",
                "listed-incremental",
                "to-command",
                "use-compress-program",
                "info-script",
                "new-volume-script",
                "rsh-command",
                "rmt-command",
                "checkpoint-action",
                "index-file",
                "exclude",
                "transform",
                "owner",
                "group",
                "mode",
                "mtime",
                "newer",
                "label",
                "format",
                "blocking-factor",
                "tape-length",
                "volno-file",
                "xform",
                "strip-components",
                "suffix",
                "backup",
                "sort",
                "warning",
                "quoting-style",
                "newer-mtime",
                "after-date",
                "level",
                "occurrence",
                "record-size",
                "checkpoint",
                "null",
            ];
            let value = match attached {
                Some(v) => Some(v),
                None if long_args.iter().any(|l| scan::is_long(name, l))
                    && !matches!(name, "checkpoint" | "null" | "backup") =>
                {
                    i += 1;
                    args.get(i).map(|w| w.text.clone())
                }
                None => None,
            };
            let v = value.clone().unwrap_or_default();
            if TAR_EXEC.iter().any(|e| scan::is_long(name, e)) && name.len() >= 2 {
                f.ask(
                    Class::Executes,
                    format!("`tar --{name}` runs the program it names"),
                );
            } else if scan::is_long(name, "checkpoint-action") && name.len() >= 11 {
                if v.contains("exec") {
                    f.ask(
                        Class::Executes,
                        "`tar --checkpoint-action=exec=…` runs a command at every checkpoint",
                    );
                }
            } else if scan::is_long(name, "extract") || scan::is_long(name, "get") {
                st.mode = Some('x');
            } else if scan::is_long(name, "create") {
                st.mode = Some('c');
            } else if scan::is_long(name, "list") {
                st.mode = Some('t');
            } else if scan::is_long(name, "append")
                || scan::is_long(name, "update")
                || scan::is_long(name, "concatenate")
                || scan::is_long(name, "catenate")
                || scan::is_long(name, "delete")
            {
                st.mode = Some('r');
            } else if scan::is_long(name, "diff") || scan::is_long(name, "compare") {
                st.mode = Some('d');
            } else if scan::is_long(name, "file") && name.len() >= 2 {
                st.archive = value;
            } else if scan::is_long(name, "directory") && name.len() >= 2 {
                st.dir = value;
            } else if scan::is_long(name, "listed-incremental")
                || scan::is_long(name, "index-file")
                || scan::is_long(name, "volno-file")
            {
                if !v.is_empty() {
                    f.writes(vec![v.clone()], format!("`tar --{name}` writes `{v}`"));
                }
            } else if scan::is_long(name, "remove-files") {
                f.deletes(
                    Vec::new(),
                    "`tar --remove-files` deletes the files it archives",
                );
            } else if scan::is_long(name, "files-from") || scan::is_long(name, "exclude-from") {
                f.read(&v);
            }
            i += 1;
            continue;
        }
        // A dash cluster: letters taking an argument take the rest or the next word.
        let chars: Vec<char> = t[1..].chars().collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            if takes_arg(c) {
                let rest: String = chars[k + 1..].iter().collect();
                let value = if rest.is_empty() {
                    i += 1;
                    args.get(i).map(|w| w.text.clone())
                } else {
                    Some(rest)
                };
                tar_short(c, value, f, &mut st);
                break;
            }
            tar_short(c, None, f, &mut st);
            k += 1;
        }
        i += 1;
    }
    let TarState { mode, archive, dir } = st;
    if let Some(a) = &archive
        && a.contains(':')
        && !inv.texts().any(|w| w == "--force-local")
    {
        f.ask(
            Class::Network,
            format!("`tar -f {a}`: an archive name with `:` is a remote archive (rmt over ssh)"),
        );
    }
    match mode {
        Some('x') => {
            if let Some(a) = &archive {
                f.read(a);
            }
            let place = dir.map_or_else(|| "the current folder".to_string(), |d| format!("`{d}`"));
            f.writes_unknown(format!(
                "extracting an archive writes the paths stored in it into {place}, which \
                 toolpilot cannot check before it runs"
            ));
        }
        Some('c') | Some('r') => {
            for o in &operands {
                f.read(o);
            }
            match archive.as_deref() {
                None | Some("-") => {
                    f.allow(Class::ReadOnly, "`tar` writing an archive to its output")
                }
                Some(a) => f.writes(
                    vec![a.to_string()],
                    format!("`tar` writes the archive `{a}`"),
                ),
            }
        }
        Some('t') | Some('d') => {
            if let Some(a) = &archive {
                f.read(a);
            }
            f.allow(Class::ReadOnly, "`tar` listing or comparing an archive");
        }
        _ => {
            if inv.texts().any(|w| w == "--version" || w == "--help") {
                f.allow(Class::ReadOnly, "prints its version or help");
            } else {
                f.ask(Class::Unknown, "`tar` without a mode toolpilot recognises");
            }
        }
    }
    true
}

pub(crate) fn zip(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "-TT (--unzip-command)");
    let texts: Vec<&str> = inv.texts().collect();
    if texts
        .iter()
        .any(|w| *w == "-TT" || w.starts_with("--unzip-command") || w.starts_with("-TT"))
    {
        f.ask(
            Class::Executes,
            "`zip -TT` (--unzip-command) runs the command it names to test the archive",
        );
    }
    if texts.iter().any(|w| {
        *w == "-m"
            || *w == "--move"
            || (w.starts_with('-') && !w.starts_with("--") && w.contains('m') && w.len() <= 5)
    }) {
        f.deletes(
            Vec::new(),
            "`zip -m` deletes the files it adds to the archive",
        );
    }
    let ops: Vec<String> = texts
        .iter()
        .filter(|w| !w.starts_with('-'))
        .map(|w| w.to_string())
        .collect();
    if texts.len() == 1 && matches!(texts[0], "-v" | "-h" | "--help" | "--version") {
        f.allow(Class::ReadOnly, "prints its version or help");
        return true;
    }
    match ops.split_first() {
        Some((archive, files)) => {
            for x in files {
                f.read(x);
            }
            f.writes(
                vec![archive.clone()],
                format!("`zip` writes the archive `{archive}`"),
            );
        }
        None => f.writes_unknown("`zip` writes an archive"),
    }
    true
}

pub(crate) fn unzip(inv: &Inv, f: &mut Facts) -> bool {
    let texts: Vec<&str> = inv.texts().collect();
    let lists = texts.iter().any(|w| {
        w.starts_with('-') && !w.starts_with("--") && w[1..].chars().any(|c| "ltpvcZz".contains(c))
    }) || texts.iter().any(|w| *w == "--help" || *w == "--version")
        || texts.is_empty();
    if let Some(a) = texts.iter().find(|w| !w.starts_with('-')) {
        f.read(a);
    }
    if lists {
        f.allow(
            Class::ReadOnly,
            "`unzip` listing, testing or printing an archive",
        );
    } else {
        let dir = texts
            .windows(2)
            .find(|w| w[0] == "-d")
            .map(|w| format!("`{}`", w[1]))
            .unwrap_or_else(|| "the current folder".into());
        f.writes_unknown(format!(
            "`unzip` extracts the paths stored in the archive into {dir}, which toolpilot \
             cannot check before it runs"
        ));
    }
    true
}

/// `gzip`, `xz`, `zstd`, …: without `-c`/`--stdout`, `-l` or `-t` they replace their files.
pub(crate) fn compressor(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    let mut to_stdout = false;
    let mut out: Option<String> = None;
    let mut files = Vec::new();
    let args = inv.args();
    let mut i = 0;
    let mut ended = false;
    while i < args.len() {
        let t = args[i].text.as_str();
        if ended || !t.starts_with('-') || t == "-" {
            files.push(t.to_string());
        } else if t == "--" {
            ended = true;
        } else if let Some(long) = t.strip_prefix("--") {
            let n = long.split('=').next().unwrap_or("");
            if [
                "stdout",
                "to-stdout",
                "list",
                "test",
                "help",
                "version",
                "info",
            ]
            .contains(&n)
            {
                to_stdout = true;
            }
            if n == "output" {
                out = long
                    .split_once('=')
                    .map(|(_, v)| v.to_string())
                    .or_else(|| {
                        i += 1;
                        args.get(i).map(|w| w.text.clone())
                    });
            }
        } else {
            let body = &t[1..];
            if body.contains(['c', 'l', 't', 'h', 'V', 'L']) {
                to_stdout = true;
            }
            if name.starts_with("zstd") && body.ends_with('o') {
                i += 1;
                out = args.get(i).map(|w| w.text.clone());
            } else if name.starts_with("zstd") && body == "o" {
                i += 1;
                out = args.get(i).map(|w| w.text.clone());
            }
            if matches!(name, "xz" | "unxz" | "lzma" | "zstd") && body.starts_with('T') {
                // -T N (threads): the value is attached or next.
                if body.len() == 1 {
                    i += 1;
                }
            }
        }
        i += 1;
    }
    for x in &files {
        f.read(x);
    }
    if name == "lz4" && files.len() >= 2 && !to_stdout {
        let dest = files[files.len() - 1].clone();
        f.writes(vec![dest.clone()], format!("`lz4 IN OUT` writes `{dest}`"));
        return true;
    }
    if let Some(o) = out {
        f.writes(vec![o.clone()], format!("`{name} -o` writes `{o}`"));
        return true;
    }
    let real: Vec<String> = files.into_iter().filter(|x| x != "-").collect();
    if to_stdout || real.is_empty() {
        f.allow(
            Class::ReadOnly,
            format!("`{name}` writing to its output, listing or testing"),
        );
    } else {
        f.writes(
            real.clone(),
            format!("`{name}` without -c replaces each file with its (de)compressed version"),
        );
    }
    true
}
