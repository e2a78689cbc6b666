//! The outline of a file, or of a model's `changes`, that lazy edits are placed by: at each
//! level (the file; the members of a class, impl, trait, module, namespace, struct or enum;
//! the subsections of a Markdown section) the items in order, each with the lines it covers,
//! what kind of item it is and the name it declares, and the placeholder comments between
//! them.
//!
//! Code is outlined from its tree-sitter tree (the parsers of `code::symbols`), Markdown from
//! its ATX headings. Items are whole lines: comments and attributes directly above an item
//! (no blank line between) belong to it, a comment after it on its last line too; a level
//! where two items share a line cannot be outlined. Pure: text in, outline out; what to do
//! with an outline is `edit::place`'s business.

use std::ops::Range;
use std::path::Path;

use tree_sitter::{Node, Point};

use super::lazy::is_placeholder_line;
use crate::code::symbols::{self, Lang};

/// What a file is written in, as far as placing edits goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Code(Lang),
    Markdown,
}

impl Syntax {
    /// The syntax of a file, by its extension.
    pub fn of(path: &Path) -> Option<Syntax> {
        if let Some(lang) = Lang::of(path) {
            return Some(Syntax::Code(lang));
        }
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        matches!(ext.as_str(), "md" | "markdown" | "mdown" | "mkd").then_some(Syntax::Markdown)
    }

    pub fn name(self) -> &'static str {
        match self {
            Syntax::Code(lang) => lang.name(),
            Syntax::Markdown => "Markdown",
        }
    }
}

/// The coarse kind of an item that names are compared within: `struct Foo` and `impl Foo`
/// are different items, `function foo` and `const foo = () => …` the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cat {
    /// Struct, enum, union, class, interface, trait, type alias, typedef.
    Type,
    /// A Rust `impl` block (named `Type` or `Trait for Type`).
    Impl,
    /// A module or namespace.
    Module,
    /// Functions, methods, fields, variables, constants, macros: everything else with a name.
    Value,
    /// A Markdown section, by its heading level.
    Heading(u8),
    /// The text of a Markdown section before its first subsection (or of a document before
    /// its first heading).
    Intro,
    /// An item without a name (`use`, `import`, `#include`, a statement, a comment): matched
    /// by its text.
    Other,
}

/// One item.
#[derive(Debug, Clone)]
pub struct Unit {
    pub cat: Cat,
    /// The tree-sitter kind of the declaration (`function_item`), or `section`/`intro`.
    pub kind: &'static str,
    pub name: Option<String>,
    /// The item's text with whitespace collapsed (what unnamed items are matched by).
    pub text: String,
    /// Every line of the item, leading comments and attributes included (0-based, end
    /// exclusive).
    pub lines: Range<usize>,
    /// The first line of the declaration itself (after its leading comments and attributes).
    pub core: usize,
    pub body: Option<Body>,
    /// A placeholder comment somewhere inside (only ever in `changes`).
    pub has_ph: bool,
}

/// The body of an item, when its lines can be told apart from the item's header and footer.
#[derive(Debug, Clone)]
pub struct Body {
    /// The lines between the header (`impl Foo {`, `def f(x):`, `## Title`) and the footer
    /// (`}`; empty for Python and Markdown).
    pub inner: Range<usize>,
    /// The members, when the body holds declarations (a class, impl, module, section);
    /// `None` for statements (a function body), which are placed line by line.
    pub members: Option<Vec<Entry>>,
}

/// What a level holds: items and placeholder comments (by their line).
#[derive(Debug, Clone)]
pub enum Entry {
    Unit(Unit),
    Placeholder(usize),
}

impl Unit {
    /// How the item is named in messages: `name`, `## Title`, or its first line.
    pub fn label(&self, lines: &[&str]) -> String {
        match (&self.name, self.cat) {
            (Some(n), Cat::Heading(level)) => format!("{} {n}", "#".repeat(level as usize)),
            (Some(n), Cat::Impl) => format!("impl {n}"),
            (Some(n), _) => n.clone(),
            (None, Cat::Intro) => "(text)".into(),
            (None, _) => {
                let first = lines.get(self.core).map_or("", |l| l.trim());
                short(first, 40)
            }
        }
    }

    /// The members of the body, when it holds declarations.
    pub fn members(&self) -> Option<&[Entry]> {
        self.body.as_ref()?.members.as_deref()
    }
}

/// Shortens text to `max` characters for a message.
pub fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

