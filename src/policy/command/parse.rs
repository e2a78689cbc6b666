//! Splits a shell command line into the simple commands it would run, for the policy.
//!
//! Handles quoting (`'…'`, `"…"`, `\`), separators (`;`, `&&`, `||`, `|`, `|&`, `&`,
//! newlines), command substitution (`$(…)`, backticks), process substitution (`<(…)`,
//! `>(…)`), subshells and groups (`( … )`, `{ …; }`), redirections (`>`, `>>`, `<`, `2>&1`,
//! `&>`, `<<<`), comments, leading variable assignments, `if`/`while`/`until` heads and
//! wrapper commands (`time`, `nohup`, `nice`, `timeout N`, `env`, `command`). Anything outside
//! that grammar (here-documents, `for`/`case`/functions, arithmetic expansion, unterminated
//! quotes) is [`ParseError`]: the policy then asks rather than guesses. This is deliberately
//! a conservative splitter, not a shell: it only has to find every command that could run.

/// One command the line would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The words with quotes removed; expansions are kept as written (`$HOME`, `$(…)`).
    pub words: Vec<String>,
    /// Variables assigned before the command (`FOO=1 make`), names only.
    pub assignments: Vec<String>,
    /// Files written by output redirections (`> out.txt`), as written.
    pub writes: Vec<String>,
    /// The command word itself comes from an expansion (`$cmd args`, `$(which x)`).
    pub dynamic: bool,
    /// Its standard input comes from the previous command in a pipeline.
    pub piped_from: Option<usize>,
    /// It runs inside a command or process substitution.
    pub nested: bool,
}

impl Part {
    /// The words joined by single spaces: what rules match against.
    pub fn text(&self) -> String {
        self.words.join(" ")
    }

    pub fn name(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A word as lexed: its unquoted value, and whether it contains an unquoted expansion.
#[derive(Debug, Clone, Default)]
struct Word {
    value: String,
    expansion: bool,
    /// The word came out of quotes (so `{`, `if` … are not keywords).
    quoted: bool,
}

#[derive(Debug, Clone)]
enum Tok {
    Word(Word),
    /// `;`, `&&`, `||`, `&`, newline.
    Sep,
    /// `|` or `|&`.
    Pipe,
    /// A redirection operator; the next word is its target (`out` tells if it writes).
    Redir {
        out: bool,
        dup: bool,
    },
    /// `(` … `)` subshell, already parsed.
    Sub(Vec<Part>),
}

struct Lexer<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    /// Commands found inside substitutions, collected as we go.
    nested: Vec<Part>,
    depth: usize,
}

const MAX_DEPTH: usize = 16;

impl<'a> Lexer<'a> {
    fn new(src: &'a str, depth: usize) -> Lexer<'a> {
        Lexer {
            s: src.as_bytes(),
            src,
            i: 0,
            nested: Vec::new(),
            depth,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.s.get(self.i + k).copied()
    }

    fn err<T>(&self, msg: &str) -> Result<T, ParseError> {
        Err(ParseError(msg.to_string()))
    }

    /// Finds the end of a `(`-balanced region starting after `(`; returns the inner text.
    fn balanced(&mut self) -> Result<&'a str, ParseError> {
        let start = self.i;
        let mut depth = 1usize;
        while let Some(c) = self.peek() {
            match c {
                b'\\' => self.i += 2,
                b'\'' => {
                    self.i += 1;
                    while self.peek().is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    if self.peek().is_none() {
                        return self.err("an unterminated single quote");
                    }
                    self.i += 1;
                }
                b'"' => {
                    self.i += 1;
                    while let Some(c) = self.peek() {
                        if c == b'\\' {
                            self.i += 2;
                        } else if c == b'"' {
                            break;
                        } else {
                            self.i += 1;
                        }
                    }
                    if self.peek().is_none() {
                        return self.err("an unterminated double quote");
                    }
                    self.i += 1;
                }
                b'(' => {
                    depth += 1;
                    self.i += 1;
                }
                b')' => {
                    depth -= 1;
                    self.i += 1;
                    if depth == 0 {
                        return Ok(&self.src[start..self.i - 1]);
                    }
                }
                _ => self.i += 1,
            }
        }
        self.err("an unclosed parenthesis")
    }

    fn substitution(&mut self, inner: &str) -> Result<(), ParseError> {
        if self.depth >= MAX_DEPTH {
            return self.err("substitutions nested too deeply");
        }
        let mut parts = parse_at(inner, self.depth + 1)?;
        for p in &mut parts {
            p.nested = true;
        }
        self.nested.extend(parts);
        Ok(())
    }

    /// `$…` at the current position (after the `$`), appended to `w`.
    fn dollar(&mut self, w: &mut Word) -> Result<(), ParseError> {
        match self.peek() {
            Some(b'(') if self.peek_at(1) == Some(b'(') => self.err("arithmetic expansion $((…))"),
            Some(b'(') => {
                self.i += 1;
                let inner = self.balanced()?;
                self.substitution(inner)?;
                w.value.push_str("$(");
                w.value.push_str(inner);
                w.value.push(')');
                w.expansion = true;
                Ok(())
            }
            Some(b'{') => {
                let start = self.i;
                while self.peek().is_some_and(|c| c != b'}') {
                    self.i += 1;
                }
                if self.peek().is_none() {
                    return self.err("an unclosed ${…}");
                }
                self.i += 1;
                w.value.push('$');
                w.value.push_str(&self.src[start..self.i]);
                w.expansion = true;
                Ok(())
            }
            Some(c) if c.is_ascii_alphanumeric() || b"_?#@*!$-".contains(&c) => {
                let start = self.i;
                if c.is_ascii_alphabetic() || c == b'_' {
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                    {
                        self.i += 1;
                    }
                } else {
                    self.i += 1;
                }
                w.value.push('$');
                w.value.push_str(&self.src[start..self.i]);
                w.expansion = true;
                Ok(())
            }
            _ => {
                w.value.push('$');
                Ok(())
            }
        }
    }

    fn backtick(&mut self, w: &mut Word) -> Result<(), ParseError> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == b'\\' {
                self.i += 2;
            } else if c == b'`' {
                break;
            } else {
                self.i += 1;
            }
        }
        if self.peek().is_none() {
            return self.err("an unterminated backtick");
        }
        let inner = &self.src[start..self.i];
        self.i += 1;
        self.substitution(inner)?;
        w.value.push('`');
        w.value.push_str(inner);
        w.value.push('`');
        w.expansion = true;
        Ok(())
    }

