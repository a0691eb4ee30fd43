#!/usr/bin/env bash
# Regenerates the fuzz targets' seed corpora (fuzz/corpus-seed/<target>/) and the event
# decoder's schema registry (fuzz/data/schemas.postcard) from real bytes:
#
# - pgoutput: a table of every column type changed in every way (inserts, updates with and
#   without a key change, TOASTed values left unchanged, replica identity full, deletes,
#   truncates, a logical message) on the local PostgreSQL, its slot's messages read with
#   pg_logical_slot_peek_binary_changes in text and in binary mode;
# - binlog_event, binlog_rows: the same on the local MariaDB (every column type, MariaDB's
#   own UUID and INET6 included, zero dates, negative times, an XA transaction, a DDL), the
#   binlog read with `mariadb-binlog --raw`, cut into transactions; and MySQL's forms of the
#   same events (v2 rows events, GTID, XA_prepare), which no local server writes;
# - log_segment: segment files written by the log (the fixture's from an earlier build, and
#   one of this build with the events above), and damaged logs;
# - event_decode, json_value: those events encoded for the log, and their values in JSON;
# - config: config.example.toml and its commented blocks, uncommented.
#
# Needs the servers scripts/services prepares (PostgreSQL with wal_level = logical, MariaDB
# with binlog_format = ROW and binlog_row_metadata = FULL). Usage: fuzz/seed.sh
set -euo pipefail
cd "$(dirname "$0")"

PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
export PGHOST PGUSER
MYSQL=(mariadb -h "${MYSQL_HOST:-127.0.0.1}" -u "${MYSQL_USER:-root}")
DB=siphon_fuzz_seed
capture=$(mktemp -d)
trap 'rm -rf "$capture"' EXIT

echo "==> PostgreSQL: every column type, every kind of change, through pgoutput" >&2
psql -q -v ON_ERROR_STOP=1 -d postgres -o /dev/null \
  -c "select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = '$DB'" \
  -c "drop database if exists $DB" -c "create database $DB"
pg() { psql -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
pg <<'SQL'
create type mood as enum ('sad', 'ok', 'happy');
create table every_type (
  id bigint primary key, b bool, i2 smallint, i4 int, f4 real, f8 double precision,
  n numeric(20,6), nn numeric, t text, vc varchar(20), c char(4), nm name, by bytea,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, u uuid,
  j json, jb jsonb, e mood, inet_ inet, cidr_ cidr, mac macaddr, money_ money, bits bit(5),
  vbits varbit(9), oid_ oid, pt point, arr_i int[], arr_t text[], arr_2d int[][],
  arr_n numeric[], arr_ts timestamptz[], big text
);
-- Stored out of line uncompressed, so that an update leaving it alone sends it as unchanged.
alter table every_type alter column big set storage external;
create table keyless (a int, b text);
alter table keyless replica identity full;
create table full_identity (id int primary key, v text);
alter table full_identity replica identity full;
create publication siphon_fuzz_seed for all tables;
select pg_create_logical_replication_slot('siphon_fuzz_seed', 'pgoutput') \g /dev/null
SQL
pg <<'SQL'
insert into every_type values (1, true, -32768, 2147483647, 'NaN', '-Infinity', 12345678901234.123456,
  '-0.000000000000000000001', 'tab	and "quotes" \ and ünïcödé ✓', 'varchar', 'ch', 'nm', '\xdeadbeef00',
  '2024-02-29', '23:59:59.999999', '12:00:00+05:30', '1999-12-31 23:59:59.5', '2000-01-01 00:00:00+00',
  '1 year 2 mons -3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, null]}',
  '{"b": {"c": "d"}}', 'happy', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, B'10101',
  B'110', 4294967295, '(1.5,-2)', '{1,NULL,3}', '{"a b","c,d",NULL,"\"q\""}', '{{1,2},{3,4}}',
  '{1.5,NaN}', '{"2024-01-01 00:00:00+00",infinity}', repeat('toasted ', 400));
insert into every_type (id, d, ts, tstz, n) values (2, 'infinity', '-infinity', 'infinity', 'NaN');
insert into every_type (id, d, ts) values (3, '0044-03-15 BC', '0001-01-01 00:00:00 BC');
insert into every_type (id) values (4);
update every_type set t = 'changed', i4 = -1 where id = 1;
update every_type set id = 10 where id = 1;
update every_type set i2 = null where id = 2;
delete from every_type where id = 3;
insert into keyless values (1, 'one'), (null, null);
update keyless set b = 'uno' where a = 1;
delete from keyless where a is null;
insert into full_identity values (1, 'a');
update full_identity set v = 'b';
delete from full_identity;
begin;
insert into every_type (id, t) select g, 'row ' || g from generate_series(100, 104) g;
select pg_logical_emit_message(true, 'siphon', 'a transactional message') \g /dev/null
commit;
select pg_logical_emit_message(false, 'siphon', 'a message outside a transaction') \g /dev/null
truncate keyless, full_identity;
SQL
for mode in text binary; do
  binary=$([ $mode = binary ] && echo true || echo false)
  pg -At -F ' ' -c "select lsn, encode(data, 'hex') from pg_logical_slot_peek_binary_changes(
      'siphon_fuzz_seed', null, null, 'proto_version', '1', 'publication_names', 'siphon_fuzz_seed',
      'messages', 'true', 'binary', '$binary')" >"$capture/pg-$mode.hex"