/// The outline of a text.
#[derive(Debug)]
pub struct Outline {
    pub entries: Vec<Entry>,
    /// For each line, whether it is a placeholder comment (never, for a file).
    pub ph: Vec<bool>,
    /// The tree has a syntax error somewhere.
    pub has_error: bool,
}

/// Whether placeholder comments are looked for: in `changes`, not in the file (where a comment
/// saying `...` is just a comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    File,
    Changes,
}

/// How `changes` was read: as a part of the file, or as the members of a class written alone
/// (JavaScript and TypeScript methods do not parse outside a class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    AsIs,
    Members,
}

/// The outline of `text`. Fails (with the reason) where the tree cannot tell the items apart:
/// a syntax error between items, two items on one line, a file too large to parse.
pub fn outline(
    syntax: Syntax,
    text: &str,
    role: Role,
    reading: Reading,
) -> Result<Outline, String> {
    let lines = split_lines(text);
    let candidates: Vec<bool> = lines
        .iter()
        .map(|l| role == Role::Changes && is_placeholder_line(l))
        .collect();
    match syntax {
        Syntax::Markdown => Ok(markdown(&lines, candidates)),
        Syntax::Code(lang) => code(lang, text, &lines, candidates, reading),
    }
}

/// Splits text into lines without their `\n`; a final `\n` does not start another line.
pub fn split_lines(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    s.strip_suffix('\n').unwrap_or(s).split('\n').collect()
}

// ---------------------------------------------------------------------------------------------
// Code

/// The wrapper `changes` is put in to read it as members of a class.
const WRAP_OPEN: &str = "class __toolpilot_members__ {\n";
const WRAP_CLOSE: &str = "\n}\n";

fn code(
    lang: Lang,
    text: &str,
    lines: &[&str],
    candidates: Vec<bool>,
    reading: Reading,
) -> Result<Outline, String> {
    let masked = mask_python_bodies(lang, lines, &candidates);
    let body = masked.as_deref().unwrap_or(text);
    let (src, base) = match reading {
        Reading::AsIs => (body.to_string(), 0),
        Reading::Members => {
            if !matches!(
                lang,
                Lang::JavaScript | Lang::TypeScript | Lang::Tsx | Lang::Java
            ) {
                return Err(format!("{} members parse on their own", lang.name()));
            }
            (format!("{WRAP_OPEN}{body}{WRAP_CLOSE}"), 1)
        }
    };
    let tree = symbols::parse(lang, &src)
        .ok_or_else(|| format!("the text is too large to parse as {}", lang.name()))?;
    let root = tree.root_node();
    let b = Builder {
        lang,
        src: &src,
        base,
        lines,
        ph: confirm_placeholders(root, lines, &candidates, base, masked.is_some()),
    };
    let nodes: Vec<Node<'_>> = match reading {
        Reading::AsIs => named_children(root),
        Reading::Members => {
            let class = root
                .named_child(0)
                .filter(|n| n.kind() == "class_declaration")
                .ok_or("`changes` does not read as class members")?;
            let body = class
                .child_by_field_name("body")
                .ok_or("`changes` does not read as class members")?;
            if body.has_error() {
                return Err("`changes` does not read as class members".into());
            }
            named_children(body)
        }
    };
    let entries = b.level(nodes)?;
    b.covered(&entries, 0..lines.len())?;
    Ok(Outline {
        entries,
        has_error: root.has_error(),
        ph: b.ph,
    })
}

/// In Python a block holding only a comment is a syntax error, so `def f():` followed by
/// `# ...` alone does not parse as a function. For parsing, such a placeholder (a body of its
/// own: after a line ending in `:`, deeper than it, with nothing else deeper after it)
/// becomes `pass`. Returns the text to parse, when anything was replaced.
fn mask_python_bodies(lang: Lang, lines: &[&str], ph: &[bool]) -> Option<String> {
    if lang != Lang::Python || !ph.iter().any(|&p| p) {
        return None;
    }
    let indent = |l: &str| l.len() - l.trim_start().len();
    let code = |k: usize| !ph[k] && !lines[k].trim().is_empty();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut any = false;
    for (k, l) in lines.iter().enumerate() {
        if !ph[k] {
            continue;
        }
        let Some(head) = (0..k).rev().find(|&j| code(j)) else {
            continue;
        };
        let opens = lines[head].trim_end().ends_with(':') && indent(l) > indent(lines[head]);
        let next = (k + 1..lines.len()).find(|&j| code(j));
        let alone = next.is_none_or(|j| indent(lines[j]) <= indent(lines[head]));
        if opens && alone {
            out[k] = format!("{}pass", &l[..indent(l)]);
            any = true;
        }
    }
    any.then(|| {
        let mut s = out.join("\n");
        s.push('\n');
        s
    })
}