    fn push_char(&mut self, w: &mut Word) {
        // Copy one UTF-8 character.
        let len = utf8_len(self.s[self.i]);
        let end = (self.i + len).min(self.s.len());
        w.value.push_str(self.src.get(self.i..end).unwrap_or(""));
        self.i = end;
    }

    fn word(&mut self) -> Result<Word, ParseError> {
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b')' => break,
                b'(' => {
                    // `<(`/`>(` are handled as operators; a bare `(` inside a word is odd.
                    return self.err("a parenthesis inside a word");
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'\n') => self.i += 1,
                        Some(_) => self.push_char(&mut w),
                        None => {}
                    }
                }
                b'\'' => {
                    self.i += 1;
                    w.quoted = true;
                    let start = self.i;
                    while self.peek().is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    if self.peek().is_none() {
                        return self.err("an unterminated single quote");
                    }
                    w.value.push_str(&self.src[start..self.i]);
                    self.i += 1;
                }
                b'"' => {
                    self.i += 1;
                    w.quoted = true;
                    loop {
                        match self.peek() {
                            None => return self.err("an unterminated double quote"),
                            Some(b'"') => {
                                self.i += 1;
                                break;
                            }
                            Some(b'\\') => {
                                self.i += 1;
                                match self.peek() {
                                    Some(c) if b"\"\\$`\n".contains(&c) => {
                                        if c != b'\n' {
                                            w.value.push(c as char);
                                        }
                                        self.i += 1;
                                    }
                                    _ => w.value.push('\\'),
                                }
                            }
                            Some(b'$') => {
                                self.i += 1;
                                self.dollar(&mut w)?;
                            }
                            Some(b'`') => {
                                self.i += 1;
                                self.backtick(&mut w)?;
                            }
                            Some(_) => self.push_char(&mut w),
                        }
                    }
                }
                b'$' => {
                    self.i += 1;
                    self.dollar(&mut w)?;
                }
                b'`' => {
                    self.i += 1;
                    self.backtick(&mut w)?;
                }
                _ => self.push_char(&mut w),
            }
        }
        Ok(w)
    }

    fn tokens(&mut self) -> Result<Vec<Tok>, ParseError> {
        let mut out = Vec::new();
        let mut at_word_start = true;
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\r' => {
                    self.i += 1;
                    at_word_start = true;
                    continue;
                }
                b'#' if at_word_start => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.i += 1;
                    }
                    continue;
                }
                b'\n' | b';' => {
                    if c == b';' && self.peek_at(1) == Some(b';') {
                        return self.err("a case statement (;;)");
                    }
                    self.i += 1;
                    out.push(Tok::Sep);
                }
                b'&' => {
                    if self.peek_at(1) == Some(b'&') {
                        self.i += 2;
                        out.push(Tok::Sep);
                    } else if self.peek_at(1) == Some(b'>') {
                        self.i += 2;
                        if self.peek() == Some(b'>') {
                            self.i += 1;
                        }
                        out.push(Tok::Redir {
                            out: true,
                            dup: false,
                        });
                    } else {
                        self.i += 1;
                        out.push(Tok::Sep);
                    }
                }
                b'|' => {
                    if self.peek_at(1) == Some(b'|') {
                        self.i += 2;
                        out.push(Tok::Sep);
                    } else {
                        self.i += 1;
                        if self.peek() == Some(b'&') {
                            self.i += 1;
                        }
                        out.push(Tok::Pipe);
                    }
                }
                b'<' | b'>' => {
                    if self.peek_at(1) == Some(b'(') {
                        self.i += 2;
                        let inner = self.balanced()?;
                        self.substitution(inner)?;
                        out.push(Tok::Word(Word {
                            value: format!("{}({inner})", c as char),
                            expansion: true,
                            quoted: false,
                        }));
                    } else {
                        out.push(self.redirection()?);
                    }
                }
                b'(' => {
                    if self.i > 0 && !b" \t\n;&|(".contains(&self.s[self.i - 1]) {
                        return self.err("a function definition or an unexpected `(`");
                    }
                    self.i += 1;
                    let inner = self.balanced()?;
                    if self.depth >= MAX_DEPTH {
                        return self.err("subshells nested too deeply");
                    }
                    out.push(Tok::Sub(parse_at(inner, self.depth + 1)?));
                }
                b')' => return self.err("an unmatched `)`"),
                _ => {
                    let w = self.word()?;
                    // `2>` and `2>&1`: digits right before a redirection belong to it.
                    if !w.quoted
                        && !w.value.is_empty()
                        && w.value.bytes().all(|b| b.is_ascii_digit())
                        && matches!(self.peek(), Some(b'<' | b'>'))
                    {
                        out.push(self.redirection()?);
                    } else {
                        out.push(Tok::Word(w));
                    }
                }
            }
            at_word_start = true;
        }
        Ok(out)
    }

    fn redirection(&mut self) -> Result<Tok, ParseError> {
        let c = self.peek().unwrap_or(b'>');
        self.i += 1;
        if c == b'<' {
            if self.peek() == Some(b'<') {
                if self.peek_at(1) == Some(b'<') {
                    self.i += 2; // here-string: the next word is data
                    return Ok(Tok::Redir {
                        out: false,
                        dup: false,
                    });
                }
                return self.err("a here-document (<<)");
            }
            let dup = self.peek() == Some(b'&');
            if dup {
                self.i += 1;
            }
            return Ok(Tok::Redir { out: false, dup });
        }
        if matches!(self.peek(), Some(b'>' | b'|')) {
            self.i += 1;
        }
        let dup = self.peek() == Some(b'&');
        if dup {
            self.i += 1;
        }
        Ok(Tok::Redir { out: true, dup })
    }
}

