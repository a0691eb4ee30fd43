//! Kafka Connect's schemas of Debezium's records (`converter.schemas.enable`): the envelope,
//! Debezium's source struct, keys, and each column's type in each handling mode.

use super::*;

/// Kafka Connect's schema of an event as Debezium declares it (`converter.schemas.enable`):
/// the envelope with the table's row struct (from its schema record), Debezium's source
/// struct and the transaction block.
pub fn envelope_schema(event: &Event, schema: &TableSchema, modes: &Modes) -> Json {
    let prefix = topic(event);
    let row = |field: &str| {
        json!({
            "type": "struct",
            "fields": schema.columns.iter().map(|c| field_schema(c, modes)).collect::<Vec<_>>(),
            "optional": true,
            "name": format!("{prefix}.Value"),
            "field": field,
        })
    };
    let field = |ty: &str, optional: bool, name: &str| json!({"type": ty, "optional": optional, "field": name});
    let snapshot = json!({
        "type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
        "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
        "default": "false", "field": "snapshot",
    });
    json!({
        "type": "struct",
        "fields": [
            row("before"),
            row("after"),
            source_schema(event, snapshot),
            {
                "type": "struct",
                "fields": [
                    field("string", false, "id"),
                    field("int64", false, "total_order"),
                    field("int64", false, "data_collection_order"),
                ],
                "optional": true,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
            field("string", false, "op"),
            field("int64", true, "ts_ms"),
            field("int64", true, "ts_us"),
            field("int64", true, "ts_ns"),
        ],
        "optional": false,
        "name": format!("{prefix}.Envelope"),
        "version": 2,
    })
}

/// Debezium's `source` struct of the event's connector.
pub(super) fn source_schema(event: &Event, snapshot: Json) -> Json {
    let field = |ty: &str, optional: bool, name: &str| json!({"type": ty, "optional": optional, "field": name});
    let mut fields = vec![
        field("string", false, "version"),
        field("string", false, "connector"),
        field("string", false, "name"),
        field("int64", false, "ts_ms"),
        snapshot,
        field("string", false, "db"),
        field("string", true, "sequence"),
        field("int64", true, "ts_us"),
        field("int64", true, "ts_ns"),
    ];
    let connector = event.source.position.debezium_source(event.source.fields());
    fields.extend(
        connector
            .schema_fields
            .iter()
            .map(|(ty, optional, name)| field(ty, *optional, name)),
    );
    let name = connector.schema_name;
    json!({
        "type": "struct",
        "fields": fields,
        "optional": false,
        "name": name,
        "version": 1,
        "field": "source",
    })
}

/// Kafka Connect's schema of the record key: the key columns, `<topic>.Key`.
pub fn key_schema(event: &Event, schema: &TableSchema, modes: &Modes) -> Json {
    json!({
        "type": "struct",
        "fields": schema.key.iter().map(|&i| field_schema(&schema.columns[i], modes)).collect::<Vec<_>>(),
        "optional": false,
        "name": format!("{}.Key", topic(event)),
    })
}

/// A column's schema with its name, `optional` from its nullability.
pub(super) fn field_schema(column: &Column, modes: &Modes) -> Json {
    let mut schema = column_schema(column, modes);
    schema["field"] = json!(&*column.name);
    schema
}

/// A column's schema, `optional` from its nullability: the schema of a record key or value
/// that is one column's value (the outbox EventRouter's).
pub fn column_schema(column: &Column, modes: &Modes) -> Json {
    let mut schema = kind_schema(&column.kind, column, modes);
    schema["optional"] = json!(column.nullable);
    schema
}

/// The schema of values of a kind (an array's elements are always optional).
pub(super) fn kind_schema(kind: &ColumnKind, column: &Column, modes: &Modes) -> Json {
    let plain = |ty: &str| json!({"type": ty, "optional": true});
    let named =
        |ty: &str, name: &str| json!({"type": ty, "optional": true, "name": name, "version": 1});
    let precision = if (0..6).contains(&column.type_modifier) {
        column.type_modifier
    } else {
        6
    };
    match kind {
        ColumnKind::Bool => plain("boolean"),
        ColumnKind::Int16 => plain("int16"),
        ColumnKind::Int32 if mysql_type(Some(column)) == Some(MysqlType::Year) => {
            named("int32", "io.debezium.time.Year")
        }
        ColumnKind::Int32 => plain("int32"),
        ColumnKind::Int64 => plain("int64"),
        ColumnKind::Float32 => plain("float"),
        ColumnKind::Float64 => plain("double"),
        ColumnKind::Decimal { precision, scale } => {
            decimal_schema(*precision, *scale, modes.decimal)
        }
        ColumnKind::Text { .. } => plain("string"),
        ColumnKind::Bytes => match mysql_type(Some(column)) {
            Some(MysqlType::Bits(n)) => {
                let mut s = named("bytes", "io.debezium.data.Bits");
                s["parameters"] = json!({"length": n.to_string()});
                s
            }
            // Debezium turns bytes into text in its string modes; `bytes` stays bytes.
            _ => plain(if modes.binary == BinaryMode::Bytes {
                "bytes"
            } else {
                "string"
            }),
        },
        ColumnKind::Geometry { point } => spatial::schema(*point),
        ColumnKind::Json { .. } => named("string", "io.debezium.data.Json"),
        ColumnKind::Uuid => named("string", "io.debezium.data.Uuid"),
        ColumnKind::Enum { labels } => {
            let mut s = named("string", "io.debezium.data.Enum");
            s["parameters"] = json!({"allowed": labels.join(",")});
            s
        }
        ColumnKind::Date => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoDate"),
            TimeMode::Connect => named("int32", "org.apache.kafka.connect.data.Date"),
            _ => named("int32", "io.debezium.time.Date"),
        },
        ColumnKind::Time | ColumnKind::Duration => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoTime"),
            TimeMode::Connect => named("int32", "org.apache.kafka.connect.data.Time"),
            TimeMode::Adaptive if precision <= 3 => named("int32", "io.debezium.time.Time"),
            _ => named("int64", "io.debezium.time.MicroTime"),
        },
        ColumnKind::TimeTz => named("string", "io.debezium.time.ZonedTime"),
        ColumnKind::Timestamp => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoTimestamp"),
            TimeMode::Connect => named("int64", "org.apache.kafka.connect.data.Timestamp"),
            _ if precision <= 3 => named("int64", "io.debezium.time.Timestamp"),
            _ => named("int64", "io.debezium.time.MicroTimestamp"),
        },
        ColumnKind::TimestampTz => named("string", "io.debezium.time.ZonedTimestamp"),
        ColumnKind::Interval => match modes.interval {
            IntervalMode::String => named("string", "io.debezium.time.Interval"),
            IntervalMode::Numeric => named("int64", "io.debezium.time.MicroDuration"),
        },
        ColumnKind::Array(element) => json!({
            "type": "array",
            "items": kind_schema(element, column, modes),
            "optional": true,
        }),
        ColumnKind::Other => match column.type_id {
            MONEY => decimal_schema(None, Some(2), modes.decimal),
            POINT => spatial::schema(true),
            OID => plain("int64"),
            BIT if column.type_modifier == 1 => plain("boolean"),
            BIT | VARBIT => {
                let mut s = named("bytes", "io.debezium.data.Bits");
                let length = if column.type_modifier > 0 {
                    column.type_modifier
                } else {
                    i32::MAX
                };
                s["parameters"] = json!({"length": length.to_string()});
                s
            }
            _ => plain("string"),
        },
    }
}

/// The schema of a decimal in `mode`: a string, a double, Kafka Connect's Decimal (a
/// declared scale) or Debezium's VariableScaleDecimal.
pub(super) fn decimal_schema(
    precision: Option<u32>,
    scale: Option<u32>,
    mode: DecimalMode,
) -> Json {
    match (mode, scale) {
        (DecimalMode::String, _) => json!({"type": "string", "optional": true}),
        (DecimalMode::Double, _) => json!({"type": "double", "optional": true}),
        (DecimalMode::Precise, Some(scale)) => {
            let mut parameters = json!({"scale": scale.to_string()});
            if let Some(p) = precision {
                parameters["connect.decimal.precision"] = json!(p.to_string());
            }
            json!({"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
                   "version": 1, "parameters": parameters})
        }
        (DecimalMode::Precise, None) => json!({
            "type": "struct",
            "fields": [
                {"type": "int32", "optional": false, "field": "scale"},
                {"type": "bytes", "optional": false, "field": "value"},
            ],
            "optional": true,
            "name": "io.debezium.data.VariableScaleDecimal",
            "version": 1,
            "doc": "Variable scaled decimal",
        }),
    }
}