/// The placeholder candidates that the tree confirms: the line starts with a comment (or a
/// JSX `{/* … */}`, or a masked Python `pass`), not with a string that happens to hold `...`.
fn confirm_placeholders(
    root: Node<'_>,
    lines: &[&str],
    candidates: &[bool],
    base: usize,
    masked: bool,
) -> Vec<bool> {
    let mut out = vec![false; lines.len()];
    for (k, l) in lines.iter().enumerate() {
        if !candidates[k] {
            continue;
        }
        let col = l.len() - l.trim_start().len();
        let at = Point::new(k + base, col);
        let mut node = root.descendant_for_point_range(at, at);
        while let Some(n) = node {
            if n.start_position().row != k + base {
                break;
            }
            let kind = n.kind();
            if is_comment_kind(kind)
                || (kind == "jsx_expression"
                    && n.named_child_count() == 1
                    && n.named_child(0).is_some_and(|c| is_comment_kind(c.kind())))
                || (masked && kind == "pass_statement")
            {
                out[k] = true;
                break;
            }
            node = n.parent();
        }
    }
    out
}

fn is_comment_kind(kind: &str) -> bool {
    kind.contains("comment")
}

fn named_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// The last line a node covers (a node that ends with its newline ends on the line before).
fn last_row(n: Node<'_>) -> usize {
    let (s, e) = (n.start_position(), n.end_position());
    if e.column == 0 && e.row > s.row {
        e.row - 1
    } else {
        e.row
    }
}

struct Builder<'a> {
    lang: Lang,
    src: &'a str,
    /// Lines of `src` before the first line of the text (the class wrapper).
    base: usize,
    lines: &'a [&'a str],
    ph: Vec<bool>,
}

