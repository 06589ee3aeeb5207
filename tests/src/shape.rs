//! Reply *shapes* for the differential test: keys present/absent and JSON types, recursively, without values
//! that legitimately differ between two agents (times, pids, handles).

use std::collections::BTreeSet;

use serde_json::Value;

/// The JSON type name of a value (`int` and `float` are distinct: QAPI `int` vs `number`).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Compares the shapes of `a` and `b`; returns one line per difference (`path: a-side vs b-side`).
///
/// Arrays: every element of both sides must share one shape per side, merged over elements (keys present in
/// some elements count as optional). Two non-empty arrays compare their merged element shapes; an empty array
/// matches any array.
pub fn shape_diff(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at("$", a, b, &mut out);
    out
}

fn diff_at(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    let (ta, tb) = (type_name(a), type_name(b));
    let numeric = |t: &str| t == "int" || t == "float";
    if ta != tb && !(numeric(ta) && numeric(tb) && path.ends_with("login-time")) {
        out.push(format!(
            "{path}: {ta} ({}) vs {tb} ({})",
            short(a),
            short(b)
        ));
        return;
    }
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            let ka: BTreeSet<&String> = ma.keys().collect();
            let kb: BTreeSet<&String> = mb.keys().collect();
            for k in ka.difference(&kb) {
                out.push(format!(
                    "{path}.{k}: present ({}) vs absent",
                    short(&ma[*k])
                ));
            }
            for k in kb.difference(&ka) {
                out.push(format!(
                    "{path}.{k}: absent vs present ({})",
                    short(&mb[*k])
                ));
            }
            for k in ka.intersection(&kb) {
                diff_at(&format!("{path}.{k}"), &ma[*k], &mb[*k], out);
            }
        }
        (Value::Array(va), Value::Array(vb)) => {
            if va.is_empty() || vb.is_empty() {
                return;
            }
            let (sa, sb) = (merged_keys(va), merged_keys(vb));
            if sa != sb {
                out.push(format!("{path}[*]: element keys {sa:?} vs {sb:?}"));
            }
            diff_at(&format!("{path}[0]"), &va[0], &vb[0], out);
        }
        _ => {}
    }
}

/// For arrays of objects: the union of keys, each marked `?` when not in every element.
fn merged_keys(items: &[Value]) -> BTreeSet<String> {
    let all: Vec<BTreeSet<&String>> = items
        .iter()
        .filter_map(Value::as_object)
        .map(|m| m.keys().collect())
        .collect();
    let union: BTreeSet<&String> = all.iter().flatten().copied().collect();
    union
        .into_iter()
        .map(|k| {
            if all.iter().all(|s| s.contains(k)) {
                k.clone()
            } else {
                format!("{k}?")
            }
        })
        .collect()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!(
            "{}…",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 60)
                .last()
                .map(|(i, _)| i)
                .unwrap_or(0)]
        )
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn detects_missing_key_and_type_change() {
        let d = shape_diff(
            &json!({"return": {"a": 1, "b": "x"}}),
            &json!({"return": {"a": "1"}}),
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(shape_diff(
            &json!({"return": [{"a": 1}]}),
            &json!({"return": [{"a": 2}, {"a": 3}]})
        )
        .is_empty());
        assert!(!shape_diff(&json!([{"a": 1}]), &json!([{"a": 2}, {"b": 3}])).is_empty());
    }
}
