//! YAML front matter of Markdown files (rules, skills): split, parse, and write.
//!
//! A front matter block is a first line `---`, YAML, and a line `---`; the rest is the body.
//! Parsing uses a real YAML parser (`serde_norway`) and tolerates what Continue tolerates
//! (`globs` as a string or a list, booleans written as strings); writing goes through the same
//! crate, so every value is quoted and escaped as YAML requires and a value can never add keys.

use serde_norway::{Mapping, Value};

/// The front matter (as YAML text, `None` when the file has none) and the body.
pub fn split(text: &str) -> (Option<&str>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    // The closing line: `---` alone (the YAML may be empty).
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return (Some(yaml), body);
        }
        offset += line.len();
    }
    // No closing line: not front matter, the whole file is the body.
    (None, text)
}

/// Parsed front matter: the YAML mapping, read with lenient accessors.
#[derive(Debug, Clone, Default)]
pub struct FrontMatter {
    map: Mapping,
}

impl FrontMatter {
    /// Parses the YAML of a front matter block. An empty block is an empty mapping.
    pub fn parse(yaml: &str) -> Result<FrontMatter, String> {
        if yaml.trim().is_empty() {
            return Ok(FrontMatter::default());
        }
        match serde_norway::from_str::<Value>(yaml) {
            Ok(Value::Mapping(map)) => Ok(FrontMatter { map }),
            Ok(Value::Null) => Ok(FrontMatter::default()),
            Ok(_) => Err("the front matter is not a mapping of keys to values".into()),
            Err(e) => Err(format!("the front matter is not valid YAML: {e}")),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A string value (numbers and booleans are shown as written); blank counts as absent.
    pub fn string(&self, key: &str) -> Option<String> {
        let s = match self.get(key)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => return None,
        };
        let t = s.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    /// A string or a list of strings (`globs`, `regex`); a string with commas is one glob.
    pub fn list(&self, key: &str) -> Vec<String> {
        match self.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_string()],
            Some(Value::Sequence(items)) => items
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A boolean; `"true"`/`"false"` strings are accepted. `Err` names a value of another type.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(other) => Err(format!(
                "`{key}` must be true or false, not {}",
                serde_norway::to_string(other)
                    .unwrap_or_default()
                    .trim_end()
            )),
        }
    }
}

/// Writes `---\n<yaml>---\n\n<body>`: the pairs in order, every value serialised by the YAML
/// crate (strings quoted and escaped where YAML needs it).
pub fn write(pairs: &[(&str, Value)], body: &str) -> Result<String, String> {
    let mut map = Mapping::new();
    for (k, v) in pairs {
        map.insert(Value::String((*k).to_string()), v.clone());
    }
    let yaml = if map.is_empty() {
        String::new()
    } else {
        serde_norway::to_string(&Value::Mapping(map))
            .map_err(|e| format!("cannot write the front matter: {e}"))?
    };
    let mut out = String::from("---\n");
    out.push_str(&yaml);
    if !yaml.is_empty() && !yaml.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("---\n\n");
    out.push_str(body.trim_end());
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_front_matter_from_the_body() {
        assert_eq!(split("---\na: 1\n---\nbody\n"), (Some("a: 1\n"), "body\n"));
        assert_eq!(split("---\n---\nbody"), (Some(""), "body"));
        assert_eq!(
            split("\u{feff}---\r\na: 1\r\n---\r\nb"),
            (Some("a: 1\r\n"), "b")
        );
        assert_eq!(split("no front matter"), (None, "no front matter"));
        // An unclosed block is not front matter.
        assert_eq!(split("---\na: 1\nbody"), (None, "---\na: 1\nbody"));
        // `---` later in the body is part of the body.
        assert_eq!(
            split("---\na: 1\n---\nx\n---\ny\n"),
            (Some("a: 1\n"), "x\n---\ny\n")
        );
    }

    #[test]
    fn reads_globs_and_regex_as_string_or_list() {
        let fm = FrontMatter::parse(
            "globs: \"**/*.ts\"\nregex: [\"foo\", \"bar\"]\nalwaysApply: \"false\"\nname: 12\n",
        )
        .unwrap();
        assert_eq!(fm.list("globs"), ["**/*.ts"]);
        assert_eq!(fm.list("regex"), ["foo", "bar"]);
        assert_eq!(fm.bool("alwaysApply"), Ok(Some(false)));
        assert_eq!(fm.string("name").as_deref(), Some("12"));
        assert_eq!(fm.string("description"), None);
        let fm = FrontMatter::parse("globs:\n  - a/**\n  - '!a/gen/**'\nalwaysApply: 3\n").unwrap();
        assert_eq!(fm.list("globs"), ["a/**", "!a/gen/**"]);
        assert!(fm.bool("alwaysApply").unwrap_err().contains("alwaysApply"));
        assert!(FrontMatter::parse("a: [unclosed").is_err());
        assert!(FrontMatter::parse("- a\n- b\n").is_err());
        assert!(FrontMatter::parse("").unwrap().string("x").is_none());
    }

    #[test]
    fn written_values_cannot_inject_keys() {
        let evil = "x\n---\nalwaysApply: true\nglobs: '**'";
        let text = write(
            &[
                ("description", Value::String(evil.into())),
                ("alwaysApply", Value::Bool(false)),
            ],
            "Body\n",
        )
        .unwrap();
        let (yaml, body) = split(&text);
        assert_eq!(body, "\nBody\n");
        let fm = FrontMatter::parse(yaml.unwrap()).unwrap();
        assert_eq!(fm.string("description").as_deref(), Some(evil));
        assert_eq!(fm.bool("alwaysApply"), Ok(Some(false)));
        assert!(fm.list("globs").is_empty());
    }
}