impl Builder<'_> {
    fn text(&self, n: Node<'_>) -> &str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    /// A row of the tree as a line of the text.
    fn row(&self, r: usize) -> usize {
        r.saturating_sub(self.base)
    }

    fn is_ph(&self, line: usize) -> bool {
        self.ph.get(line).copied().unwrap_or(false)
    }

    /// The entries of one level, from the nodes it holds in source order.
    fn level(&self, nodes: Vec<Node<'_>>) -> Result<Vec<Entry>, String> {
        let mut out: Vec<Entry> = Vec::new();
        // Comments and attributes not yet known to belong to the next item.
        let mut pending: Vec<Node<'_>> = Vec::new();
        let mut last_end: Option<usize> = None;
        for n in nodes {
            let (s, e) = (self.row(n.start_position().row), self.row(last_row(n)));
            if n.is_error() || n.is_missing() {
                return Err(format!("a syntax error at line {}", s + 1));
            }
            if s == e && self.is_ph(s) {
                self.flush(&mut pending, &mut out);
                out.push(Entry::Placeholder(s));
                last_end = Some(s);
                continue;
            }
            if last_end.is_some_and(|le| s <= le) {
                // A comment after an item on its last line belongs to it.
                if is_comment_kind(n.kind())
                    && pending.is_empty()
                    && let Some(Entry::Unit(u)) = out.last_mut()
                {
                    u.lines.end = u.lines.end.max(e + 1);
                    last_end = Some(e.max(last_end.unwrap_or(e)));
                    continue;
                }
                return Err(format!("line {} holds more than one item", s + 1));
            }
            if is_comment_kind(n.kind()) || is_attribute(n.kind()) {
                if let Some(p) = pending.last()
                    && self.row(last_row(*p)) + 1 < s
                {
                    self.flush(&mut pending, &mut out);
                }
                pending.push(n);
                last_end = Some(e);
                continue;
            }
            let start = match pending.first() {
                Some(p)
                    if pending
                        .last()
                        .is_some_and(|l| self.row(last_row(*l)) + 1 >= s) =>
                {
                    let st = self.row(p.start_position().row);
                    pending.clear();
                    st
                }
                _ => {
                    self.flush(&mut pending, &mut out);
                    s
                }
            };
            out.push(Entry::Unit(self.unit(n, start)?));
            last_end = Some(e);
        }
        self.flush(&mut pending, &mut out);
        Ok(out)
    }

    /// Every non-blank line of `range` belongs to an entry (else the level is not made of
    /// whole-line items, and placing by lines could drop a line).
    fn covered(&self, entries: &[Entry], range: Range<usize>) -> Result<(), String> {
        let mut seen = vec![false; range.len()];
        for e in entries {
            let r = match e {
                Entry::Unit(u) => u.lines.clone(),
                Entry::Placeholder(k) => *k..k + 1,
            };
            for k in r {
                if let Some(s) = k.checked_sub(range.start).and_then(|i| seen.get_mut(i)) {
                    *s = true;
                }
            }
        }
        match range
            .clone()
            .zip(&seen)
            .find(|(k, s)| !**s && self.lines.get(*k).is_some_and(|l| !l.trim().is_empty()))
        {
            Some((k, _)) => Err(format!("line {} is not part of any item", k + 1)),
            None => Ok(()),
        }
    }

    /// Comments and attributes with no item right after them are items of their own.
    fn flush(&self, pending: &mut Vec<Node<'_>>, out: &mut Vec<Entry>) {
        let Some(first) = pending.first().copied() else {
            return;
        };
        let last = pending.last().copied().unwrap_or(first);
        let (s, e) = (
            self.row(first.start_position().row),
            self.row(last_row(last)),
        );
        let text = pending
            .iter()
            .map(|n| collapse(self.text(*n)))
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Entry::Unit(Unit {
            cat: Cat::Other,
            kind: first.kind(),
            name: None,
            text,
            lines: s..e + 1,
            core: s,
            body: None,
            has_ph: (s..=e).any(|r| self.is_ph(r)),
        }));
        pending.clear();
    }

    fn unit(&self, n: Node<'_>, start: usize) -> Result<Unit, String> {
        let decl = self.declaration(n);
        let name = self.name(decl);
        let cat = match name {
            Some(_) => category(decl.kind()),
            None => Cat::Other,
        };
        let end = self.row(last_row(n));
        Ok(Unit {
            cat,
            kind: decl.kind(),
            name,
            text: collapse(self.text(n)),
            lines: start..end + 1,
            core: self.row(decl.start_position().row).max(start),
            body: self.body(decl),
            has_ph: (start..=end).any(|r| self.is_ph(r)),
        })
    }

    /// The declaration inside a wrapper (`export`, decorators, `template <…>`, `declare`).
    fn declaration<'t>(&self, n: Node<'t>) -> Node<'t> {
        let mut n = n;
        for _ in 0..4 {
            let inner = match n.kind() {
                "export_statement" => n.child_by_field_name("declaration").or_else(|| {
                    named_children(n)
                        .into_iter()
                        .rev()
                        .find(|c| c.kind() != "decorator" && !is_comment_kind(c.kind()))
                }),
                "decorated_definition" => n.child_by_field_name("definition"),
                "template_declaration" | "ambient_declaration" => named_children(n)
                    .into_iter()
                    .rev()
                    .find(|c| !is_comment_kind(c.kind())),
                _ => None,
            };
            match inner {
                Some(i) => n = i,
                None => break,
            }
        }
        n
    }

    /// The name a declaration declares, or None for items matched by their text.
    fn name(&self, d: Node<'_>) -> Option<String> {
        let field =
            |n: Node<'_>, f: &str| n.child_by_field_name(f).map(|x| self.text(x).to_string());
        let name = match d.kind() {
            // `#ifndef FOO_H` … `#endif`: named by its first line.
            "preproc_ifdef" | "preproc_if" => self.text(d).lines().next().map(collapse),
            "method_declaration" if self.lang == Lang::Go => {
                let recv = d.child_by_field_name("receiver").map(|r| {
                    self.text(r)
                        .trim_matches(|c| c == '(' || c == ')')
                        .split_whitespace()
                        .last()
                        .unwrap_or("")
                        .trim_start_matches('*')
                        .split('[')
                        .next()
                        .unwrap_or("")
                        .to_string()
                });
                let name = field(d, "name")?;
                Some(match recv {
                    Some(r) if !r.is_empty() => format!("{r}.{name}"),
                    _ => name,
                })
            }
            "lexical_declaration"
            | "variable_declaration"
            | "var_declaration"
            | "const_declaration"
            | "short_var_declaration" => {
                let names: Vec<String> =
                    descendants_of_kind(d, &["variable_declarator", "var_spec", "const_spec"])
                        .into_iter()
                        .flat_map(|v| {
                            let mut c = v.walk();
                            v.children_by_field_name("name", &mut c)
                                .map(|n| self.text(n).to_string())
                                .collect::<Vec<_>>()
                        })
                        .collect();
                (!names.is_empty()).then(|| names.join(", "))
            }
            "type_declaration" if self.lang == Lang::Go => {
                let specs = descendants_of_kind(d, &["type_spec", "type_alias"]);
                let names: Vec<String> =
                    specs.into_iter().filter_map(|v| field(v, "name")).collect();
                (!names.is_empty()).then(|| names.join(", "))
            }
            "expression_statement" if self.lang == Lang::Python => {
                let a = d.named_child(0).filter(|a| a.kind() == "assignment")?;
                let left = a.child_by_field_name("left")?;
                matches!(left.kind(), "identifier" | "attribute")
                    .then(|| self.text(left).to_string())
            }
            "field_declaration" | "declaration" => field(d, "name").or_else(|| {
                let decl = d.child_by_field_name("declarator")?;
                match decl.kind() {
                    "variable_declarator" => field(decl, "name"),
                    _ => symbols::declarator_name(decl, self.src.as_bytes()),
                }
            }),
            "public_field_definition" | "field_definition" => {
                field(d, "name").or_else(|| field(d, "property"))
            }
            "use_declaration"
            | "import_statement"
            | "import_from_statement"
            | "import_declaration"
            | "preproc_include"
            | "package_declaration"
            | "package_clause"
            | "using_declaration"
            | "extern_crate_declaration" => None,
            _ => symbols::declared_name(self.lang, d, self.src).or_else(|| field(d, "name")),
        };
        name.filter(|n| !n.trim().is_empty())
            .map(|n| n.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    /// The body of a declaration and, when it holds declarations, its members.
    fn body(&self, d: Node<'_>) -> Option<Body> {
        if matches!(d.kind(), "preproc_ifdef" | "preproc_if") {
            return self.conditional_body(d);
        }
        let body = d.child_by_field_name("body").or_else(|| {
            // Go `type T struct {…}`, C `typedef struct {…} T`: the body of the type.
            let ty = match d.kind() {
                "type_declaration" => descendants_of_kind(d, &["type_spec"])
                    .first()
                    .and_then(|s| s.child_by_field_name("type")),
                "type_definition" | "declaration" => d.child_by_field_name("type"),
                _ => None,
            }?;
            ty.child_by_field_name("body").or_else(|| {
                named_children(ty)
                    .into_iter()
                    .find(|c| c.kind() == "field_declaration_list")
            })
        })?;
        let container = match body.kind() {
            "declaration_list"
            | "field_declaration_list"
            | "enum_variant_list"
            | "class_body"
            | "interface_body"
            | "object_type"
            | "enum_body"
            | "enumerator_list"
            | "annotation_type_body" => true,
            "block" => d.kind() == "class_definition",
            "statement_block" => matches!(d.kind(), "internal_module" | "module"),
            _ => false,
        };
        let count = body.child_count();
        let open = body.child(0).filter(|c| c.kind() == "{");
        let close = count
            .checked_sub(1)
            .and_then(|i| body.child(i))
            .filter(|c| c.kind() == "}");
        if close.is_some_and(|c| c.is_missing()) {
            // An unclosed body (`impl S {` and no `}`): its end is a guess, so the item is
            // placed line by line.
            return None;
        }
        let inner = match (open, close) {
            (Some(o), Some(c)) => {
                let (a, b) = (
                    self.row(o.end_position().row),
                    self.row(c.start_position().row),
                );
                (a < b).then(|| a + 1..b)?
            }
            _ => {
                // An indented block (Python): from the line after the `:` to the block's end.
                let colon = (0..d.child_count())
                    .rev()
                    .filter_map(|i| d.child(i))
                    .find(|c| c.kind() == ":" && c.end_byte() <= body.start_byte())?;
                let a = self.row(colon.end_position().row);
                let b = self.row(last_row(body));
                (a < self.row(body.start_position().row)).then(|| a + 1..b + 1)?
            }
        };
        let members = if container {
            let mut nodes: Vec<Node<'_>> = named_children(body);
            if body.kind() == "block" {
                // Comments between a Python class header and its block are the class's.
                nodes.extend(named_children(d).into_iter().filter(|c| {
                    is_comment_kind(c.kind()) && self.row(c.start_position().row) >= inner.start
                }));
                nodes.sort_by_key(|n| n.start_byte());
            }
            let inside = nodes.iter().all(|n| {
                let (s, e) = (self.row(n.start_position().row), self.row(last_row(*n)));
                s >= inner.start && e < inner.end
            });
            if inside {
                self.level(nodes)
                    .and_then(|m| self.covered(&m, inner.clone()).map(|()| m))
                    .ok()
            } else {
                None
            }
        } else {
            None
        };
        Some(Body { inner, members })
    }
}

impl Builder<'_> {
    /// The lines between `#ifdef X` and `#endif` (a header guard), when there is no `#else`
    /// part (whose lines would be neither header nor members).
    fn conditional_body(&self, d: Node<'_>) -> Option<Body> {
        if d.child_by_field_name("alternative").is_some() {
            return None;
        }
        let endif = d.child(d.child_count().checked_sub(1)?)?;
        if endif.kind() != "#endif" {
            return None;
        }
        let inner = self.row(d.start_position().row) + 1..self.row(endif.start_position().row);
        let skip: Vec<usize> = ["name", "condition"]
            .iter()
            .filter_map(|f| d.child_by_field_name(f).map(|n| n.id()))
            .collect();
        let nodes: Vec<Node<'_>> = named_children(d)
            .into_iter()
            .filter(|n| !skip.contains(&n.id()))
            .collect();
        let inside = nodes.iter().all(|n| {
            let (s, e) = (self.row(n.start_position().row), self.row(last_row(*n)));
            s >= inner.start && e < inner.end
        });
        let members = if inside {
            self.level(nodes)
                .and_then(|m| self.covered(&m, inner.clone()).map(|()| m))
                .ok()
        } else {
            None
        };
        Some(Body { inner, members })
    }
}

