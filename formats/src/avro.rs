//! Avro of Debezium's records, as Kafka Connect's `AvroConverter` writes them: Confluent's
//! `AvroData` 7.0 (what Debezium 3.6 ships) turns the record's Kafka Connect schema into an
//! Avro schema and its value into an Avro datum. siphon makes the same Connect schema and
//! payload as for JSON ([`crate::debezium`]) and converts them here, so that the schema text
//! registered and the bytes written are Debezium's own (`tests/debezium.rs` compares them with
//! the real converter's):
//!
//! - a struct is a record named by its Connect name split at the last dot (`a.b.Value` is
//!   `Value` in namespace `a.b`), an unnamed one `io.confluent.connect.avro.ConnectDefault`,
//!   `…2`, …; a record named again is written as a reference to the first;
//! - `int8`/`int16` are Avro `int` with `connect.type`, `int64` `long`, `float` and `double`
//!   themselves; Kafka Connect's Decimal, Date, Time and Timestamp take Avro's logical
//!   types (`decimal` with `scale` and `precision`, 64 without `connect.decimal.precision`);
//!   Debezium's own names (`io.debezium.time.*`, `io.debezium.data.*`) travel as
//!   `connect.name` only, with `connect.version`, `connect.parameters`, `connect.doc` and
//!   `connect.default`, in `AvroData`'s order;
//! - an optional schema is the union `["null", T]`, or `[T, "null"]` where it has a default
//!   (a struct: always null first); an optional field without a default defaults to null, and
//!   a null value of a field with a default is written as the default, as Kafka Connect's
//!   `Struct.get` hands it to the converter.
//!
//! The schema text is Avro's compact `Schema.toString()`, keys in its order. A record or field
//! name Avro refuses (a column named `first name`) has each character it refuses replaced by
//! `_`, as Debezium's `field.name.adjustment.mode = avro` does; Debezium without that setting
//! stops on such a name.
//!
//! siphon writes the schema text and the binary encoding itself rather than through the
//! `apache-avro` crate, which the tests use to read them back: that crate refuses namespaces
//! Avro's Java parser (and so Debezium) accepts, such as a topic prefix `my-shop`.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value as Json, json};

use crate::json::parse_float;

/// An Avro schema made from a Kafka Connect schema: its text, as registered, and how a value
/// of the Connect schema is written in it.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    text: String,
    root: Node,
}

/// How a value is written.
#[derive(Debug, Clone)]
enum Node {
    Int,
    Long,
    Float,
    Double,
    Boolean,
    /// Text, and the text written where it has none (see [`zero`]).
    String {
        zero: &'static str,
    },
    /// Bytes, and the bytes written where it has none: a decimal's are its unscaled zero.
    Bytes {
        zero: &'static [u8],
    },
    Array(Box<Node>),
    Record(Vec<Field>),
    /// A union of null and `value`; `null_first` says which branch is 0.
    Optional {
        null_first: bool,
        value: Box<Node>,
    },
}

/// A record's field: its name in the Connect payload, how its value is written, and the
/// value written for a null.
#[derive(Debug, Clone)]
struct Field {
    name: String,
    node: Node,
    default: Option<Json>,
}

impl AvroSchema {
    /// The Avro schema of `connect`, a Kafka Connect schema as its JSON converter writes it
    /// (`{"type":"struct","name":…,"fields":[…]}`). The error names what cannot be converted.
    pub fn from_connect(connect: &Json) -> Result<AvroSchema, String> {
        let mut builder = Builder::default();
        let (schema, root) = builder.schema(connect)?;
        let text = serde_json::to_string(&schema).map_err(|e| e.to_string())?;
        Ok(AvroSchema { text, root })
    }

    /// The schema's text: what a schema registry is given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Appends `value` (a Connect payload of the schema, as Kafka Connect's JSON converter
    /// writes it: bytes in base64) to `out` in Avro's binary encoding. Every value is written:
    /// a null the schema cannot hold as its type's zero, a value of another kind than its
    /// schema's too, and then its field's path is returned, for a warning.
    #[must_use]
    pub fn write(&self, value: &Json, out: &mut Vec<u8>) -> Vec<String> {
        let mut mismatched = Vec::new();
        write(&self.root, value, out, &mut Vec::new(), &mut mismatched);
        mismatched
    }
}

/// Converts schemas the way `AvroData.fromConnectSchema` does, keeping what `Schema.toString`
/// needs: the named records already written and the enclosing namespace.
#[derive(Debug, Default)]
struct Builder {
    /// Records already written, by full name.
    records: HashMap<String, Node>,
    /// The namespace of the record whose fields are being written.
    namespace: Option<String>,
    /// Unnamed records so far.
    unnamed: u32,
}

