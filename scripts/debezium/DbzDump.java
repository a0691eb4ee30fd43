import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Avro;
import io.debezium.engine.format.Json;
import io.debezium.engine.Header;
import io.debezium.engine.format.SerializationFormat;
import java.io.BufferedWriter;
import java.io.FileWriter;
import java.util.List;
import java.util.Properties;
import java.util.function.Function;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Runs Debezium's embedded PostgreSQL connector and writes every record it emits, as one JSON
 * object a line: {"topic":…,"key":<key JSON or null>,"value":<value JSON or null>} (a null value
 * is a tombstone), and "headers":{name: JSON, …} where the record has headers (a transform's,
 * such as the outbox EventRouter's; each value as Kafka Connect's JsonConverter writes it). It
 * stops after N records, or once no record has come for IDLE seconds (env DBZ_IDLE_S, default
 * 15) after the first one, or when the engine stops (a connector that cannot start, e.g. with
 * every replication slot taken, stops it): then with exit status 1 if it stopped on an error.
 * Arguments: DB TABLE_INCLUDE_LIST SLOT SNAPSHOT_MODE N OUT_FILE [key=value ...]
 * Extra key=value pairs are Debezium connector properties, e.g. decimal.handling.mode=string
 * time.precision.mode=isostring interval.handling.mode=string converter.schemas.enable=true.
 * With env DBZ_FORMAT=avro the records go through Confluent's AvroConverter instead (give it
 * converter.schema.registry.url=…): key and value are then written as hex strings of the
 * converter's bytes (Confluent's wire format).
 */
public class DbzDump {
    public static void main(String[] a) throws Exception {
        String db = a[0], tables = a[1], slot = a[2], snapshot = a[3], out = a[5];
        long n = Long.parseLong(a[4]);
        long idleMs = Long.parseLong(System.getenv().getOrDefault("DBZ_IDLE_S", "15")) * 1000;
        Properties p = new Properties();
        p.setProperty("name", "dump");
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        p.setProperty("offset.flush.interval.ms", "60000");
        p.setProperty("topic.prefix", "dbz");
        p.setProperty("database.hostname", "127.0.0.1");
        p.setProperty("database.port", "5432");
        p.setProperty("database.user", "postgres");
        p.setProperty("database.password", "");
        p.setProperty("database.dbname", db);
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("slot.name", slot);
        p.setProperty("publication.autocreate.mode", "filtered");
        p.setProperty("publication.name", slot + "_pub");
        p.setProperty("table.include.list", tables);
        p.setProperty("snapshot.mode", snapshot);
        p.setProperty("converter.schemas.enable", "false");
        for (int i = 6; i < a.length; i++) {
            int eq = a[i].indexOf('=');
            p.setProperty(a[i].substring(0, eq), a[i].substring(eq + 1));
        }
        String schemas = p.getProperty("converter.schemas.enable");
        p.setProperty("key.converter.schemas.enable", schemas);
        p.setProperty("value.converter.schemas.enable", schemas);
        AtomicLong seen = new AtomicLong();
        AtomicLong last = new AtomicLong(0);
        // Set when the engine stops: whether it stopped without an error.
        AtomicReference<Boolean> stopped = new AtomicReference<>();
        BufferedWriter w = new BufferedWriter(new FileWriter(out));
        DebeziumEngine<?> engine = "avro".equals(System.getenv("DBZ_FORMAT"))
            ? engine(Avro.class, p, DbzDump::hex, w, seen, last, stopped)
            : engine(Json.class, p, Function.identity(), w, seen, last, stopped);
        ExecutorService ex = Executors.newSingleThreadExecutor();
        ex.execute(engine);
        // With no record at all, it ends after ten idle times (five minutes at least), so that
        // a connector that gets nothing fails its test rather than hanging it.
        long started = System.currentTimeMillis(), firstMs = Math.max(10 * idleMs, 300_000);
        while (seen.get() < n && stopped.get() == null && (last.get() == 0
                ? System.currentTimeMillis() - started < firstMs
                : System.currentTimeMillis() - last.get() < idleMs)) Thread.sleep(100);
        synchronized (w) { w.close(); }
        System.out.printf("debezium: %d records written to %s%n", seen.get(), out);
        // The engine's close waits on its connector's threads, which a connector stuck
        // reconnecting never ends: a minute at most, then the process ends anyway.
        Thread closer = new Thread(() -> {
            try { engine.close(); } catch (Exception e) { e.printStackTrace(); }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(60_000);
        ex.shutdownNow();
        System.exit(Boolean.FALSE.equals(stopped.get()) ? 1 : 0);
    }

    /** The engine writing its records in `format`, each key and value shown as `show` says. */
    static <T> DebeziumEngine<ChangeEvent<T, T>> engine(Class<? extends SerializationFormat<T>> format, Properties p,
            Function<T, String> show, BufferedWriter w, AtomicLong seen, AtomicLong last, AtomicReference<Boolean> stopped) {
        // Headers through Kafka Connect's JsonConverter (the embedded engine takes no
        // SimpleHeaderConverter, Kafka Connect's default on a worker).
        return DebeziumEngine.create(format, format, Json.class).using(p)
            .notifying((List<ChangeEvent<T, T>> records, DebeziumEngine.RecordCommitter<ChangeEvent<T, T>> c) -> {
                for (ChangeEvent<T, T> r : records) {
                    synchronized (w) {
                        try {
                            w.write("{\"topic\":\"" + r.destination() + "\",\"key\":" + (r.key() == null ? "null" : show.apply(r.key()))
                                + ",\"value\":" + (r.value() == null ? "null" : show.apply(r.value())) + headers(r) + "}\n");
                        } catch (java.io.IOException e) { throw new RuntimeException(e); }
                    }
                    seen.incrementAndGet();
                    last.set(System.currentTimeMillis());
                    c.markProcessed(r);
                }
                c.markBatchFinished();
            }).using((boolean ok, String message, Throwable error) -> {
                System.err.println("debezium: engine stopped: " + message);
                if (error != null) error.printStackTrace();
                stopped.set(ok);
            }).build();
    }

    /** `,"headers":{name: text, …}` for a record with headers (the outbox EventRouter's), else nothing. */
    static String headers(ChangeEvent<?, ?> r) {
        List<Header<Object>> headers = r.headers();
        if (headers == null || headers.isEmpty()) return "";
        StringBuilder s = new StringBuilder(",\"headers\":{");
        for (int i = 0; i < headers.size(); i++) {
            if (i > 0) s.append(',');
            Object value = headers.get(i).getValue();
            s.append(quote(headers.get(i).getKey())).append(':').append(value == null ? "null" : value.toString());
        }
        return s.append('}').toString();
    }

    /** A JSON string. */
    static String quote(String text) {
        StringBuilder s = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') s.append('\\').append(c);
            else if (c < 0x20) s.append(String.format("\\u%04x", (int) c));
            else s.append(c);
        }
        return s.append('"').toString();
    }

    /** Bytes as a JSON string of hex digits. */
    static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder("\"");
        for (byte b : bytes) s.append(String.format("%02x", b));
        return s.append('"').toString();
    }
}