fn is_attribute(kind: &str) -> bool {
    matches!(kind, "attribute_item" | "decorator" | "annotation")
}

fn descendants_of_kind<'t>(n: Node<'t>, kinds: &[&str]) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        if kinds.contains(&x.kind()) {
            out.push(x);
            continue;
        }
        let mut children = named_children(x);
        children.reverse();
        stack.extend(children);
    }
    out
}

fn category(kind: &str) -> Cat {
    match kind {
        "impl_item" => Cat::Impl,
        "mod_item"
        | "internal_module"
        | "module"
        | "namespace_definition"
        | "preproc_ifdef"
        | "preproc_if" => Cat::Module,
        "struct_item"
        | "enum_item"
        | "union_item"
        | "trait_item"
        | "type_item"
        | "class_definition"
        | "class_declaration"
        | "abstract_class_declaration"
        | "class"
        | "interface_declaration"
        | "type_alias_declaration"
        | "enum_declaration"
        | "record_declaration"
        | "annotation_type_declaration"
        | "type_definition"
        | "struct_specifier"
        | "union_specifier"
        | "enum_specifier"
        | "class_specifier"
        | "alias_declaration"
        | "type_declaration" => Cat::Type,
        _ => Cat::Value,
    }
}

/// Whitespace collapsed to single spaces.
pub fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// Markdown

