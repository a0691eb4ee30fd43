#!/usr/bin/env bash
# The daemon's memory while the file log compacts, against the same daemon with compaction off
# (the reference), in the same run: a table of ROWS rows (about 220 bytes each) is snapshotted
# from the local PostgreSQL into a file sink, and the daemon's anonymous memory (RssAnon) is
# sampled every half second through the snapshot and for HOLD seconds after it, while
# maintenance passes (every MAINTENANCE) compact the log.
#
#   benches/compaction_daemon.sh LABEL=BINARY[:off] …
#   ROWS=3000000 HOLD=240 benches/compaction_daemon.sh new=target/release/siphon off=target/release/siphon:off
#
# Each LABEL=BINARY runs once in the order given (":off" sets compaction = false) and prints
# the peak during the snapshot, the peak after it and the log's size. Needs psql and curl.
set -euo pipefail
rows=${ROWS:-3000000}
hold=${HOLD:-240}
maintenance=${MAINTENANCE:-15s}
db=siphon_bench_compaction
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
[ $# -gt 0 ] || { sed -n 2,12p "$0"; exit 2; }

if [ "$(psql -d postgres -Atc "select count(*) from pg_database where datname = '$db'")" = 0 ]; then
    psql -q -d postgres -c "create database $db"
fi
count=-1
if [ "$(psql -d $db -Atc "select to_regclass('items') is not null")" = t ]; then count=$(psql -d $db -Atc "select count(*) from items"); fi
if [ "$count" != "$rows" ]; then
    echo "compaction_daemon: filling $db.public.items with $rows rows" >&2
    psql -q -d $db -c "drop table if exists items" \
        -c "create table items (id bigint primary key, payload text not null)" \
        -c "insert into items select g, repeat(md5(g::text), 6) from generate_series(1, $rows) g" \
        -c "analyze items"
fi

metric() { curl -fs 127.0.0.1:18093/metrics | awk -v m="$1" '$1 ~ "^"m {print int($2); exit}'; }
anon_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

printf '%-10s %-11s %12s %16s %16s %12s\n' run compaction snapshot_s "peak_snap_MB" "peak_after_MB" log_MB
for spec in "$@"; do
    label=${spec%%=*}
    binary=${spec#*=}
    compaction=true
    case $binary in *:off) binary=${binary%:off}; compaction=false ;; esac
    work=$(mktemp -d)
    slot=siphon_bench_compaction_$label
    cat >"$work/siphon.toml" <<TOML
data_dir = "$work/data"
[admin]
listen = "127.0.0.1:18093"
[pipelines.bench.source]
kind = "postgres"
url = "postgres://$PGUSER@$PGHOST:5432/$db"
tables = ["public.items"]
slot = "$slot"
publication = "siphon_bench_compaction"
[pipelines.bench.log]
compaction = $compaction
maintenance_interval = "$maintenance"
[pipelines.bench.sinks.files]
kind = "file"
path = "$work/out"
max_file_size = "256MiB"
max_files = 2
TOML
    "$binary" run --config "$work/siphon.toml" >"$work/daemon.log" 2>&1 &
    pid=$!
    start=$SECONDS snap_peak=0 after_peak=0 snapshot_s=
    while kill -0 $pid 2>/dev/null; do
        kb=$(anon_kb $pid)
        if [ -z "$snapshot_s" ]; then
            [ "$kb" -gt "$snap_peak" ] && snap_peak=$kb
            end=$(metric siphon_log_end_offset || true)
            if [ -n "$end" ] && [ "$end" -ge "$rows" ]; then snapshot_s=$((SECONDS - start)); done_at=$SECONDS; fi
        else
            [ "$kb" -gt "$after_peak" ] && after_peak=$kb
            [ $((SECONDS - done_at)) -lt "$hold" ] || break
        fi
        sleep 0.5
    done
    kill -0 $pid 2>/dev/null || { echo "compaction_daemon: the daemon stopped:" >&2; tail -20 "$work/daemon.log" >&2; exit 1; }
    log_mb=$(( $(du -sk "$work/data" | cut -f1) / 1024 ))
    kill -INT $pid; wait $pid || true
    psql -q -d $db -c "select pg_drop_replication_slot('$slot') from pg_replication_slots where slot_name = '$slot'" >/dev/null
    grep -c "key map is full" "$work/daemon.log" >"$work/passes" || true
    printf '%-10s %-11s %12s %16.1f %16.1f %12s   (%s map-full passes)\n' "$label" "$compaction" "$snapshot_s" \
        "$(awk "BEGIN {print $snap_peak / 1024}")" "$(awk "BEGIN {print $after_peak / 1024}")" "$log_mb" "$(cat "$work/passes")"
    rm -rf "$work"
done