done
pg -o /dev/null -c "select pg_drop_replication_slot('siphon_fuzz_seed')"
psql -q -d postgres -c "drop database $DB"

echo "==> MariaDB: every column type, every kind of change, through the binlog" >&2
"${MYSQL[@]}" -e "drop database if exists $DB; create database $DB"
read -r file start < <("${MYSQL[@]}" -N -e "show master status" | cut -f1,2)
"${MYSQL[@]}" "$DB" <<'SQL'
set sql_mode = '';
create table every_type (
  id int primary key, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
  mi mediumint, mu mediumint unsigned, ii int, iu int unsigned, bi bigint, bu bigint unsigned,
  yr year, f float, d double, dec1 decimal(14,4), dec2 decimal(65,30), dec3 decimal(5,0),
  b1 bit(1), b17 bit(17), ch char(10) character set latin1, chu char(3) character set utf8mb4,
  vc varchar(300), va varchar(20) character set ascii, vg varchar(10) character set gbk,
  vs varchar(10) character set sjis, vu varchar(10) character set ucs2, tt tinytext,
  tx text, mt mediumtext, lt longtext, bn binary(4), vb varbinary(300), tb tinyblob, bl blob,
  mb mediumblob, lb longblob, dt date, t0 time, t6 time(6), dt3 datetime(3), dt6 datetime(6),
  ts6 timestamp(6) null, ts0 timestamp null, e enum('a','b''c','ü'), s set('x','y','z'),
  j json, g geometry, pnt point, u uuid, i6 inet6
);
create table keyless (a int, b varchar(10));
insert into every_type values (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648,
  4294967295, -9223372036854775808, 18446744073709551615, 2155, -3.5e38, 1.7976931348623157e308,
  -1234567890.1234, 12345678901234567890123456789012345.123456789012345678901234567890, -99999,
  b'1', b'10101010101010101', 'café', '✓✓✓', repeat('v', 300), 'ascii', '中文', 'ソ',
  'ucs', 'tiny', 'text ✓', 'medium', 'long', 'ab', x'00ff00', x'01', x'0203', x'04',
  x'05', '9999-12-31', '-838:59:59', '838:59:58.999999', '2024-02-29 12:34:56.789',
  '1000-01-01 00:00:00.000001', '2038-01-19 03:14:07.999999', '1970-01-01 00:00:01', 'b''c',
  'x,z', '{"k": [1, "two", null, {"n": 3.5}]}', ST_GeomFromText('LINESTRING(0 0,1 1)'),
  ST_GeomFromText('POINT(1 2)'), 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2001:db8::ff00:42:8329');
insert into every_type (id, dt, t0, dt6, ts0, e, s) values (2, '0000-00-00', '-00:00:01',
  '0000-00-00 00:00:00', '0000-00-00 00:00:00', '', '');
insert into every_type (id) values (3);
update every_type set vc = 'changed', ti = 0 where id = 1;
update every_type set id = 10 where id = 1;
delete from every_type where id = 2;
insert into keyless values (1, 'one'), (null, null);
update keyless set b = 'uno';
delete from keyless;
xa start 'fuzz', 'branch', 7;
insert into every_type (id, vc) values (20, 'xa');
xa end 'fuzz', 'branch', 7;
xa prepare 'fuzz', 'branch', 7;
xa commit 'fuzz', 'branch', 7;
alter table keyless add column c int;
truncate keyless;
SQL
read -r _ stop < <("${MYSQL[@]}" -N -e "show master status" | cut -f1,2)
mariadb-binlog --raw --read-from-remote-server -h "${MYSQL_HOST:-127.0.0.1}" -u "${MYSQL_USER:-root}" \
  --start-position="$start" --stop-position="$stop" --result-file="$capture/" "$file"
mv "$capture/$file" "$capture/mariadb.binlog"
"${MYSQL[@]}" -e "drop database $DB"

echo "==> writing the corpora" >&2
rm -rf corpus-seed
mkdir -p corpus-seed/config
cp ../config.example.toml corpus-seed/config/example.toml
cp ../tests/fixtures/datadir-8cf3556/siphon.toml corpus-seed/config/fixture.toml
# Each commented block of the example, uncommented (as src/config/tests.rs reads them).
for block in $(sed -n 's/^# >>> \([a-z0-9_-]*\).*/\1/p' ../config.example.toml); do
  sed -n "/^# >>> $block/,/^# <<< $block/{/^# \(>>>\|<<<\)/d;s/^# \{0,1\}//;p}" ../config.example.toml \
    >"corpus-seed/config/block-$block.toml"
done
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/siphon-fuzz-target} \
  cargo run -q --example seed -- "$capture" ../tests/fixtures/datadir-8cf3556/data
du -sh corpus-seed data >&2
