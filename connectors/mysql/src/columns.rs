//! What a column of a captured table is, from the server's catalog (the snapshot) or from a
//! binlog table map with its full row metadata (the stream): one description for both, so the
//! same table registers the same schema version either way.

use std::sync::Arc;

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::consts::{ColumnType, GeometryType};
use mysql_common::proto::MySerialize;
use siphon_core::name::Name;
use siphon_core::schema::{Column, ColumnKind, SchemaId, TableSchema};
use siphon_core::{Error, Result, TableName};

use crate::charset::{Charset, Collations, unsupported};

/// The MySQL type of a column, as far as decoding its values needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataType {
    /// tinyint, smallint, mediumint, int, bigint, year.
    Integer,
    /// `bigint unsigned`: exact beyond i64, as a decimal.
    BigUnsigned,
    /// float, double.
    Float,
    /// decimal(p,s).
    Decimal,
    /// bit(1): a boolean.
    Bit1,
    /// bit(n), n > 1: its bytes.
    Bits,
    /// char, varchar, text: characters, as the bytes at hand encode them (the column's own
    /// set in a binlog row image, the connection's in a query's results).
    Text(Charset),
    /// varbinary, blob: bytes.
    Binary,
    /// binary(n): n bytes. The binlog drops a value's trailing zero bytes (as it drops a
    /// char's trailing spaces); they are put back.
    FixedBinary(usize),
    /// date.
    Date,
    /// time (may be negative or beyond a day).
    Time,
    /// datetime: wall time, no zone.
    DateTime,
    /// timestamp: an instant, UTC.
    Timestamp,
    /// enum, with its labels.
    Enum(Vec<String>),
    /// set, with its labels.
    Set(Vec<String>),
    /// json (MySQL's binary JSON; MariaDB's JSON is text).
    Json,
    /// geometry types: MySQL's internal form (the SRID, 4 bytes little-endian, then WKB).
    Geometry,
}

impl DataType {
    /// An ENUM's label for its index (1-based; 0 is the empty string MySQL stores for a value
    /// it refused), or `None` past its labels or for another type.
    pub fn enum_label(&self, index: u64) -> Option<String> {
        let DataType::Enum(labels) = self else {
            return None;
        };
        match index {
            0 => Some(String::new()),
            i => labels.get(usize::try_from(i - 1).ok()?).cloned(),
        }
    }

    /// A SET's labels for its bitmask, joined with commas, or `None` for another type.
    pub fn set_labels(&self, bits: u64) -> Option<String> {
        let DataType::Set(labels) = self else {
            return None;
        };
        Some(
            labels
                .iter()
                .enumerate()
                .filter(|(i, _)| bits >> i & 1 == 1)
                .map(|(_, l)| l.as_str())
                .collect::<Vec<_>>()
                .join(","),
        )
    }
}

/// One column: its name, type, and how the schema record declares it.
#[derive(Debug, Clone)]
pub struct ColumnInfo {
    /// Its name.
    pub name: Name,
    /// How its values decode.
    pub data_type: DataType,
    /// The schema record's column.
    pub column: Column,
}

/// A captured table's columns and key, its schema registered in the log.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The database.
    pub database: Name,
    /// The table.
    pub table: Name,
    /// Columns in order.
    pub columns: Vec<ColumnInfo>,
    /// Positions of the primary-key columns, in key order.
    pub key: Vec<usize>,
    /// The registered schema.
    pub schema: Arc<TableSchema>,
}

impl Shape {
    /// The table's name.
    pub fn name(&self) -> TableName {
        TableName::new(self.database.clone(), self.table.clone())
    }

    /// The shape of `database.table`, its schema registered through `register`.
    pub fn new(
        (database, table): (&str, &str),
        columns: Vec<ColumnInfo>,
        key: Vec<usize>,
        server: &str,
        register: impl FnOnce(&TableSchema) -> Result<Arc<TableSchema>>,
    ) -> Result<Shape> {
        let schema = register(&TableSchema {
            id: SchemaId::UNREGISTERED,
            connector: "mysql".into(),
            server: server.into(),
            database: database.into(),
            schema: None,
            table: table.into(),
            columns: columns.iter().map(|c| c.column.clone()).collect(),
            key: key.clone(),
        })?;
        Ok(Shape {
            database: database.into(),
            table: table.into(),
            columns,
            key,
            schema,
        })
    }
}

