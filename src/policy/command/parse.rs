//! Splits a shell command line into the simple commands it would run, for the policy.
//!
//! The lexer reads what `sh` (dash) and `bash` read: blanks are only space and tab (`\r` is
//! part of a word), `#` starts a comment only at the start of a word, a backslash-newline
//! joins lines, quotes (`'…'`, `"…"`, `\`, bash's `$'…'` with its escapes decoded), separators
//! (`;`, `&&`, `||`, `|`, `|&`, `&`, newlines), command substitution (`$(…)`, backticks),
//! `${…}` (its words parsed for substitutions; the forms bash evaluates as code, `${!x}`,
//! `${x[…]}`, `${x:offset}`, `${x@P}`, are refused), process substitution (`<(…)`, `>(…)`),
//! subshells and groups, redirections (`>`, `>>`, `>|`, `<>`, `&>`, `&>>`, `>&file`, `3>`,
//! `<<<`), here-documents (the body of an unquoted one is scanned for substitutions), leading
//! variable assignments and `if`/`while`/`until` heads. Anything outside that grammar
//! (`for`/`case`/functions, arithmetic, `[[`, unterminated quotes) is a [`ParseError`]: the
//! policy then asks rather than guesses. Wrappers (`env`, `timeout`, `xargs`, …) are kept in
//! the part's words; the rules look through them. This is deliberately a conservative splitter,
//! not a shell: it only has to find every command that could run.

/// A word as the shell reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Word {
    /// The text with quotes removed and escapes decoded; expansions are kept as written
    /// (`$HOME`, `$(…)`, `*.rs`).
    pub text: String,
    /// Some of it was quoted.
    pub quoted: bool,
    /// It contains something the shell expands (a parameter, a substitution, an unquoted glob,
    /// brace expansion, `~`, or text that `sh` and `bash` read differently), so the text is not
    /// necessarily what the command gets.
    pub dynamic: bool,
    /// It begins with an expansion or an unquoted glob or brace: after expansion it could begin
    /// with `-` and be taken for an option.
    pub open_start: bool,
    /// How many bytes at the start of `text` are unquoted literal characters.
    literal_prefix: usize,
}

impl Word {
    /// A plain word (for tests and for words the rules make up).
    pub fn plain(text: &str) -> Word {
        Word {
            text: text.to_string(),
            literal_prefix: text.len(),
            ..Word::default()
        }
    }

    /// `NAME=value` with an unquoted, literal name: the index of `=`.
    fn assignment(&self) -> Option<usize> {
        let eq = self.text[..self.literal_prefix].find('=')?;
        let name = self.text[..eq]
            .strip_suffix('+')
            .unwrap_or(&self.text[..eq]);
        let ok = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        ok.then_some(eq)
    }

    /// Whether it could be an option: it starts with `-`, or with something that expands.
    pub fn maybe_option(&self) -> bool {
        self.open_start || self.text.starts_with('-')
    }
}

/// A variable assigned before a command (`FOO=1 make`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub name: String,
    pub value: String,
}

/// What a redirection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirOp {
    /// `<`
    In,
    /// `>`, `>|`, `&>`, `>&file`: creates or truncates the target.
    Out,
    /// `>>`, `&>>`
    Append,
    /// `<>`: opens the target for reading and writing (creating it).
    InOut,
    /// `<&n`, `>&n`, `>&-`: duplicates or closes a descriptor.
    Dup,
    /// `<<` / `<<-`: the target is the body.
    HereDoc,
    /// `<<<`: the target is the text.
    HereString,
}

impl RedirOp {
    /// Whether the target is a file that is written.
    pub fn writes(self) -> bool {
        matches!(self, RedirOp::Out | RedirOp::Append | RedirOp::InOut)
    }

    /// Whether the target is a file that is read.
    pub fn reads(self) -> bool {
        matches!(self, RedirOp::In | RedirOp::InOut)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub op: RedirOp,
    pub target: Word,
}

/// One command the line would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The command and its arguments. Empty for a part that only assigns or redirects
    /// (`X=1`, `> out`, the redirections of a subshell or group).
    pub words: Vec<Word>,
    /// Variables assigned before the command (or alone: `PATH=/tmp/bin`).
    pub assignments: Vec<Assignment>,
    pub redirects: Vec<Redirect>,
    /// Its standard input comes from the previous command in a pipeline.
    pub piped_from: Option<usize>,
    /// It runs inside a command or process substitution.
    pub nested: bool,
}