impl Builder {
    /// The schema at one place (a union where the Connect schema is optional).
    fn schema(&mut self, connect: &Json) -> Result<(Json, Node), String> {
        let optional = connect["optional"].as_bool().unwrap_or(false);
        let has_default = !connect["default"].is_null();
        let (base, node) = self.base(connect)?;
        if !optional {
            return Ok((base, node));
        }
        let is_struct = connect["type"] == "struct";
        let null_first = is_struct || !has_default;
        let union = if null_first {
            json!(["null", base])
        } else {
            json!([base, "null"])
        };
        Ok((
            union,
            Node::Optional {
                null_first,
                value: Box::new(node),
            },
        ))
    }

    /// The schema of a value that is present.
    fn base(&mut self, connect: &Json) -> Result<(Json, Node), String> {
        let ty = connect["type"].as_str().unwrap_or_default();
        let name = connect["name"].as_str();
        let mut out = Map::new();
        let node = match ty {
            "struct" => return self.record(connect, name),
            "array" => {
                out.insert("type".into(), json!("array"));
                let (items, item) = self.schema(&connect["items"])?;
                out.insert("items".into(), items);
                Node::Array(Box::new(item))
            }
            _ => {
                let (avro, node) = match ty {
                    "int8" | "int16" | "int32" => ("int", Node::Int),
                    "int64" => ("long", Node::Long),
                    // Kafka Connect's JSON names of FLOAT32 and FLOAT64.
                    "float" => ("float", Node::Float),
                    "double" => ("double", Node::Double),
                    "boolean" => ("boolean", Node::Boolean),
                    "string" => ("string", Node::String { zero: "" }),
                    "bytes" => (
                        "bytes",
                        Node::Bytes {
                            zero: if name == Some(DECIMAL) { &[0] } else { &[] },
                        },
                    ),
                    other => {
                        return Err(format!(
                            "Kafka Connect type {other:?} has no Avro form here"
                        ));
                    }
                };
                out.insert("type".into(), json!(avro));
                node
            }
        };
        let parameters = connect["parameters"].as_object();
        let parameter = |key: &str| parameters.and_then(|p| p.get(key)).and_then(Json::as_str);
        let decimal = name == Some(DECIMAL);
        if decimal {
            let number = |s: Option<&str>, default: i64| {
                s.and_then(|s| s.parse::<i64>().ok()).unwrap_or(default)
            };
            out.insert("scale".into(), json!(number(parameter("scale"), 0)));
            out.insert(
                "precision".into(),
                json!(number(parameter("connect.decimal.precision"), 64)),
            );
        }
        metadata(connect, &mut out);
        if matches!(ty, "int8" | "int16") {
            out.insert("connect.type".into(), json!(ty));
        }
        let logical = match name {
            _ if decimal => Some("decimal"),
            Some("org.apache.kafka.connect.data.Date") => Some("date"),
            Some("org.apache.kafka.connect.data.Time") => Some("time-millis"),
            Some("org.apache.kafka.connect.data.Timestamp") => Some("timestamp-millis"),
            _ => None,
        };
        if let Some(logical) = logical {
            out.insert("logicalType".into(), json!(logical));
        }
        if let Some(parameters) = parameters {
            for (key, value) in parameters.iter().filter(|(k, _)| k.starts_with("avro")) {
                out.insert(key.clone(), value.clone());
            }
        }
        if out.len() == 1 {
            // A primitive without properties is written as its name.
            return Ok((out.remove("type").unwrap_or_default(), node));
        }
        Ok((Json::Object(out), node))
    }

