//! Typed fields taken out of a request's JSON object, with errors that name the field and say
//! what it must be (`` `stream` must be true or false, got a string ``). Shared by the chat
//! and the Responses request parsers.
//!
//! A field that is missing and one that is `null` are the same: absent (`None`).

use serde_json::{Map, Number, Value};

use super::{RequestError, kind_of};

/// The fields of a JSON object, taken out one by one; what is left is [`Fields::rest`].
pub struct Fields {
    map: Map<String, Value>,
}

impl Fields {
    pub fn new(map: Map<String, Value>) -> Fields {
        Fields { map }
    }

    /// The field as sent (`null` included), taken out.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// The field, taken out; `None` when it is missing or `null`.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// The field, left in place; `None` when it is missing or `null`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// `true` or `false`.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, RequestError> {
        bool_at(key, self.take(key).as_ref())
    }

    /// A string; `must_be` says what it stands for ("a string (the system message)").
    pub fn string(&mut self, key: &str, must_be: &str) -> Result<Option<String>, RequestError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(key, must_be, &other)),
        }
    }

    /// A number; `must_be` says which ("a number").
    pub fn number(&mut self, key: &str, must_be: &str) -> Result<Option<Number>, RequestError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n)),
            Some(other) => Err(wrong_type(key, must_be, &other)),
        }
    }

    /// An array; `must_be` says of what ("an array of messages").
    pub fn array(&mut self, key: &str, must_be: &str) -> Result<Option<Vec<Value>>, RequestError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(wrong_type(key, must_be, &other)),
        }
    }

    /// An object; `must_be` says which ("an object such as {\"effort\":\"medium\"}").
    pub fn object(
        &mut self,
        key: &str,
        must_be: &str,
    ) -> Result<Option<Map<String, Value>>, RequestError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(other) => Err(wrong_type(key, must_be, &other)),
        }
    }

    /// The fields not taken.
    pub fn rest(self) -> Map<String, Value> {
        self.map
    }
}

/// A field of the wrong type: `` `param` must be {must_be}, got {what it is} ``.
pub fn wrong_type(param: &str, must_be: &str, got: &Value) -> RequestError {
    RequestError::invalid(
        param,
        format!("`{param}` must be {must_be}, got {}", kind_of(got)),
    )
}

/// A nested value (`stream_options.include_usage`) that must be `true` or `false`.
pub fn bool_at(param: &str, v: Option<&Value>) -> Result<Option<bool>, RequestError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(param, "true or false", other)),
    }
}

/// A nested value (`text.verbosity`) that must be a string.
pub fn str_at<'a>(
    param: &str,
    must_be: &str,
    v: Option<&'a Value>,
) -> Result<Option<&'a str>, RequestError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(param, must_be, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Fields {
        match v {
            Value::Object(m) => Fields::new(m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn missing_and_null_are_absent_and_wrong_types_are_named() {
        let mut f = fields(json!({"a": null, "b": true, "s": 3, "o": {"x": "y"}, "n": "1"}));
        assert_eq!(f.bool("a"), Ok(None));
        assert_eq!(f.bool("missing"), Ok(None));
        assert_eq!(f.bool("b"), Ok(Some(true)));
        let e = f.string("s", "a string").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("s"));
        assert_eq!(e.message, "`s` must be a string, got a number");
        assert!(f.object("o", "an object").unwrap().is_some());
        let e = f.number("n", "a number").unwrap_err();
        assert_eq!(e.message, "`n` must be a number, got a string");
        assert!(f.rest().is_empty());
        let e = bool_at("x.y", Some(&json!([]))).unwrap_err();
        assert_eq!(e.message, "`x.y` must be true or false, got an array");
        assert_eq!(str_at("x.z", "a string", Some(&json!("v"))), Ok(Some("v")));
    }
}