impl Part {
    /// The words joined by single spaces: what rules match against.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (i, w) in self.words.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&w.text);
        }
        s
    }

    pub fn name(&self) -> &str {
        self.words.first().map_or("", |w| w.text.as_str())
    }

    /// The assignments, words and redirections (other than descriptor duplications) joined by
    /// single spaces: what an "always allow" answer saves and matches, so that approving
    /// `echo x > notes.txt` does not approve `echo x > .git/config`.
    pub fn full_text(&self) -> String {
        let mut items: Vec<String> = self
            .assignments
            .iter()
            .map(|a| format!("{}={}", a.name, a.value))
            .collect();
        items.extend(self.words.iter().map(|w| w.text.clone()));
        for r in &self.redirects {
            let op = match r.op {
                RedirOp::In => "<",
                RedirOp::Out => ">",
                RedirOp::Append => ">>",
                RedirOp::InOut => "<>",
                RedirOp::HereDoc => "<<",
                RedirOp::HereString => "<<<",
                RedirOp::Dup => continue,
            };
            items.push(format!("{op} {}", r.target.text));
        }
        items.join(" ")
    }

    /// The command word itself comes from an expansion (`$cmd args`, `$(which x)`, `{rm,x}`).
    pub fn dynamic(&self) -> bool {
        self.words.first().is_some_and(|w| w.dynamic)
    }

    /// Files written by output redirections, as written (`/dev/null` and the like left out).
    pub fn writes(&self) -> impl Iterator<Item = &Word> {
        self.redirects
            .iter()
            .filter(|r| r.op.writes() && !is_harmless_target(&r.target.text))
            .map(|r| &r.target)
    }

    /// Files read by input redirections.
    pub fn reads(&self) -> impl Iterator<Item = &Word> {
        self.redirects
            .iter()
            .filter(|r| r.op.reads())
            .map(|r| &r.target)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

#[derive(Debug, Clone)]
enum Tok {
    Word(Word),
    /// `;`, `&&`, `||`, `&`, newline.
    Sep,
    /// `|` or `|&`.
    Pipe,
    /// A redirection operator; the next word is its target (here-documents carry theirs).
    Redir(RedirOp, Option<Word>),
    /// `<&`: the next word is a descriptor, or (bash) a file that is read.
    DupIn,
    /// `(` … `)` subshell, already parsed.
    Sub(Vec<Part>),
}

/// A here-document whose body starts after the next newline.
struct PendingHereDoc {
    delimiter: String,
    quoted: bool,
    strip_tabs: bool,
}

struct Lexer<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    /// Commands found inside substitutions, collected as we go.
    nested: Vec<Part>,
    depth: usize,
    heredocs: Vec<PendingHereDoc>,
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
            heredocs: Vec::new(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.s.get(self.i + k).copied()
    }

    /// Skips backslash-newline pairs (line continuations) at the current position.
    fn skip_continuations(&mut self) {
        while self.peek() == Some(b'\\') && self.peek_at(1) == Some(b'\n') {
            self.i += 2;
        }
    }

    /// The next byte after any line continuations, without consuming it.
    fn peek_joined(&mut self) -> Option<u8> {
        self.skip_continuations();
        self.peek()
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
                        return err("an unterminated single quote");
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
                        return err("an unterminated double quote");
                    }
                    self.i += 1;
                }
                b'`' => {
                    self.i += 1;
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
                        return err("an unterminated backtick");
                    }
                    self.i += 1;
                }
                b'#' if self.i == start
                    || self
                        .s
                        .get(self.i.wrapping_sub(1))
                        .is_some_and(|b| b" \t\n;&|(".contains(b)) =>
                {
                    // A comment inside a substitution could hide a `)`.
                    return err("a comment inside a substitution");
                }
                b'(' => {
                    depth += 1;
                    self.i += 1;
                }
                b')' => {
                    depth -= 1;
                    self.i += 1;
                    if depth == 0 {
                        let inner = self.src.get(start..self.i - 1).unwrap_or("");
                        if inner.contains("<<") && !inner.contains("<<<") {
                            return err("a here-document inside a substitution");
                        }
                        let has_case = inner
                            .split(|c: char| c.is_whitespace() || ";&|(".contains(c))
                            .any(|w| w == "case");
                        if has_case || inner.contains("$'") {
                            // `case x in a)` and `$'\)'` would end the region early.
                            return err("a case statement or $'…' string inside a substitution");
                        }
                        return Ok(inner);
                    }
                }
                _ => self.i += 1,
            }
        }
        err("an unclosed parenthesis")
    }

    fn substitution(&mut self, inner: &str) -> Result<(), ParseError> {
        if self.depth >= MAX_DEPTH {
            return err("substitutions nested too deeply");
        }
        let mut parts = parse_at(inner, self.depth + 1)?;
        for p in &mut parts {
            p.nested = true;
        }
        self.nested.extend(parts);
        Ok(())
    }

    /// `$…` at the current position (after the `$`), appended to `w`.
    fn dollar(&mut self, w: &mut Word, in_dquote: bool) -> Result<(), ParseError> {
        self.skip_continuations();
        let opens = w.text.is_empty();
        let expands = match self.peek() {
            Some(b'(' | b'{' | b'[') => true,
            Some(c) => c.is_ascii_alphanumeric() || b"_?#@*!$-".contains(&c),
            None => false,
        };
        if opens && expands {
            w.open_start = true;
        }
        match self.peek() {
            Some(b'(') if self.peek_at(1) == Some(b'(') => err("arithmetic expansion $((…))"),
            Some(b'[') => err("arithmetic expansion $[…]"),
            Some(b'(') => {
                self.i += 1;
                let inner = self.balanced()?;
                self.substitution(inner)?;
                w.text.push_str("$(");
                w.text.push_str(inner);
                w.text.push(')');
                w.dynamic = true;
                Ok(())
            }
            Some(b'{') => {
                self.i += 1;
                let start = self.i;
                self.brace_body()?;
                let body = self.src.get(start..self.i).unwrap_or("");
                self.i += 1; // the closing brace
                w.text.push_str("${");
                w.text.push_str(body);
                w.text.push('}');
                w.dynamic = true;
                Ok(())
            }
            Some(b'\'') if !in_dquote => self.ansi_c(w),
            Some(b'"') if !in_dquote => {
                // bash's `$"…"` (a translated string) is `$` then `"…"` in dash.
                w.dynamic = true;
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
                w.text.push('$');
                w.text.push_str(self.src.get(start..self.i).unwrap_or(""));
                w.dynamic = true;
                Ok(())
            }
            _ => {
                w.text.push('$');
                Ok(())
            }
        }
    }

    /// The body of `${…}` (after `{`), up to the closing `}` (not consumed). Words inside are
    /// scanned for substitutions; the forms bash evaluates as arithmetic or code are refused.
    fn brace_body(&mut self) -> Result<(), ParseError> {
        // The parameter: a name, digits, or one special character.
        match self.peek() {
            Some(b'!') => return err("indirect expansion ${!…}"),
            Some(b'#') if self.peek_at(1) != Some(b'}') => self.i += 1, // length ${#x}
            _ => {}
        }
        let start = self.i;
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.i += 1;
                }
            }
            Some(c) if c.is_ascii_digit() => {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
            Some(c) if b"?#@*$-".contains(&c) => self.i += 1,
            _ => return err("a ${…} expansion toolpilot does not read"),
        }
        if self.i == start {
            return err("a ${…} expansion toolpilot does not read");
        }
        // The operator.
        match self.peek() {
            Some(b'}') => return Ok(()),
            Some(b'[') => return err("an array subscript in ${…} (evaluated as arithmetic)"),
            Some(b'@') => return err("a ${…@…} transformation"),
            Some(b':') => {
                self.i += 1;
                if !matches!(self.peek(), Some(b'-' | b'=' | b'+' | b'?')) {
                    return err("a substring expansion ${x:offset} (evaluated as arithmetic)");
                }
                self.i += 1;
            }
            Some(b'-' | b'=' | b'+' | b'?') => self.i += 1,
            Some(b'#' | b'%') => {
                let c = self.peek();
                self.i += 1;
                if self.peek() == c {
                    self.i += 1;
                }
            }
            Some(b'/') => {
                self.i += 1;
                if matches!(self.peek(), Some(b'/' | b'#' | b'%')) {
                    self.i += 1;
                }
            }
            Some(b'^' | b',') => {
                let c = self.peek();
                self.i += 1;
                if self.peek() == c {
                    self.i += 1;
                }
            }
            _ => return err("a ${…} expansion toolpilot does not read"),
        }
        // The word: like a double-quoted string that ends at `}`.
        let mut scratch = Word::default();
        loop {
            match self.peek() {
                None => return err("an unclosed ${…}"),
                Some(b'}') => return Ok(()),
                Some(b'\\') => self.i += 2,
                Some(b'\'') => {
                    self.i += 1;
                    while self.peek().is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    if self.peek().is_none() {
                        return err("an unterminated single quote");
                    }
                    self.i += 1;
                }
                Some(b'"') => {
                    self.i += 1;
                    self.dquote(&mut scratch)?;
                }
                Some(b'$') => {
                    self.i += 1;
                    self.dollar(&mut scratch, true)?;
                }
                Some(b'`') => {
                    self.i += 1;
                    self.backtick(&mut scratch)?;
                }
                Some(_) => self.i += 1,
            }
        }
    }

    /// bash's `$'…'` (after the `$`, at the quote): escapes decoded. dash reads `$` and a
    /// single-quoted string, so the word is marked dynamic; a `\'` inside would end the string
    /// at different places in the two shells, so it is refused.
    fn ansi_c(&mut self, w: &mut Word) -> Result<(), ParseError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return err("an unterminated $'…' string"),
                Some(b'\'') => break,
                Some(b'\\') => {
                    self.i += 1;
                    let Some(c) = self.peek() else {
                        return err("an unterminated $'…' string");
                    };
                    self.i += 1;
                    match c {
                        b'\'' => {
                            return err("a $'…' string with \\' (sh and bash end it differently)");
                        }
                        b'a' => out.push('\x07'),
                        b'b' => out.push('\x08'),
                        b'e' | b'E' => out.push('\x1b'),
                        b'f' => out.push('\x0c'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'v' => out.push('\x0b'),
                        b'\\' => out.push('\\'),
                        b'"' => out.push('"'),
                        b'?' => out.push('?'),
                        b'0'..=b'7' => {
                            let mut v = u32::from(c - b'0');
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.i += 1;
                                    }
                                    _ => break,
                                }
                            }
                            push_byte_value(&mut out, v)?;
                        }
                        b'x' | b'u' | b'U' => {
                            let max = match c {
                                b'x' => 2,
                                b'u' => 4,
                                _ => 8,
                            };
                            let mut v = 0u32;
                            let mut n = 0;
                            while n < max {
                                match self.peek().and_then(|d| (d as char).to_digit(16)) {
                                    Some(d) => {
                                        v = v.wrapping_mul(16).wrapping_add(d);
                                        self.i += 1;
                                        n += 1;
                                    }
                                    None => break,
                                }
                            }
                            if n == 0 {
                                out.push('\\');
                                out.push(c as char);
                            } else if c == b'x' {
                                push_byte_value(&mut out, v)?;
                            } else {
                                match char::from_u32(v) {
                                    Some(ch) if v != 0 => out.push(ch),
                                    _ => return err("a $'…' escape that is not a character"),
                                }
                            }
                        }
                        b'c' => return err("a control-character escape \\c in $'…'"),
                        other => {
                            out.push('\\');
                            let len = utf8_len(other);
                            self.i -= 1;
                            let end = (self.i + len).min(self.s.len());
                            out.push_str(self.src.get(self.i..end).unwrap_or(""));
                            self.i = end;
                        }
                    }
                }
                Some(b) => {
                    let len = utf8_len(b);
                    let end = (self.i + len).min(self.s.len());
                    out.push_str(self.src.get(self.i..end).unwrap_or(""));
                    self.i = end;
                }
            }
        }
        self.i += 1;
        w.text.push_str(&out);
        w.quoted = true;
        w.dynamic = true;
        Ok(())
    }

    fn backtick(&mut self, w: &mut Word) -> Result<(), ParseError> {
        if w.text.is_empty() {
            w.open_start = true;
        }
        let mut inner = String::new();
        while let Some(c) = self.peek() {
            if c == b'\\' {
                // Inside backticks, `\$`, `` \` `` and `\\` lose their backslash.
                match self.peek_at(1) {
                    Some(d @ (b'$' | b'`' | b'\\')) => {
                        inner.push(d as char);
                        self.i += 2;
                    }
                    Some(b'\n') => self.i += 2,
                    Some(_) => {
                        inner.push('\\');
                        self.i += 1;
                    }
                    None => self.i += 1,
                }
            } else if c == b'`' {
                break;
            } else {
                let len = utf8_len(c);
                let end = (self.i + len).min(self.s.len());
                inner.push_str(self.src.get(self.i..end).unwrap_or(""));
                self.i = end;
            }
        }
        if self.peek().is_none() {
            return err("an unterminated backtick");
        }
        self.i += 1;
        self.substitution(&inner)?;
        w.text.push('`');
        w.text.push_str(&inner);
        w.text.push('`');
        w.dynamic = true;
        Ok(())
    }

    fn push_char(&mut self, w: &mut Word) {
        let len = utf8_len(self.s[self.i]);
        let end = (self.i + len).min(self.s.len());
        w.text.push_str(self.src.get(self.i..end).unwrap_or(""));
        self.i = end;
    }

    /// The inside of a double-quoted string (after the opening quote, through the closing one).
    fn dquote(&mut self, w: &mut Word) -> Result<(), ParseError> {
        loop {
            match self.peek() {
                None => return err("an unterminated double quote"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'\n') => self.i += 1,
                        Some(c) if b"\"\\$`".contains(&c) => {
                            w.text.push(c as char);
                            self.i += 1;
                        }
                        _ => w.text.push('\\'),
                    }
                }
                Some(b'$') => {
                    self.i += 1;
                    self.dollar(w, true)?;
                }
                Some(b'`') => {
                    self.i += 1;
                    self.backtick(w)?;
                }
                Some(_) => self.push_char(w),
            }
        }
    }

    /// The body of an unquoted here-document: substitutions run, as in double quotes.
    fn heredoc_body(&mut self, body: &str) -> Result<(), ParseError> {
        let mut lx = Lexer::new(body, self.depth);
        let mut w = Word::default();
        while let Some(c) = lx.peek() {
            match c {
                b'\\' => {
                    lx.i += 1;
                    if lx.peek().is_some() {
                        lx.push_char(&mut w);
                    }
                }
                b'$' => {
                    lx.i += 1;
                    lx.dollar(&mut w, true)?;
                }
                b'`' => {
                    lx.i += 1;
                    lx.backtick(&mut w)?;
                }
                _ => lx.push_char(&mut w),
            }
        }
        self.nested.extend(lx.nested);
        Ok(())
    }

    fn word(&mut self) -> Result<Option<Word>, ParseError> {
        let mut w = Word::default();
        let mut literal = true;
        let mut any = false;
        // Brace expansion (bash): an unquoted `{` followed by an unquoted `,` or `..` and `}`.
        let mut brace: Option<bool> = None; // Some(at the start of the word)
        let mut brace_list = false;
        let mut bracket: Option<(usize, bool)> = None;
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b')' => break,
                b'(' => {
                    return err("a function definition or an unexpected `(`");
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'\n') => {
                            self.i += 1;
                            continue;
                        }
                        Some(_) => {
                            literal = false;
                            w.quoted = true;
                            self.push_char(&mut w);
                        }
                        None => {}
                    }
                }
                b'\'' => {
                    self.i += 1;
                    literal = false;
                    w.quoted = true;
                    let start = self.i;
                    while self.peek().is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    if self.peek().is_none() {
                        return err("an unterminated single quote");
                    }
                    w.text.push_str(self.src.get(start..self.i).unwrap_or(""));
                    self.i += 1;
                }
                b'"' => {
                    self.i += 1;
                    literal = false;
                    w.quoted = true;
                    self.dquote(&mut w)?;
                }
                b'$' => {
                    self.i += 1;
                    literal = false;
                    self.dollar(&mut w, false)?;
                }
                b'`' => {
                    self.i += 1;
                    literal = false;
                    self.backtick(&mut w)?;
                }
                b'*' | b'?' => {
                    w.dynamic = true;
                    if w.text.is_empty() {
                        w.open_start = true;
                    }
                    self.push_char(&mut w);
                }
                b'[' => {
                    // A bracket expression only with a `]` later in the word.
                    if bracket.is_none() {
                        bracket = Some((w.text.len(), w.text.is_empty()));
                    }
                    self.push_char(&mut w);
                }
                b'{' => {
                    if brace.is_none() {
                        brace = Some(w.text.is_empty());
                    }
                    self.push_char(&mut w);
                }
                b',' if brace.is_some() => {
                    brace_list = true;
                    self.push_char(&mut w);
                }
                b'.' if brace.is_some() && self.peek_at(1) == Some(b'.') => {
                    brace_list = true;
                    self.push_char(&mut w);
                }
                b'~' if w.text.is_empty() && !w.quoted => {
                    w.dynamic = true;
                    self.push_char(&mut w);
                }
                _ => self.push_char(&mut w),
            }
            if literal {
                w.literal_prefix = w.text.len();
            }
            any = true;
        }
        if let Some((pos, at_start)) = bracket
            && w.text[pos + 1..].contains(']')
        {
            w.dynamic = true;
            w.open_start |= at_start;
        }
        if let Some(at_start) = brace
            && brace_list
            && w.text.contains('}')
        {
            w.dynamic = true;
            w.open_start |= at_start;
        }
        if !any {
            return Ok(None);
        }
        Ok(Some(w))
    }

    fn tokens(&mut self) -> Result<Vec<Tok>, ParseError> {
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            let start = self.i;
            match c {
                b' ' | b'\t' => {
                    self.i += 1;
                    continue;
                }
                b'\\' if self.peek_at(1) == Some(b'\n') => {
                    self.i += 2;
                    continue;
                }
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.i += 1;
                    }
                    continue;
                }
                b'\n' => {
                    self.i += 1;
                    out.push(Tok::Sep);
                    self.read_heredocs()?;
                    continue;
                }
                b';' => {
                    self.i += 1;
                    if matches!(self.peek_joined(), Some(b';' | b'&')) {
                        return err("a case statement (;; or ;&)");
                    }
                    out.push(Tok::Sep);
                }
                b'&' => {
                    self.i += 1;
                    match self.peek_joined() {
                        Some(b'&') => {
                            self.i += 1;
                            out.push(Tok::Sep);
                        }
                        Some(b'>') => {
                            self.i += 1;
                            let op = if self.peek_joined() == Some(b'>') {
                                self.i += 1;
                                RedirOp::Append
                            } else {
                                RedirOp::Out
                            };
                            out.push(Tok::Redir(op, None));
                        }
                        _ => out.push(Tok::Sep),
                    }
                }
                b'|' => {
                    self.i += 1;
                    match self.peek_joined() {
                        Some(b'|') => {
                            self.i += 1;
                            out.push(Tok::Sep);
                        }
                        Some(b'&') => {
                            self.i += 1;
                            out.push(Tok::Pipe);
                        }
                        _ => out.push(Tok::Pipe),
                    }
                }
                b'<' | b'>' => {
                    if self.peek_at(1) == Some(b'(') {
                        self.i += 2;
                        let inner = self.balanced()?;
                        self.substitution(inner)?;
                        out.push(Tok::Word(Word {
                            text: format!("{}({inner})", c as char),
                            dynamic: true,
                            open_start: true,
                            ..Word::default()
                        }));
                    } else {
                        out.push(self.redirection()?);
                    }
                }
                b'(' => {
                    if self.peek_at(1) == Some(b'(') {
                        return err("an arithmetic command ((…))");
                    }
                    self.i += 1;
                    let inner = self.balanced()?;
                    if inner.trim().is_empty() {
                        return err("a function definition");
                    }
                    if self.depth >= MAX_DEPTH {
                        return err("subshells nested too deeply");
                    }
                    out.push(Tok::Sub(parse_at(inner, self.depth + 1)?));
                }
                b')' => return err("an unmatched `)`"),
                _ => {
                    let Some(w) = self.word()? else { continue };
                    // `2>` and `2>&1`: digits right before a redirection belong to it.
                    if !w.quoted
                        && !w.text.is_empty()
                        && w.text.bytes().all(|b| b.is_ascii_digit())
                        && matches!(self.peek(), Some(b'<' | b'>'))
                        && self.peek_at(1) != Some(b'(')
                    {
                        out.push(self.redirection()?);
                    } else {
                        out.push(Tok::Word(w));
                    }
                }
            }
            if !self.heredocs.is_empty()
                && self
                    .src
                    .get(start..self.i)
                    .is_some_and(|t| t.contains('\n'))
            {
                return err("a here-document on a line that goes on over several lines");
            }
        }
        if !self.heredocs.is_empty() {
            // No newline after the operator: the body is empty (both shells accept this).
            self.heredocs.clear();
        }
        Ok(out)
    }

    /// After a newline: the bodies of the here-documents opened on that line.
    fn read_heredocs(&mut self) -> Result<(), ParseError> {
        let pending = std::mem::take(&mut self.heredocs);
        for h in pending {
            let mut body = String::new();
            loop {
                if self.i >= self.s.len() {
                    break; // delimited by the end of the line (sh and bash accept it)
                }
                let end = self.src[self.i..]
                    .find('\n')
                    .map_or(self.s.len(), |k| self.i + k);
                let line = self.src.get(self.i..end).unwrap_or("");
                self.i = (end + 1).min(self.s.len());
                let cmp = if h.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line
                };
                if cmp == h.delimiter {
                    break;
                }
                body.push_str(cmp);
                body.push('\n');
            }
            if !h.quoted {
                self.heredoc_body(&body)?;
            }
        }
        Ok(())
    }

    fn redirection(&mut self) -> Result<Tok, ParseError> {
        let c = self.peek().unwrap_or(b'>');
        self.i += 1;
        if c == b'<' {
            match self.peek_joined() {
                Some(b'<') => {
                    self.i += 1;
                    if self.peek_joined() == Some(b'<') {
                        self.i += 1;
                        return Ok(Tok::Redir(RedirOp::HereString, None));
                    }
                    let strip_tabs = self.peek_joined() == Some(b'-');
                    if strip_tabs {
                        self.i += 1;
                    }
                    while matches!(self.peek(), Some(b' ' | b'\t')) {
                        self.i += 1;
                    }
                    let Some(delim) = self.word()? else {
                        return err("a here-document without a delimiter");
                    };
                    if delim.dynamic && !delim.quoted {
                        return err("a here-document whose delimiter has an expansion");
                    }
                    self.heredocs.push(PendingHereDoc {
                        delimiter: delim.text.clone(),
                        quoted: delim.quoted,
                        strip_tabs,
                    });
                    return Ok(Tok::Redir(RedirOp::HereDoc, Some(delim)));
                }
                Some(b'&') => {
                    self.i += 1;
                    return Ok(Tok::DupIn);
                }
                Some(b'>') => {
                    self.i += 1;
                    return Ok(Tok::Redir(RedirOp::InOut, None));
                }
                _ => return Ok(Tok::Redir(RedirOp::In, None)),
            }
        }
        match self.peek_joined() {
            Some(b'>') => {
                self.i += 1;
                Ok(Tok::Redir(RedirOp::Append, None))
            }
            Some(b'|') => {
                self.i += 1;
                Ok(Tok::Redir(RedirOp::Out, None))
            }
            Some(b'&') => {
                self.i += 1;
                // `>&2`, `>&-` duplicate or close; `>&file` (bash) writes the file. The target
                // decides: see `parse_at`.
                Ok(Tok::Redir(RedirOp::Dup, None))
            }
            _ => Ok(Tok::Redir(RedirOp::Out, None)),
        }
    }
}