    /// A struct's record, or a reference to it where it was written before.
    fn record(&mut self, connect: &Json, name: Option<&str>) -> Result<(Json, Node), String> {
        let (namespace, short) = match name {
            Some(full) => match full.trim_end_matches('.').rsplit_once('.') {
                Some((namespace, short)) => (Some(namespace.to_owned()), short.to_owned()),
                None => (None, full.to_owned()),
            },
            None => {
                self.unnamed += 1;
                let short = match self.unnamed {
                    1 => "ConnectDefault".to_owned(),
                    n => format!("ConnectDefault{n}"),
                };
                (Some("io.confluent.connect.avro".to_owned()), short)
            }
        };
        let short = avro_name(&short);
        let full = match &namespace {
            Some(ns) => format!("{ns}.{short}"),
            None => short.clone(),
        };
        if let Some(node) = self.records.get(&full) {
            // Avro writes a named type once, then its name: short within its own namespace.
            let reference = if namespace == self.namespace {
                short
            } else {
                full
            };
            return Ok((json!(reference), node.clone()));
        }
        let mut out = Map::new();
        out.insert("type".into(), json!("record"));
        out.insert("name".into(), json!(short));
        if namespace != self.namespace {
            out.insert(
                "namespace".into(),
                json!(namespace.clone().unwrap_or_default()),
            );
        }
        let enclosing = std::mem::replace(&mut self.namespace, namespace);
        let fields = connect["fields"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut written = Vec::with_capacity(fields.len());
        let mut nodes = Vec::with_capacity(fields.len());
        for field in fields {
            let field_name = field["field"].as_str().unwrap_or_default();
            let (schema, node) = self.schema(field)?;
            let mut f = Map::new();
            f.insert("name".into(), json!(avro_name(field_name)));
            f.insert("type".into(), schema);
            let default = (!field["default"].is_null()).then(|| field["default"].clone());
            // Avro takes a default only of the union's first branch: a struct's is never.
            match &default {
                Some(d) if field["type"] != "struct" => {
                    f.insert("default".into(), d.clone());
                }
                Some(_) => {}
                None if field["optional"].as_bool().unwrap_or(false) => {
                    f.insert("default".into(), Json::Null);
                }
                None => {}
            }
            written.push(Json::Object(f));
            nodes.push(Field {
                name: field_name.to_owned(),
                node,
                default,
            });
        }
        self.namespace = enclosing;
        out.insert("fields".into(), Json::Array(written));
        metadata(connect, &mut out);
        let node = Node::Record(nodes);
        self.records.insert(full, node.clone());
        Ok((Json::Object(out), node))
    }
}

/// Kafka Connect's name of its Decimal.
const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// `AvroData`'s properties from a Connect schema, in its order.
fn metadata(connect: &Json, out: &mut Map<String, Json>) {
    if let Some(doc) = connect.get("doc").filter(|d| !d.is_null()) {
        out.insert("connect.doc".into(), doc.clone());
    }
    if let Some(version) = connect.get("version").filter(|v| !v.is_null()) {
        out.insert("connect.version".into(), version.clone());
    }
    if let Some(parameters) = connect["parameters"].as_object().filter(|p| !p.is_empty()) {
        out.insert(
            "connect.parameters".into(),
            Json::Object(parameters.clone()),
        );
    }
    if let Some(default) = connect.get("default").filter(|d| !d.is_null()) {
        out.insert("connect.default".into(), default.clone());
    }
    if let Some(name) = connect.get("name").filter(|n| !n.is_null()) {
        out.insert("connect.name".into(), name.clone());
    }
}

/// A name as Avro takes it: a letter or `_`, then letters, digits or `_`; any other character
/// becomes `_` (Debezium's `avro` name adjustment).
fn avro_name(name: &str) -> String {
    let valid = |i: usize, c: char| c == '_' || c.is_alphabetic() || (i > 0 && c.is_alphanumeric());
    if name.chars().enumerate().all(|(i, c)| valid(i, c)) && !name.is_empty() {
        return name.to_owned();
    }
    let adjusted: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| if valid(i, c) { c } else { '_' })
        .collect();
    if adjusted.is_empty() {
        "_".to_owned()
    } else {
        adjusted
    }
}