/// A column from the catalog's description: `data_type` and `column_type` as
/// `information_schema.COLUMNS` gives them (`int`, `int(10) unsigned`; `enum('a','b')`).
pub fn from_catalog(
    name: &str,
    data_type: &str,
    column_type: &str,
    nullable: bool,
    (precision, scale): (Option<u32>, Option<u32>),
    binary_charset: bool,
) -> ColumnInfo {
    let unsigned = column_type.contains("unsigned");
    // The number in `bit(12)`, `datetime(6)`.
    let size = || {
        column_type
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(n, _)| n.parse::<u32>().ok())
    };
    let bits = || size().unwrap_or(1);
    let data = match data_type {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "year" => DataType::Integer,
        "bigint" if unsigned => DataType::BigUnsigned,
        "bigint" => DataType::Integer,
        "float" | "double" | "real" => DataType::Float,
        "decimal" | "numeric" => DataType::Decimal,
        "bit" if bits() == 1 => DataType::Bit1,
        "bit" => DataType::Bits,
        // A query's results come in the connection's set.
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if !binary_charset => {
            DataType::Text(Charset::UTF8)
        }
        "binary" => DataType::FixedBinary(size().unwrap_or(1) as usize),
        "date" => DataType::Date,
        "time" => DataType::Time,
        "datetime" => DataType::DateTime,
        "timestamp" => DataType::Timestamp,
        "enum" => DataType::Enum(labels(column_type)),
        "set" => DataType::Set(labels(column_type)),
        "json" => DataType::Json,
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" | "geomcollection" => DataType::Geometry,
        _ => DataType::Binary,
    };
    let base = match (data_type, unsigned) {
        ("integer", u) => ("int", u),
        ("real", u) => ("double", u),
        ("numeric", u) => ("decimal", u),
        // MySQL 8 names a GEOMETRYCOLLECTION column's type `geomcollection`.
        ("geomcollection", u) => ("geometrycollection", u),
        (d, u) => (d, u),
    };
    let precision = precision.filter(|_| data == DataType::Decimal);
    let scale = scale.filter(|_| data == DataType::Decimal);
    let size = match data {
        DataType::Bit1 | DataType::Bits => bits(),
        DataType::Time | DataType::DateTime | DataType::Timestamp => size().unwrap_or(0),
        _ => 0,
    };
    info(name, base, data, nullable, (precision, scale), size)
}

/// The columns of a table map with full row metadata (`binlog_row_metadata = FULL`): names,
/// signedness, character sets (by collation id, named through `collations`), enum and set
/// labels, and the primary key. Refused without names, or with a column in a character set
/// siphon cannot decode.
pub fn from_table_map(
    tme: &TableMapEvent<'_>,
    collations: &Collations,
) -> Result<(Vec<ColumnInfo>, Vec<usize>)> {
    let n = tme.columns_count() as usize;
    // No table has none; the rows of one would take no bytes, and reading them not end.
    if n == 0 {
        return Err(Error::permanent(format!(
            "the binlog's table map of {}.{} has no columns",
            tme.database_name(),
            tme.table_name()
        )));
    }
    let meta = TableMapMeta::read(tme)?;
    if meta.names.len() != n {
        return Err(Error::permanent(format!(
            "the binlog's table map of {}.{} carries no column names: set binlog_row_metadata = FULL on the server",
            tme.database_name(),
            tme.table_name()
        )));
    }
    let mut columns = MapColumns {
        tme,
        collations,
        signedness: meta.signedness.into_iter(),
        enum_labels: meta.enum_labels.into_iter(),
        set_labels: meta.set_labels.into_iter(),
        geometry_types: meta.geometry_types.into_iter(),
        text_sets: meta.text_sets,
        label_sets: meta.label_sets,
        character_columns: 0,
        label_columns: 0,
    };
    let infos = meta
        .names
        .iter()
        .enumerate()
        .map(|(i, name)| columns.column(i, name))
        .collect::<Result<_>>()?;
    Ok((infos, meta.key))
}