/// The outline of a Markdown document: sections by their ATX headings (`#` to `######`, not
/// inside fenced code blocks or front matter), each holding its text before its first
/// subsection (an intro) and its subsections. Placeholder comment lines at the start or end of
/// an intro are entries of the level; inside the intro they belong to it.
fn markdown(lines: &[&str], candidates: Vec<bool>) -> Outline {
    let n = lines.len();
    let mut hidden = vec![false; n];
    // Front matter.
    if lines.first().is_some_and(|l| l.trim_end() == "---")
        && let Some(end) = (1..n).find(|&k| matches!(lines[k].trim_end(), "---" | "..."))
    {
        hidden[..=end].fill(true);
    }
    // Fenced code blocks.
    let mut fence: Option<(char, usize)> = None;
    for (k, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let ch = t.chars().next().unwrap_or(' ');
        let run = t.chars().take_while(|&c| c == ch).count();
        match fence {
            Some((fc, len)) => {
                hidden[k] = true;
                if ch == fc && run >= len && t[run..].trim().is_empty() {
                    fence = None;
                }
            }
            None if (ch == '`' || ch == '~') && run >= 3 && l.len() - t.len() < 4 => {
                hidden[k] = true;
                fence = Some((ch, run));
            }
            None => {}
        }
    }
    let ph: Vec<bool> = (0..n).map(|k| candidates[k] && !hidden[k]).collect();
    let headings: Vec<Option<(u8, String)>> = (0..n)
        .map(|k| {
            if hidden[k] || ph[k] {
                return None;
            }
            heading(lines[k])
        })
        .collect();
    let md = Md {
        lines,
        ph: &ph,
        headings: &headings,
    };
    let entries = md.level(0..n);
    Outline {
        entries,
        ph,
        has_error: false,
    }
}