/// Writes `value` as `node` says. A null where the schema has no null is written as the
/// type's zero (the payload should hold none: the Debezium formatter fills the NOT NULL
/// columns a delete's old row lacks with Debezium's values); a value of another kind too, its
/// field's path (`path`, the fields on the way) added to `mismatched`.
fn write(
    node: &Node,
    value: &Json,
    out: &mut Vec<u8>,
    path: &mut Vec<String>,
    mismatched: &mut Vec<String>,
) {
    if value.is_null() && !matches!(node, Node::Optional { .. }) {
        zero(node, out);
        return;
    }
    let written = match node {
        Node::Optional {
            null_first,
            value: inner,
        } => {
            if value.is_null() {
                varint(if *null_first { 0 } else { 1 }, out);
            } else {
                varint(if *null_first { 1 } else { 0 }, out);
                write(inner, value, out, path, mismatched);
            }
            true
        }
        Node::Int => value
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(|n| varint(i64::from(n), out))
            .is_some(),
        // An unsigned 64-bit value past i64 wraps, as Debezium's `long` mode writes it.
        #[allow(clippy::cast_possible_wrap)]
        Node::Long => value
            .as_i64()
            .or_else(|| value.as_u64().map(|u| u as i64))
            .map(|n| varint(n, out))
            .is_some(),
        #[allow(clippy::cast_possible_truncation)]
        Node::Float => parse_float(value)
            .map(|f| out.extend_from_slice(&(f as f32).to_le_bytes()))
            .is_some(),
        Node::Double => parse_float(value)
            .map(|f| out.extend_from_slice(&f.to_le_bytes()))
            .is_some(),
        Node::Boolean => value.as_bool().map(|b| out.push(u8::from(b))).is_some(),
        Node::String { .. } => value.as_str().map(|s| bytes(s.as_bytes(), out)).is_some(),
        Node::Bytes { .. } => value
            .as_str()
            .and_then(|s| BASE64.decode(s).ok())
            .map(|b| bytes(&b, out))
            .is_some(),
        Node::Array(item) => match value.as_array() {
            Some(items) => {
                if !items.is_empty() {
                    varint(items.len() as i64, out);
                    for v in items {
                        write(item, v, out, path, mismatched);
                    }
                }
                out.push(0);
                true
            }
            None => false,
        },
        Node::Record(fields) => match value.as_object() {
            Some(object) => {
                for field in fields {
                    let v = match (object.get(&field.name), &field.default) {
                        (None | Some(Json::Null), Some(default)) => default,
                        (Some(v), _) => v,
                        (None, None) => &Json::Null,
                    };
                    path.push(field.name.clone());
                    write(&field.node, v, out, path, mismatched);
                    path.pop();
                }
                true
            }
            None => false,
        },
    };
    if !written {
        zero(node, out);
        mismatched.push(if path.is_empty() {
            "the value".to_owned()
        } else {
            path.join(".")
        });
    }
}

/// The type's zero: 0, false, empty text, bytes or array, null where null is allowed, a
/// record of its fields' defaults or zeros.
fn zero(node: &Node, out: &mut Vec<u8>) {
    match node {
        Node::Int | Node::Long | Node::Boolean | Node::Array(_) => out.push(0),
        Node::String { zero } => bytes(zero.as_bytes(), out),
        Node::Bytes { zero } => bytes(zero, out),
        Node::Float => out.extend_from_slice(&0f32.to_le_bytes()),
        Node::Double => out.extend_from_slice(&0f64.to_le_bytes()),
        Node::Optional { null_first, .. } => varint(if *null_first { 0 } else { 1 }, out),
        Node::Record(fields) => {
            for field in fields {
                match &field.default {
                    Some(default) => {
                        write(&field.node, default, out, &mut Vec::new(), &mut Vec::new())
                    }
                    None => zero(&field.node, out),
                }
            }
        }
    }
}

