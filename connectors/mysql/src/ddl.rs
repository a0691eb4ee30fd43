//! What a binlog QUERY event's statement does to the tables, read from its head: a row-based
//! binlog carries rows as row events, but a `TRUNCATE`, a `DROP TABLE`, a `CREATE OR REPLACE
//! TABLE` or a `RENAME TABLE` only as the statement — the rows they remove or bring in are in
//! no row event. So the stream reads the tables such a statement names, and XA's statements,
//! which MariaDB and MySQL also log as QUERY events.
//!
//! Only the head of a statement is read (its verb and the names after it), with a tokenizer
//! that knows MySQL's quoting and comments: a full SQL parser would have to accept the rest
//! of every CREATE TABLE a server may log (engine options, partitioning, system versioning)
//! only to give back the name at its start.

use siphon_core::TableName;

/// A statement of a QUERY event, as far as the stream needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// `BEGIN`: a transaction's start.
    Begin,
    /// `COMMIT`: a transaction's end (of a non-transactional engine's statements).
    Commit,
    /// MySQL's `XA START xid` (MariaDB puts it in the GTID event instead).
    XaStart(Option<Xid>),
    /// `XA END xid`.
    XaEnd,
    /// `XA COMMIT xid [ONE PHASE]`.
    XaCommit {
        /// The transaction.
        xid: Xid,
        /// Committed without a prepare (MySQL logs it inside the transaction it ends).
        one_phase: bool,
    },
    /// `XA ROLLBACK xid`.
    XaRollback(Xid),
    /// A statement that changes tables (`CREATE`, `ALTER`, `DROP`, `RENAME`, `TRUNCATE`): what
    /// it does to each table it names. Empty when it names none siphon can read (then the
    /// caller assumes any table may have changed).
    Tables(Vec<TableChange>),
    /// Anything else: `SAVEPOINT`, `CREATE USER`, a view, a trigger, a statement on a
    /// non-transactional table.
    Other,
}

/// An XA transaction's id: format id, global transaction id, branch qualifier.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Xid {
    /// The format id.
    pub format: u32,
    /// The global transaction id's bytes.
    pub gtrid: Vec<u8>,
    /// The branch qualifier's bytes.
    pub bqual: Vec<u8>,
}

impl std::fmt::Display for Xid {
    /// As the server writes it: `X'61',X'',1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        write!(
            f,
            "X'{}',X'{}',{}",
            hex(&self.gtrid),
            hex(&self.bqual),
            self.format
        )
    }
}

/// What a statement does to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableChange {
    /// Made anew (`CREATE TABLE`): every row it gets follows as row events.
    Created(TableName),
    /// Its rows are gone (`TRUNCATE`).
    Truncated(TableName),
    /// Gone with its rows (`DROP TABLE`, or `DROP DATABASE` of its database).
    Dropped(TableName),
    /// Dropped and made anew (`CREATE OR REPLACE TABLE`): its old rows are gone; the new
    /// table's follow as row events.
    Replaced(TableName),
    /// Renamed away: the name holds no rows now.
    RenamedFrom(TableName),
    /// Another table renamed to this name: its rows are in no row event.
    RenamedTo(TableName),
    /// Its shape may have changed (`ALTER TABLE`, an index).
    Altered(TableName),
    /// Its rows changed without row events: a partition truncated, dropped, exchanged with
    /// another table's rows or converted to a table; a tablespace imported.
    Refreshed(TableName),
    /// A whole database dropped (the caller knows which of its tables it captured).
    DatabaseDropped(String),
}

impl TableChange {
    /// Whether it changes `table` (a dropped database: each of its tables).
    pub fn touches(&self, table: &TableName) -> bool {
        match self {
            TableChange::Created(n)
            | TableChange::Truncated(n)
            | TableChange::Dropped(n)
            | TableChange::Replaced(n)
            | TableChange::RenamedFrom(n)
            | TableChange::RenamedTo(n)
            | TableChange::Altered(n)
            | TableChange::Refreshed(n) => n == table,
            TableChange::DatabaseDropped(database) => table.namespace() == database,
        }
    }
}

/// Reads a QUERY event's statement; `database` is the event's default database.
pub fn statement(sql: &str, database: &str) -> Statement {
    let tokens = tokens(sql);
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        database,
    };
    p.statement()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A bare word: a keyword or an unquoted name.
    Word(String),
    /// A `backquoted` name.
    Quoted(String),
    /// A 'string' (or "string") literal's bytes.
    Str(Vec<u8>),
    /// An X'…' literal's bytes.
    Hex(Vec<u8>),
    /// A number.
    Number(String),
    /// Any other character (`.`, `,`, `(`, …).
    Punct(char),
}

