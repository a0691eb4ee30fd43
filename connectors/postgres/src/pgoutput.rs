//! Decoder of the pgoutput logical replication protocol, version 1
//! (<https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>).

use bytes::{Buf, Bytes};

/// One column of a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TupleValue {
    /// SQL NULL.
    Null,
    /// An unchanged TOASTed value that was not sent.
    Unchanged,
    /// The value in the type's text output.
    Text(Bytes),
    /// The value in the type's binary output.
    Binary(Bytes),
}

/// A column as a Relation message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity key.
    pub key: bool,
    /// Its name.
    pub name: String,
    /// Its type's OID.
    pub type_oid: u32,
    /// Its type modifier.
    pub type_modifier: i32,
}

/// A table, as the server describes it before the first change to it (and after DDL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID.
    pub id: u32,
    /// Its schema.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// REPLICA IDENTITY: `d` default, `n` nothing, `f` full, `i` index.
    pub replica_identity: u8,
    /// Its columns in order.
    pub columns: Vec<RelationColumn>,
}

/// A pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A transaction begins.
    Begin {
        final_lsn: u64,
        commit_time_micros: i64,
        xid: u32,
    },
    /// It committed.
    Commit {
        commit_lsn: u64,
        end_lsn: u64,
        commit_time_micros: i64,
    },
    /// Where it came from (for replicated changes).
    Origin { lsn: u64, name: String },
    /// A table's shape.
    Relation(Relation),
    /// A type's name.
    Type {
        id: u32,
        namespace: String,
        name: String,
    },
    /// A new row.
    Insert { relation: u32, new: Vec<TupleValue> },
    /// A changed row; `old` is the key (`K`) or the whole old row (`O`) when the replica
    /// identity provides it.
    Update {
        relation: u32,
        old: Option<Vec<TupleValue>>,
        old_is_key: bool,
        new: Vec<TupleValue>,
    },
    /// A deleted row: its key, or the whole old row.
    Delete {
        relation: u32,
        old: Vec<TupleValue>,
        old_is_key: bool,
    },
    /// Truncated tables.
    Truncate {
        relations: Vec<u32>,
        cascade: bool,
        restart_identity: bool,
    },
    /// A logical decoding message (`pg_logical_emit_message`).
    Logical {
        transactional: bool,
        lsn: u64,
        prefix: String,
        content: Bytes,
    },
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pgoutput: {}", self.0)
    }
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize, what: &str) -> Result<(), DecodeError> {
        if self.0.remaining() < n {
            return Err(DecodeError(format!("message ends inside {what}")));
        }
        Ok(())
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        self.need(1, what)?;
        Ok(self.0.get_u8())
    }
    fn i16(&mut self, what: &str) -> Result<i16, DecodeError> {
        self.need(2, what)?;
        Ok(self.0.get_i16())
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        self.need(4, what)?;
        Ok(self.0.get_u32())
    }
    fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        self.need(4, what)?;
        Ok(self.0.get_i32())
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        self.need(8, what)?;
        Ok(self.0.get_u64())
    }
    fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        self.need(8, what)?;
        Ok(self.0.get_i64())
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<Bytes, DecodeError> {
        self.need(n, what)?;
        Ok(self.0.split_to(n))
    }
    fn cstr(&mut self, what: &str) -> Result<String, DecodeError> {
        let end = self
            .0
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| DecodeError(format!("unterminated {what}")))?;
        let s = String::from_utf8_lossy(&self.0[..end]).into_owned();
        self.0.advance(end + 1);
        Ok(s)
    }
    /// A count of columns: never negative.
    fn count(&mut self, what: &str) -> Result<i16, DecodeError> {
        match self.i16(what)? {
            n if n < 0 => Err(DecodeError(format!("{what} of {n} columns"))),
            n => Ok(n),
        }
    }
    fn tuple(&mut self) -> Result<Vec<TupleValue>, DecodeError> {
        let n = self.count("tuple")?;
        (0..n)
            .map(|_| {
                Ok(match self.u8("tuple column")? {
                    b'n' => TupleValue::Null,
                    b'u' => TupleValue::Unchanged,
                    b't' => {
                        let len = self.u32("column length")? as usize;
                        TupleValue::Text(self.bytes(len, "column value")?)
                    }
                    b'b' => {
                        let len = self.u32("column length")? as usize;
                        TupleValue::Binary(self.bytes(len, "column value")?)
                    }
                    k => {
                        return Err(DecodeError(format!(
                            "unknown tuple column kind {:?}",
                            k as char
                        )));
                    }
                })
            })
            .collect()
    }
}