/// A table map's columns read in order: what the map's optional metadata gives each kind of
/// column (signedness to numbers, labels to enums and sets, character sets to text, types
/// to geometries) is taken in turn.
struct MapColumns<'m, 't> {
    tme: &'m TableMapEvent<'t>,
    collations: &'m Collations,
    signedness: std::vec::IntoIter<bool>,
    enum_labels: std::vec::IntoIter<Vec<Vec<u8>>>,
    set_labels: std::vec::IntoIter<Vec<Vec<u8>>>,
    geometry_types: std::vec::IntoIter<GeometryType>,
    text_sets: Sets,
    label_sets: Sets,
    /// Character (and geometry) columns, and enum and set columns, read so far.
    character_columns: usize,
    label_columns: usize,
}

impl MapColumns<'_, '_> {
    /// Column `i`, named `name`.
    fn column(&mut self, i: usize, name: &str) -> Result<ColumnInfo> {
        let tme = self.tme;
        let ty = tme
            .get_column_type(i)
            .ok()
            .flatten()
            .ok_or_else(|| Error::permanent(format!("table map column {i}: unknown type")))?;
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        readable(tme, name, ty, meta)?;
        // YEAR is among the numbers the table map gives a sign to, and unsigned there
        // (MySQL's YEAR is); the catalog's type has no sign, and neither does siphon's.
        let unsigned = ty.is_numeric_type()
            && self.signedness.next().unwrap_or(false)
            && ty != ColumnType::MYSQL_TYPE_YEAR;
        let real_type = if ty == ColumnType::MYSQL_TYPE_STRING && !meta.is_empty() {
            ColumnType::try_from(meta[0]).unwrap_or(ty)
        } else {
            ty
        };
        // A DECIMAL's scale never passes its precision (mysql_common's reader sizes its buffer
        // by the difference).
        if real_type == ColumnType::MYSQL_TYPE_NEWDECIMAL && meta.get(1) > meta.first() {
            return Err(Error::permanent(format!(
                "the binlog's table map gives {} a decimal scale past its precision ({meta:?})",
                self.qualified(name)
            )));
        }
        // The server gives a geometry column (binary) a set too; `is_character_type` does not
        // count it.
        let collation =
            if real_type.is_character_type() || real_type == ColumnType::MYSQL_TYPE_GEOMETRY {
                self.character_columns += 1;
                self.text_sets.of(self.character_columns - 1)
            } else {
                None
            };
        let (base, data, precision_scale, size) = match plain_type(real_type, meta, unsigned) {
            Some(plain) => plain,
            None => self.character_type(name, real_type, meta, collation)?,
        };
        // The metadata names each geometry column's type, as the catalog does.
        let base = match real_type {
            ColumnType::MYSQL_TYPE_GEOMETRY => {
                self.geometry_types.next().map_or(base, geometry_name)
            }
            _ => base,
        };
        let nullable = tme.null_bitmask().get(i).is_some_and(|b| *b);
        Ok(info(
            name,
            (base, unsigned),
            data,
            nullable,
            precision_scale,
            size,
        ))
    }

    /// A column of a type whose bytes are characters in a set (or bytes, in `binary`):
    /// text, binary strings, blobs, enums and sets.
    fn character_type(
        &mut self,
        name: &str,
        real_type: ColumnType,
        meta: &[u8],
        collation: Option<u16>,
    ) -> Result<PlainType> {
        use ColumnType::*;
        let binary = collation == Some(63);
        let text = |this: &Self| this.charset(name, collation).map(DataType::Text);
        Ok(match real_type {
            MYSQL_TYPE_ENUM => {
                let list = self.enum_labels.next();
                (
                    "enum",
                    DataType::Enum(self.labels(name, list)?),
                    (None, None),
                    0,
                )
            }
            MYSQL_TYPE_SET => {
                let list = self.set_labels.next();
                (
                    "set",
                    DataType::Set(self.labels(name, list)?),
                    (None, None),
                    0,
                )
            }
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING if binary => {
                ("varbinary", DataType::Binary, (None, None), 0)
            }
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => ("varchar", text(self)?, (None, None), 0),
            MYSQL_TYPE_STRING if binary => {
                // Metadata: the real type, whose high bits carry the length's, then its low byte.
                let (b0, b1) = (meta.first().copied(), meta.get(1).copied());
                let length = b0.zip(b1).map_or(0, |(b0, b1)| {
                    usize::from(b1) | usize::from((b0 & 0x30) ^ 0x30) << 4
                });
                ("binary", DataType::FixedBinary(length), (None, None), 0)
            }
            MYSQL_TYPE_STRING => ("char", text(self)?, (None, None), 0),
            MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB
                if binary || collation.is_none() =>
            {
                ("blob", DataType::Binary, (None, None), 0)
            }
            MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB => ("text", text(self)?, (None, None), 0),
            _ => ("blob", DataType::Binary, (None, None), 0),
        })
    }