/// The statement's tokens, comments left out (the body of a `/*! … */` comment, which the
/// server executes, kept).
fn tokens(sql: &str) -> Vec<Token> {
    let bytes = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let rest = &bytes[i..];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with(b"/*!") || rest.starts_with(b"/*M!") {
            // An executable comment: its version digits go, its body is read; the `*/` that
            // ends it is skipped where it comes.
            i += if rest[2] == b'M' { 4 } else { 3 };
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
        } else if rest.starts_with(b"*/") {
            i += 2;
        } else if rest.starts_with(b"/*") {
            i = find(bytes, i + 2, b"*/").map_or(bytes.len(), |end| end + 2);
        } else if c == b'#' || rest.starts_with(b"-- ") || rest == b"--" {
            i = find(bytes, i, b"\n").map_or(bytes.len(), |end| end + 1);
        } else if (c == b'x' || c == b'X') && rest.get(1) == Some(&b'\'') {
            let (text, next) = quoted(bytes, i + 1, b'\'');
            out.push(Token::Hex(unhex(&text).unwrap_or_default()));
            i = next;
        } else if c == b'\'' || c == b'"' {
            let (text, next) = quoted(bytes, i, c);
            out.push(Token::Str(text));
            i = next;
        } else if c == b'`' {
            let (text, next) = quoted(bytes, i, b'`');
            out.push(Token::Quoted(String::from_utf8_lossy(&text).into_owned()));
            i = next;
        } else if c.is_ascii_digit() {
            let end = scan(bytes, i, |b| {
                b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
            });
            let text = &sql[i..end];
            // `1abc` is a name in MySQL.
            if text.bytes().all(|b| b.is_ascii_digit()) {
                out.push(Token::Number(text.to_owned()));
            } else {
                out.push(Token::Word(text.to_owned()));
            }
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 {
            let end = scan(bytes, i, |b| {
                b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
            });
            out.push(Token::Word(sql[i..end].to_owned()));
            i = end;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(Token::Punct(ch));
            i += ch.len_utf8();
        }
    }
    out
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn scan(bytes: &[u8], from: usize, take: impl Fn(u8) -> bool) -> usize {
    let mut end = from;
    while end < bytes.len() && take(bytes[end]) {
        end += 1;
    }
    end
}

/// The body of a literal quoted with `q` starting at `start`, doubled quotes and (for
/// strings) backslash escapes undone; and the index after it.
fn quoted(bytes: &[u8], start: usize, q: u8) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut i = start + 1;
    while i < bytes.len() {
        let c = bytes[i];
        if c == q && bytes.get(i + 1) == Some(&q) {
            out.push(q);
            i += 2;
        } else if c == q {
            return (out, i + 1);
        } else if c == b'\\' && q != b'`' && i + 1 < bytes.len() {
            out.push(match bytes[i + 1] {
                b'0' => 0,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'Z' => 0x1a,
                other => other,
            });
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    (out, bytes.len())
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    database: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    /// Takes the next token if it is the keyword `word`.
    fn keyword(&mut self, word: &str) -> bool {
        match self.peek() {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(word) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    /// Takes the keywords `words` in order, or none of them.
    fn keywords(&mut self, words: &[&str]) -> bool {
        let start = self.at;
        if words.iter().all(|w| self.keyword(w)) {
            return true;
        }
        self.at = start;
        false
    }

    fn punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.at += 1;
            return true;
        }
        false
    }

    /// A name part: a bare word or a backquoted name.
    fn name_part(&mut self) -> Option<String> {
        let part = match self.peek()? {
            Token::Word(w) => w.clone(),
            Token::Quoted(q) => q.clone(),
            _ => return None,
        };
        self.at += 1;
        Some(part)
    }

    /// A table name, qualified with the default database where it is not.
    fn table(&mut self) -> Option<TableName> {
        let first = self.name_part()?;
        if self.punct('.') {
            let table = self.name_part()?;
            return Some(TableName::new(first, table));
        }
        Some(TableName::new(self.database, first))
    }

    /// Names separated by commas.
    fn tables(&mut self) -> Option<Vec<TableName>> {
        let mut names = vec![self.table()?];
        while self.punct(',') {
            names.push(self.table()?);
        }
        Some(names)
    }

    fn statement(&mut self) -> Statement {
        let Some(Token::Word(verb)) = self.peek().cloned() else {
            return Statement::Other;
        };
        self.at += 1;
        let tables = match verb.to_ascii_uppercase().as_str() {
            "BEGIN" => return Statement::Begin,
            "COMMIT" => return Statement::Commit,
            "XA" => return self.xa(),
            "TRUNCATE" => {
                self.keyword("TABLE");
                self.table().map(|t| vec![TableChange::Truncated(t)])
            }
            "RENAME" => {
                if !self.keyword("TABLE") && !self.keyword("TABLES") {
                    return Statement::Other; // RENAME USER
                }
                self.renames()
            }
            "DROP" => return self.drop(),
            "CREATE" => return self.create(),
            "ALTER" => return self.alter(),
            _ => return Statement::Other,
        };
        Statement::Tables(tables.unwrap_or_default())
    }

    /// `[IF EXISTS] a [WAIT n | NOWAIT] TO b [, c TO d]…` (MariaDB's clauses included).
    fn renames(&mut self) -> Option<Vec<TableChange>> {
        let mut changes = Vec::new();
        self.keywords(&["IF", "EXISTS"]);
        loop {
            let from = self.table()?;
            if self.keyword("WAIT") {
                self.at += 1; // the seconds
            } else {
                self.keyword("NOWAIT");
            }
            if !self.keyword("TO") {
                return None;
            }
            let to = self.table()?;
            changes.push(TableChange::RenamedFrom(from));
            changes.push(TableChange::RenamedTo(to));
            if !self.punct(',') {
                return Some(changes);
            }
        }
    }

    fn drop(&mut self) -> Statement {
        // A temporary table (logged in statement or mixed format) is no captured table, even
        // where it shadows one of the same name.
        if self.keyword("TEMPORARY") {
            return Statement::Other;
        }
        if self.keyword("DATABASE") || self.keyword("SCHEMA") {
            self.keywords(&["IF", "EXISTS"]);
            return match self.name_part() {
                Some(d) => Statement::Tables(vec![TableChange::DatabaseDropped(d)]),
                None => Statement::Tables(Vec::new()),
            };
        }
        if self.keyword("TABLE") || self.keyword("TABLES") {
            self.keywords(&["IF", "EXISTS"]);
            // MariaDB: DROP TABLE … WAIT n / NOWAIT follow the names; nothing before them.
            let names = self.tables().unwrap_or_default();
            return Statement::Tables(names.into_iter().map(TableChange::Dropped).collect());
        }
        if self.keyword("INDEX") {
            return self.index();
        }
        Statement::Other
    }

    fn create(&mut self) -> Statement {
        let replace = self.keywords(&["OR", "REPLACE"]);
        if self.keyword("TEMPORARY") {
            return Statement::Other;
        }
        if self.keyword("TABLE") {
            self.keywords(&["IF", "NOT", "EXISTS"]);
            return Statement::Tables(match self.table() {
                Some(t) if replace => vec![TableChange::Replaced(t)],
                Some(t) => vec![TableChange::Created(t)],
                None => Vec::new(),
            });
        }
        // CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX i ON t
        let start = self.at;
        for word in ["UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE"] {
            self.keyword(word);
        }
        if self.keyword("INDEX") {
            return self.index();
        }
        self.at = start;
        Statement::Other
    }

    /// `[IF [NOT] EXISTS] i ON t`, after INDEX.
    fn index(&mut self) -> Statement {
        self.keywords(&["IF", "NOT", "EXISTS"]);
        self.keywords(&["IF", "EXISTS"]);
        let _ = self.name_part();
        if self.keyword("ON")
            && let Some(t) = self.table()
        {
            return Statement::Tables(vec![TableChange::Altered(t)]);
        }
        Statement::Tables(Vec::new())
    }

    /// `ALTER [ONLINE] [IGNORE] TABLE t …`, with a `RENAME [TO|AS] u` among its clauses.
    fn alter(&mut self) -> Statement {
        self.keyword("ONLINE");
        self.keyword("IGNORE");
        if !self.keyword("TABLE") {
            return Statement::Other; // ALTER USER, ALTER VIEW, ALTER DATABASE, …
        }
        self.keywords(&["IF", "EXISTS"]);
        let Some(table) = self.table() else {
            return Statement::Tables(Vec::new());
        };
        let mut changes = vec![TableChange::Altered(table.clone())];
        // Top-level clauses: RENAME [TO|AS] (not RENAME COLUMN / INDEX / KEY), and those that
        // change rows without row events.
        let mut depth = 0usize;
        while let Some(token) = self.peek().cloned() {
            self.at += 1;
            let Token::Word(w) = token else {
                match token {
                    Token::Punct('(') => depth += 1,
                    Token::Punct(')') => depth = depth.saturating_sub(1),
                    _ => {}
                }
                continue;
            };
            if depth > 0 {
                continue;
            }
            match w.to_ascii_uppercase().as_str() {
                "RENAME" => {
                    if ["COLUMN", "INDEX", "KEY"].iter().any(|k| self.keyword(k)) {
                        continue;
                    }
                    let _ = self.keyword("TO") || self.keyword("AS");
                    if let Some(to) = self.table() {
                        changes.retain(|c| *c != TableChange::Altered(table.clone()));
                        changes.push(TableChange::RenamedFrom(table.clone()));
                        changes.push(TableChange::RenamedTo(to));
                    }
                }
                "TRUNCATE" | "DROP" | "EXCHANGE" | "CONVERT" if self.keyword("PARTITION") => {
                    changes.push(TableChange::Refreshed(table.clone()));
                    if w.eq_ignore_ascii_case("EXCHANGE") {
                        // EXCHANGE PARTITION p WITH TABLE other
                        let _ = self.name_part();
                        if self.keywords(&["WITH", "TABLE"])
                            && let Some(other) = self.table()
                        {
                            changes.push(TableChange::Refreshed(other));
                        }
                    }
                }
                // CONVERT TABLE t TO PARTITION p: t's rows join this table.
                "CONVERT" if self.keyword("TABLE") => {
                    changes.push(TableChange::Refreshed(table.clone()));
                    if let Some(other) = self.table() {
                        changes.push(TableChange::Dropped(other));
                    }
                }
                "IMPORT" | "DISCARD" if self.keyword("TABLESPACE") => {
                    changes.push(TableChange::Refreshed(table.clone()));
                }
                _ => {}
            }
        }
        Statement::Tables(changes)
    }

    /// `XA …` after XA.
    fn xa(&mut self) -> Statement {
        if self.keyword("START") || self.keyword("BEGIN") {
            return Statement::XaStart(self.xid());
        }
        if self.keyword("END") {
            return Statement::XaEnd;
        }
        if self.keyword("COMMIT") {
            return match self.xid() {
                Some(xid) => Statement::XaCommit {
                    xid,
                    one_phase: self.keywords(&["ONE", "PHASE"]),
                },
                None => Statement::Other,
            };
        }
        if self.keyword("ROLLBACK") {
            return self.xid().map_or(Statement::Other, Statement::XaRollback);
        }
        Statement::Other
    }

    /// `gtrid [, bqual [, format]]`, each a string or an X'…' literal (the server logs them
    /// so), the format a number (1 by default).
    fn xid(&mut self) -> Option<Xid> {
        let mut bytes = || match self.peek()? {
            Token::Str(b) | Token::Hex(b) => {
                let b = b.clone();
                self.at += 1;
                Some(b)
            }
            _ => None,
        };
        let gtrid = bytes()?;
        let mut xid = Xid {
            format: 1,
            gtrid,
            bqual: Vec::new(),
        };
        if self.punct(',') {
            xid.bqual = match self.peek()? {
                Token::Str(b) | Token::Hex(b) => b.clone(),
                _ => return None,
            };
            self.at += 1;
            if self.punct(',') {
                xid.format = match self.peek()? {
                    Token::Number(n) => n.parse().ok()?,
                    _ => return None,
                };
                self.at += 1;
            }
        }
        Some(xid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> TableName {
        TableName::parse(name).unwrap()
    }

    fn tables(sql: &str) -> Vec<TableChange> {
        match statement(sql, "app") {
            Statement::Tables(t) => t,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn statements_that_change_tables_name_them() {
        use TableChange::*;
        assert_eq!(tables("truncate a"), [Truncated(t("app.a"))]);
        assert_eq!(
            tables("  /* app */ TRUNCATE TABLE `shop`.`or``ders`"),
            [Truncated(t("shop.or`ders"))]
        );
        assert_eq!(
            tables("DROP TABLE IF EXISTS `a`,`d` /* generated by server */"),
            [Dropped(t("app.a")), Dropped(t("app.d"))]
        );
        assert_eq!(
            tables("create or replace table a (id int primary key) select 7 as id"),
            [Replaced(t("app.a"))]
        );
        assert_eq!(
            tables("CREATE TABLE IF NOT EXISTS x.y like z"),
            [Created(t("x.y"))]
        );
        assert_eq!(
            tables("rename table a to c, b to a"),
            [
                RenamedFrom(t("app.a")),
                RenamedTo(t("app.c")),
                RenamedFrom(t("app.b")),
                RenamedTo(t("app.a"))
            ]
        );
        assert_eq!(
            tables("alter table c add column (x int), rename to other.d"),
            [RenamedFrom(t("app.c")), RenamedTo(t("other.d"))]
        );
        assert_eq!(
            tables("ALTER TABLE c RENAME COLUMN x TO y, ADD KEY (y)"),
            [Altered(t("app.c"))]
        );
        assert_eq!(
            tables("create unique index i on t (a)"),
            [Altered(t("app.t"))]
        );
        assert_eq!(
            tables("drop database if exists `shop`"),
            [DatabaseDropped("shop".into())]
        );
        assert_eq!(
            tables("/*!40000 ALTER TABLE `t` DISABLE KEYS */"),
            [Altered(t("app.t"))]
        );
        assert_eq!(tables("CREATE TABLE"), []);
        assert_eq!(
            tables("RENAME TABLE IF EXISTS items WAIT 3 TO items_old, items_new NOWAIT TO items"),
            [
                RenamedFrom(t("app.items")),
                RenamedTo(t("app.items_old")),
                RenamedFrom(t("app.items_new")),
                RenamedTo(t("app.items"))
            ]
        );
        assert_eq!(
            tables("alter table t truncate partition p1, p2"),
            [Altered(t("app.t")), Refreshed(t("app.t"))]
        );
        assert_eq!(
            tables("ALTER TABLE t EXCHANGE PARTITION p WITH TABLE x.u"),
            [
                Altered(t("app.t")),
                Refreshed(t("app.t")),
                Refreshed(t("x.u"))
            ]
        );
        assert_eq!(
            tables("alter table t discard tablespace"),
            [Altered(t("app.t")), Refreshed(t("app.t"))]
        );
        assert_eq!(
            tables("alter table t add partition (partition p3 values less than (30))"),
            [Altered(t("app.t"))]
        );
    }

    #[test]
    fn other_statements_are_not_table_changes() {
        for sql in [
            "SAVEPOINT `s1`",
            "ROLLBACK TO `s1`",
            "CREATE USER 'x'@'%' IDENTIFIED BY 'drop table t'",
            "create definer=root view v as select 1",
            "ALTER USER u",
            "RENAME USER a TO b",
            "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @x = 1",
            "insert into myisam_table values (1)",
            "/* unclosed",
            "DROP TEMPORARY TABLE `tt2` /* generated by server */",
            "DROP /*!40005 TEMPORARY */ TABLE IF EXISTS `t`",
            "CREATE OR REPLACE TEMPORARY TABLE t (id int)",
        ] {
            assert_eq!(statement(sql, "app"), Statement::Other, "{sql}");
        }
        assert_eq!(statement("BEGIN", "app"), Statement::Begin);
        assert_eq!(statement("COMMIT /* xid=2 */", "app"), Statement::Commit);
    }

    /// A statement that changes tables but whose names the tokenizer cannot read names none:
    /// the stream warns of it and assumes any table may have changed.
    #[test]
    fn unreadable_table_statements_name_no_table() {
        for sql in [
            "TRUNCATE TABLE",
            "truncate table ?",
            "RENAME TABLE a",
            "rename table a b",
            "DROP TABLE IF EXISTS",
            "ALTER TABLE",
            "CREATE OR REPLACE TABLE (id int)",
            "CREATE INDEX i",
        ] {
            assert_eq!(
                statement(sql, "app"),
                Statement::Tables(Vec::new()),
                "{sql}"
            );
        }
    }

    #[test]
    fn xa_statements_read_their_xid() {
        let xid = |gtrid: &[u8], bqual: &[u8], format| Xid {
            format,
            gtrid: gtrid.to_vec(),
            bqual: bqual.to_vec(),
        };
        assert_eq!(
            statement("XA COMMIT X'61',X'',1", "app"),
            Statement::XaCommit {
                xid: xid(b"a", b"", 1),
                one_phase: false
            }
        );
        assert_eq!(
            statement("XA ROLLBACK X'6774',X'6271',7", "app"),
            Statement::XaRollback(xid(b"gt", b"bq", 7))
        );
        assert_eq!(
            statement("xa commit 'x' one phase", "app"),
            Statement::XaCommit {
                xid: xid(b"x", b"", 1),
                one_phase: true
            }
        );
        assert_eq!(
            statement("XA START X'31',X'',1", "app"),
            Statement::XaStart(Some(xid(b"1", b"", 1)))
        );
        assert_eq!(statement("XA END X'31',X'',1", "app"), Statement::XaEnd);
        assert_eq!(xid(b"a\x00", b"", 2).to_string(), "X'6100',X'',2");
    }
}
