//! The awk family (`awk`, `gawk`, `mawk`, `nawk`): options that load code (`-f`, `-i`, `-l`,
//! `-E`) and a reader of awk programs that finds `system(…)`, pipes (`print | "cmd"`,
//! `"cmd" | getline`), output redirection inside `print`/`printf` (`print > "f"`; `$3 > 100` as
//! a pattern is a comparison), and gawk's `@load`/`@include` and indirect calls.

use super::Class;
use super::models::{Facts, Inv};

/// What a program does besides reading its input and printing.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Program {
    pub executes: bool,
    /// Output files of `print > "f"`: `Some(name)` for a string literal, `None` otherwise.
    pub writes: Vec<Option<String>>,
    /// Files read by `getline < "f"`.
    pub reads: Vec<Option<String>>,
    /// `@load` / `@include` / indirect calls.
    pub loads: bool,
}

pub(crate) fn judge(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(inv, Class::Executes, "-f, -i or -l (load code)");
    let args = inv.args();
    let mut program: Option<&super::parse::Word> = None;
    let mut sandbox = false;
    let mut i = 0;
    let mut sources = Vec::new();
    while i < args.len() {
        let t = args[i].text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        let (name, attached) = match t.strip_prefix("--") {
            Some(long) => match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_string())),
                None => (format!("--{long}"), None),
            },
            None => {
                let opt: String = t.chars().take(2).collect();
                let rest: String = t.chars().skip(2).collect();
                (opt, (!rest.is_empty()).then_some(rest))
            }
        };
        let long = |full: &str| name.len() > 3 && full.starts_with(name.as_str());
        let takes = matches!(
            name.as_str(),
            "-f" | "-v" | "-F" | "-e" | "-i" | "-l" | "-E" | "-W"
        ) || [
            "--file",
            "--assign",
            "--field-separator",
            "--source",
            "--include",
            "--load",
            "--exec",
        ]
        .iter()
        .any(|l| long(l));
        let value = if takes {
            match attached.clone() {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i).map(|w| w.text.clone())
                }
            }
        } else {
            attached.clone()
        };
        let v = value.clone().unwrap_or_default();
        match name.as_str() {
            "-f" | "-E" => {
                f.read(&v);
                f.ask(
                    Class::Unknown,
                    format!(
                        "`{} {name}` runs an awk program from a file, which toolpilot cannot read \
                         here; an awk program can run commands and write files",
                        inv.name()
                    ),
                );
            }
            "-i" | "-l" => {
                f.ask(
                    Class::Executes,
                    format!(
                        "`{} {name}` loads code (an awk library or a shared object)",
                        inv.name()
                    ),
                );
            }
            "-e" => sources.push(v),
            "-v" | "-F" => {}
            "-W" => {
                if v.starts_with("exec") || v.starts_with('e') && v.len() < 5 {
                    f.ask(
                        Class::Unknown,
                        "`mawk -W exec` runs an awk program from a file",
                    );
                } else if !matches!(
                    v.as_str(),
                    "version" | "posix_space" | "usage" | "interactive" | "sprintf" | "posix"
                ) {
                    f.ask(
                        Class::Unknown,
                        format!("`awk -W {v}` is an option toolpilot does not know"),
                    );
                }
            }
            "-S" | "--sandbox" => sandbox = true,
            "-b"
            | "-c"
            | "-C"
            | "-g"
            | "-h"
            | "-L"
            | "-M"
            | "-n"
            | "-N"
            | "-O"
            | "-P"
            | "-r"
            | "-s"
            | "-t"
            | "-V"
            | "--characters-as-bytes"
            | "--traditional"
            | "--copyright"
            | "--gen-pot"
            | "--help"
            | "--lint"
            | "--bignum"
            | "--non-decimal-data"
            | "--use-lc-numeric"
            | "--optimize"
            | "--posix"
            | "--re-interval"
            | "--no-optimize"
            | "--lint-old"
            | "--version"
            | "--csv"
            | "-k" => {}
            "-d" | "-o" | "-p" | "-D" | "--dump-variables" | "--pretty-print" | "--profile"
            | "--debug" => {
                if matches!(name.as_str(), "-D" | "--debug") {
                    f.ask(
                        Class::Executes,
                        "`gawk --debug` runs the interactive debugger",
                    );
                } else {
                    let target = value
                        .clone()
                        .unwrap_or_else(|| "awkvars.out / awkprof.out".into());
                    f.writes(
                        vec![target.clone()],
                        format!("`gawk {name}` writes `{target}`"),
                    );
                }
            }
            _ if long("--file") || long("--exec") => {
                f.ask(
                    Class::Unknown,
                    format!("`{name}` runs an awk program from a file"),
                );
            }
            _ if long("--include") || long("--load") => {
                f.ask(Class::Executes, format!("`{name}` loads code"));
            }
            _ if long("--source") => sources.push(v),
            _ if long("--assign") || long("--field-separator") => {}
            _ if long("--sandbox") => sandbox = true,
            _ => {
                f.ask(
                    Class::Unknown,
                    format!(
                        "`{} {name}` is an option toolpilot does not know",
                        inv.name()
                    ),
                );
            }
        }
        i += 1;
    }
    let loads_program = inv
        .texts()
        .any(|w| matches!(w, "-f" | "-E") || w.starts_with("--fi") || w.starts_with("--exe"));
    if sources.is_empty() && !loads_program {
        program = args.get(i);
        i += 1;
        if let Some(p) = program {
            sources.push(p.text.clone());
        } else {
            f.ask(Class::Unknown, "awk without a program");
            return true;
        }
    }
    for w in args.iter().skip(i) {
        if !w.text.contains('=') || w.text.starts_with('/') || w.text.starts_with('.') {
            f.read(&w.text);
        }
    }
    if program.is_some_and(|p| p.dynamic) && !sandbox {
        f.ask(
            Class::Unknown,
            "the awk program comes from an expansion, so toolpilot cannot read it",
        );
    }
    for src in &sources {
        match read_program(src) {
            Err(why) => {
                if !sandbox {
                    f.ask(
                        Class::Unknown,
                        format!("toolpilot cannot read this awk program ({why})"),
                    );
                }
            }
            Ok(p) => {
                if sandbox {
                    continue;
                }
                if p.executes {
                    f.ask(
                        Class::Executes,
                        "the awk program runs commands (system() or a pipe to or from a command)",
                    );
                }
                if p.loads {
                    f.ask(
                        Class::Executes,
                        "the awk program loads code or calls a function by name (@load, \
                         @include, @name())",
                    );
                }
                if !p.writes.is_empty() {
                    let known: Option<Vec<String>> = p.writes.iter().cloned().collect();
                    match known {
                        Some(t) => {
                            let t: Vec<String> = t
                                .into_iter()
                                .filter(|x| !super::parse::is_harmless_target(x))
                                .collect();
                            if !t.is_empty() {
                                f.writes(
                                    t.clone(),
                                    format!(
                                        "the awk program writes {} (print > file)",
                                        t.iter()
                                            .map(|x| format!("`{x}`"))
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    ),
                                );
                            }
                        }
                        None => f.writes_unknown(
                            "the awk program writes to files whose names it computes (print > expression)",
                        ),
                    }
                }
                for r in p.reads.iter().flatten() {
                    f.read(r);
                }
            }
        }
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Regex,
    Num,
    Op(String),
    Newline,
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let b = src.as_bytes();
    let mut out: Vec<Tok> = Vec::new();
    let mut i = 0;
    // After an operand, `/` divides; otherwise it starts a regex.
    let operand_end = |out: &Vec<Tok>| {
        matches!(
            out.last(),
            Some(Tok::Ident(_) | Tok::Str(_) | Tok::Num | Tok::Regex)
        ) || matches!(out.last(), Some(Tok::Op(o)) if o == ")" || o == "]" || o == "$" || o == "++" || o == "--")
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\\' if b.get(i + 1) == Some(&b'\n') => i += 2,
            b'\n' => {
                out.push(Tok::Newline);
                i += 1;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                let mut s = String::new();
                loop {
                    match b.get(i) {
                        None => return Err("an unterminated string".into()),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => {
                            if let Some(&n) = b.get(i + 1) {
                                s.push(match n {
                                    b'n' => '\n',
                                    b't' => '\t',
                                    other => other as char,
                                });
                            }
                            i += 2;
                        }
                        Some(_) => {
                            let len = src[i..].chars().next().map_or(1, char::len_utf8);
                            s.push_str(&src[i..i + len]);
                            i += len;
                        }
                    }
                }
                out.push(Tok::Str(s));
            }
            b'/' if !operand_end(&out) => {
                i += 1;
                let mut in_bracket = false;
                loop {
                    match b.get(i) {
                        None | Some(b'\n') => {
                            return Err("an unterminated regular expression".into());
                        }
                        Some(b'\\') => i += 2,
                        Some(b'[') => {
                            in_bracket = true;
                            i += 1;
                        }
                        Some(b']') => {
                            in_bracket = false;
                            i += 1;
                        }
                        Some(b'/') if !in_bracket => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                out.push(Tok::Regex);
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push(Tok::Ident(src[s..i].to_string()));
            }
            c if c.is_ascii_digit() || c == b'.' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                out.push(Tok::Num);
            }
            _ => {
                let two = src.get(i..i + 2).unwrap_or("");
                let op = if [
                    ">>", "||", "&&", "|&", "==", "!=", "<=", ">=", "++", "--", "+=", "-=", "*=",
                    "/=", "%=", "^=", "**",
                ]
                .contains(&two)
                {
                    two.to_string()
                } else {
                    let len = src[i..].chars().next().map_or(1, char::len_utf8);
                    src[i..i + len].to_string()
                };
                i += op.len();
                out.push(Tok::Op(op));
            }
        }
    }
    Ok(out)
}

