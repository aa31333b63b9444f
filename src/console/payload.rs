//! A record's payload as a person reads it: JSON as it is; MessagePack (the
//! LangGraph Python saver's `msgpack` values) decoded into JSON, with each
//! extension that wraps a constructor call, `[module, name, arguments]`,
//! shown as `{"type": name, ...its arguments}`; anything else as text or
//! hex. Payloads are untrusted: decoding is bounded in depth and in the
//! bytes read, and the result is escaped by the page that shows it.

use serde_json::{Map, Value};

/// How deep the MessagePack decoder goes before it gives up.
const DEPTH_MAX: usize = 32;

/// The payload as JSON, if it is JSON or MessagePack.
pub fn readable(content_type: &str, bytes: &[u8]) -> Option<Value> {
    if content_type.contains("msgpack") {
        return msgpack(bytes);
    }
    serde_json::from_slice::<Value>(bytes).ok()
}

/// A session's item (an Agents SDK item, an ADK event) as who said it and
/// what: its role or author, and its text, call or output.
pub fn item(content_type: &str, bytes: &[u8], max: usize) -> (String, String) {
    let Some(value) = readable(content_type, bytes) else {
        return (String::new(), super::view::bytes_text(bytes, max));
    };
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let who = field(&value, "author").or_else(|| field(&value, "role")).or_else(|| field(&value, "type"));
    let content = value.get("content").unwrap_or(&Value::Null);
    let parts = content.get("parts").or(Some(content)).and_then(Value::as_array);
    let texts: Vec<String> = parts
        .into_iter()
        .flatten()
        .filter_map(|part| match part {
            Value::String(text) => Some(text.clone()),
            part => field(part, "text").or_else(|| {
                ["functionCall", "functionResponse"].iter().find_map(|k| part.get(*k)).map(|call| call.to_string())
            }),
        })
        .collect();
    let text = match (content, texts.is_empty()) {
        (Value::String(text), _) => text.clone(),
        (_, false) => texts.join(" "),
        _ => match (field(&value, "name"), value.get("arguments").or(value.get("output"))) {
            (Some(name), Some(args)) => {
                format!("{name}({})", args.as_str().map_or_else(|| args.to_string(), str::to_owned))
            }
            _ => value.to_string(),
        },
    };
    (who.unwrap_or_default(), super::view::cut(&text, max))
}

/// The payload on one line of at most `max` characters.
pub fn line(content_type: &str, bytes: &[u8], max: usize) -> String {
    match readable(content_type, bytes) {
        Some(Value::String(text)) => super::view::cut(&text, max),
        Some(value) => super::view::cut(&value.to_string(), max),
        None => super::view::bytes_text(bytes, max),
    }
}

fn msgpack(bytes: &[u8]) -> Option<Value> {
    let mut reader = bytes;
    let value = rmpv::decode::read_value_with_max_depth(&mut reader, DEPTH_MAX).ok()?;
    reader.is_empty().then(|| json(value, 0))
}

fn json(value: rmpv::Value, depth: usize) -> Value {
    use rmpv::Value as M;
    match value {
        M::Nil => Value::Null,
        M::Boolean(b) => Value::Bool(b),
        M::Integer(n) => n.as_i64().map(Value::from).or_else(|| n.as_u64().map(Value::from)).unwrap_or(Value::Null),
        M::F32(f) => Value::from(f64::from(f)),
        M::F64(f) => Value::from(f),
        M::String(s) => Value::String(s.into_str().unwrap_or_default()),
        M::Binary(b) => Value::String(super::view::bytes_text(&b, 200)),
        M::Array(items) => Value::Array(items.into_iter().map(|v| json(v, depth + 1)).collect()),
        M::Map(pairs) => Value::Object(pairs.into_iter().map(|(k, v)| (key(k), json(v, depth + 1))).collect()),
        M::Ext(code, data) => extension(code, &data, depth),
    }
}

fn key(k: rmpv::Value) -> String {
    match k {
        rmpv::Value::String(s) => s.into_str().unwrap_or_default(),
        other => other.to_string(),
    }
}

/// An extension: a constructor call `[module, name, arguments…]` as an
/// object naming its type, else its code and bytes.
fn extension(code: i8, data: &[u8], depth: usize) -> Value {
    let inner = (depth < DEPTH_MAX).then(|| msgpack(data)).flatten();
    let Some(Value::Array(mut parts)) = inner else {
        return serde_json::json!({ "extension": code, "bytes": super::view::bytes_text(data, 200) });
    };
    let named = matches!(parts.as_slice(), [Value::String(_), Value::String(_), ..]);
    if !named {
        return Value::Array(parts);
    }
    let rest: Vec<Value> = parts.split_off(2);
    let mut object = Map::new();
    object.insert("type".to_owned(), parts.pop().unwrap_or(Value::Null));
    match rest.into_iter().next() {
        Some(Value::Object(arguments)) => object.extend(arguments),
        Some(Value::Null) | None => {}
        Some(argument) => {
            object.insert("args".to_owned(), argument);
        }
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(value: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).unwrap();
        out
    }

    #[test]
    fn json_reads_as_it_is_and_other_bytes_as_text() {
        assert_eq!(readable("json", br#"{"a": 1}"#), Some(serde_json::json!({"a": 1})));
        assert_eq!(readable("bytes", b"\xff\xfe"), None);
        assert_eq!(line("json", br#""approve?""#, 60), "approve?");
    }

    #[test]
    fn items_say_who_and_what() {
        let agents = br#"{"role": "user", "content": "Where is my order?"}"#;
        assert_eq!(item("application/json", agents, 80), ("user".into(), "Where is my order?".into()));
        let output =
            br#"{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On its way."}]}"#;
        assert_eq!(item("application/json", output, 80), ("assistant".into(), "On its way.".into()));
        let call = br#"{"type": "function_call", "name": "refund", "arguments": "{\"amount\": 40}"}"#;
        assert_eq!(item("application/json", call, 80), ("function_call".into(), r#"refund({"amount": 40})"#.into()));
        let adk = br#"{"author": "user", "content": {"role": "user", "parts": [{"text": "hi"}, {"text": "there"}]}}"#;
        assert_eq!(item("application/json", adk, 80), ("user".into(), "hi there".into()));
    }

    #[test]
    fn a_constructor_extension_names_its_type_and_arguments() {
        use rmpv::Value as M;
        let call = M::Array(vec![
            M::from("langgraph.types"),
            M::from("Interrupt"),
            M::Map(vec![(M::from("value"), M::from("Refund 40 EUR?")), (M::from("id"), M::from("abc"))]),
        ]);
        let writes = M::Array(vec![M::Ext(2, encode(&call))]);
        let shown = readable("msgpack", &encode(&writes)).unwrap();
        assert_eq!(shown, serde_json::json!([{"type": "Interrupt", "value": "Refund 40 EUR?", "id": "abc"}]));
    }

    #[test]
    fn truncated_or_foreign_msgpack_is_not_decoded() {
        let whole = encode(&rmpv::Value::Array(vec![rmpv::Value::from("x"); 3]));
        assert_eq!(readable("msgpack", &whole[..whole.len() - 1]), None);
        assert!(line("msgpack", &whole[..2], 60).len() <= 60 * 4);
        let opaque = encode(&rmpv::Value::Ext(7, vec![0xc1]));
        assert_eq!(readable("msgpack", &opaque).unwrap()["extension"], 7);
    }
}