    /// An enum's or a set's labels, decoded in the set the map gives that column's labels.
    fn labels(&mut self, name: &str, list: Option<Vec<Vec<u8>>>) -> Result<Vec<String>> {
        self.label_columns += 1;
        let set = self.charset(name, self.label_sets.of(self.label_columns - 1))?;
        Ok(list
            .unwrap_or_default()
            .iter()
            .map(|label| set.decode(label).0)
            .collect())
    }

    /// The set a column's bytes are in (63 is `binary`); UTF-8 where the map gives none.
    fn charset(&self, name: &str, collation: Option<u16>) -> Result<Charset> {
        let Some(id) = collation else {
            return Ok(Charset::UTF8);
        };
        let set = self.collations.charset(id).unwrap_or("unknown");
        Charset::by_name(set).ok_or_else(|| unsupported(&self.qualified(name), set))
    }

    fn qualified(&self, name: &str) -> String {
        format!(
            "{}.{}.{name}",
            self.tme.database_name(),
            self.tme.table_name()
        )
    }
}

/// Refuses a column of type `ty` whose metadata (`meta`) siphon's and mysql_common's
/// readers cannot read its values by.
fn readable(tme: &TableMapEvent<'_>, name: &str, ty: ColumnType, meta: &[u8]) -> Result<()> {
    let table = || format!("{}.{}", tme.database_name(), tme.table_name());
    // mysql_common reads a typed array's (a multi-valued index's) values with its element's
    // type taken from the element's metadata; siphon does not read them.
    if ty == ColumnType::MYSQL_TYPE_TYPED_ARRAY {
        return Err(Error::permanent(format!(
            "the binlog's table map of {} gives column {name} a typed array, which siphon \
             cannot read",
            table()
        )));
    }
    // Temporal types' metadata is their digits of fraction: six at most.
    if matches!(
        ty,
        ColumnType::MYSQL_TYPE_TIME2
            | ColumnType::MYSQL_TYPE_DATETIME2
            | ColumnType::MYSQL_TYPE_TIMESTAMP2
    ) && meta.first().is_some_and(|fsp| *fsp > 6)
    {
        return Err(Error::permanent(format!(
            "the binlog's table map of {} gives column {name} {} digits of fraction",
            table(),
            meta[0]
        )));
    }
    // A BIT's metadata: the bits of its last byte (0 to 7), then its whole bytes.
    if ty == ColumnType::MYSQL_TYPE_BIT && meta.first().is_some_and(|bits| *bits > 7) {
        return Err(Error::permanent(format!(
            "the binlog's table map of {} gives bit column {name} {} bits in a byte",
            table(),
            meta[0]
        )));
    }
    if meta.len() < metadata_needed(ty) {
        return Err(Error::permanent(format!(
            "the binlog's table map of {} gives column {name} ({ty:?}) {} bytes of metadata",
            table(),
            meta.len()
        )));
    }
    Ok(())
}

