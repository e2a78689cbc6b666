//! Lazy edits placed by the syntax tree: `edit_existing_file`'s `changes` (changed items, with
//! placeholder comments for unchanged code, or without any) lined up with the file's outline
//! (`edit::outline`) item by item, by kind and name.
//!
//! # How a level is placed
//!
//! The items of `changes` are matched to the items of the file at the same level: by kind
//! and name (`fn load`, `class Calculator`, `impl Display for Config`, `## Install`), items
//! without a name (imports, statements, comments) by their text, or, when only one of them in
//! the same stretch is, a version of it that keeps all its words (`from x import a, b` for
//! `from x import a`). The matched items split both sides into gaps:
//!
//! - a matched item is replaced whole by its version in `changes`; when that version holds
//!   placeholders, its members are placed the same way one level down (a class, impl,
//!   module, section), its body is kept when the body is only a placeholder, and otherwise
//!   (a function body) the lines are placed by line anchoring (`edit::lazy`) within the item;
//! - in a gap, the first placeholder stands for all the file's items there; new items before
//!   it go before them, new items after it after them; a second placeholder in the same gap
//!   stands for nothing;
//! - a gap without a placeholder: at the start and end of a level the file's items are kept
//!   (a forgotten outer placeholder); between two matched items they are removed, when the
//!   level has placeholders elsewhere (the model skipped them on purpose).
//!
//! A level without any placeholder is an edit of the items it names, unless its items cover
//! the level's (every named item matched, and the first and last one too): the file's other
//! items are kept, new items go right after the matched item before them (before the first
//! matched item at the start, at the end when nothing matched). Only a covering `changes` is
//! a rewrite, where what it leaves out is removed.
//!
//! The level is the file's top level when an item there matches; otherwise the container
//! (class, impl, module, section, header guard) whose members match most, which is how a
//! method given alone finds its class and a `##` section its `#` document. JavaScript,
//! TypeScript and Java `changes` that match nothing as written are read again as the members
//! of a class (methods do not parse on their own).
//!
//! Markdown text (what a section holds before its first subsection) is the same text as the
//! file's when it shares a line with it, or when its section matched and no placeholder
//! follows it; text followed by a placeholder is placed within the old text, or before it.
//! Comments and attributes the file has above an item stay when `changes` gives none; new
//! and replaced items are indented like the level's items.
//!
//! Whatever the tree cannot decide (a syntax error between items, two items on one line,
//! items in another order than the file's, an item given twice, a new item holding a
//! placeholder, top-level lines next to members of a container) is reported as undecided,
//! for the caller to fall back to line anchoring; a name several items fit equally is
//! reported with the candidates, for the caller to refuse rather than guess.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use super::lazy::{self, char_similarity};
use super::outline::{self, Cat, Entry, Reading, Role, Syntax, Unit, collapse, split_lines};
use crate::code::symbols;

/// The new file, and what became of `changes`, one sentence per item or placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub text: String,
    pub report: Vec<String>,
}

/// What placing by the tree came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Placed(Placed),
    /// No item of `changes` is in the file: the items of each side, for a message.
    Unmatched {
        changes: Vec<String>,
        file: Vec<String>,
    },
    /// The tree could not line `changes` up with the file; `candidates` are the places it
    /// could go, when there were several.
    Undecided {
        why: String,
        candidates: Vec<String>,
    },
    /// The tree cannot be used (a syntax error between the file's items, a file too large).
    NoTree(String),
}

/// Places `changes` in `original` by the syntax tree. The result ends with `\n` iff
/// `original` does.
pub fn place(syntax: Syntax, original: &str, changes: &str) -> Outcome {
    let o_lines = split_lines(original);
    let c_lines = split_lines(changes);
    let orig = match outline::outline(syntax, original, Role::File, Reading::AsIs) {
        Ok(o) => o,
        Err(why) => {
            return Outcome::NoTree(format!(
                "the file does not outline as {}: {why}",
                syntax.name()
            ));
        }
    };
    let readings: &[Reading] = match syntax {
        Syntax::Markdown => &[Reading::AsIs],
        Syntax::Code(_) => &[Reading::AsIs, Reading::Members],
    };
    let mut unreadable = None;
    let mut unmatched = None;
    for &reading in readings {
        let ch = match outline::outline(syntax, changes, Role::Changes, reading) {
            Ok(c) => c,
            Err(why) => {
                if reading == Reading::AsIs {
                    unreadable = Some(why);
                }
                continue;
            }
        };
        let mut cx = Ctx {
            o: &o_lines,
            c: &c_lines,
            ph: &ch.ph,
            report: Vec::new(),
            within: Vec::new(),
            nested: 0,
        };
        let blocks = match choose(&orig.entries, &ch.entries, &o_lines, &c_lines) {
            Choice::Root => cx.root(&orig.entries, &ch.entries),
            Choice::In(unit) => cx.inside(unit, &ch.entries),
            Choice::Ambiguous(units) => {
                return Outcome::Undecided {
                    why: format!(
                        "the items of `changes` ({}) are members of {} items of the file",
                        names(&units_of(&ch.entries), &c_lines),
                        units.len()
                    ),
                    candidates: units.iter().map(|u| located(u, &o_lines)).collect(),
                };
            }
            Choice::Mixed(why) => {
                return Outcome::Undecided {
                    why,
                    candidates: Vec::new(),
                };
            }
            Choice::None => {
                unmatched = Some(
                    units_of(&ch.entries)
                        .iter()
                        .map(|u| u.label(&c_lines))
                        .collect(),
                );
                continue;
            }
        };
        let lines = match blocks {
            Ok(l) => l,
            Err(u) => {
                return Outcome::Undecided {
                    why: u.why,
                    candidates: u.candidates,
                };
            }
        };
        let mut text = lines.join("\n");
        if original.ends_with('\n') && !lines.is_empty() {
            text.push('\n');
        }
        if let Syntax::Code(lang) = syntax
            && !orig.has_error
            && !ch.has_error
            && symbols::parse(lang, &text).is_some_and(|t| t.root_node().has_error())
        {
            return Outcome::Undecided {
                why: "placing the items by the tree gave code that does not parse".into(),
                candidates: Vec::new(),
            };
        }
        return Outcome::Placed(Placed {
            text,
            report: cx.report,
        });
    }
    match (unmatched, unreadable) {
        (Some(changes), _) => Outcome::Unmatched {
            changes,
            file: units_of(&orig.entries)
                .iter()
                .map(|u| u.label(&o_lines))
                .collect(),
        },
        (None, Some(why)) => Outcome::NoTree(format!(
            "`changes` does not outline as {}: {why}",
            syntax.name()
        )),
        (None, None) => Outcome::NoTree("`changes` has no items".into()),
    }
}

