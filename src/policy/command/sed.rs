//! `sed`: options (`-i` in every spelling, `-f` scripts, `--sandbox`) and a conservative reader
//! of sed scripts that finds the commands that run programs (`e`, `s///e`), write files (`w`,
//! `W`, `s///w`) or read other files (`r`, `R`). A script it cannot read is asked about.

use super::Class;
use super::models::{Facts, Inv};
use super::scan::{self, Getopt, Item};

/// What a script does besides editing the stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Script {
    /// `e` commands or `s///e`.
    pub executes: bool,
    /// Files written by `w`, `W` and `s///w`.
    pub writes: Vec<String>,
    /// Files read by `r` and `R`.
    pub reads: Vec<String>,
}

pub(crate) fn judge(inv: &Inv, f: &mut Facts) -> bool {
    f.injection(
        inv,
        Class::Executes,
        "-i or --expression with an `e` command",
    );
    let g = Getopt {
        short_arg: "efl",
        short_opt: "i",
        long_arg: &["expression", "file", "line-length"],
        stop_at_operand: false,
    };
    let (items, _) = scan::getopt(inv.args(), &g);
    let mut scripts: Vec<String> = Vec::new();
    let mut from_file = false;
    let mut in_place = false;
    let mut sandbox = false;
    let mut operands: Vec<&super::parse::Word> = Vec::new();
    let mut dynamic_script = false;
    for it in &items {
        match it {
            Item::Short { c: 'e', value } => {
                dynamic_script |= value.as_ref().is_some_and(|w| w.dynamic);
                scripts.push(scan::text(value).to_string());
            }
            Item::Short { c: 'f', value } => {
                from_file = true;
                f.read(scan::text(value));
            }
            Item::Short { c: 'i', .. } => in_place = true,
            Item::Short { c, .. } if "nrEsuzl".contains(*c) => {}
            Item::Short { c, .. } => {
                f.ask(
                    Class::Unknown,
                    format!("`sed -{c}` is an option toolpilot does not know"),
                );
            }
            Item::Long { name, value } => {
                if name.is_empty() {
                    continue;
                }
                if scan::is_long(name, "in-place") {
                    in_place = true;
                } else if scan::is_long(name, "expression") {
                    dynamic_script |= value.as_ref().is_some_and(|w| w.dynamic);
                    scripts.push(scan::text(value).to_string());
                } else if scan::is_long(name, "file") && name.len() >= 2 {
                    from_file = true;
                    f.read(scan::text(value));
                } else if name == "sandbox" {
                    sandbox = true;
                } else if !KNOWN_LONG.iter().any(|l| scan::is_long(name, l)) {
                    f.ask(
                        Class::Unknown,
                        format!("`sed --{name}` is an option toolpilot does not know"),
                    );
                }
            }
            Item::Operand(k) => operands.push(&inv.args()[*k]),
        }
    }
    let mut files = operands.into_iter();
    if scripts.is_empty() && !from_file {
        match files.next() {
            Some(w) => {
                dynamic_script |= w.dynamic;
                scripts.push(w.text.clone());
            }
            None => {
                f.ask(Class::Unknown, "`sed` without a script");
                return true;
            }
        }
    }
    let files: Vec<String> = files.map(|w| w.text.clone()).collect();
    for x in &files {
        f.read(x);
    }
    if in_place {
        f.writes(
            files.clone(),
            format!(
                "`sed -i` edits {} in place",
                if files.is_empty() {
                    "its files".to_string()
                } else {
                    files
                        .iter()
                        .map(|x| format!("`{x}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        );
    }
    if from_file && !sandbox {
        f.ask(
            Class::Unknown,
            "`sed -f` runs a script from a file, which toolpilot cannot read here; a sed script \
             can write files and run commands",
        );
    }
    if dynamic_script && !sandbox {
        f.ask(
            Class::Unknown,
            "the sed script comes from an expansion, so toolpilot cannot read it; a sed script \
             can write files and run commands",
        );
    }
    match read_script(&scripts.join("\n")) {
        Err(why) if !sandbox => f.ask(
            Class::Unknown,
            format!(
                "toolpilot cannot read this sed script ({why}); a sed script can write files and \
                 run commands"
            ),
        ),
        Err(_) => {}
        Ok(s) => {
            if !sandbox {
                if s.executes {
                    f.ask(
                        Class::Executes,
                        "the sed script runs shell commands (the `e` command or the `e` flag of `s`)",
                    );
                }
                let outs: Vec<String> = s
                    .writes
                    .into_iter()
                    .filter(|w| !super::parse::is_harmless_target(w))
                    .collect();
                if !outs.is_empty() {
                    f.writes(
                        outs.clone(),
                        format!(
                            "the sed script writes {} (the `w` command or flag)",
                            outs.iter()
                                .map(|x| format!("`{x}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                }
                for r in &s.reads {
                    f.read(r);
                }
            }
        }
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

const KNOWN_LONG: &[&str] = &[
    "quiet",
    "silent",
    "debug",
    "posix",
    "regexp-extended",
    "separate",
    "unbuffered",
    "null-data",
    "zero-terminated",
    "line-length",
    "follow-symlinks",
    "binary",
    "help",
    "version",
    "sandbox",
];

struct Reader<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// The rest of the line (for file names, labels and text).
    fn rest_of_line(&mut self) -> String {
        let start = self.i;
        while self.peek().is_some_and(|c| c != b'\n') {
            self.i += 1;
        }
        self.src.get(start..self.i).unwrap_or("").to_string()
    }

    /// A delimited part of `s` or `y` (after the delimiter), through the closing delimiter.
    fn delimited(&mut self, delim: u8) -> Result<(), String> {
        loop {
            match self.peek() {
                None => return Err("an unterminated `s` or `y` command".into()),
                Some(b'\\') => {
                    self.i += 2;
                }
                Some(b'\n') if delim != b'\n' => {
                    return Err("a newline inside an `s` or `y` command".into());
                }
                Some(c) if c == delim => {
                    self.i += 1;
                    return Ok(());
                }
                Some(_) => self.i += 1,
            }
        }
    }

    /// An address: a line number, `$`, `/re/`, `\cREc`, `first~step`, `+N`, `~N`.
    fn address(&mut self) -> Result<bool, String> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                if self.peek() == Some(b'~') {
                    self.i += 1;
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                }
                Ok(true)
            }
            Some(b'$') => {
                self.i += 1;
                Ok(true)
            }
            Some(b'/') => {
                self.i += 1;
                self.delimited(b'/')?;
                self.regex_flags();
                Ok(true)
            }
            Some(b'\\') => {
                self.i += 1;
                let Some(d) = self.peek() else {
                    return Err("an address ending in a backslash".into());
                };
                self.i += 1;
                self.delimited(d)?;
                self.regex_flags();
                Ok(true)
            }
            Some(b'+' | b'~') => {
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn regex_flags(&mut self) {
        while matches!(self.peek(), Some(b'I' | b'M')) {
            self.i += 1;
        }
    }

    /// Text of `a`, `i`, `c`: one line (GNU), or `\` newline and lines ending in `\`.
    fn text(&mut self) {
        self.blanks();
        if self.peek() == Some(b'\\') {
            self.i += 1;
            if self.peek() == Some(b'\n') {
                self.i += 1;
            }
        }
        loop {
            match self.peek() {
                None => return,
                Some(b'\\') => self.i += 2,
                Some(b'\n') => {
                    self.i += 1;
                    return;
                }
                Some(_) => self.i += 1,
            }
        }
    }
}

/// Reads a sed script. Errors for anything outside GNU sed's grammar.
pub(crate) fn read_script(script: &str) -> Result<Script, String> {
    let mut r = Reader {
        s: script.as_bytes(),
        src: script,
        i: 0,
    };
    let mut out = Script::default();
    let mut depth = 0usize;
    loop {
        // Between commands: blanks, newlines, `;`.
        while matches!(r.peek(), Some(b' ' | b'\t' | b'\n' | b';')) {
            r.i += 1;
        }
        let Some(_) = r.peek() else { break };
        if r.peek() == Some(b'#') {
            r.rest_of_line();
            continue;
        }
        if r.address()? {
            r.blanks();
            if r.peek() == Some(b',') {
                r.i += 1;
                r.blanks();
                if !r.address()? {
                    return Err("a range without a second address".into());
                }
            }
        }
        r.blanks();
        while r.peek() == Some(b'!') {
            r.i += 1;
            r.blanks();
        }
        let Some(cmd) = r.peek() else {
            return Err("an address without a command".into());
        };
        r.i += 1;
        match cmd {
            b'{' => {
                depth += 1;
                continue;
            }
            b'}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "an unmatched `}`".to_string())?;
            }
            b'=' | b'd' | b'D' | b'g' | b'G' | b'h' | b'H' | b'n' | b'N' | b'p' | b'P' | b'x'
            | b'z' | b'F' => {}
            b'l' | b'L' | b'q' | b'Q' => {
                r.blanks();
                while r.peek().is_some_and(|c| c.is_ascii_digit()) {
                    r.i += 1;
                }
            }
            b':' => {
                r.blanks();
                let label = r.rest_of_label();
                if label.is_empty() {
                    return Err("a `:` without a label".into());
                }
            }
            b'b' | b't' | b'T' => {
                r.blanks();
                r.rest_of_label();
            }
            b'a' | b'i' | b'c' => r.text(),
            b'r' | b'R' => {
                r.blanks();
                let file = r.rest_of_line();
                out.reads.push(file.trim_end().to_string());
            }
            b'w' | b'W' => {
                r.blanks();
                let file = r.rest_of_line();
                out.writes.push(file.trim_end().to_string());
            }
            b'e' => {
                out.executes = true;
                r.rest_of_line();
            }
            b'v' => {
                r.rest_of_label();
            }
            b's' => {
                let Some(d) = r.peek() else {
                    return Err("an `s` without a delimiter".into());
                };
                if d == b'\\' || d == b'\n' {
                    return Err("an `s` with a backslash or newline delimiter".into());
                }
                r.i += 1;
                r.delimited(d)?;
                r.delimited(d)?;
                // Flags.
                loop {
                    match r.peek() {
                        Some(b'g' | b'p' | b'i' | b'I' | b'm' | b'M') => r.i += 1,
                        Some(c) if c.is_ascii_digit() => r.i += 1,
                        Some(b'e') => {
                            out.executes = true;
                            r.i += 1;
                        }
                        Some(b'w') => {
                            r.i += 1;
                            r.blanks();
                            let file = r.rest_of_line();
                            out.writes.push(file.trim_end().to_string());
                            break;
                        }
                        _ => break,
                    }
                }
            }
            b'y' => {
                let Some(d) = r.peek() else {
                    return Err("a `y` without a delimiter".into());
                };
                r.i += 1;
                r.delimited(d)?;
                r.delimited(d)?;
            }
            other => {
                return Err(format!("the command `{}`", other as char));
            }
        }
        // After a command: blanks, then `;`, newline, `}`, `#` or the end.
        r.blanks();
        match r.peek() {
            None | Some(b';' | b'\n' | b'}' | b'#') => {}
            Some(c) => return Err(format!("unexpected `{}` after a command", c as char)),
        }
    }
    if depth != 0 {
        return Err("an unclosed `{`".into());
    }
    Ok(out)
}

impl Reader<'_> {
    /// A label: up to `;` or the end of the line (GNU).
    fn rest_of_label(&mut self) -> String {
        let start = self.i;
        while self.peek().is_some_and(|c| c != b'\n' && c != b';') {
            self.i += 1;
        }
        self.src.get(start..self.i).unwrap_or("").trim().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts() {
        let ok = |s: &str| read_script(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert_eq!(ok("s/a/b/g"), Script::default());
        assert_eq!(ok("1,5p;$d"), Script::default());
        assert!(ok("1e touch x").executes);
        assert!(ok("s/x/date/e").executes);
        assert!(ok("s|a|b|ge").executes);
        assert_eq!(ok("s/a/b/w out.txt").writes, ["out.txt"]);
        assert_eq!(ok("/x/w log").writes, ["log"]);
        assert_eq!(ok("1r /etc/passwd").reads, ["/etc/passwd"]);
        assert!(
            !ok("s/e/w/").executes,
            "e and w inside the pattern are text"
        );
        assert!(!ok("s,a\\,e,b,").executes);
        assert!(ok("/re/{s/a/b/;p}").writes.is_empty());
        assert!(ok("$!N;s/\\n/ /;ta").writes.is_empty());
        assert!(ok("a\\\nhello e w\n").writes.is_empty());
        assert!(ok("1i text with e and w").writes.is_empty());
        assert!(ok("y/abc/xyz/").writes.is_empty());
        assert!(ok("# comment e\np").writes.is_empty());
        assert!(ok(":a;N;$!ba;s/\\n/,/g").writes.is_empty());
        for bad in ["s/a/b", "{p", "k", "s/a/b/ x", "1,p"] {
            assert!(read_script(bad).is_err(), "{bad:?}");
        }
    }
}
