//! The QMP request envelope: `{"execute": ..., "arguments": {...}, "id": ...}` validated like `qmp-dispatch.c`.
//!
//! Members are checked in QEMU's QDict order; the first offending member decides the error. The `id` is
//! picked up before any check (QEMU reads it right after the "must be an object" test), so every error reply about
//! a well-formed object still echoes it.

use serde_json::{Map, Value};

use crate::qga::error::QgaError;
use crate::qga::qdict::qdict_order;
use crate::qga::schema::Command;

/// A validated request envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The command name (not yet checked against the schema).
    pub execute: String,
    /// The `arguments` object, if the request had one.
    pub arguments: Option<Map<String, Value>>,
    /// The request id, echoed verbatim in the reply (any JSON value).
    pub id: Option<Value>,
}

/// An invalid request: the error to send and the id to echo with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct RequestError {
    /// The request's `id`, if it had one.
    pub id: Option<Value>,
    /// The error reply body.
    pub error: QgaError,
}

impl Request {
    /// Validates one top-level JSON value from the stream as a QGA request.
    ///
    /// Errors: "QMP input must be a JSON object", "QMP input member 'execute' must be a string",
    /// "QMP input member 'arguments' must be an object", "QMP input member 'X' is unexpected" (also for
    /// `exec-oob`: QGA never allows out-of-band execution), "QMP input lacks member 'execute'".
    pub fn from_value(value: Value) -> Result<Request, RequestError> {
        let Value::Object(mut dict) = value else {
            return Err(RequestError {
                id: None,
                error: QgaError::input_not_object(),
            });
        };
        let id = dict.get("id").cloned();
        let fail = |error: QgaError| RequestError {
            id: id.clone(),
            error,
        };
        let mut has_execute = false;
        // qmp-dispatch walks the members in QDict order; the first offending one decides the error.
        for (key, val) in qdict_order(&dict) {
            match key.as_str() {
                "execute" => {
                    if !val.is_string() {
                        return Err(fail(QgaError::input_member_type("execute", "a string")));
                    }
                    has_execute = true;
                }
                "arguments" => {
                    if !val.is_object() {
                        return Err(fail(QgaError::input_member_type("arguments", "an object")));
                    }
                }
                "id" => {}
                other => return Err(fail(QgaError::input_member_unexpected(other))),
            }
        }
        if !has_execute {
            return Err(fail(QgaError::input_lacks_member("execute")));
        }
        let execute = match dict.remove("execute") {
            Some(Value::String(s)) => s,
            _ => return Err(fail(QgaError::input_lacks_member("execute"))),
        };
        let arguments = match dict.remove("arguments") {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        Ok(Request {
            execute,
            arguments,
            id,
        })
    }

    /// Parses the command and its arguments against the schema ([`Command::parse`]).
    pub fn command(&self) -> Result<Command, QgaError> {
        Command::parse(&self.execute, self.arguments.as_ref())
    }
}

/// Encodes a request for the host side: `{"execute": "X", "arguments": {...}, "id": ...}` in compact JSON
/// followed by `\n` (qemu-ga doesn't need the newline, but line-based agents and logs like it).
///
/// `args` is left out when `None`; `id` likewise.
pub fn encode_request(
    execute: &str,
    args: Option<&Map<String, Value>>,
    id: Option<&Value>,
) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("execute".to_owned(), Value::String(execute.to_owned()));
    if let Some(a) = args {
        m.insert("arguments".to_owned(), Value::Object(a.clone()));
    }
    if let Some(id) = id {
        m.insert("id".to_owned(), id.clone());
    }
    // Serializing a `Value` cannot fail (all keys are strings); fall back to an empty line just in case.
    let mut out = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> RequestError {
        Request::from_value(v).unwrap_err()
    }

    #[test]
    fn envelope_errors_with_qemu_texts_and_id() {
        let e = err(json!([1]));
        assert_eq!(e.error.desc, "QMP input must be a JSON object");
        assert_eq!(e.id, None);
        let e = err(json!({"exec-oob": "guest-ping", "id": 3}));
        assert_eq!(e.error.desc, "QMP input member 'exec-oob' is unexpected");
        assert_eq!(e.id, Some(json!(3)));
        let e = err(json!({"id": "x"}));
        assert_eq!(e.error.desc, "QMP input lacks member 'execute'");
        assert_eq!(e.id, Some(json!("x")));
        let e = err(json!({"execute": 1}));
        assert_eq!(e.error.desc, "QMP input member 'execute' must be a string");
        let e = err(json!({"execute": "guest-ping", "arguments": null, "id": [1, {"a": 2}]}));
        assert_eq!(
            e.error.desc,
            "QMP input member 'arguments' must be an object"
        );
        assert_eq!(e.id, Some(json!([1, {"a": 2}])));
    }

    #[test]
    fn valid_request() {
        let r = Request::from_value(
            json!({"id": null, "execute": "guest-sync", "arguments": {"id": 5}}),
        )
        .unwrap();
        assert_eq!(r.execute, "guest-sync");
        assert_eq!(r.id, Some(Value::Null));
        assert_eq!(r.command().unwrap().name(), "guest-sync");
    }

    #[test]
    fn encode_request_shape() {
        let args = json!({"id": 42});
        let out = encode_request("guest-sync-delimited", args.as_object(), None);
        assert_eq!(
            out,
            b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}\n"
        );
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back["arguments"]["id"], 42);
    }
}