fn push_byte_value(out: &mut String, v: u32) -> Result<(), ParseError> {
    match v {
        0 => err("a NUL byte in $'…'"),
        1..=0x7f => {
            out.push(char::from_u32(v).unwrap_or('?'));
            Ok(())
        }
        _ => err("a non-ASCII byte escape in $'…'"),
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

/// Reserved words that open or continue a compound command the parser follows.
const SKIPPED_KEYWORDS: &[&str] = &[
    "{", "}", "!", "then", "else", "do", "if", "elif", "while", "until", "fi", "done",
];
/// Reserved words of constructs the parser does not follow.
const REFUSED_KEYWORDS: &[&str] = &[
    "for", "case", "select", "function", "coproc", "[[", "]]", "esac", "in",
];

fn parse_at(line: &str, depth: usize) -> Result<Vec<Part>, ParseError> {
    let mut lx = Lexer::new(line, depth);
    let toks = lx.tokens()?;
    let mut parts: Vec<Part> = Vec::new();
    let mut cur: Option<Part> = None;
    let mut pending_pipe: Option<usize> = None;
    let mut redirect: Option<RedirOp> = None;
    let mut dup_in = false;

    let flush = |cur: &mut Option<Part>, parts: &mut Vec<Part>| -> Option<usize> {
        match cur.take() {
            Some(p)
                if !p.words.is_empty() || !p.assignments.is_empty() || !p.redirects.is_empty() =>
            {
                parts.push(p);
                Some(parts.len() - 1)
            }
            _ => None,
        }
    };
    for tok in toks {
        match tok {
            Tok::Word(w) => {
                if let Some(op) = redirect.take() {
                    let op = match op {
                        RedirOp::Dup
                            if !(w.text == "-" || w.text.bytes().all(|b| b.is_ascii_digit())) =>
                        {
                            // `>&file` is `&>file` in bash (dash refuses it); `<&file` reads.
                            if dup_in { RedirOp::In } else { RedirOp::Out }
                        }
                        op => op,
                    };
                    cur.get_or_insert_with(|| new_part(pending_pipe))
                        .redirects
                        .push(Redirect { op, target: w });
                    continue;
                }
                let part = cur.get_or_insert_with(|| new_part(pending_pipe));
                if part.words.is_empty() {
                    if let Some(eq) = w.assignment() {
                        let name = w.text[..eq].trim_end_matches('+').to_string();
                        part.assignments.push(Assignment {
                            name,
                            value: w.text[eq + 1..].to_string(),
                        });
                        continue;
                    }
                    if !w.quoted && !w.text.contains(['$', '`']) {
                        let t = w.text.as_str();
                        if REFUSED_KEYWORDS.contains(&t) {
                            return err(format!("a `{t}` construct"));
                        }
                        if part.assignments.is_empty()
                            && part.redirects.is_empty()
                            && SKIPPED_KEYWORDS.contains(&t)
                        {
                            continue;
                        }
                    }
                }
                part.words.push(w);
            }
            Tok::Sep => {
                if redirect.is_some() {
                    return err("a redirection without a target");
                }
                flush(&mut cur, &mut parts);
                pending_pipe = None;
            }
            Tok::Pipe => {
                if redirect.is_some() {
                    return err("a redirection without a target");
                }
                pending_pipe = flush(&mut cur, &mut parts);
                if pending_pipe.is_none() && !parts.is_empty() {
                    pending_pipe = Some(parts.len() - 1);
                }
            }
            Tok::Redir(op, Some(body)) => {
                if redirect.is_some() {
                    return err("a redirection without a target");
                }
                cur.get_or_insert_with(|| new_part(pending_pipe))
                    .redirects
                    .push(Redirect { op, target: body });
            }
            Tok::Redir(op, None) => {
                if redirect.is_some() {
                    return err("a redirection without a target");
                }
                redirect = Some(op);
                dup_in = false;
            }
            Tok::DupIn => {
                if redirect.is_some() {
                    return err("a redirection without a target");
                }
                redirect = Some(RedirOp::Dup);
                dup_in = true;
            }
            Tok::Sub(inner) => {
                flush(&mut cur, &mut parts);
                parts.extend(inner);
            }
        }
    }
    if redirect.is_some() {
        return err("a redirection without a target");
    }
    flush(&mut cur, &mut parts);
    parts.extend(lx.nested);
    Ok(parts)
}

fn new_part(piped_from: Option<usize>) -> Part {
    Part {
        words: Vec::new(),
        assignments: Vec::new(),
        redirects: Vec::new(),
        piped_from,
        nested: false,
    }
}

/// Redirection targets that are not files in any sense that matters.
pub fn is_harmless_target(t: &str) -> bool {
    matches!(
        t,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty" | "/dev/fd/1" | "/dev/fd/2"
    )
}

/// A fork bomb: a function that calls itself in a pipeline or in the background
/// (`:(){ :|:& };:`, `bomb(){ bomb|bomb & }; bomb`), in either definition syntax. Returns the
/// function's name.
pub fn fork_bomb(line: &str) -> Option<String> {
    let b = line.as_bytes();
    let is_sep = |c: u8| b" \t\n(){}|&;<>".contains(&c);
    // (name, where its body should start)
    let mut defs: Vec<(&str, usize)> = Vec::new();
    for i in 0..b.len() {
        if b[i] != b'(' {
            continue;
        }
        let Some(after) = empty_parens(b, i) else {
            continue;
        };
        let mut e = i;
        while e > 0 && matches!(b[e - 1], b' ' | b'\t') {
            e -= 1;
        }
        let mut s = e;
        while s > 0 && !is_sep(b[s - 1]) {
            s -= 1;
        }
        if s < e {
            defs.push((&line[s..e], after));
        }
    }
    for (k, _) in line.match_indices("function") {
        if k > 0 && !is_sep(b[k - 1]) {
            continue;
        }
        let mut j = k + "function".len();
        if !b.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
            continue;
        }
        while b.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
            j += 1;
        }
        let s = j;
        while j < b.len() && !is_sep(b[j]) {
            j += 1;
        }
        if s == j {
            continue;
        }
        let mut after = j;
        while matches!(b.get(after), Some(b' ' | b'\t')) {
            after += 1;
        }
        let after = if b.get(after) == Some(&b'(') {
            empty_parens(b, after).unwrap_or(j)
        } else {
            j
        };
        defs.push((&line[s..j], after));
    }
    for (name, mut k) in defs {
        while b.get(k).is_some_and(|c| c.is_ascii_whitespace()) {
            k += 1;
        }
        let close = match b.get(k) {
            Some(b'{') => '}',
            Some(b'(') => ')',
            _ => continue,
        };
        let Some(end) = line[k + 1..].find(close) else {
            continue;
        };
        let body = &line[k + 1..k + 1 + end];
        let calls = body
            .split(|c: char| c.is_whitespace() || "|&;(){}".contains(c))
            .any(|w| w == name);
        let spawns = body
            .replace("&&", "")
            .replace("||", "")
            .contains(['|', '&']);
        if calls && spawns {
            return Some(name.to_string());
        }
    }
    None
}