/// Why the tree could not decide.
#[derive(Debug)]
struct Undecided {
    why: String,
    candidates: Vec<String>,
}

impl Undecided {
    fn new(why: String) -> Undecided {
        Undecided {
            why,
            candidates: Vec::new(),
        }
    }
}

/// What an item is matched by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Named(Cat, String),
    Text(&'static str, String),
    Intro,
}

fn key(u: &Unit) -> Key {
    match (u.cat, &u.name) {
        (Cat::Intro, _) => Key::Intro,
        (cat, Some(n)) => Key::Named(cat, n.clone()),
        (_, None) => Key::Text(u.kind, u.text.clone()),
    }
}

fn named(u: &Unit) -> bool {
    u.name.is_some() || u.cat == Cat::Intro
}

fn units_of(entries: &[Entry]) -> Vec<&Unit> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Unit(u) => Some(u),
            Entry::Placeholder(_) => None,
        })
        .collect()
}

/// `` `name` (lines a–b) ``.
fn located(u: &Unit, lines: &[&str]) -> String {
    format!("`{}` ({})", u.label(lines), span(&u.lines))
}

fn span(r: &Range<usize>) -> String {
    if r.end <= r.start + 1 {
        format!("line {}", r.start + 1)
    } else {
        format!("lines {}–{}", r.start + 1, r.end)
    }
}

/// Item names for a message: the first eight, and how many more.
fn names(units: &[&Unit], lines: &[&str]) -> String {
    let mut parts: Vec<String> = units.iter().take(8).map(|u| u.label(lines)).collect();
    if units.len() > 8 {
        parts.push(format!("and {} more", units.len() - 8));
    }
    parts.join(", ")
}

enum Choice<'a> {
    Root,
    In(&'a Unit),
    Ambiguous(Vec<&'a Unit>),
    /// Items of two levels at once (the reason).
    Mixed(String),
    None,
}

/// The level `changes` belongs to: the top level when a named item matches there at least as
/// often as in any container; else the one container whose members match most.
fn choose<'a>(o: &'a [Entry], c: &[Entry], ol: &[&str], cl: &[&str]) -> Choice<'a> {
    let c_units: Vec<&Unit> = units_of(c).into_iter().filter(|u| named(u)).collect();
    // Text before the first heading of `changes` is the same text as the file's only when
    // they have a line in common.
    let overlap = |entries: &[Entry]| {
        let units = units_of(entries);
        let keys: HashSet<Key> = units.iter().map(|u| key(u)).collect();
        c_units
            .iter()
            .filter(|cu| match cu.cat {
                Cat::Intro => units.iter().any(|ou| {
                    ou.cat == Cat::Intro && {
                        let lines: HashSet<&str> = ol[ou.lines.clone()]
                            .iter()
                            .map(|l| l.trim())
                            .filter(|l| !l.is_empty())
                            .collect();
                        cl[cu.lines.clone()]
                            .iter()
                            .any(|l| lines.contains(l.trim()))
                    }
                }),
                _ => keys.contains(&key(cu)),
            })
            .count()
    };
    let root = overlap(o);
    let mut best: Vec<&Unit> = Vec::new();
    let mut best_n = 0;
    let mut stack: Vec<&Unit> = units_of(o);
    while let Some(u) = stack.pop() {
        let Some(m) = u.members() else { continue };
        let n = overlap(m);
        if n > best_n {
            best = vec![u];
            best_n = n;
        } else if n == best_n && n > 0 {
            best.push(u);
        }
        stack.extend(units_of(m));
    }
    if root > 0 && root >= best_n {
        return Choice::Root;
    }
    // Whether an item without a name is one of `entries` (by its text or a version of it).
    let fits = |entries: &[Entry], u: &Unit| {
        let units = units_of(entries);
        units
            .iter()
            .any(|t| !named(t) && (key(t) == key(u) || similar(t, u, ol, cl)))
    };
    match best.len() {
        0 => {
            // No named item matches: imports or statements alone belong to the top level.
            if units_of(c)
                .into_iter()
                .filter(|u| !named(u))
                .any(|u| fits(o, u))
            {
                Choice::Root
            } else {
                Choice::None
            }
        }
        1 => {
            // Top-level lines (an import) next to members of a container: two levels at once.
            let members = best[0].members().unwrap_or(&[]);
            match units_of(c)
                .into_iter()
                .find(|u| !named(u) && fits(o, u) && !fits(members, u))
            {
                Some(u) => Choice::Mixed(format!(
                    "`changes` mixes lines of the top level (`{}`) with members of `{}`",
                    u.label(cl),
                    best[0].label(ol)
                )),
                None => Choice::In(best[0]),
            }
        }
        _ => {
            best.sort_by_key(|u| u.lines.start);
            Choice::Ambiguous(best)
        }
    }
}

/// How a level without explicit placeholders treats the file's items it does not mention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Placeholders at this level: gaps without one between matched items are removed.
    Explicit,
    /// No placeholders, and `changes` does not cover the level: unmentioned items are kept.
    Partial,
    /// No placeholders, and `changes` covers the level: it is the new level.
    Whole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    Only,
    Leading,
    Interior,
    Trailing,
}

/// A run of output lines and where they came from: lines of the file (`orig`) and of
/// `changes` (`ch`) it stands for, to choose the blank lines between runs.
#[derive(Debug)]
struct Block {
    lines: Vec<String>,
    orig: Option<Range<usize>>,
    ch: Option<Range<usize>>,
    /// An item of the level (not a header or footer).
    member: bool,
    label: Option<String>,
}

struct Ctx<'a> {
    o: &'a [&'a str],
    c: &'a [&'a str],
    ph: &'a [bool],
    report: Vec<String>,
    /// The containers being placed in, innermost last, for the report.
    within: Vec<String>,
    /// How many matched items deep the level being placed is (0: the level `changes` was
    /// chosen for).
    nested: usize,
}

fn blank(l: &str) -> bool {
    l.trim().is_empty()
}

fn indent_of(l: &str) -> &str {
    &l[..l.len() - l.trim_start().len()]
}

