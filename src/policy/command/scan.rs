//! Reading a command's options the way getopt does: short clusters (`-ni`, `-i.bak`, `-oFILE`),
//! long options with `=` or a separate value, GNU's unique-prefix abbreviations (`--in-pl`),
//! `--` ending the options, and (for most GNU tools) options after operands.

use super::parse::Word;

/// How one tool reads its options.
pub(crate) struct Getopt {
    /// Short options that take an argument (attached, `-oFILE`, or the next word).
    pub short_arg: &'static str,
    /// Short options with an optional attached argument (`-i[SUF]`).
    pub short_opt: &'static str,
    /// Long options that take an argument (`--output=F` or `--output F`).
    pub long_arg: &'static [&'static str],
    /// Options stop at the first operand (wrappers: `env`, `timeout`, `xargs`).
    pub stop_at_operand: bool,
}

/// One option or operand, in order.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// `c` is the option letter; `value` its argument if it takes one.
    Short { c: char, value: Option<Word> },
    /// `name` as written after `--` (without `=value`).
    Long { name: String, value: Option<Word> },
    /// An operand: the index into the words.
    Operand(usize),
}

/// The options and operands of `words` (the arguments, without the command name). Words after
/// `--` are operands. `end` tells the index of the first word after the options when they
/// stop at the first operand.
pub(crate) fn getopt(words: &[Word], g: &Getopt) -> (Vec<Item>, usize) {
    let mut out = Vec::new();
    let mut i = 0;
    let mut ended = false;
    while i < words.len() {
        let w = &words[i];
        let t = w.text.as_str();
        if ended || t == "-" || !t.starts_with('-') || t.len() < 2 {
            if g.stop_at_operand && !ended {
                return (out, i);
            }
            out.push(Item::Operand(i));
            i += 1;
            continue;
        }
        if t == "--" {
            ended = true;
            i += 1;
            if g.stop_at_operand {
                return (out, i);
            }
            continue;
        }
        if let Some(body) = t.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let takes = g
                .long_arg
                .iter()
                .any(|l| l.starts_with(name) && !name.is_empty());
            let value = match attached {
                Some(v) => Some(Word::plain(v)),
                None if takes => {
                    i += 1;
                    words.get(i).cloned()
                }
                None => None,
            };
            out.push(Item::Long {
                name: name.to_string(),
                value,
            });
            i += 1;
            continue;
        }
        // A short cluster.
        let chars: Vec<char> = t[1..].chars().collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            let rest: String = chars[k + 1..].iter().collect();
            if g.short_arg.contains(c) {
                let value = if rest.is_empty() {
                    i += 1;
                    words.get(i).cloned()
                } else {
                    Some(Word::plain(&rest))
                };
                out.push(Item::Short { c, value });
                break;
            }
            if g.short_opt.contains(c) {
                let value = (!rest.is_empty()).then(|| Word::plain(&rest));
                out.push(Item::Short { c, value });
                break;
            }
            out.push(Item::Short { c, value: None });
            k += 1;
        }
        i += 1;
    }
    (out, words.len())
}

/// Whether `name` (as written after `--`) could stand for the long option `full`: GNU tools
/// accept any unique prefix, so every prefix counts (an ambiguous one makes the tool fail,
/// and counting it only ever asks more).
pub(crate) fn is_long(name: &str, full: &str) -> bool {
    !name.is_empty() && full.starts_with(name)
}

/// The text of an option's value, or empty.
pub(crate) fn text(v: &Option<Word>) -> &str {
    v.as_ref().map_or("", |w| w.text.as_str())
}

/// The words before `--` that begin with an expansion or unquoted glob (they could expand to
/// an option).
pub(crate) fn open_before_end(words: &[Word]) -> Option<&Word> {
    words
        .iter()
        .take_while(|w| w.text != "--" || w.dynamic)
        .find(|w| w.open_start)
}

/// The paths a generic command would read among its arguments: operands, the value of
/// `--opt=value`, the attached value of a short option (`-f.env`), and `name=value` values.
pub(crate) fn path_like(words: &[Word]) -> Vec<String> {
    let mut out = Vec::new();
    for w in words {
        let t = w.text.as_str();
        if let Some(body) = t.strip_prefix("--") {
            if let Some((_, v)) = body.split_once('=') {
                out.push(v.to_string());
            }
        } else if let Some(body) = t.strip_prefix('-') {
            if body.chars().count() > 1 {
                let rest: String = body.chars().skip(1).collect();
                out.push(rest);
            }
        } else {
            if let Some((_, v)) = t.split_once('=') {
                out.push(v.to_string());
            }
            out.push(t.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Word> {
        s.split(' ').map(Word::plain).collect()
    }

    #[test]
    fn clusters_and_long_options() {
        let g = Getopt {
            short_arg: "ef",
            short_opt: "i",
            long_arg: &["expression", "file"],
            stop_at_operand: false,
        };
        let (items, _) = getopt(&words("-ni.bak -e p --expr=q --in-pl f -- -x"), &g);
        let shown: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::Short { c, value } => format!("-{c}{}", text(value)),
                Item::Long { name, value } => format!("--{name}={}", text(value)),
                Item::Operand(k) => format!("@{k}"),
            })
            .collect();
        assert_eq!(
            shown,
            ["-n", "-i.bak", "-ep", "--expr=q", "--in-pl=", "@5", "@7"]
        );
        assert!(is_long("in-pl", "in-place"));
        assert!(!is_long("inplace", "in-place"));
    }
}