/// At `(` (index `i`): the index after the matching `)` if only blanks are between.
fn empty_parens(b: &[u8], i: usize) -> Option<usize> {
    let mut k = i + 1;
    while matches!(b.get(k), Some(b' ' | b'\t')) {
        k += 1;
    }
    (b.get(k) == Some(&b')')).then_some(k + 1)
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
        assert_eq!(texts("echo a#b"), ["echo a#b"]);
        assert_eq!(texts("ls \\\n -la"), ["ls -la"]);
        assert_eq!(texts("echo $'a\\x41\\n'"), ["echo aA\n"]);
        assert!(parse("echo $'a\\'; touch x").is_err());
    }

    #[test]
    fn a_carriage_return_is_part_of_a_word() {
        assert_eq!(texts("ls \r#; touch pwned"), ["ls \r#", "touch pwned"]);
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
        assert_eq!(
            texts("echo ${x:-$(touch pwned)}"),
            ["echo ${x:-$(touch pwned)}", "touch pwned"]
        );
        assert_eq!(
            texts("echo \"${x:-`id`}\" ${#y} ${z%.rs}"),
            ["echo ${x:-`id`} ${#y} ${z%.rs}", "id"]
        );
    }

    #[test]
    fn here_documents() {
        let p = parse("cat <<EOF > out.txt\nhello $(whoami)\nEOF\necho done").unwrap();
        let t: Vec<String> = p.iter().map(Part::text).collect();
        assert_eq!(t, ["cat", "echo done", "whoami"]);
        assert_eq!(p[0].writes().next().unwrap().text, "out.txt");
        assert_eq!(
            texts("cat <<'EOF'\n$(rm -rf x)\nEOF"),
            ["cat"],
            "a quoted delimiter keeps the body literal"
        );
        assert_eq!(texts("cat <<-EOF\n\tx\n\tEOF\nls"), ["cat", "ls"]);
    }

    #[test]
    fn redirections_assignments_and_wrappers() {
        let p = parse("FOO=1 LD_PRELOAD=x.so make test > out.log 2>&1").unwrap();
        assert_eq!(p[0].text(), "make test");
        let names: Vec<&str> = p[0].assignments.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["FOO", "LD_PRELOAD"]);
        let w: Vec<&str> = p[0].writes().map(|w| w.text.as_str()).collect();
        assert_eq!(w, ["out.log"]);
        let p = parse("cargo build 2>/dev/null >&2 < in.txt").unwrap();
        assert_eq!(p[0].writes().count(), 0);
        assert_eq!(p[0].reads().next().unwrap().text, "in.txt");
        let p = parse("echo x >& out; echo y >| o2; echo z &>> o3; (ls) > o4").unwrap();
        let all: Vec<String> = p
            .iter()
            .flat_map(|p| p.writes().map(|w| w.text.clone()))
            .collect();
        assert_eq!(all, ["out", "o2", "o3", "o4"]);
        let p = parse("FOO=\"a b\" make").unwrap();
        assert_eq!(p[0].text(), "make");
        assert_eq!(p[0].assignments[0].value, "a b");
        let p = parse("PATH=/tmp/x; ls").unwrap();
        assert_eq!(p[0].assignments[0].name, "PATH");
        assert!(p[0].words.is_empty());
        assert_eq!(
            texts("if test -f x; then cat x; else echo no; fi"),
            ["test -f x", "cat x", "echo no"]
        );
        assert!(parse("$CMD --flag").unwrap()[0].dynamic());
        assert!(parse("`which rm` -rf /").unwrap()[0].dynamic());
        assert!(parse("{rm,-rf,x}").unwrap()[0].dynamic());
        assert!(!parse("echo {}").unwrap()[0].words[1].dynamic);
    }

    #[test]
    fn open_starts() {
        let p = parse("rg foo *.rs src/*.rs \"$x\" ${y} -- ok").unwrap();
        let open: Vec<bool> = p[0].words.iter().map(|w| w.open_start).collect();
        assert_eq!(open, [false, false, true, false, true, true, false, false]);
    }

    #[test]
    fn refuses_what_it_cannot_judge() {
        for bad in [
            "echo 'unterminated",
            "echo \"unterminated",
            "for f in *; do rm $f; done",
            "echo $((1+2))",
            "f() { rm -rf /; }; f",
            "f () { rm -rf /; }; f",
            "echo a )",
            "echo >",
            "case x in a) ;; esac",
            ":(){ :|:& };:",
            "echo ${!x}",
            "echo ${a[$(id)]}",
            "echo ${x:1}",
            "echo ${x@P}",
            "[[ -f x ]]",
            "((x++))",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn fork_bombs() {
        for bomb in [
            ":(){ :|:& };:",
            ":(){:|:&};:",
            "bomb(){ bomb|bomb & }; bomb",
            "f () { f | f & } ; f",
            "function b { b|b& }; b",
        ] {
            assert!(fork_bomb(bomb).is_some(), "{bomb:?}");
        }
        for fine in ["f() { echo hi; }; f", "echo ':(){'", "ls | wc -l &"] {
            assert!(fork_bomb(fine).is_none(), "{fine:?}");
        }
    }
}