fn utf8_len(b: u8) -> usize {
    match b {
        b if b < 0x80 => 1,
        b if b >= 0xF0 => 4,
        b if b >= 0xE0 => 3,
        b if b >= 0xC0 => 2,
        _ => 1,
    }
}

/// Splits `line` into the commands it runs.
pub fn parse(line: &str) -> Result<Vec<Part>, ParseError> {
    parse_at(line, 0)
}

const WRAPPERS: &[&str] = &["time", "nohup", "command", "builtin", "exec"];

fn parse_at(line: &str, depth: usize) -> Result<Vec<Part>, ParseError> {
    let mut lx = Lexer::new(line, depth);
    let toks = lx.tokens()?;
    let mut parts: Vec<Part> = Vec::new();
    let mut cur: Option<Part> = None;
    let mut pending_pipe: Option<usize> = None;
    let mut redirect: Option<bool> = None; // Some(out) while waiting for a target
    let mut dup = false;

    let flush = |cur: &mut Option<Part>, parts: &mut Vec<Part>| -> Option<usize> {
        match cur.take() {
            Some(p) if !p.words.is_empty() => {
                parts.push(p);
                Some(parts.len() - 1)
            }
            _ => None,
        }
    };
    for tok in toks {
        match tok {
            Tok::Word(w) => {
                if let Some(out) = redirect.take() {
                    if out && !dup && !is_harmless_target(&w.value) {
                        cur.get_or_insert_with(|| new_part(pending_pipe))
                            .writes
                            .push(w.value);
                    }
                    continue;
                }
                let part = cur.get_or_insert_with(|| new_part(pending_pipe));
                if part.words.is_empty() {
                    if !w.quoted {
                        // Leading assignments.
                        if let Some(eq) = w.value.find('=') {
                            let name = &w.value[..eq];
                            if !name.is_empty()
                                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                                && !name.as_bytes()[0].is_ascii_digit()
                            {
                                part.assignments.push(name.to_string());
                                continue;
                            }
                        }
                        match w.value.as_str() {
                            "{" | "}" | "!" | "then" | "else" | "do" | "if" | "elif" | "while"
                            | "until" => continue,
                            "fi" | "done" | "esac" => continue,
                            "for" | "case" | "select" | "function" | "coproc" | "[[" => {
                                return Err(ParseError(format!("a `{}` construct", w.value)));
                            }
                            _ => {}
                        }
                        if WRAPPERS.contains(&w.value.as_str()) && !part.assignments.is_empty() {
                            continue;
                        }
                    }
                    if w.value.contains("()") || w.value.ends_with("()") {
                        return Err(ParseError("a function definition".into()));
                    }
                    part.dynamic = w.expansion;
                }
                part.words.push(w.value);
            }
            Tok::Sep => {
                if redirect.is_some() {
                    return Err(ParseError("a redirection without a target".into()));
                }
                flush(&mut cur, &mut parts);
                pending_pipe = None;
            }
            Tok::Pipe => {
                if redirect.is_some() {
                    return Err(ParseError("a redirection without a target".into()));
                }
                pending_pipe = flush(&mut cur, &mut parts);
                if pending_pipe.is_none() && !parts.is_empty() {
                    pending_pipe = Some(parts.len() - 1);
                }
            }
            Tok::Redir { out, dup: d } => {
                redirect = Some(out);
                dup = d;
            }
            Tok::Sub(inner) => {
                flush(&mut cur, &mut parts);
                parts.extend(inner);
            }
        }
    }
    if redirect.is_some() {
        return Err(ParseError("a redirection without a target".into()));
    }
    flush(&mut cur, &mut parts);
    for p in &mut parts {
        strip_wrappers(p);
    }
    parts.extend(lx.nested);
    Ok(parts)
}