/// An ATX heading's level and title.
fn heading(line: &str) -> Option<(u8, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let t = &line[indent..];
    let level = t.chars().take_while(|&c| c == '#').count();
    let rest = &t[level..];
    if !(1..=6).contains(&level) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let title = rest.trim().trim_end_matches('#').trim_end();
    Some((level as u8, title.to_string()))
}

struct Md<'a> {
    lines: &'a [&'a str],
    ph: &'a [bool],
    headings: &'a [Option<(u8, String)>],
}

impl Md<'_> {
    fn blank(&self, k: usize) -> bool {
        self.lines[k].trim().is_empty()
    }

    fn level(&self, range: Range<usize>) -> Vec<Entry> {
        let first_heading = range.clone().find(|&k| self.headings[k].is_some());
        let mut out = self.intro(range.start..first_heading.unwrap_or(range.end));
        let mut cursor = first_heading;
        while let Some(h) = cursor {
            let Some((level, title)) = self.headings[h].clone() else {
                break;
            };
            let next = (h + 1..range.end)
                .find(|&k| self.headings[k].as_ref().is_some_and(|(l, _)| *l <= level));
            let end = next.unwrap_or(range.end);
            let last = (h..end).rev().find(|&k| !self.blank(k)).unwrap_or(h);
            let inner = h + 1..last + 1;
            out.push(Entry::Unit(Unit {
                cat: Cat::Heading(level),
                kind: "section",
                name: Some(title),
                text: collapse(&self.lines[h..=last].join("\n")),
                lines: h..last + 1,
                core: h,
                body: Some(Body {
                    inner: inner.clone(),
                    members: Some(self.level(inner)),
                }),
                has_ph: (h..=last).any(|k| self.ph[k]),
            }));
            cursor = next;
        }
        out
    }

    /// The entries of a section's text before its first subsection.
    fn intro(&self, range: Range<usize>) -> Vec<Entry> {
        let content: Vec<usize> = range
            .clone()
            .filter(|&k| !self.blank(k) && !self.ph[k])
            .collect();
        let (Some(&first), Some(&last)) = (content.first(), content.last()) else {
            return range
                .filter(|&k| self.ph[k])
                .map(Entry::Placeholder)
                .collect();
        };
        let mut out: Vec<Entry> = (range.start..first)
            .filter(|&k| self.ph[k])
            .map(Entry::Placeholder)
            .collect();
        out.push(Entry::Unit(Unit {
            cat: Cat::Intro,
            kind: "intro",
            name: None,
            text: collapse(&self.lines[first..=last].join("\n")),
            lines: first..last + 1,
            core: first,
            body: None,
            has_ph: (first..=last).any(|k| self.ph[k]),
        }));
        out.extend(
            (last + 1..range.end)
                .filter(|&k| self.ph[k])
                .map(Entry::Placeholder),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outline as lines: `label lines` per item (1-based, inclusive), members indented,
    /// `...` for a placeholder.
    fn show(path: &str, text: &str, role: Role) -> Vec<String> {
        let syntax = Syntax::of(Path::new(path)).unwrap_or_else(|| panic!("{path}"));
        let o = outline(syntax, text, role, Reading::AsIs).unwrap_or_else(|e| panic!("{e}"));
        let lines = split_lines(text);
        let mut out = Vec::new();
        fn walk(entries: &[Entry], lines: &[&str], depth: usize, out: &mut Vec<String>) {
            for e in entries {
                let pad = "  ".repeat(depth);
                match e {
                    Entry::Placeholder(r) => out.push(format!("{pad}... {}", r + 1)),
                    Entry::Unit(u) => {
                        out.push(format!(
                            "{pad}{} {}-{}",
                            u.label(lines),
                            u.lines.start + 1,
                            u.lines.end
                        ));
                        if let Some(m) = u.members() {
                            walk(m, lines, depth + 1, out);
                        }
                    }
                }
            }
        }
        walk(&o.entries, &lines, 0, &mut out);
        out
    }

    #[track_caller]
    fn check(path: &str, text: &str, role: Role, expected: &[&str]) {
        assert_eq!(show(path, text, role), expected);
    }

    #[test]
    fn rust_items_take_their_doc_comments_and_attributes() {
        check(
            "a.rs",
            "use std::io;\n\n/// Doc.\n#[derive(Debug)]\npub struct A {\n    x: u32,\n}\n\nimpl fmt::Display for A {\n    fn fmt(&self) {}\n}\nconst X: u8 = 1; // one\n",
            Role::File,
            &[
                "use std::io; 1-1",
                "A 3-7",
                "  x 6-6",
                "impl fmt::Display for A 9-11",
                "  fmt 10-10",
                "X 12-12",
            ],
        );
    }

    #[test]
    fn placeholders_are_comments_the_tree_confirms() {
        check(
            "a.ts",
            "class C {\n  // ... existing code ...\n  m() { return \"// ... not this\"; }\n}\n",
            Role::Changes,
            &["C 1-4", "  ... 2", "  m 3-3"],
        );
        // A placeholder alone in a Python body still makes a function.
        check(
            "a.py",
            "def f(x):\n    # ...\n\n# ... rest ...\n",
            Role::Changes,
            &["f 1-2", "... 4"],
        );
        // In the file, a comment saying `...` is just a comment.
        check("a.py", "# ...\nx = 1\n", Role::File, &["x 1-2"]);
    }

    #[test]
    fn names_in_every_language() {
        check(
            "a.go",
            "package p\n\nimport \"fmt\"\n\ntype T struct {\n\tA int\n}\n\nvar x, y = 1, 2\n\nfunc (t *T) M() {}\n\nfunc F() {}\n",
            Role::File,
            &[
                "package p 1-1",
                "import \"fmt\" 3-3",
                "T 5-7",
                "  A 6-6",
                "x, y 9-9",
                "T.M 11-11",
                "F 13-13",
            ],
        );
        check(
            "a.py",
            "import os\n\n@dataclass\nclass P:\n    \"\"\"Doc.\"\"\"\n    x: int = 0\n\n    def m(self):\n        pass\n\nX = 1\n",
            Role::File,
            &[
                "import os 1-1",
                "P 3-9",
                "  \"\"\"Doc.\"\"\" 5-5",
                "  x 6-6",
                "  m 8-9",
                "X 11-11",
            ],
        );
        check(
            "a.js",
            "import x from 'x';\n\nexport default class A extends B {\n  static n = 1;\n  get v() { return 1; }\n}\n\nexport const f = () => 1, g = 2;\nmodule.exports = { A };\n",
            Role::File,
            &[
                "import x from 'x'; 1-1",
                "A 3-6",
                "  n 4-4",
                "  v 5-5",
                "f, g 8-8",
                "module.exports = { A }; 9-9",
            ],
        );
        check(
            "a.java",
            "package p;\n\npublic class A {\n    private int v = 0;\n\n    @Override\n    public String toString() { return \"\"; }\n}\n",
            Role::File,
            &["package p; 1-1", "A 3-8", "  v 4-4", "  toString 6-7"],
        );
        check(
            "a.c",
            "#include <stdio.h>\n#define N 3\n\nstruct s { int a; };\n\nstatic int f(void);\n\nint f(void) { return N; }\n",
            Role::File,
            &["#include <stdio.h> 1-1", "N 2-2", "s 4-4", "f 6-6", "f 8-8"],
        );
        check(
            "a.md",
            "---\ntitle: x\n---\n\nIntro.\n\n# A\n\n## A1\n\ntext\n\n# B\n\n```\n# code\n```\n",
            Role::File,
            &[
                "(text) 1-5",
                "# A 7-11",
                "  ## A1 9-11",
                "    (text) 11-11",
                "# B 13-17",
                "  (text) 15-17",
            ],
        );
    }

    #[test]
    fn levels_the_tree_cannot_split_into_lines() {
        let syntax = Syntax::of(Path::new("a.js")).unwrap_or(Syntax::Markdown);
        let err = outline(syntax, "a(); b();\n", Role::File, Reading::AsIs).unwrap_err();
        assert_eq!(err, "line 1 holds more than one item");
        let err = outline(syntax, "function f( {\n", Role::File, Reading::AsIs).unwrap_err();
        assert!(err.contains("syntax error at line 1"), "{err}");
    }
}