/// Bytes of metadata mysql_common's row reader takes of a column of (real) type `ty`, which it
/// indexes without checking: a table map must give them (it gives a VAR_STRING none, which no
/// server's table map holds).
fn metadata_needed(ty: ColumnType) -> usize {
    use ColumnType::*;
    match ty {
        MYSQL_TYPE_TIMESTAMP2
        | MYSQL_TYPE_DATETIME2
        | MYSQL_TYPE_TIME2
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_GEOMETRY
        | MYSQL_TYPE_VECTOR => 1,
        MYSQL_TYPE_BIT
        | MYSQL_TYPE_NEWDECIMAL
        | MYSQL_TYPE_ENUM
        | MYSQL_TYPE_SET
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING => 2,
        _ => 0,
    }
}

/// What a table map's optional metadata says of its columns.
struct TableMapMeta {
    names: Vec<String>,
    signedness: Vec<bool>,
    enum_labels: Vec<Vec<Vec<u8>>>,
    set_labels: Vec<Vec<Vec<u8>>>,
    /// Positions of the primary-key columns.
    key: Vec<usize>,
    /// Collation ids per character column, and per enum or set column: each given for every
    /// such column in order, or as a default with the exceptions.
    text_sets: Sets,
    label_sets: Sets,
    /// The declared type of each geometry column, in order.
    geometry_types: Vec<GeometryType>,
}

impl TableMapMeta {
    fn read(tme: &TableMapEvent<'_>) -> Result<TableMapMeta> {
        let mut names = Vec::new();
        let mut signedness = Vec::new();
        let mut enum_labels: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut set_labels: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut key = Vec::new();
        // Collation ids per character column, and per enum or set column: each given for every
        // such column in order, or as a default with the exceptions.
        let mut text_sets = Sets::default();
        let mut label_sets = Sets::default();
        let mut geometry_types = Vec::new();
        for field in tme.iter_optional_meta() {
            let field = field.map_err(|e| Error::permanent(format!("table map metadata: {e}")))?;
            match field {
                OptionalMetadataField::ColumnName(list) => {
                    names.extend(
                        list.iter_names()
                            .filter_map(|n| n.ok())
                            .map(|n| n.name().into_owned()),
                    );
                }
                OptionalMetadataField::Signedness(bits) => {
                    signedness.extend(bits.iter().map(|b| *b))
                }
                OptionalMetadataField::EnumStrValue(list) => {
                    enum_labels.extend(table_map_labels(&list)?)
                }
                OptionalMetadataField::SetStrValue(list) => {
                    set_labels.extend(table_map_labels(&list)?)
                }
                OptionalMetadataField::SimplePrimaryKey(keys) => {
                    key.extend(
                        keys.iter_indexes()
                            .filter_map(|k| k.ok())
                            .map(|k| k as usize),
                    );
                }
                OptionalMetadataField::PrimaryKeyWithPrefix(keys) => {
                    key.extend(
                        keys.iter_keys()
                            .filter_map(|k| k.ok())
                            .map(|k| k.column_index() as usize),
                    );
                }
                OptionalMetadataField::DefaultCharset(c) => text_sets.default_of(&c),
                OptionalMetadataField::ColumnCharset(c) => text_sets.each(&c),
                OptionalMetadataField::EnumAndSetDefaultCharset(c) => label_sets.default_of(&c),
                OptionalMetadataField::EnumAndSetColumnCharset(c) => label_sets.each(&c),
                OptionalMetadataField::GeometryType(types) => geometry_types.extend(
                    types
                        .iter_geometry_types()
                        // An unknown type is a geometry still.
                        .map(|t| t.unwrap_or(GeometryType::GEOM_GEOMETRY)),
                ),
                _ => {}
            }
        }
        Ok(TableMapMeta {
            names,
            signedness,
            enum_labels,
            set_labels,
            key,
            text_sets,
            label_sets,
            geometry_types,
        })
    }
}

/// A geometry column's type as the catalog names it.
fn geometry_name(geometry: GeometryType) -> &'static str {
    match geometry {
        GeometryType::GEOM_GEOMETRY => "geometry",
        GeometryType::GEOM_POINT => "point",
        GeometryType::GEOM_LINESTRING => "linestring",
        GeometryType::GEOM_POLYGON => "polygon",
        GeometryType::GEOM_MULTIPOINT => "multipoint",
        GeometryType::GEOM_MULTILINESTRING => "multilinestring",
        GeometryType::GEOM_MULTIPOLYGON => "multipolygon",
        GeometryType::GEOM_GEOMETRYCOLLECTION => "geometrycollection",
    }
}

