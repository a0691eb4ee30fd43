//! The stream's decoding without a server, for the fuzz targets (`fuzz/`: `binlog_event`,
//! `binlog_rows`): not an API. Each event's bytes go through `mysql_common`'s reader, as
//! `BinlogStream` gives them to the stream, then through the stream's own steps — MariaDB's
//! GTID events, rotations, statements, XA prepares, table maps to shapes, and row images by
//! siphon's decoder or, where it declines, `mysql_common`'s — into events. What needs the
//! server or the log (schema changes read from the catalog, spools, appends) is left out.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::binlog::events::{
    Event as BinlogEvent, EventData, FormatDescriptionEvent, RotateEvent, RowsEventData,
    TableMapEvent,
};
use mysql_async::binlog::{BinlogVersion, EventType};
use mysql_async::consts::ColumnType;
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::schema::SchemaStore;
use siphon_core::{Error, Event, KeyChange, Result};

use super::{
    LOG_EVENT_ARTIFICIAL_F, MARIADB_ANNOTATE_ROWS, MARIADB_COMPRESSED_ROWS, MARIADB_GTID,
    mariadb_gtid, op_of, own_images, rotated_to, row,
};
use crate::charset::Collations;
use crate::columns::{Shape, from_table_map};
use crate::ddl::{self, Statement};
use crate::events::{EventFactory, Place, key_of};
use crate::rows::RowDecoder;
use crate::xa;
use siphon_core::event::format_uuid;

/// Collations of a MariaDB 10.11 server (ids as a table map names them): a few of each
/// kind siphon reads, `binary`, and sets it refuses.
const COLLATIONS: &[(u16, &str)] = &[
    (1, "big5"),
    (7, "koi8r"),
    (8, "latin1"),
    (9, "latin2"),
    (11, "ascii"),
    (13, "sjis"),
    (19, "euckr"),
    (24, "gb2312"),
    (28, "gbk"),
    (33, "utf8mb3"),
    (35, "ucs2"),
    (45, "utf8mb4"),
    (46, "utf8mb4"),
    (47, "latin1"),
    (51, "cp1251"),
    (54, "utf16"),
    (56, "utf16le"),
    (60, "utf32"),
    (63, "binary"),
    (83, "utf8mb3"),
    (95, "cp932"),
    (224, "utf8mb4"),
    (248, "gb18030"),
    (255, "utf8mb4"),
    (2304, "utf8mb4"),
];