fn owned(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

/// Lines moved from one indentation to another (lines not starting with `from` stay).
fn reindent(lines: &[&str], from: &str, to: &str) -> Vec<String> {
    if from == to {
        return owned(lines);
    }
    lines
        .iter()
        .map(|l| match l.strip_prefix(from) {
            Some(rest) if !blank(l) => format!("{to}{rest}"),
            _ => l.to_string(),
        })
        .collect()
}

impl Ctx<'_> {
    fn say(&mut self, s: String) {
        match self.within.last() {
            Some(w) => self.report.push(format!("in `{w}`: {s}")),
            None => self.report.push(s),
        }
    }

    /// The whole file: the top level placed.
    fn root(&mut self, o: &[Entry], c: &[Entry]) -> Result<Vec<String>, Undecided> {
        let o_units = units_of(o);
        let mut blocks = vec![Block {
            lines: Vec::new(),
            orig: Some(0..0),
            ch: Some(0..0),
            member: false,
            label: None,
        }];
        blocks.extend(self.level(&o_units, c)?);
        blocks.push(Block {
            lines: Vec::new(),
            orig: Some(self.o.len()..self.o.len()),
            ch: Some(self.c.len()..self.c.len()),
            member: false,
            label: None,
        });
        Ok(self.join(&blocks, self.typical(&o_units)))
    }

    /// The whole file, `changes` placed among the members of one container.
    fn inside(&mut self, container: &Unit, c: &[Entry]) -> Result<Vec<String>, Undecided> {
        let (Some(body), Some(members)) = (&container.body, container.members()) else {
            return Err(Undecided::new("the container has no members".into()));
        };
        let o_units = units_of(members);
        let label = container.label(self.o);
        self.report.push(format!(
            "`changes` holds members of `{label}` ({})",
            span(&container.lines)
        ));
        self.within.push(label);
        let inner = self.level(&o_units, c);
        self.within.pop();
        let mut blocks = vec![Block {
            lines: owned(&self.o[..body.inner.start]),
            orig: Some(0..body.inner.start),
            ch: None,
            member: false,
            label: None,
        }];
        blocks.extend(inner?);
        blocks.push(Block {
            lines: owned(&self.o[body.inner.end..]),
            orig: Some(body.inner.end..self.o.len()),
            ch: None,
            member: false,
            label: None,
        });
        Ok(self.join(&blocks, self.typical(&o_units)))
    }

    /// The blank lines usual between the items of a level: the most frequent count.
    fn typical(&self, units: &[&Unit]) -> usize {
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for w in units.windows(2) {
            let gap = w[1].lines.start.saturating_sub(w[0].lines.end);
            *counts.entry(gap).or_default() += 1;
        }
        counts
            .into_iter()
            .max_by_key(|&(gap, n)| (n, gap))
            .map_or(0, |(gap, _)| gap)
    }

    /// Joins blocks, choosing the blank lines between two of them: those of `changes` when
    /// both come from it and follow each other there; else those of the file when both stand
    /// for lines that follow each other there; else as many as either side has next to the
    /// junction, and at least the level's usual count between two items.
    fn join(&self, blocks: &[Block], typical: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            if i > 0 {
                out.extend(self.separator(&blocks[i - 1], b, typical));
            }
            out.extend(b.lines.iter().cloned());
        }
        out
    }

    fn separator(&self, x: &Block, y: &Block, typical: usize) -> Vec<String> {
        if let (Some(xc), Some(yc)) = (&x.ch, &y.ch)
            && xc.end <= yc.start
            && self.c[xc.end..yc.start].iter().all(|l| blank(l))
        {
            return owned(&self.c[xc.end..yc.start]);
        }
        if let (Some(xo), Some(yo)) = (&x.orig, &y.orig)
            && xo.end <= yo.start
            && self.o[xo.end..yo.start].iter().all(|l| blank(l))
        {
            return owned(&self.o[xo.end..yo.start]);
        }
        let after = x.ch.as_ref().map_or(0, |r| {
            self.c[r.end.min(self.c.len())..]
                .iter()
                .take_while(|l| blank(l))
                .count()
        });
        let before = y.ch.as_ref().map_or(0, |r| {
            self.c[..r.start.min(self.c.len())]
                .iter()
                .rev()
                .take_while(|l| blank(l))
                .count()
        });
        // Next to a header or footer, the blank lines `changes` has on its side of it.
        let n = match (x.member, y.member) {
            (true, true) => after.max(before).max(typical),
            (false, _) if x.ch.is_some() => after,
            (_, false) if y.ch.is_some() => before,
            _ => after.max(before),
        };
        vec![String::new(); n]
    }

    /// Places `c` (entries of `changes`) among the items `o` of the file at one level.
    fn level(&mut self, o: &[&Unit], c_in: &[Entry]) -> Result<Vec<Block>, Undecided> {
        // A placeholder at the end of a new item has nothing to stand for inside it: it
        // stands for what follows the item (a new Markdown section, then `<!-- ... -->`).
        let first = self.pairs(o, c_in)?;
        let matched: HashSet<usize> = first.iter().map(|p| p.0).collect();
        let mut c: Vec<Entry> = Vec::with_capacity(c_in.len());
        for (i, e) in c_in.iter().enumerate() {
            match e {
                Entry::Unit(u) if u.has_ph && !matched.contains(&i) => {
                    let (u, hoisted) = self.hoist(u);
                    c.push(Entry::Unit(u));
                    c.extend(hoisted.into_iter().map(Entry::Placeholder));
                }
                e => c.push(e.clone()),
            }
        }
        let pairs = self.pairs(o, &c)?;
        let matched: HashSet<usize> = pairs.iter().map(|p| p.0).collect();
        for (i, e) in c.iter().enumerate() {
            if let Entry::Unit(u) = e
                && u.has_ph
                && !matched.contains(&i)
            {
                let r = (u.lines.clone())
                    .find(|&k| self.ph[k])
                    .unwrap_or(u.lines.start);
                return Err(Undecided::new(format!(
                    "`{}` (line {} of `changes`) is not in the file, yet it holds a placeholder \
                     comment (line {}) that has no code to stand for",
                    u.label(self.c),
                    u.lines.start + 1,
                    r + 1
                )));
            }
        }
        let mode = if c.iter().any(|e| matches!(e, Entry::Placeholder(_))) {
            Mode::Explicit
        } else if covers(o, &pairs) {
            Mode::Whole
        } else {
            Mode::Partial
        };
        let target = o.first().map(|u| indent_of(self.o[u.core]).to_string());
        let mut blocks = Vec::new();
        let (mut ci, mut oi) = (0, 0);
        for k in 0..=pairs.len() {
            let (ce, oe) = pairs.get(k).copied().unwrap_or((c.len(), o.len()));
            let pos = match (k == 0, k == pairs.len()) {
                (true, true) => Pos::Only,
                (true, false) => Pos::Leading,
                (false, true) => Pos::Trailing,
                (false, false) => Pos::Interior,
            };
            self.gap(
                &c[ci..ce],
                &o[oi..oe],
                pos,
                mode,
                target.as_deref(),
                &mut blocks,
            );
            if let Some(Entry::Unit(cu)) = c.get(ce)
                && k < pairs.len()
            {
                // Text followed by a placeholder: the placeholder also stands for the rest of
                // the old text.
                let then = match c.get(ce + 1) {
                    Some(Entry::Placeholder(r)) if cu.cat == Cat::Intro => Some(*r),
                    _ => None,
                };
                blocks.push(self.replace(o[oe], cu, then)?);
                (ci, oi) = (ce + 1, oe + 1);
            }
        }
        Ok(blocks)
    }

    /// A new item without the placeholder lines at its end (returned, to stand after it).
    fn hoist(&self, u: &Unit) -> (Unit, Vec<usize>) {
        let Some(last) = u
            .lines
            .clone()
            .rev()
            .find(|&k| !self.ph[k] && !blank(self.c[k]))
        else {
            return (u.clone(), Vec::new());
        };
        let hoisted: Vec<usize> = (last + 1..u.lines.end).filter(|&k| self.ph[k]).collect();
        if hoisted.is_empty() {
            return (u.clone(), hoisted);
        }
        let mut u = u.clone();
        u.lines.end = last + 1;
        if let Some(b) = u.body.as_mut() {
            b.inner.end = b.inner.end.min(last + 1);
            if let Some(m) = b.members.as_mut() {
                m.retain(|e| !matches!(e, Entry::Placeholder(r) if *r > last));
            }
        }
        u.has_ph = u.lines.clone().any(|k| self.ph[k]);
        (u, hoisted)
    }

    /// Matches the items of `changes` to the file's at one level: (entry index in `c`, index
    /// in `o`), both increasing.
    fn pairs(&self, o: &[&Unit], c: &[Entry]) -> Result<Vec<(usize, usize)>, Undecided> {
        let mut o_by_key: HashMap<Key, Vec<usize>> = HashMap::new();
        for (i, u) in o.iter().enumerate() {
            o_by_key.entry(key(u)).or_default().push(i);
        }
        let mut c_by_key: HashMap<Key, Vec<usize>> = HashMap::new();
        let mut c_order: Vec<Key> = Vec::new();
        for (i, e) in c.iter().enumerate() {
            if let Entry::Unit(u) = e {
                let k = key(u);
                if !c_by_key.contains_key(&k) {
                    c_order.push(k.clone());
                }
                c_by_key.entry(k).or_default().push(i);
            }
        }
        let unit = |i: usize| match &c[i] {
            Entry::Unit(u) => Some(u),
            Entry::Placeholder(_) => None,
        };
        let mut want: Vec<(usize, usize)> = Vec::new();
        for k in &c_order {
            let (Some(cis), Some(ois)) = (c_by_key.get(k), o_by_key.get(k)) else {
                continue;
            };
            if cis.len() == ois.len() {
                want.extend(cis.iter().copied().zip(ois.iter().copied()));
                continue;
            }
            if !matches!(k, Key::Named(..)) {
                continue; // repeated text: matched by position below
            }
            // A name several items share (overloads, a prototype and its definition): the one
            // of the same kind and the closest text.
            let mut used = HashSet::new();
            for &ci in cis {
                let Some(cu) = unit(ci) else { continue };
                let mut scored: Vec<(f64, usize)> = ois
                    .iter()
                    .filter(|oi| !used.contains(*oi))
                    .map(|&oi| {
                        let ou = o[oi];
                        let s = if ou.text == cu.text {
                            3.0
                        } else {
                            let first = |u: &Unit, l: &[&str]| collapse(l[u.core]);
                            char_similarity(&first(ou, self.o), &first(cu, self.c))
                                + if ou.kind == cu.kind { 1.0 } else { 0.0 }
                        };
                        (s, oi)
                    })
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                match scored.as_slice() {
                    [(s, oi), rest @ ..] if rest.first().is_none_or(|r| s - r.0 > 0.05) => {
                        used.insert(*oi);
                        want.push((ci, *oi));
                    }
                    [] => {
                        return Err(Undecided::new(format!(
                            "`{}` is in `changes` more often than in the file (again at line {} \
                             of `changes`)",
                            cu.label(self.c),
                            cu.lines.start + 1
                        )));
                    }
                    _ => {
                        return Err(Undecided {
                            why: format!(
                                "`{}` (line {} of `changes`) could be any of {} items of the file",
                                cu.label(self.c),
                                cu.lines.start + 1,
                                ois.len()
                            ),
                            candidates: ois.iter().map(|&oi| located(o[oi], self.o)).collect(),
                        });
                    }
                }
            }
        }
        // The text before a section's first subsection is the same text only when it shares a
        // line with it, or when its section matched and no placeholder follows it (which
        // would make it text added before the old text).
        want.retain(|&(ci, oi)| {
            let Some(cu) = unit(ci) else { return true };
            if cu.cat != Cat::Intro {
                return true;
            }
            let followed = matches!(c.get(ci + 1), Some(Entry::Placeholder(_)));
            let shares = self.shares_line(o[oi], cu);
            shares || (self.nested > 0 && !followed)
        });
        want.sort_unstable();
        let kept = increasing(&want);
        if kept.len() < want.len() {
            let (ci, oi) = want
                .iter()
                .copied()
                .find(|p| !kept.contains(p))
                .unwrap_or((0, 0));
            return Err(Undecided::new(format!(
                "`changes` has its items in another order than the file (`{}`, line {} of \
                 `changes`, is at {} of the file)",
                unit(ci).map(|u| u.label(self.c)).unwrap_or_default(),
                unit(ci).map_or(0, |u| u.lines.start + 1),
                span(&o[oi].lines)
            )));
        }
        // Items without a name that changed: paired with the one similar item in the same
        // stretch of the file, when the new version keeps all its words.
        let mut pairs = kept;
        let mut extra = Vec::new();
        for k in 0..=pairs.len() {
            let (c0, o0) = if k == 0 {
                (0, 0)
            } else {
                (pairs[k - 1].0 + 1, pairs[k - 1].1 + 1)
            };
            let (c1, o1) = pairs.get(k).copied().unwrap_or((c.len(), o.len()));
            let cs: Vec<usize> = (c0..c1)
                .filter(|&i| unit(i).is_some_and(|u| !named(u)))
                .collect();
            let os: Vec<usize> = (o0..o1).filter(|&i| !named(o[i])).collect();
            for &ci in &cs {
                let Some(cu) = unit(ci) else { continue };
                let fits: Vec<usize> = os
                    .iter()
                    .copied()
                    .filter(|&oi| similar(o[oi], cu, self.o, self.c))
                    .collect();
                if let [oi] = fits[..] {
                    let back = cs
                        .iter()
                        .filter(|&&cj| unit(cj).is_some_and(|u| similar(o[oi], u, self.o, self.c)))
                        .count();
                    if back == 1 {
                        extra.push((ci, oi));
                    }
                }
            }
        }
        if !extra.is_empty() {
            pairs.extend(extra);
            pairs.sort_unstable();
            pairs = increasing(&pairs);
        }
        Ok(pairs)
    }

    /// Whether two items have a non-blank line in common.
    fn shares_line(&self, o: &Unit, c: &Unit) -> bool {
        let lines: HashSet<&str> = self.o[o.lines.clone()]
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        self.c[c.lines.clone()]
            .iter()
            .any(|l| lines.contains(l.trim()))
    }

    /// One gap: the entries of `changes` and the file's items between two matched items.
    fn gap(
        &mut self,
        c: &[Entry],
        o: &[&Unit],
        pos: Pos,
        mode: Mode,
        target: Option<&str>,
        blocks: &mut Vec<Block>,
    ) {
        #[derive(PartialEq)]
        enum Implicit {
            Start,
            End,
        }
        let explicit = c.iter().any(|e| matches!(e, Entry::Placeholder(_)));
        let implicit = match (explicit, mode, pos) {
            (true, ..) | (false, Mode::Whole, _) => None,
            (false, _, Pos::Leading | Pos::Only) => Some(Implicit::Start),
            (false, Mode::Explicit, Pos::Interior) => None,
            (false, _, _) => Some(Implicit::End),
        };
        let mut kept = o.is_empty();
        if implicit == Some(Implicit::Start) {
            self.keep(o, None, blocks);
            kept = true;
        }
        for e in c {
            match e {
                Entry::Placeholder(r) if !kept => {
                    self.keep(o, Some(*r), blocks);
                    kept = true;
                }
                Entry::Placeholder(r) => {
                    let why = if o.is_empty() {
                        "there is no code of the file there"
                    } else {
                        "an earlier placeholder already stands for the code there"
                    };
                    self.say(format!(
                        "line {} of `changes` (a placeholder) stood for nothing: {why}",
                        r + 1
                    ));
                }
                Entry::Unit(u) => {
                    let b = self.added(u, target, blocks);
                    blocks.push(b);
                }
            }
        }
        if implicit == Some(Implicit::End) && !kept {
            self.keep(o, None, blocks);
            kept = true;
        }
        if !kept && let (Some(f), Some(l)) = (o.first(), o.last()) {
            let why = if mode == Mode::Whole {
                "`changes` rewrites this level and leaves them out"
            } else {
                "`changes` goes past them without a placeholder comment"
            };
            self.say(format!(
                "removed {}: {} ({why})",
                span(&(f.lines.start..l.lines.end)),
                names(o, self.o)
            ));
        }
    }

    /// Keeps the file's items `o` (for the placeholder on line `ph`, or because `changes` does
    /// not mention them).
    fn keep(&mut self, o: &[&Unit], ph: Option<usize>, blocks: &mut Vec<Block>) {
        let (Some(f), Some(l)) = (o.first(), o.last()) else {
            if let Some(r) = ph {
                self.say(format!(
                    "line {} of `changes` (a placeholder) stood for nothing: there is no code of \
                     the file there",
                    r + 1
                ));
            }
            return;
        };
        let range = f.lines.start..l.lines.end;
        let what = names(o, self.o);
        match ph {
            Some(r) => self.say(format!(
                "line {} of `changes` kept {}: {what}",
                r + 1,
                span(&range)
            )),
            None => self.say(format!("kept {} (not in `changes`): {what}", span(&range))),
        }
        blocks.push(Block {
            lines: owned(&self.o[range.clone()]),
            orig: Some(range),
            ch: None,
            member: true,
            label: Some(l.label(self.o)),
        });
    }

    /// A new item of `changes`, indented like the level's items.
    fn added(&mut self, u: &Unit, target: Option<&str>, blocks: &[Block]) -> Block {
        let label = u.label(self.c);
        let lines = &self.c[u.lines.clone()];
        let from = indent_of(self.c[u.core]).to_string();
        let lines = match target {
            Some(t) => reindent(lines, &from, t),
            None => owned(lines),
        };
        let place = match blocks
            .iter()
            .rev()
            .find(|b| b.member)
            .and_then(|b| b.label.clone())
        {
            Some(prev) => format!("after `{prev}`"),
            None => "at the start".to_string(),
        };
        self.say(format!(
            "added `{label}` (new, line {} of `changes`) {place}",
            u.lines.start + 1
        ));
        Block {
            lines,
            orig: None,
            ch: Some(u.lines.clone()),
            member: true,
            label: Some(label),
        }
    }

    /// The leading comments and attributes of the file's item, when `changes` gives none.
    fn prefix(&self, o: &Unit, c: &Unit) -> Vec<String> {
        if c.core == c.lines.start && o.core > o.lines.start {
            owned(&self.o[o.lines.start..o.core])
        } else {
            Vec::new()
        }
    }

    /// A matched item: its version in `changes`, with its members or body placed when that
    /// version holds placeholders or leaves members out.
    fn replace(&mut self, o: &Unit, c: &Unit, then: Option<usize>) -> Result<Block, Undecided> {
        let label = o.label(self.o);
        let block = |lines: Vec<String>| Block {
            lines,
            orig: Some(o.lines.clone()),
            ch: Some(c.lines.clone()),
            member: true,
            label: Some(label.clone()),
        };
        if self.o[o.lines.clone()] == self.c[c.lines.clone()] {
            return Ok(block(owned(&self.o[o.lines.clone()])));
        }
        let mut lines = self.prefix(o, c);
        if let (Some(ob), Some(cb), Some(om), Some(cm)) =
            (&o.body, &c.body, o.members(), c.members())
        {
            let o_units = units_of(om);
            self.within.push(label.clone());
            self.nested += 1;
            let members = self.level(&o_units, cm);
            self.nested -= 1;
            self.within.pop();
            let mut blocks = vec![Block {
                lines: owned(&self.c[c.lines.start..cb.inner.start]),
                orig: Some(o.lines.start..ob.inner.start),
                ch: Some(c.lines.start..cb.inner.start),
                member: false,
                label: None,
            }];
            blocks.extend(members?);
            blocks.push(Block {
                lines: owned(&self.c[cb.inner.end..c.lines.end]),
                orig: Some(ob.inner.end..o.lines.end),
                ch: Some(cb.inner.end..c.lines.end),
                member: false,
                label: None,
            });
            lines.extend(self.join(&blocks, self.typical(&o_units)));
            if self.o[o.lines.start..ob.inner.start] != self.c[c.lines.start..cb.inner.start] {
                self.say(format!("replaced the first line(s) of `{label}`"));
            }
            return Ok(block(lines));
        }
        if !c.has_ph && then.is_none() {
            self.say(format!("replaced `{label}` ({})", span(&o.lines)));
            let from = indent_of(self.c[c.core]);
            let to = indent_of(self.o[o.core]);
            lines.extend(reindent(&self.c[c.lines.clone()], from, to));
            return Ok(block(lines));
        }
        // A body that is only a placeholder: the new header over the old body.
        if let (Some(ob), Some(cb)) = (&o.body, &c.body)
            && cb.inner.clone().all(|k| self.ph[k] || blank(self.c[k]))
            && cb.inner.clone().any(|k| self.ph[k])
        {
            lines.extend(owned(&self.c[c.lines.start..cb.inner.start]));
            lines.extend(owned(&self.o[ob.inner.clone()]));
            lines.extend(owned(&self.c[cb.inner.end..c.lines.end]));
            self.say(format!(
                "line {} of `changes` kept the body of `{label}` ({}) under its new first line(s)",
                cb.inner
                    .clone()
                    .find(|&k| self.ph[k])
                    .unwrap_or(cb.inner.start)
                    + 1,
                span(&ob.inner)
            ));
            return Ok(block(lines));
        }
        // Statements: placed line by line within the item.
        let text = |l: &[&str]| {
            let mut s = l.join("\n");
            s.push('\n');
            s
        };
        let mut c_text = text(&self.c[c.lines.clone()]);
        if let Some(r) = then {
            c_text.push_str(&text(&self.c[r..r + 1]));
        }
        let x = lazy::expand_at(
            &text(&self.o[o.lines.clone()]),
            &c_text,
            o.lines.start,
            c.lines.start,
        )
        .map_err(|e| Undecided::new(format!("inside `{label}` ({}): {e}", span(&o.lines))))?;
        self.say(format!(
            "placed the changes to `{label}` ({}) line by line",
            span(&o.lines)
        ));
        for n in x.kept.into_iter().chain(x.notes) {
            self.say(format!("in `{label}`: {n}"));
        }
        lines.extend(split_lines(&x.text).into_iter().map(str::to_string));
        Ok(block(lines))
    }
}