/// The labels of each ENUM (or SET) column, from a table map's ENUM_STR_VALUE (SET_STR_VALUE)
/// field: per column a length-encoded count, then each label length-encoded. Read here, not
/// by mysql_common's `iter_values`, which sizes a vector by the count before reading a label
/// (a count past the field's bytes panicked: capacity overflow).
fn table_map_labels(field: &impl MySerialize) -> Result<Vec<Vec<Vec<u8>>>> {
    let mut raw = Vec::new();
    field.serialize(&mut raw);
    let cut_short = || Error::permanent("table map metadata: ENUM or SET labels cut short");
    let mut bytes = raw.as_slice();
    let mut columns = Vec::new();
    while !bytes.is_empty() {
        let count = lenenc(&mut bytes).ok_or_else(cut_short)?;
        // Each label takes a byte at least: a count past the bytes left is no list.
        if count > bytes.len() as u64 {
            return Err(cut_short());
        }
        let mut column = Vec::new();
        for _ in 0..count {
            let len = lenenc(&mut bytes).ok_or_else(cut_short)?;
            let len = usize::try_from(len)
                .ok()
                .filter(|&n| n <= bytes.len())
                .ok_or_else(cut_short)?;
            let (label, rest) = bytes.split_at(len);
            column.push(label.to_vec());
            bytes = rest;
        }
        columns.push(column);
    }
    Ok(columns)
}

/// A length-encoded integer of the MySQL protocol, taken off the front of `bytes`.
fn lenenc(bytes: &mut &[u8]) -> Option<u64> {
    let (&first, rest) = bytes.split_first()?;
    let width = match first {
        0..=0xfa => {
            *bytes = rest;
            return Some(u64::from(first));
        }
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let value = rest.get(..width)?;
    *bytes = &rest[width..];
    Some(value.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b)))
}