/// Decodes one message.
pub fn decode(data: Bytes) -> Result<Message, DecodeError> {
    let mut r = Reader(data);
    let tag = r.u8("message tag")?;
    Ok(match tag {
        b'B' => Message::Begin {
            final_lsn: r.u64("begin")?,
            commit_time_micros: r.i64("begin")?,
            xid: r.u32("begin")?,
        },
        b'C' => {
            let _flags = r.u8("commit")?;
            Message::Commit {
                commit_lsn: r.u64("commit")?,
                end_lsn: r.u64("commit")?,
                commit_time_micros: r.i64("commit")?,
            }
        }
        b'O' => Message::Origin {
            lsn: r.u64("origin")?,
            name: r.cstr("origin name")?,
        },
        b'R' => {
            let id = r.u32("relation")?;
            let namespace = r.cstr("relation namespace")?;
            let name = r.cstr("relation name")?;
            let replica_identity = r.u8("relation")?;
            let n = r.count("relation")?;
            let columns = (0..n)
                .map(|_| {
                    Ok(RelationColumn {
                        key: r.u8("column flags")? & 1 == 1,
                        name: r.cstr("column name")?,
                        type_oid: r.u32("column type")?,
                        type_modifier: r.i32("column type modifier")?,
                    })
                })
                .collect::<Result<_, DecodeError>>()?;
            Message::Relation(Relation {
                id,
                namespace,
                name,
                replica_identity,
                columns,
            })
        }
        b'Y' => Message::Type {
            id: r.u32("type")?,
            namespace: r.cstr("type namespace")?,
            name: r.cstr("type name")?,
        },
        b'I' => {
            let relation = r.u32("insert")?;
            expect(&mut r, b'N', "insert")?;
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32("update")?;
            let (old, old_is_key) = match r.u8("update")? {
                b'N' => (None, false),
                k @ (b'K' | b'O') => {
                    let old = r.tuple()?;
                    expect(&mut r, b'N', "update")?;
                    (Some(old), k == b'K')
                }
                k => return Err(DecodeError(format!("unexpected {:?} in update", k as char))),
            };
            Message::Update {
                relation,
                old,
                old_is_key,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32("delete")?;
            let k = r.u8("delete")?;
            if k != b'K' && k != b'O' {
                return Err(DecodeError(format!("unexpected {:?} in delete", k as char)));
            }
            Message::Delete {
                relation,
                old: r.tuple()?,
                old_is_key: k == b'K',
            }
        }
        b'T' => {
            let n = r.u32("truncate")?;
            let options = r.u8("truncate")?;
            let relations = (0..n)
                .map(|_| r.u32("truncate relation"))
                .collect::<Result<_, _>>()?;
            Message::Truncate {
                relations,
                cascade: options & 1 == 1,
                restart_identity: options & 2 == 2,
            }
        }
        b'M' => {
            let flags = r.u8("message")?;
            let lsn = r.u64("message")?;
            let prefix = r.cstr("message prefix")?;
            let len = r.u32("message")? as usize;
            Message::Logical {
                transactional: flags & 1 == 1,
                lsn,
                prefix,
                content: r.bytes(len, "message content")?,
            }
        }
        t => return Err(DecodeError(format!("unknown message tag {:?}", t as char))),
    })
}

fn expect(r: &mut Reader, tag: u8, what: &str) -> Result<(), DecodeError> {
    let got = r.u8(what)?;
    if got != tag {
        return Err(DecodeError(format!(
            "expected {:?} in {what}, found {:?}",
            tag as char, got as char
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;

    use super::*;

    fn tuple(out: &mut Vec<u8>, cols: &[Option<&str>]) {
        out.put_i16(cols.len() as i16);
        for c in cols {
            match c {
                None => out.put_u8(b'n'),
                Some("<unchanged>") => out.put_u8(b'u'),
                Some(v) => {
                    out.put_u8(b't');
                    out.put_u32(v.len() as u32);
                    out.put_slice(v.as_bytes());
                }
            }
        }
    }

    #[test]
    fn relation_and_changes() {
        let mut rel = vec![b'R'];
        rel.put_u32(16384);
        rel.put_slice(b"public\0orders\0");
        rel.put_u8(b'd');
        rel.put_i16(2);
        rel.put_u8(1);
        rel.put_slice(b"id\0");
        rel.put_u32(20);
        rel.put_i32(-1);
        rel.put_u8(0);
        rel.put_slice(b"note\0");
        rel.put_u32(25);
        rel.put_i32(-1);
        let Message::Relation(r) = decode(rel.into()).unwrap() else {
            panic!()
        };
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.columns.len()),
            ("public", "orders", 2)
        );
        assert!(r.columns[0].key && !r.columns[1].key);

        let mut upd = vec![b'U'];
        upd.put_u32(16384);
        upd.put_u8(b'K');
        tuple(&mut upd, &[Some("1"), None]);
        upd.put_u8(b'N');
        tuple(&mut upd, &[Some("2"), Some("<unchanged>")]);
        assert_eq!(
            decode(upd.into()).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some(vec![
                    TupleValue::Text(Bytes::from_static(b"1")),
                    TupleValue::Null
                ]),
                old_is_key: true,
                new: vec![
                    TupleValue::Text(Bytes::from_static(b"2")),
                    TupleValue::Unchanged
                ],
            }
        );

        let mut trunc = vec![b'T'];
        trunc.put_u32(2);
        trunc.put_u8(1);
        trunc.put_u32(1);
        trunc.put_u32(2);
        assert_eq!(
            decode(trunc.into()).unwrap(),
            Message::Truncate {
                relations: vec![1, 2],
                cascade: true,
                restart_identity: false
            }
        );
    }

    /// Found by the pgoutput fuzz target: an Insert whose tuple counted -22235 columns read
    /// as one of none (the stream then panicked taking its key).
    #[test]
    fn a_negative_column_count_is_an_error() {
        let mut ins = vec![b'I'];
        ins.put_u32(16525);
        ins.put_u8(b'N');
        ins.put_i16(-22235);
        assert!(decode(ins.into()).is_err());
        let mut rel = vec![b'R'];
        rel.put_u32(1);
        rel.put_slice(b"public\0t\0");
        rel.put_u8(b'd');
        rel.put_i16(-1);
        assert!(decode(rel.into()).is_err());
    }

    #[test]
    fn truncated_input_is_an_error() {
        let mut ins = vec![b'I'];
        ins.put_u32(1);
        ins.put_u8(b'N');
        ins.put_i16(1);
        ins.put_u8(b't');
        ins.put_u32(10);
        ins.put_slice(b"abc");
        assert!(decode(ins.into()).is_err());
        assert!(decode(Bytes::from_static(b"Z")).is_err());
        assert!(decode(Bytes::new()).is_err());
    }
}