/// Whether the matched items cover the level: every named item and the first and last item
/// are matched.
fn covers(o: &[&Unit], pairs: &[(usize, usize)]) -> bool {
    if pairs.is_empty() || o.is_empty() {
        return false;
    }
    let mut m = vec![false; o.len()];
    for &(_, oi) in pairs {
        m[oi] = true;
    }
    o.iter().zip(&m).all(|(u, &m)| m || !named(u)) && m[0] && m[o.len() - 1]
}

/// A changed version of an unnamed item: same kind, and the same first line or all its words
/// kept, starting with the same word.
fn similar(o: &Unit, c: &Unit, ol: &[&str], cl: &[&str]) -> bool {
    if o.kind != c.kind {
        return false;
    }
    if collapse(ol[o.core]) == collapse(cl[c.core]) {
        return true;
    }
    let words = |s: &str| -> Vec<String> {
        s.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (wo, wc) = (words(&o.text), words(&c.text));
    let set: HashSet<&String> = wc.iter().collect();
    !wo.is_empty() && wo.first() == wc.first() && wo.iter().all(|w| set.contains(w))
}

/// The longest subsequence of `pairs` (sorted by their first element) whose second elements
/// increase; earliest pairs preferred.
fn increasing(pairs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let n = pairs.len();
    let mut len = vec![1usize; n];
    let mut prev = vec![None; n];
    for i in 0..n {
        for j in 0..i {
            if pairs[j].0 < pairs[i].0 && pairs[j].1 < pairs[i].1 && len[j] + 1 > len[i] {
                len[i] = len[j] + 1;
                prev[i] = Some(j);
            }
        }
    }
    let Some(best) = (0..n).max_by_key(|&i| (len[i], std::cmp::Reverse(i))) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = Some(best);
    while let Some(i) = cur {
        out.push(pairs[i]);
        cur = prev[i];
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Lines, each terminated.
    fn t(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    fn run(path: &str, original: &str, changes: &str) -> Outcome {
        let syntax = Syntax::of(Path::new(path)).unwrap_or_else(|| panic!("no syntax for {path}"));
        place(syntax, original, changes)
    }

    /// Places and compares the whole new file, and requires each `report` fragment in the
    /// report.
    #[track_caller]
    fn check(path: &str, original: &str, changes: &str, expected: &str, report: &[&str]) {
        match run(path, original, changes) {
            Outcome::Placed(p) => {
                assert_eq!(
                    p.text, expected,
                    "\n--- got:\n{}\n--- expected:\n{expected}\n--- report: {:#?}",
                    p.text, p.report
                );
                for want in report {
                    assert!(
                        p.report.iter().any(|r| r.contains(want)),
                        "no {want:?} in {:#?}",
                        p.report
                    );
                }
            }
            other => panic!("expected a placement, got {other:?}"),
        }
    }

    #[track_caller]
    fn undecided(path: &str, original: &str, changes: &str, why: &str) {
        match run(path, original, changes) {
            Outcome::Undecided { why: w, .. } | Outcome::NoTree(w) => {
                assert!(w.contains(why), "{w:?} lacks {why:?}")
            }
            other => panic!("expected no decision, got {other:?}"),
        }
    }

    #[test]
    fn markdown_text_followed_by_a_placeholder_goes_before_the_old_text() {
        let orig = t(&[
            "# Guide",
            "",
            "## Setup",
            "",
            "Install the package.",
            "",
            "### Linux",
            "",
            "Use apt.",
        ]);
        check(
            "g.md",
            &orig,
            &t(&["## Setup", "", "Read the notes first.", "", "<!-- ... -->"]),
            &t(&[
                "# Guide",
                "",
                "## Setup",
                "",
                "Read the notes first.",
                "",
                "Install the package.",
                "",
                "### Linux",
                "",
                "Use apt.",
            ]),
            &[
                "in `## Setup`: added `(text)`",
                "line 5 of `changes` kept lines 5–9",
            ],
        );
        // Sharing a line with the old text, it is placed within it.
        check(
            "g.md",
            &orig,
            &t(&[
                "## Setup",
                "",
                "Install the package.",
                "Then run `guide init`.",
                "",
                "<!-- ... -->",
            ]),
            &orig.replace(
                "Install the package.\n",
                "Install the package.\nThen run `guide init`.\n",
            ),
            &["placed the changes to `(text)` (line 5) line by line"],
        );
    }

    #[test]
    fn markdown_text_without_a_heading_is_not_the_documents_first_text() {
        let orig = t(&[
            "Intro text.",
            "",
            "## A",
            "",
            "Alpha.",
            "",
            "## B",
            "",
            "Beta.",
        ]);
        match run(
            "r.md",
            &orig,
            &t(&["<!-- ... -->", "Gamma.", "<!-- ... -->"]),
        ) {
            Outcome::Unmatched { .. } => {}
            other => panic!("{other:?}"),
        }
        // Headings inside code fences are not headings.
        check(
            "r.md",
            &t(&[
                "## A",
                "",
                "```sh",
                "# not a heading",
                "```",
                "",
                "## B",
                "",
                "b",
            ]),
            &t(&["## B", "", "bee"]),
            &t(&[
                "## A",
                "",
                "```sh",
                "# not a heading",
                "```",
                "",
                "## B",
                "",
                "bee",
            ]),
            &["replaced `(text)` (line 9)"],
        );
    }

    #[test]
    fn an_unclosed_impl_is_placed_line_by_line() {
        let orig = t(&[
            "struct S;",
            "",
            "impl S {",
            "    fn one(&self) {}",
            "",
            "    fn two(&self) {}",
            "}",
        ]);
        check(
            "s.rs",
            &orig,
            &t(&[
                "impl S {",
                "    // ... existing code ...",
                "",
                "    fn three(&self) {}",
            ]),
            &orig.replace(
                "    fn two(&self) {}\n}",
                "    fn two(&self) {}\n\n    fn three(&self) {}\n}",
            ),
            &["placed the changes to `impl S` (lines 3–7) line by line"],
        );
    }

    #[test]
    fn what_the_tree_cannot_decide() {
        let rs = t(&["fn a() {}", "", "fn b() {}", "", "fn c() {}"]);
        undecided(
            "x.rs",
            &rs,
            &t(&["// ...", "fn c() { 3 }", "fn a() { 1 }", "// ..."]),
            "another order than the file",
        );
        undecided(
            "x.rs",
            &rs,
            &t(&["// ...", "fn b() {}", "", "mod m {", "    // ...", "}"]),
            "`m` (line 4 of `changes`) is not in the file, yet it holds a placeholder",
        );
        undecided("x.rs", "fn a( {\n", "fn a() {}\n", "syntax error at line 1");
    }

    #[test]
    fn overloads_and_prototypes_are_told_apart_by_their_first_line() {
        let java = t(&[
            "class M {",
            "    int add(int a, int b) {",
            "        return a + b;",
            "    }",
            "",
            "    double add(double a, double b) {",
            "        return a + b;",
            "    }",
            "}",
        ]);
        check(
            "M.java",
            &java,
            &t(&[
                "class M {",
                "    // ...",
                "    double add(double a, double b) {",
                "        return b + a;",
                "    }",
                "}",
            ]),
            &java.replace(
                "        return a + b;\n    }\n}",
                "        return b + a;\n    }\n}",
            ),
            &["replaced `add` (lines 6–8)"],
        );
    }

    #[test]
    fn leading_comments_attributes_and_decorators_stay_when_changes_leaves_them_out() {
        let py = t(&[
            "class P:",
            "    @property",
            "    def x(self):",
            "        return 1",
            "",
            "    def y(self):",
            "        return 2",
        ]);
        check(
            "p.py",
            &py,
            &t(&["    def x(self):", "        return 10"]),
            &py.replace("return 1\n", "return 10\n"),
            &["in `P`: replaced `x` (lines 2–4)"],
        );
        let ts = t(&[
            "// The answer.",
            "export const answer = 41;",
            "",
            "export const other = 1;",
        ]);
        check(
            "a.ts",
            &ts,
            "export const answer = 42;\n",
            &ts.replace("41", "42"),
            &["replaced `answer`"],
        );
    }

    #[test]
    fn members_of_structs_interfaces_and_enums() {
        let rs = t(&[
            "pub struct Config {",
            "    pub port: u16,",
            "    pub host: String,",
            "}",
        ]);
        check(
            "c.rs",
            &rs,
            &t(&[
                "pub struct Config {",
                "    // ... existing fields ...",
                "    pub debug: bool,",
                "}",
            ]),
            &t(&[
                "pub struct Config {",
                "    pub port: u16,",
                "    pub host: String,",
                "    pub debug: bool,",
                "}",
            ]),
            &["in `Config`: line 2 of `changes` kept lines 2–3: port, host"],
        );
        let ts = t(&[
            "interface Opts {",
            "  a: string;",
            "  b: number;",
            "}",
            "",
            "enum E {",
            "  X,",
            "  Y,",
            "}",
        ]);
        check(
            "o.ts",
            &ts,
            &t(&["interface Opts {", "  // ...", "  b?: number;", "}"]),
            &ts.replace("  b: number;", "  b?: number;"),
            &["in `Opts`: replaced `b` (line 3)"],
        );
    }

    #[test]
    fn a_method_alone_at_the_wrong_indentation_is_indented_like_its_neighbours() {
        let js = t(&[
            "class A {",
            "  one() {",
            "    return 1;",
            "  }",
            "",
            "  two() {",
            "    return 2;",
            "  }",
            "}",
        ]);
        check(
            "a.js",
            &js,
            &t(&["two() {", "  return 22;", "}"]),
            &js.replace("return 2;", "return 22;"),
            &[
                "`changes` holds members of `A` (lines 1–9)",
                "in `A`: replaced `two` (lines 6–8)",
            ],
        );
    }

    #[test]
    fn statements_at_the_top_level_are_matched_by_their_first_line_or_their_words() {
        let py = t(&[
            "import sys",
            "",
            "",
            "def main(argv):",
            "    print(argv)",
            "",
            "",
            "if __name__ == \"__main__\":",
            "    main(sys.argv)",
        ]);
        check(
            "m.py",
            &py,
            &t(&[
                "if __name__ == \"__main__\":",
                "    sys.exit(main(sys.argv))",
            ]),
            &py.replace("    main(sys.argv)", "    sys.exit(main(sys.argv))"),
            &["replaced `if __name__ == \"__main__\":` (lines 8–9)"],
        );
    }

    #[test]
    fn a_covering_rewrite_removes_what_it_leaves_out_between_its_first_and_last_items() {
        let rs = t(&["use a;", "use b;", "", "fn f() {}", "", "fn g() {}"]);
        check(
            "r.rs",
            &rs,
            &t(&["use a;", "", "fn f() { 1 }", "", "fn g() { 2 }"]),
            &t(&["use a;", "", "fn f() { 1 }", "", "fn g() { 2 }"]),
            &["removed line 2: use b;"],
        );
    }

    #[test]
    fn trailing_comments_belong_to_their_line_and_c_plus_plus_templates_are_named() {
        let cpp = t(&[
            "template <typename T>",
            "T twice(T x) { return 2 * x; }  // doubles",
            "",
            "int main() { return twice(1); }",
        ]);
        check(
            "t.cpp",
            &cpp,
            &t(&["template <typename T>", "T twice(T x) { return x + x; }"]),
            &t(&[
                "template <typename T>",
                "T twice(T x) { return x + x; }",
                "",
                "int main() { return twice(1); }",
            ]),
            &["replaced `twice` (lines 1–2)"],
        );
    }

    #[test]
    fn placeholders_inside_a_function_body_are_placed_line_by_line_within_it() {
        let rs = t(&[
            "impl Store {",
            "    pub fn get(&self, key: &str) -> Option<u32> {",
            "        let k = key.trim();",
            "        self.items.get(k).copied()",
            "    }",
            "",
            "    pub fn len(&self) -> usize {",
            "        self.items.len()",
            "    }",
            "}",
        ]);
        check(
            "s.rs",
            &rs,
            &t(&[
                "impl Store {",
                "    pub fn get(&self, key: &str) -> Option<u32> {",
                "        log(key);",
                "        // ... existing code ...",
                "    }",
                "}",
            ]),
            &rs.replace("Option<u32> {\n", "Option<u32> {\n        log(key);\n"),
            &["in `impl Store`: placed the changes to `get` (lines 2–5) line by line"],
        );
        // An object literal without a name, matched by its first line.
        let js = t(&["module.exports = {", "  port: 8080,", "  host: 'a',", "};"]);
        check(
            "c.js",
            &js,
            &t(&["module.exports = {", "  // ...", "  debug: true,", "};"]),
            &js.replace("  host: 'a',\n", "  host: 'a',\n  debug: true,\n"),
            &["placed the changes to `module.exports = {` (lines 1–4) line by line"],
        );
    }

    #[test]
    fn a_test_module_gets_a_new_test_with_its_attribute() {
        let rs = t(&[
            "fn f() -> u8 { 1 }",
            "",
            "#[cfg(test)]",
            "mod tests {",
            "    #[test]",
            "    fn one() {",
            "        assert_eq!(super::f(), 1);",
            "    }",
            "}",
        ]);
        check(
            "f.rs",
            &rs,
            &t(&[
                "// ... existing code ...",
                "mod tests {",
                "    // ... existing code ...",
                "",
                "    #[test]",
                "    fn two() {",
                "        assert_ne!(super::f(), 2);",
                "    }",
                "}",
            ]),
            &rs.replace(
                "        assert_eq!(super::f(), 1);\n    }\n}",
                "        assert_eq!(super::f(), 1);\n    }\n\n    #[test]\n    fn two() {\n        assert_ne!(super::f(), 2);\n    }\n}",
            ),
            &["in `tests`: added `two`"],
        );
    }

    #[test]
    fn a_header_guard_holds_the_declarations_of_a_c_header() {
        let h = t(&[
            "#ifndef CALC_H",
            "#define CALC_H",
            "",
            "int add(int a, int b);",
            "",
            "int sub(int a, int b);",
            "",
            "#endif",
        ]);
        check(
            "calc.h",
            &h,
            "int sub(int a, int b, int c);\n",
            &h.replace("int sub(int a, int b);", "int sub(int a, int b, int c);"),
            &["`changes` holds members of `#ifndef CALC_H` (lines 1–8)"],
        );
    }

    #[test]
    fn an_item_given_twice_is_not_guessed() {
        undecided(
            "d.py",
            &t(&["def a():", "    pass"]),
            &t(&["def a():", "    return 1", "", "def a():", "    return 2"]),
            "`a` is in `changes` more often than in the file (again at line 4 of `changes`)",
        );
    }

    /// Random cuts of real files with placeholders at random places never panic, and a
    /// placement keeps the final-newline convention.
    #[test]
    fn random_changes_never_panic() {
        let samples: [(&str, &str); 5] = [
            (
                "a.rs",
                "use std::io;\n\n/// Doc.\n#[derive(Debug)]\npub struct S {\n    a: u8,\n}\n\nimpl S {\n    fn one(&self) -> u8 {\n        self.a\n    }\n\n    fn two(&self) {}\n}\n\nfn main() {\n    let s = S { a: 1 };\n    println!(\"{}\", s.one());\n}\n",
            ),
            (
                "a.py",
                "import os\n\n\nclass A:\n    \"\"\"Doc.\"\"\"\n\n    def m(self, x):\n        if x:\n            return 1\n        return 2\n\n    @property\n    def p(self):\n        return 3\n\n\ndef main():\n    print(A().m(1))\n",
            ),
            (
                "a.ts",
                "import { x } from './x';\n\nexport class C {\n  private n = 0;\n\n  inc(): void {\n    this.n++;\n  }\n}\n\nexport function f(a: number): number {\n  return a * 2;\n}\n",
            ),
            (
                "a.md",
                "# T\n\nIntro.\n\n## A\n\nText a.\n\n### A1\n\nMore.\n\n## B\n\n```\n# no\n```\n",
            ),
            (
                "a.go",
                "package p\n\ntype T struct {\n\tA int\n}\n\nfunc (t T) M() int {\n\treturn t.A\n}\n\nfunc F() {}\n",
            ),
        ];
        let mut rng = fastrand::Rng::with_seed(16);
        for (path, orig) in samples {
            let lines: Vec<&str> = orig.lines().collect();
            for _ in 0..300 {
                let mut changes = Vec::new();
                for l in &lines {
                    match rng.u8(..10) {
                        0 => {}
                        1 => changes.push(format!("{l} // x")),
                        2 => {
                            let ws = &l[..l.len() - l.trim_start().len()];
                            let ph = if path.ends_with(".py") {
                                "# ..."
                            } else if path.ends_with(".md") {
                                "<!-- ... -->"
                            } else {
                                "// ..."
                            };
                            changes.push(format!("{ws}{ph}"));
                            changes.push(l.to_string());
                        }
                        3 => changes.push("new_line();".to_string()),
                        _ => changes.push(l.to_string()),
                    }
                }
                let mut c = changes.join("\n");
                if rng.bool() {
                    c.push('\n');
                }
                if let Outcome::Placed(p) = run(path, orig, &c) {
                    assert!(p.text.is_empty() || p.text.ends_with('\n'), "{path}: {c:?}");
                }
            }
        }
    }

    #[test]
    fn an_import_next_to_a_method_given_alone_is_left_to_line_anchoring() {
        undecided(
            "a.rs",
            &t(&["use std::io;", "", "impl A {", "    fn b(&self) {}", "}"]),
            &t(&[
                "use std::io;",
                "use std::fmt;",
                "",
                "fn b(&self) { todo!() }",
            ]),
            "`changes` mixes lines of the top level (`use std::io;`) with members of `impl A`",
        );
    }
}
