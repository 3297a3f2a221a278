//! Reading objects tagged by a field (`{"provider": …}`, `{"kind": …}`) so that errors inside a variant keep
//! their field path, and naming a JSON value's kind in messages.

use serde::Deserializer;
use serde::de::Deserialize;

/// Splits a `{"provider": …, …}` object (or another `tag`) into its tag and the remaining fields. Internally
/// tagged enums derived by serde buffer their content and lose the path of errors inside it; deserializing the
/// variant with [`variant`] keeps it (as a `field `…`: ` prefix that [`super::parse_json`] folds into the field
/// path).
pub(super) fn tagged<'de, D: Deserializer<'de>>(
    d: D,
    tag: &'static str,
    known: &[&'static str],
) -> Result<(String, serde_json::Map<String, serde_json::Value>), D::Error> {
    use serde::de::Error;
    let mut map = match serde_json::Value::deserialize(d)? {
        serde_json::Value::Object(map) => map,
        other => {
            return Err(D::Error::custom(format!(
                "invalid type: {}, expected an object with a \"{tag}\"",
                json_kind(&other)
            )));
        }
    };
    let value = match map.remove(tag) {
        Some(serde_json::Value::String(p)) => p,
        Some(other) => {
            return Err(D::Error::custom(format!(
                "field `{tag}`: invalid type: {}, expected a string",
                json_kind(&other)
            )));
        }
        None => return Err(D::Error::missing_field(tag)),
    };
    if !known.contains(&value.as_str()) {
        return Err(D::Error::custom(format!(
            "field `{tag}`: unknown {tag} `{value}`, expected one of {}",
            known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok((value, map))
}

pub(super) fn variant<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    rest: serde_json::Map<String, serde_json::Value>,
) -> Result<T, E> {
    serde_path_to_error::deserialize(serde_json::Value::Object(rest)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            E::custom(message)
        } else {
            E::custom(format!("field `{path}`: {message}"))
        }
    })
}

pub(super) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
