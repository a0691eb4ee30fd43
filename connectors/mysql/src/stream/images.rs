//! Rows events into rows: table maps to shapes (their schemas registered), row images by
//! siphon's decoder or, where it declines, `mysql_common`'s.

use super::*;

/// A table id's table map, and what was made of it.
pub(super) struct Mapped {
    pub(super) table_map: TableMapEvent<'static>,
    pub(super) shape: Arc<Shape>,
    pub(super) decoder: Option<Arc<RowDecoder>>,
}

impl State {
    /// The shape of a table map: made (and its schema registered) when the map differs from
    /// the one seen before for that table id.
    pub(super) fn shape(
        &mut self,
        ctx: &SourceContext,
        factory: &EventFactory,
        table_id: u64,
        tme: &TableMapEvent<'_>,
    ) -> Result<(Arc<Shape>, Option<Arc<RowDecoder>>)> {
        if let Some(mapped) = self.shapes.get(&table_id)
            && mapped.table_map == *tme
        {
            return Ok((mapped.shape.clone(), mapped.decoder.clone()));
        }
        let (columns, key) = from_table_map(tme, &self.collations)?;
        let shape = Arc::new(Shape::new(
            (&tme.database_name(), &tme.table_name()),
            columns,
            key,
            &factory.name,
            |s| ctx.register_schema(s),
        )?);
        let decoder = RowDecoder::new(tme, &shape.columns).map(Arc::new);
        self.shapes.insert(
            table_id,
            Mapped {
                table_map: tme.clone().into_owned(),
                shape: shape.clone(),
                decoder: decoder.clone(),
            },
        );
        Ok((shape, decoder))
    }
}

/// The (before, after) images of a rows event's data by siphon's decoder; `None` if the bytes
/// do not decode (then `mysql_common`'s decoder reads them).
pub(super) fn images(
    decoder: &RowDecoder,
    shape: &Shape,
    data: &[u8],
    op: Op,
) -> Option<Vec<(Option<Row>, Option<Row>)>> {
    let (before, after) = match op {
        Op::Create => (false, true),
        Op::Update => (true, true),
        _ => (true, false),
    };
    let mut at = 0;
    let mut out = Vec::new();
    let image = |at: &mut usize| -> Option<Row> {
        let (values, used) = decoder.image(data.get(*at..)?, &shape.columns)?;
        *at += used;
        Some(Row(shape
            .columns
            .iter()
            .map(|c| c.name.clone())
            .zip(values)
            .collect()))
    };
    while at < data.len() {
        let b = if before { Some(image(&mut at)?) } else { None };
        let a = if after { Some(image(&mut at)?) } else { None };
        out.push((b, a));
    }
    if out.is_empty() && !data.is_empty() {
        return None;
    }
    Some(out)
}

/// A row image as a row of `shape`'s columns (the full image: every column, in order).
pub(super) fn row(shape: &Shape, image: BinlogRow) -> Result<Row> {
    if image.len() != shape.columns.len() {
        return Err(Error::permanent(format!(
            "a row image of {}.{} holds {} of its {} columns: set binlog_row_image = FULL on the server",
            shape.database,
            shape.table,
            image.len(),
            shape.columns.len()
        )));
    }
    let values = image
        .unwrap()
        .into_iter()
        .zip(&shape.columns)
        .map(|(v, c)| {
            let v = match v {
                BinlogValue::Value(v) => generic_fixups(c, v),
                BinlogValue::Jsonb(document) => match crate::json::document(&document) {
                    Some(text) => mysql_async::Value::Bytes(text.into_bytes()),
                    None => {
                        tracing::warn!(column = %c.name, "a binary JSON value siphon cannot read: NULL");
                        mysql_async::Value::NULL
                    }
                },
                // Stopping is the only way not to lose the value: the row image holds only
                // an edit of it.
                BinlogValue::JsonDiff(_) => {
                    return Err(Error::permanent(format!(
                        "a partial JSON update of {}.{}.{} (binlog_row_value_options = \
                         PARTIAL_JSON in the writing session): the binlog holds only the edit, \
                         which siphon does not apply; set binlog_row_value_options = '' \
                         globally and in every session",
                        shape.database, shape.table, c.name
                    )));
                }
            };
            Ok((c.name.clone(), value(c, v)))
        })
        .collect::<Result<_>>()?;
    Ok(Row(values))
}

/// Corrects what `mysql_common` (0.35) reads differently from the server.
pub(super) fn generic_fixups(c: &ColumnInfo, v: mysql_async::Value) -> mysql_async::Value {
    match v {
        // A SET is its bitmask, little-endian, in the row image (the result set's form is the
        // labels' text).
        mysql_async::Value::Bytes(b) if matches!(c.data_type, DataType::Set(_)) => {
            mysql_async::Value::Int(
                b.iter()
                    .rev()
                    .fold(0_i64, |bits, byte| bits << 8 | i64::from(*byte)),
            )
        }
        // It reads a signed MEDIUMINT without its sign: the high byte zero, -1 comes as
        // 16777215.
        mysql_async::Value::Int(i) if c.column.type_name == "mediumint" && i >= 1 << 23 => {
            mysql_async::Value::Int(i - (1 << 24))
        }
        // It reads YEAR 0000 (the byte 0) as 1900, which no YEAR holds (1901 to 2155).
        mysql_async::Value::Bytes(b) if c.column.type_name == "year" && b == b"1900" => {
            mysql_async::Value::Int(0)
        }
        v => v,
    }
}

/// Sets an event's index within its transaction (position `row`, transaction order).
pub(super) fn set_row(event: &mut Event, index: u64) {
    if let Some(at) = event.source.position.get::<MysqlPosition>() {
        let moved = MysqlPosition {
            row: u32::try_from(index).unwrap_or(u32::MAX),
            ..at.clone()
        };
        event.source.position = siphon_core::SourcePosition::new(moved);
    }
    if let Some(t) = &mut event.transaction {
        t.total_order = index + 1;
    }
}

/// What a rows event does to its rows.
pub(super) fn op_of(rows: &RowsEventData<'_>) -> Op {
    match rows {
        RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => Op::Create,
        RowsEventData::UpdateRowsEvent(_)
        | RowsEventData::UpdateRowsEventV1(_)
        | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
        RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => Op::Delete,
    }
}

/// The rows event's images by siphon's decoder (`decoder`, where the table has one), which
/// reads full images only; `None` where `mysql_common`'s decoder must read them.
pub(super) fn own_images(
    decoder: Option<&RowDecoder>,
    shape: &Shape,
    rows: &RowsEventData<'_>,
    op: Op,
) -> Option<Vec<(Option<Row>, Option<Row>)>> {
    decoder
        .filter(|_| {
            !matches!(rows, RowsEventData::PartialUpdateRowsEvent(_))
                && rows.columns_before_image().is_none_or(|b| b.all())
                && rows.columns_after_image().is_none_or(|b| b.all())
        })
        .and_then(|d| images(d, shape, rows.rows_data(), op))
}