/// A column type's parts (base name, kind, precision and scale, size) where it needs no
/// character set: numbers, bits, dates and times, JSON, geometry; `None` for the others.
fn plain_type(real_type: ColumnType, meta: &[u8], unsigned: bool) -> Option<PlainType> {
    use ColumnType::*;
    // Temporal types' metadata: the digits of fractional seconds.
    let fsp = u32::from(meta.first().copied().unwrap_or(0));
    Some(match real_type {
        MYSQL_TYPE_TINY => ("tinyint", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_SHORT => ("smallint", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_INT24 => ("mediumint", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_LONG => ("int", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_LONGLONG if unsigned => ("bigint", DataType::BigUnsigned, (None, None), 0),
        MYSQL_TYPE_LONGLONG => ("bigint", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_YEAR => ("year", DataType::Integer, (None, None), 0),
        MYSQL_TYPE_FLOAT => ("float", DataType::Float, (None, None), 0),
        MYSQL_TYPE_DOUBLE => ("double", DataType::Float, (None, None), 0),
        MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL => (
            "decimal",
            DataType::Decimal,
            (
                meta.first().map(|p| u32::from(*p)),
                meta.get(1).map(|s| u32::from(*s)),
            ),
            0,
        ),
        MYSQL_TYPE_BIT => {
            // Metadata: bits in the last byte, then whole bytes.
            let bits = u32::from(meta.get(1).copied().unwrap_or(0)) * 8
                + u32::from(meta.first().copied().unwrap_or(0));
            let data = if bits == 1 {
                DataType::Bit1
            } else {
                DataType::Bits
            };
            ("bit", data, (None, None), bits)
        }
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => ("date", DataType::Date, (None, None), 0),
        MYSQL_TYPE_TIME => ("time", DataType::Time, (None, None), 0),
        MYSQL_TYPE_TIME2 => ("time", DataType::Time, (None, None), fsp),
        MYSQL_TYPE_DATETIME => ("datetime", DataType::DateTime, (None, None), 0),
        MYSQL_TYPE_DATETIME2 => ("datetime", DataType::DateTime, (None, None), fsp),
        MYSQL_TYPE_TIMESTAMP => ("timestamp", DataType::Timestamp, (None, None), 0),
        MYSQL_TYPE_TIMESTAMP2 => ("timestamp", DataType::Timestamp, (None, None), fsp),
        MYSQL_TYPE_JSON => ("json", DataType::Json, (None, None), 0),
        MYSQL_TYPE_GEOMETRY => ("geometry", DataType::Geometry, (None, None), 0),
        _ => return None,
    })
}

/// A column type's base name, kind, precision and scale, and size.
type PlainType = (&'static str, DataType, (Option<u32>, Option<u32>), u32);

/// Collation ids of a table map's character (or enum and set) columns: one per column, in
/// order, or a default and the exceptions, by the index among those columns.
#[derive(Default)]
struct Sets {
    each: Vec<u16>,
    default: Option<u16>,
    exceptions: Vec<(usize, u16)>,
}

impl Sets {
    fn each(&mut self, c: &mysql_async::binlog::events::ColumnCharsets<'_>) {
        self.each.extend(c.iter_charsets().filter_map(|c| c.ok()));
    }

    fn default_of(&mut self, c: &mysql_async::binlog::events::DefaultCharset<'_>) {
        self.default = Some(c.default_charset());
        self.exceptions.extend(
            c.iter_non_default()
                .filter_map(|c| c.ok())
                .map(|c| (c.column_index() as usize, c.charset())),
        );
    }

    fn of(&self, index: usize) -> Option<u16> {
        self.each.get(index).copied().or_else(|| {
            self.exceptions
                .iter()
                .find(|(c, _)| *c == index)
                .map(|(_, cs)| *cs)
                .or(self.default)
        })
    }
}

/// Enum or set labels from a column type: `enum('a','b''c')` → `a`, `b'c`.
fn labels(column_type: &str) -> Vec<String> {
    let inner = column_type
        .split_once('(')
        .map_or("", |(_, rest)| rest.strip_suffix(')').unwrap_or(rest));
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('\'', false) => quoted = true,
            ('\'', true) if chars.peek() == Some(&'\'') => {
                chars.next();
                current.push('\'');
            }
            ('\'', true) => {
                quoted = false;
                out.push(std::mem::take(&mut current));
            }
            ('\\', true) => {
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            (c, true) => current.push(c),
            _ => {}
        }
    }
    out
}

/// A column described by its base type name, signedness and what decoding needs. The type
/// name the schema record carries is built from these alone (`int unsigned`,
/// `decimal(10,2)`, `enum('a','b')`, `datetime(6)`), so the catalog and a table map give the
/// same. `size` is a bit column's bits or a temporal column's digits of fractional seconds;
/// it is also the type modifier (Debezium's `length` and precision).
fn info(
    name: &str,
    (base, unsigned): (&str, bool),
    data: DataType,
    nullable: bool,
    (precision, scale): (Option<u32>, Option<u32>),
    size: u32,
) -> ColumnInfo {
    let quoted = |labels: &[String]| {
        labels
            .iter()
            .map(|l| format!("'{}'", l.replace('\'', "''")))
            .collect::<Vec<_>>()
            .join(",")
    };
    let type_name = match &data {
        DataType::Decimal => format!(
            "decimal({},{})",
            precision.unwrap_or(10),
            scale.unwrap_or(0)
        ),
        DataType::Bits | DataType::Bit1 => format!("bit({})", size.max(1)),
        DataType::Time | DataType::DateTime | DataType::Timestamp if size > 0 => {
            format!("{base}({size})")
        }
        DataType::Enum(l) => format!("enum({})", quoted(l)),
        DataType::Set(l) => format!("set({})", quoted(l)),
        DataType::Text(_) if matches!(base, "tinytext" | "mediumtext" | "longtext") => {
            "text".into()
        }
        DataType::Binary if matches!(base, "tinyblob" | "mediumblob" | "longblob") => "blob".into(),
        _ if unsigned => format!("{base} unsigned"),
        _ => base.to_owned(),
    };
    let kind = match (&data, base, unsigned) {
        (DataType::Integer, "tinyint", _) => ColumnKind::Int16,
        (DataType::Integer, "smallint", false) => ColumnKind::Int16,
        (DataType::Integer, "smallint" | "mediumint" | "year", _) => ColumnKind::Int32,
        (DataType::Integer, "int", false) => ColumnKind::Int32,
        (DataType::Integer, _, _) => ColumnKind::Int64,
        (DataType::BigUnsigned, _, _) => ColumnKind::Decimal {
            precision: Some(20),
            scale: Some(0),
        },
        (DataType::Float, "float", _) => ColumnKind::Float32,
        (DataType::Float, _, _) => ColumnKind::Float64,
        (DataType::Decimal, _, _) => ColumnKind::Decimal { precision, scale },
        (DataType::Bit1, _, _) => ColumnKind::Bool,
        (DataType::Bits | DataType::Binary | DataType::FixedBinary(_), _, _) => ColumnKind::Bytes,
        (DataType::Geometry, base, _) => ColumnKind::Geometry {
            point: base == "point",
        },
        (DataType::Text(_), _, _) => ColumnKind::Text { length: None },
        (DataType::Date, _, _) => ColumnKind::Date,
        (DataType::Time, _, _) => ColumnKind::Duration,
        (DataType::DateTime, _, _) => ColumnKind::Timestamp,
        (DataType::Timestamp, _, _) => ColumnKind::TimestampTz,
        (DataType::Enum(labels), _, _) => ColumnKind::Enum {
            labels: labels.clone(),
        },
        (DataType::Set(_), _, _) => ColumnKind::Other,
        (DataType::Json, _, _) => ColumnKind::Json { binary: true },
    };
    let type_modifier = match &data {
        DataType::Bits | DataType::Bit1 => size.max(1) as i32,
        DataType::Time | DataType::DateTime | DataType::Timestamp => size as i32,
        _ => -1,
    };
    ColumnInfo {
        name: name.into(),
        data_type: data,
        column: Column {
            name: name.into(),
            type_name,
            type_id: 0,
            type_modifier,
            kind,
            nullable,
            generated: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_labels_are_unquoted() {
        assert_eq!(labels("enum('a','b''c','d,e')"), ["a", "b'c", "d,e"]);
        assert_eq!(labels("set('x')"), ["x"]);
    }

    #[test]
    fn the_catalog_names_types_as_a_table_map_does() {
        let c = from_catalog(
            "n",
            "int",
            "int(10) unsigned",
            true,
            (Some(10), Some(0)),
            false,
        );
        assert_eq!(c.column.type_name, "int unsigned");
        assert_eq!(c.column.kind, ColumnKind::Int64);
        let d = from_catalog(
            "d",
            "decimal",
            "decimal(10,2)",
            false,
            (Some(10), Some(2)),
            false,
        );
        assert_eq!(d.column.type_name, "decimal(10,2)");
        let b = from_catalog(
            "b",
            "bigint",
            "bigint(20) unsigned",
            false,
            (Some(20), Some(0)),
            false,
        );
        assert_eq!(b.data_type, DataType::BigUnsigned);
        let t = from_catalog("t", "longtext", "longtext", true, (None, None), false);
        assert_eq!(
            (t.data_type, t.column.type_name.as_str()),
            (DataType::Text(Charset::UTF8), "text")
        );
        let bit = from_catalog("x", "bit", "bit(1)", true, (None, None), false);
        assert_eq!(bit.column.kind, ColumnKind::Bool);
        let bits = from_catalog("x", "bit", "bit(12)", true, (None, None), false);
        assert_eq!(
            (bits.column.type_name.as_str(), bits.column.type_modifier),
            ("bit(12)", 12)
        );
        let dt = from_catalog("x", "datetime", "datetime(3)", true, (None, None), false);
        assert_eq!(
            (dt.column.type_name.as_str(), dt.column.type_modifier),
            ("datetime(3)", 3),
            "the digits of fractional seconds are Debezium's precision"
        );
        let tm = from_catalog("x", "time", "time", true, (None, None), false);
        assert_eq!(
            (tm.column.type_name.as_str(), tm.column.type_modifier),
            ("time", 0)
        );
    }
}