/// Reads an awk program. Errors for anything it cannot read.
pub(crate) fn read_program(src: &str) -> Result<Program, String> {
    let toks = lex(src)?;
    let mut p = Program::default();
    // Inside a print/printf statement: the parenthesis depth it started at.
    let mut print_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut k = 0;
    while k < toks.len() {
        let t = &toks[k];
        match t {
            Tok::Ident(id) if id == "system" => p.executes = true,
            Tok::Ident(id) if id == "print" || id == "printf" => print_depth = Some(depth),
            Tok::Ident(id) if id == "getline" => {
                if let Some(Tok::Op(o)) = toks.get(k + 1) {
                    if o == "<" {
                        p.reads.push(match toks.get(k + 2) {
                            Some(Tok::Str(s)) => Some(s.clone()),
                            _ => None,
                        });
                    }
                } else if let (Some(Tok::Ident(_)), Some(Tok::Op(o))) =
                    (toks.get(k + 1), toks.get(k + 2))
                    && o == "<"
                {
                    p.reads.push(match toks.get(k + 3) {
                        Some(Tok::Str(s)) => Some(s.clone()),
                        _ => None,
                    });
                }
            }
            Tok::Op(o) => match o.as_str() {
                "|" | "|&" => p.executes = true,
                "@" => p.loads = true,
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                ";" | "{" | "}" => print_depth = None,
                "&&" | "||" if print_depth == Some(depth) => print_depth = None,
                ">" | ">>" if print_depth == Some(depth) => {
                    p.writes.push(match toks.get(k + 1) {
                        Some(Tok::Str(s)) => Some(s.clone()),
                        _ => None,
                    });
                }
                _ => {}
            },
            Tok::Newline => print_depth = None,
            _ => {}
        }
        k += 1;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs() {
        let ok = |s: &str| read_program(s).unwrap();
        assert_eq!(ok("{print $1}"), Program::default());
        assert_eq!(ok("$3 > 100"), Program::default());
        assert_eq!(ok("$3 > 100 { print $1 }"), Program::default());
        assert_eq!(ok("{ if ($2 > 1) print }"), Program::default());
        assert_eq!(ok("{ print ($1 > 2) }"), Program::default());
        assert_eq!(ok("{ x = a > b; print x }"), Program::default());
        assert!(ok("BEGIN{system(\"id\")}").executes);
        assert!(ok("{print | \"sh\"}").executes);
        assert!(ok("{ \"date\" | getline d }").executes);
        assert_eq!(ok("{print > \"out.txt\"}").writes, [Some("out.txt".into())]);
        assert_eq!(
            ok("{printf(\"%s\", $1) >> \"log\"}").writes,
            [Some("log".into())]
        );
        assert_eq!(ok("{print $1 > $2}").writes, [None]);
        assert!(ok("/a|b/ { print }").writes.is_empty());
        assert!(!ok("/a|b/ { print }").executes, "| in a regex is text");
        assert!(!ok("{ print \"a|b\" }").executes);
        assert!(!ok("$1 || $2 { n++ }").executes);
        assert_eq!(
            ok("{ getline line < \"/etc/passwd\" }").reads,
            [Some("/etc/passwd".into())]
        );
        assert!(ok("@load \"x\"").loads);
        assert_eq!(ok("{ a = 4 / 2; print a }"), Program::default());
    }
}