/// A table id's shape, with the table map it was made from and siphon's decoder.
type Mapped = (TableMapEvent<'static>, Arc<Shape>, Option<Arc<RowDecoder>>);

/// One binlog stream's state, as the stream keeps it.
#[derive(Debug)]
pub struct Binlog {
    /// What `mysql_common`'s `EventStreamReader` (which `BinlogStream` reads with, and
    /// `mysql_async` does not export) keeps: the format description and the table maps.
    fde: FormatDescriptionEvent<'static>,
    table_maps: HashMap<u64, TableMapEvent<'static>>,
    collations: Collations,
    factory: EventFactory,
    shapes: HashMap<u64, Mapped>,
    file: String,
    /// The stream's first Rotate carries a checksum (see `rotated_to`).
    checksummed_rotate: bool,
    next_pos: u64,
    place: Option<Place>,
    /// Where siphon's decoder of row images and `mysql_common`'s read the same bytes as
    /// different rows (the stream trusts siphon's: the two must agree).
    pub disagreements: Vec<String>,
}

impl Default for Binlog {
    fn default() -> Self {
        Binlog {
            fde: FormatDescriptionEvent::new(BinlogVersion::Version4),
            table_maps: HashMap::new(),
            collations: COLLATIONS
                .iter()
                .map(|(id, set)| (*id, (*set).to_owned()))
                .collect(),
            factory: EventFactory {
                name: "fuzz".into(),
            },
            shapes: HashMap::new(),
            file: "mysql-bin.000001".into(),
            checksummed_rotate: true,
            next_pos: 4,
            place: None,
            disagreements: Vec::new(),
        }
    }
}

impl Binlog {
    /// One event as the server sends it (header, body, checksum): the events it makes, or
    /// why the stream would stop at it.
    pub fn event(&mut self, schemas: &dyn SchemaStore, bytes: &[u8]) -> Result<Vec<Event>> {
        let event = self
            .read(bytes)
            .map_err(|e| Error::permanent(format!("reading a binlog event: {e}")))?;
        let header = event.header();
        let kind = header.event_type_raw();
        let artificial = header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0;
        let start = if artificial {
            self.next_pos
        } else {
            u64::from(header.log_pos()).saturating_sub(u64::from(header.event_size()))
        };
        let mut made = Vec::new();
        match kind {
            MARIADB_GTID => {
                if let Some(g) = mariadb_gtid(event.data(), header.server_id()) {
                    self.begin(start, Some(g.gtid.to_string()), header.server_id());
                }
            }
            MARIADB_ANNOTATE_ROWS => {}
            k if MARIADB_COMPRESSED_ROWS.contains(&k) => {
                return Err(Error::permanent("compressed row events"));
            }
            // MySQL's compressed transaction: `BinlogStream` reads it first and hands over
            // the events inside one by one (a malformed one panics in mysql_common there,
            // before siphon sees it: RELIABILITY.md), so it is left to upstream here.
            k if k == EventType::TRANSACTION_PAYLOAD_EVENT as u8 => return Ok(made),
            _ => match event
                .read_data()
                .map_err(|e| Error::permanent(format!("decoding a binlog event: {e}")))?
            {
                Some(EventData::RotateEvent(rotate)) => {
                    self.file = rotated_to(rotate.name_raw(), self.checksummed_rotate);
                    self.checksummed_rotate = false;
                    self.next_pos = rotate.position();
                    return Ok(made);
                }
                Some(EventData::GtidEvent(g)) => {
                    let gtid = format!("{}:{}", format_uuid(&g.sid()), g.gno());
                    self.begin(start, Some(gtid), header.server_id());
                }
                Some(EventData::AnonymousGtidEvent(_)) => {
                    self.begin(start, None, header.server_id());
                }
                Some(EventData::QueryEvent(q)) => match ddl::statement(&q.query(), &q.schema()) {
                    Statement::Begin if self.place.is_none() => {
                        self.begin(start, None, header.server_id());
                    }
                    Statement::Commit => self.place = None,
                    _ => {}
                },
                Some(EventData::XidEvent(_)) => self.place = None,
                Some(EventData::XaPrepareLogEvent(body)) => {
                    xa::prepare_event(&body).ok_or_else(|| {
                        Error::permanent("an XA_prepare event siphon cannot read")
                    })?;
                    self.place = None;
                }
                Some(EventData::RowsEvent(rows)) => {
                    made = self.rows(schemas, &rows, header.timestamp())?;
                }
                _ => {}
            },
        }
        if !artificial {
            self.next_pos = u64::from(header.log_pos());
        }
        Ok(made)
    }

    /// As `EventStreamReader::read`: the event, the format description and table maps kept.
    fn read(&mut self, bytes: &[u8]) -> std::io::Result<BinlogEvent> {
        let event = BinlogEvent::read(&self.fde, bytes)?;
        let kind = event.header().event_type_raw();
        if kind == EventType::FORMAT_DESCRIPTION_EVENT as u8 {
            let fde = event.read_event::<FormatDescriptionEvent<'_>>()?;
            self.fde = fde.into_owned().with_footer(event.footer());
        } else if kind == EventType::TABLE_MAP_EVENT as u8 {
            let tme = event.read_event::<TableMapEvent<'_>>()?;
            self.table_maps.insert(tme.table_id(), tme.into_owned());
        } else if kind == EventType::ROTATE_EVENT as u8
            && !event.read_event::<RotateEvent<'_>>()?.is_fake()
        {
            self.table_maps.clear();
        }
        Ok(event)
    }

    fn begin(&mut self, start: u64, gtid: Option<String>, server_id: u32) {
        self.place = Some(Place {
            file: self.file.clone(),
            pos: start,
            row: 0,
            gtid,
            server_id,
            ts_ms: 0,
            snapshot: SnapshotMarker::False,
        });
    }

    /// As the stream's `rows`, with both decoders compared where siphon's reads the event.
    fn rows(
        &mut self,
        schemas: &dyn SchemaStore,
        rows: &RowsEventData<'_>,
        timestamp: u32,
    ) -> Result<Vec<Event>> {
        if self.place.is_none() {
            self.begin(self.next_pos, None, 1);
        }
        let tme = self.table_maps.get(&rows.table_id()).ok_or_else(|| {
            Error::permanent(format!(
                "a rows event of table id {} came before its table map",
                rows.table_id()
            ))
        })?;
        let (shape, decoder) = match self.shapes.get(&rows.table_id()) {
            Some((map, shape, decoder)) if map == tme => (shape.clone(), decoder.clone()),
            _ => {
                let (columns, key) = from_table_map(tme, &self.collations)?;
                let shape = Arc::new(Shape::new(
                    (&tme.database_name(), &tme.table_name()),
                    columns,
                    key,
                    &self.factory.name,
                    |s| schemas.register(s),
                )?);
                let decoder = RowDecoder::new(tme, &shape.columns).map(Arc::new);
                self.shapes.insert(
                    rows.table_id(),
                    (tme.clone().into_owned(), shape.clone(), decoder.clone()),
                );
                (shape, decoder)
            }
        };
        let op = op_of(rows);
        let decoded = own_images(decoder.as_deref(), &shape, rows, op);
        let generic = || {
            rows.rows(tme)
                .map(|pair| {
                    let (before, after) =
                        pair.map_err(|e| Error::permanent(format!("decoding a binlog row: {e}")))?;
                    Ok((
                        before.map(|r| row(&shape, r)).transpose()?,
                        after.map(|r| row(&shape, r)).transpose()?,
                    ))
                })
                .collect::<Result<Vec<_>>>()
        };
        let pairs = match decoded {
            Some(pairs) => {
                if !has_short_fraction_time(tme)
                    && let Ok(other) = generic()
                    && format!("{other:?}") != format!("{pairs:?}")
                {
                    self.disagreements
                        .push(format!("siphon's {pairs:?}\nmysql_common's {other:?}"));
                }
                pairs
            }
            None => generic()?,
        };
        let place = self.place.as_mut().expect("begun above");
        place.ts_ms = i64::from(timestamp) * 1000;
        let mut made = Vec::new();
        for (before, after) in pairs {
            match (op, before, after) {
                (Op::Update, Some(b), Some(a))
                    if !shape.key.is_empty() && key_of(&shape, &b) != key_of(&shape, &a) =>
                {
                    let (old_key, new_key) = (key_of(&shape, &b), key_of(&shape, &a));
                    let mut delete = self.factory.event(&shape, Op::Delete, Some(b), None, place);
                    delete.key = Some(old_key.clone());
                    delete.key_change = Some(KeyChange::To(new_key));
                    made.push(delete);
                    let mut create = self.factory.event(&shape, Op::Create, None, Some(a), place);
                    create.key_change = Some(KeyChange::From(old_key));
                    made.push(create);
                }
                (op, before, after) => {
                    made.push(self.factory.event(&shape, op, before, after, place));
                }
            }
        }
        for event in &mut made {
            super::set_row(event, place.row);
            place.row += 1;
        }
        Ok(made)
    }
}

/// Whether a table holds a TIME(1) or TIME(2) column, whose negative values with a fraction
/// mysql_common reads 625 hours off (`my_time_packed_from_binary` subtracts 0x100 from the
/// fraction as a `u32`, which wraps): a known upstream bug (RELIABILITY.md; siphon reads such
/// a column itself but in a table only mysql_common reads), so the two decoders are compared
/// only on tables without such a column.
fn has_short_fraction_time(tme: &TableMapEvent<'_>) -> bool {
    (0..tme.columns_count() as usize).any(|i| {
        matches!(
            tme.get_column_type(i),
            Ok(Some(ColumnType::MYSQL_TYPE_TIME2))
        ) && matches!(tme.get_column_metadata(i), Some([1 | 2, ..]))
    })
}