/// Avro's zig-zag variable-length integer.
fn varint(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Length-prefixed bytes.
fn bytes(b: &[u8], out: &mut Vec<u8>) {
    varint(b.len() as i64, out);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Debezium-like envelope, by `AvroData` 7.0.16's rules (the real converter is compared
    /// with siphon on real tables in `tests/debezium.rs`).
    #[test]
    fn an_envelope_converts_as_avro_data_does() {
        let value = json!({
            "type": "struct", "optional": true, "name": "dbserver1.inventory.customers.Value",
            "fields": [
                {"type": "int32", "optional": false, "field": "id"},
                {"type": "string", "optional": false, "field": "first_name"},
                {"type": "string", "optional": true, "field": "email"},
                {"type": "bytes", "optional": true, "name": DECIMAL, "version": 1,
                 "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price"},
            ],
        });
        let mut after = value.clone();
        after["field"] = json!("after");
        let mut before = value;
        before["field"] = json!("before");
        let envelope = json!({
            "type": "struct", "optional": false, "name": "dbserver1.inventory.customers.Envelope",
            "version": 2, "doc": "envelope doc",
            "fields": [
                before, after,
                {"type": "struct", "optional": false, "name": "io.debezium.connector.mysql.Source",
                 "field": "source", "fields": [
                    {"type": "string", "optional": false, "field": "version"},
                    {"type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
                     "parameters": {"allowed": "true,last,false"}, "default": "false", "field": "snapshot"},
                 ]},
                {"type": "string", "optional": false, "field": "op"},
                {"type": "int64", "optional": true, "field": "ts_ms"},
            ],
        });
        let schema = AvroSchema::from_connect(&envelope).unwrap();
        assert_eq!(
            schema.text(),
            concat!(
                r#"{"type":"record","name":"Envelope","namespace":"dbserver1.inventory.customers","fields":["#,
                r#"{"name":"before","type":["null",{"type":"record","name":"Value","fields":["#,
                r#"{"name":"id","type":"int"},{"name":"first_name","type":"string"},"#,
                r#"{"name":"email","type":["null","string"],"default":null},"#,
                r#"{"name":"price","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null}],"#,
                r#""connect.name":"dbserver1.inventory.customers.Value"}],"default":null},"#,
                r#"{"name":"after","type":["null","Value"],"default":null},"#,
                r#"{"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.mysql","fields":["#,
                r#"{"name":"version","type":"string"},"#,
                r#"{"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"}],"#,
                r#""connect.name":"io.debezium.connector.mysql.Source"}},"#,
                r#"{"name":"op","type":"string"},{"name":"ts_ms","type":["null","long"],"default":null}],"#,
                r#""connect.doc":"envelope doc","connect.version":2,"connect.name":"dbserver1.inventory.customers.Envelope"}"#,
            )
        );
        // before null, after set (price 123.45: unscaled 12345 = 0x3039), the snapshot field
        // null (written as its default), op "c", ts_ms 1.
        let payload = json!({
            "before": null,
            "after": {"id": 1001, "first_name": "Sally", "email": null, "price": BASE64.encode([0x30, 0x39])},
            "source": {"version": "3.0", "snapshot": null},
            "op": "c",
            "ts_ms": 1,
        });
        let mut out = Vec::new();
        assert!(schema.write(&payload, &mut out).is_empty());
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "00",
                "02",
                "d20f",
                "0a53616c6c79",
                "00",
                "02043039", // before, after
                "06332e30",
                "00",
                "0a66616c7365", // source: version, snapshot "false"
                "0263",
                "0202", // op, ts_ms
            )
        );
    }

    #[test]
    fn unnamed_structs_and_primitives_take_avro_datas_names() {
        let connect = json!({
            "type": "struct", "optional": false, "fields": [
                {"type": "struct", "optional": true, "field": "inner",
                 "fields": [{"type": "int16", "optional": false, "field": "small"}]},
                {"type": "array", "optional": false, "field": "list",
                 "items": {"type": "double", "optional": true}},
                {"type": "int64", "optional": false, "name": "org.apache.kafka.connect.data.Timestamp",
                 "version": 1, "field": "at"},
                {"type": "string", "optional": false, "field": "first name"},
            ],
        });
        let schema = AvroSchema::from_connect(&connect).unwrap();
        assert_eq!(
            schema.text(),
            concat!(
                r#"{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":["#,
                r#"{"name":"inner","type":["null",{"type":"record","name":"ConnectDefault2","fields":[{"name":"small","type":{"type":"int","connect.type":"int16"}}]}],"default":null},"#,
                r#"{"name":"list","type":{"type":"array","items":["null","double"]}},"#,
                r#"{"name":"at","type":{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}},"#,
                r#"{"name":"first_name","type":"string"}]}"#,
            )
        );
        let mut out = Vec::new();
        let mismatched = schema.write(
            &json!({"inner": {"small": -3}, "list": [1.5, null, "NaN"], "at": -1, "first name": ""}),
            &mut out,
        );
        assert!(mismatched.is_empty());
        let mut expected = vec![0x02, 0x05, 0x06, 0x02];
        expected.extend_from_slice(&1.5f64.to_le_bytes());
        expected.push(0x00);
        expected.push(0x02);
        expected.extend_from_slice(&f64::NAN.to_le_bytes());
        expected.extend_from_slice(&[0x00, 0x01, 0x00]);
        assert_eq!(out, expected);
    }

    #[test]
    fn nulls_and_values_the_schema_cannot_hold_are_written_as_zeros() {
        let connect = json!({"type": "struct", "optional": false, "name": "t.Value", "fields": [
            {"type": "int32", "optional": false, "field": "n"},
            {"type": "string", "optional": false, "field": "s"},
            {"type": "struct", "optional": false, "name": "t.Inner", "field": "inner", "fields": [
                {"type": "double", "optional": false, "field": "d"},
                {"type": "string", "optional": true, "default": "x", "field": "e"},
            ]},
        ]});
        let schema = AvroSchema::from_connect(&connect).unwrap();
        let mut out = Vec::new();
        // Nulls where the schema holds none: zeros, no warning.
        assert!(
            schema
                .write(&json!({"n": 7, "s": null}), &mut out)
                .is_empty()
        );
        let mut expected = vec![0x0e, 0x00];
        expected.extend_from_slice(&0f64.to_le_bytes());
        expected.extend_from_slice(&[0x00, 0x02, b'x']);
        assert_eq!(out, expected);
        // A value of the wrong kind: a zero, and its field named.
        out.clear();
        let mismatched = schema.write(&json!({"n": "x", "s": "ok", "inner": {"d": [1]}}), &mut out);
        assert_eq!(mismatched, ["n", "inner.d"]);
    }
}