fn new_part(piped_from: Option<usize>) -> Part {
    Part {
        words: Vec::new(),
        assignments: Vec::new(),
        writes: Vec::new(),
        dynamic: false,
        piped_from,
        nested: false,
    }
}

fn is_harmless_target(t: &str) -> bool {
    matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr") || t.starts_with("&")
}

/// `time cmd`, `nohup cmd`, `nice -n 5 cmd`, `timeout 10 cmd`, `env A=1 cmd`, `command cmd`:
/// the policy judges `cmd`.
fn strip_wrappers(p: &mut Part) {
    loop {
        let Some(first) = p.words.first().cloned() else {
            return;
        };
        let skip = match first.as_str() {
            "time" | "nohup" | "command" | "builtin" => {
                let mut k = 1;
                while p.words.get(k).is_some_and(|w| w.starts_with('-')) {
                    k += 1;
                }
                k
            }
            "nice" => {
                let mut k = 1;
                if p.words.get(1).is_some_and(|w| w == "-n") {
                    k = 3;
                } else if p.words.get(1).is_some_and(|w| w.starts_with('-')) {
                    k = 2;
                }
                k
            }
            "timeout" => {
                let mut k = 1;
                while p.words.get(k).is_some_and(|w| w.starts_with('-')) {
                    k += if p.words[k] == "-s" || p.words[k] == "-k" {
                        2
                    } else {
                        1
                    };
                }
                k + 1 // the duration
            }
            "env" => {
                let mut k = 1;
                while let Some(w) = p.words.get(k) {
                    if w.starts_with('-') {
                        k += 1;
                    } else if let Some(eq) = w.find('=') {
                        p.assignments.push(w[..eq].to_string());
                        k += 1;
                    } else {
                        break;
                    }
                }
                if k >= p.words.len() {
                    return; // plain `env`: prints the environment
                }
                k
            }
            _ => return,
        };
        if skip >= p.words.len() {
            return;
        }
        p.words.drain(..skip);
        p.dynamic = p
            .words
            .first()
            .is_some_and(|w| w.contains('$') || w.contains('`'));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<String> {
        parse(line).unwrap().iter().map(Part::text).collect()
    }

    #[test]
    fn separators_and_pipelines() {
        assert_eq!(
            texts("ls -la; cargo test && echo ok || echo bad"),
            ["ls -la", "cargo test", "echo ok", "echo bad"]
        );
        assert_eq!(
            texts("cat a | grep x |& wc -l & sleep 1\nfalse"),
            ["cat a", "grep x", "wc -l", "sleep 1", "false"]
        );
        let p = parse("curl -s x | sh").unwrap();
        assert_eq!(p[1].piped_from, Some(0));
        assert_eq!(p[0].piped_from, None);
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            texts(r#"git commit -m "fix: a; b" && echo 'x && y'"#),
            ["git commit -m fix: a; b", "echo x && y"]
        );
        assert_eq!(texts(r"echo a\ b \; c"), ["echo a b ; c"]);
        assert_eq!(
            texts("echo \"multi\nline\" # comment; rm -rf /"),
            ["echo multi\nline"]
        );
    }

    #[test]
    fn substitutions_are_commands_too() {
        let p = parse("echo $(rm -rf x) `whoami` \"$(id -u)\"").unwrap();
        let t: Vec<String> = p.iter().map(Part::text).collect();
        assert_eq!(t[1..], ["rm -rf x", "whoami", "id -u"]);
        assert!(p[1].nested);
        assert_eq!(
            texts("diff <(ls a) >(cat)"),
            ["diff <(ls a) >(cat)", "ls a", "cat"]
        );
        assert_eq!(
            texts("(cd sub && make) ; { echo a; echo b; }"),
            ["cd sub", "make", "echo a", "echo b"]
        );
        assert_eq!(
            texts("echo $(echo $(whoami))"),
            ["echo $(echo $(whoami))", "echo $(whoami)", "whoami"]
        );
    }

    #[test]
    fn redirections_assignments_and_wrappers() {
        let p = parse("FOO=1 LD_PRELOAD=x.so make test > out.log 2>&1").unwrap();
        assert_eq!(p[0].text(), "make test");
        assert_eq!(p[0].assignments, ["FOO", "LD_PRELOAD"]);
        assert_eq!(p[0].writes, ["out.log"]);
        let p = parse("cargo build 2>/dev/null >&2 < in.txt").unwrap();
        assert!(p[0].writes.is_empty());
        assert_eq!(texts("timeout 10 nice -n 5 cargo test"), ["cargo test"]);
        assert_eq!(texts("env RUST_LOG=1 cargo run"), ["cargo run"]);
        assert_eq!(texts("time nohup sudo reboot"), ["sudo reboot"]);
        assert_eq!(
            texts("if test -f x; then cat x; else echo no; fi"),
            ["test -f x", "cat x", "echo no"]
        );
        assert!(parse("$CMD --flag").unwrap()[0].dynamic);
        assert!(parse("`which rm` -rf /").unwrap()[0].dynamic);
    }

    #[test]
    fn refuses_what_it_cannot_judge() {
        for bad in [
            "echo 'unterminated",
            "echo \"unterminated",
            "cat <<EOF\nhi\nEOF",
            "for f in *; do rm $f; done",
            "echo $((1+2))",
            "f() { rm -rf /; }; f",
            "echo a )",
            "echo >",
            "case x in a) ;; esac",
            ":(){ :|:& };:",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
