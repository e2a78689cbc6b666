//! Tool-call arguments: parsed once, read with lenient, well-explained accessors.
//!
//! Models send arguments as a JSON string (sometimes empty, sometimes an object, sometimes a
//! JSON string that itself contains the object). Like Continue, numbers and booleans are also
//! accepted as strings (`"12"`, `"true"`). Every failure names the argument and its type.

use serde_json::{Map, Value};

use super::ToolError;
use crate::openai::kind_of;
use crate::text::preview;

/// The arguments of one tool call.
#[derive(Debug, Clone, Default)]
pub struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// Parses the raw arguments string. An empty string means no arguments.
    pub fn parse(raw: &str) -> Result<Args, String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Ok(Args::default());
        }
        let value: Value = serde_json::from_str(trimmed).map_err(|e| {
            format!(
                "the arguments are not valid JSON ({e}). Send one JSON object, for example \
                 {{\"filepath\": \"src/main.rs\"}}. You sent: {}",
                preview(trimmed, 300)
            )
        })?;
        match value {
            Value::Object(map) => Ok(Args { map }),
            // Some models double-encode: "{\"filepath\":\"a\"}".
            Value::String(s) => match serde_json::from_str::<Value>(&s) {
                Ok(Value::Object(map)) => Ok(Args { map }),
                _ => Err(format!(
                    "the arguments must be a JSON object, got a string: {}",
                    preview(&s, 200)
                )),
            },
            Value::Null => Ok(Args::default()),
            other => Err(format!(
                "the arguments must be a JSON object, got {}",
                kind_of(&other)
            )),
        }
    }

    pub fn from_map(map: Map<String, Value>) -> Args {
        Args { map }
    }

    /// The arguments as one JSON object (what an MCP server gets).
    pub fn to_value(&self) -> Value {
        Value::Object(self.map.clone())
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A required, non-blank string.
    pub fn string(&self, name: &str) -> Result<String, ToolError> {
        match self.opt_string(name)? {
            Some(s) => Ok(s),
            None => Err(ToolError::InvalidArguments(format!(
                "`{name}` is required and must be a non-empty string"
            ))),
        }
    }

    /// An optional string; blank counts as absent.
    pub fn opt_string(&self, name: &str) -> Result<Option<String>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ToolError::InvalidArguments(format!(
                "`{name}` must be a string, got {}",
                kind_of(other)
            ))),
        }
    }

    /// An optional boolean (also `"true"`/`"false"` in any case).
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(other) => Err(ToolError::InvalidArguments(format!(
                "`{name}` must be true or false, got {other}"
            ))),
        }
    }

    /// A required integer (numbers are floored; numeric strings accepted).
    pub fn integer(&self, name: &str) -> Result<i64, ToolError> {
        match self.get(name) {
            None => Err(ToolError::InvalidArguments(format!(
                "`{name}` is required and must be a number"
            ))),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f.floor() as i64))
                .ok_or_else(|| {
                    ToolError::InvalidArguments(format!("`{name}` must be a whole number, got {n}"))
                }),
            Some(Value::String(s)) => s.trim().parse::<i64>().map_err(|_| {
                ToolError::InvalidArguments(format!("`{name}` must be a number, got {s:?}"))
            }),
            Some(other) => Err(ToolError::InvalidArguments(format!(
                "`{name}` must be a number, got {}",
                kind_of(other)
            ))),
        }
    }

    /// The arguments in a canonical form (sorted keys), for detecting repeated calls.
    pub fn canonical(&self) -> String {
        let sorted: std::collections::BTreeMap<&String, &Value> = self.map.iter().collect();
        serde_json::to_string(&sorted).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shapes_models_send() {
        assert!(Args::parse("").unwrap().get("x").is_none());
        assert!(Args::parse("null").unwrap().get("x").is_none());
        let a = Args::parse(r#"{"filepath":"a.rs","n":"12","f":3.7,"b":"TRUE"}"#).unwrap();
        assert_eq!(a.string("filepath").unwrap(), "a.rs");
        assert_eq!(a.integer("n").unwrap(), 12);
        assert_eq!(a.integer("f").unwrap(), 3);
        assert_eq!(a.opt_bool("b").unwrap(), Some(true));
        let a = Args::parse(r#""{\"filepath\":\"b.rs\"}""#).unwrap();
        assert_eq!(a.string("filepath").unwrap(), "b.rs");
    }

    #[test]
    fn explains_bad_arguments() {
        let e = Args::parse(r#"{"filepath": }"#).unwrap_err();
        assert!(
            e.contains("not valid JSON") && e.contains("You sent: {\"filepath\": }"),
            "{e}"
        );
        assert!(Args::parse("[1]").unwrap_err().contains("got an array"));
        let a = Args::parse(r#"{"filepath":"  ","n":"x","b":1,"s":5}"#).unwrap();
        assert!(
            a.string("filepath")
                .unwrap_err()
                .to_string()
                .contains("`filepath` is required")
        );
        assert!(
            a.integer("n")
                .unwrap_err()
                .to_string()
                .contains("must be a number")
        );
        assert!(
            a.opt_bool("b")
                .unwrap_err()
                .to_string()
                .contains("true or false")
        );
        assert!(
            a.string("s")
                .unwrap_err()
                .to_string()
                .contains("got a number")
        );
    }
}
