//! Joined documents (issue 24): the view's state engine on a shop of `orders` orders (three
//! line items each, a product per line, a customer per order), in this process, next to
//! PostgreSQL building the same documents with `json_build_object`/`json_agg` over the same
//! rows (indexed on the foreign keys):
//!
//! - its peak memory while the state of every order is built from a snapshot of the four
//!   tables (every batch's documents built as the daemon builds them), measured first, so
//!   that the process's high-water mark is that build's; the state's size on disk;
//! - the fan-out: one customer with `fanout` orders renamed, each of their documents built
//!   and serialized, vs the join's query for those orders (reference, siphon, siphon,
//!   reference);
//! - a steady load of updates (an order's status, a line's quantity) in batches of 500, each
//!   batch's documents built, vs the join's query for the same orders each batch.
//!
//! The documents go nowhere: a sink's writes are measured by the sink benchmarks.

use std::time::{Duration, Instant};

use siphon_core::event::{Event, Op, Row, SnapshotMarker, SourceInfo, Value};
use siphon_core::position::SourcePosition;
use siphon_source_postgres::PgPosition;
use siphon_view::{View, ViewConfig};

use crate::figure::{Figure, Measure, Rates, Target, thousands};

const CUSTOMERS: u64 = 1000;
const PRODUCTS: u64 = 20;
const LINES_PER_ORDER: u64 = 3;
/// Events per batch of the snapshot and of the steady load.
const SNAPSHOT_BATCH: usize = 10_000;
const LOAD_BATCH: usize = 500;

/// The tables and their rows, as PostgreSQL makes them.
const SHOP: &str = "
    create table customers (id int primary key, name text not null, email text);
    create table products (id int primary key, name text not null, price numeric(8,2));
    create table orders (id int primary key, customer_id int, status text not null,
                         total int not null);
    create table line_items (id int primary key, order_id int, product_id int,
                             line int not null, qty int not null);
    insert into customers select g, 'customer ' || g, 'c' || g || '@example.com'
        from generate_series(1, $CUSTOMERS) g;
    insert into products select g, 'product ' || g, 1.50 from generate_series(1, $PRODUCTS) g;
    insert into orders select g, case when g <= $FANOUT then 1 else g % ($CUSTOMERS - 1) + 2 end,
                              'new', g from generate_series(1, $ORDERS) g;
    insert into line_items select g, (g - 1) / 3 + 1, g % $PRODUCTS + 1, (g - 1) % 3 + 1,
                                  (g - 1) % 3 + 1
        from generate_series(1, $ORDERS * 3) g;
    create index on orders (customer_id);
    create index on line_items (order_id);
    analyze;";

/// The documents of the orders `where`, as the view builds them.
const JOIN: &str = "
    select json_build_object(
        'id', o.id, 'status', o.status, 'total', o.total,
        'customer', (select json_build_object('id', c.id, 'name', c.name)
                     from customers c where c.id = o.customer_id),
        'lines', coalesce((select json_agg(json_build_object(
                               'line', l.line, 'qty', l.qty, 'product_name', p.name)
                               order by l.line, l.id)
                           from line_items l left join products p on p.id = l.product_id
                           where l.order_id = o.id), '[]'))::text
    from orders o where ";

fn view_config() -> anyhow::Result<ViewConfig> {
    Ok(serde_json::from_value(serde_json::json!({
        "root": "public.orders",
        "columns": ["id", "status", "total"],
        "one": {"customer": {"table": "public.customers", "foreign_key": "customer_id",
                             "columns": ["id", "name"]}},
        "many": {"lines": {"table": "public.line_items", "foreign_key": "order_id",
                           "order_by": "line", "columns": ["line", "qty"],
                           "one": {"product": {"table": "public.products",
                                               "foreign_key": "product_id",
                                               "columns": ["name"], "flatten": "product_"}}}}
    }))?)
}

/// A change of `table`'s row `columns` (its `id` first).
fn change(table: &str, op: Op, columns: Vec<(&str, Value)>, n: u64) -> Event {
    let row = Row(columns.into_iter().map(|(c, v)| (c.into(), v)).collect());
    Event {
        op,
        key: Some(Row(vec![row.0[0].clone()])),
        before: None,
        after: Some(row),
        source: SourceInfo {
            connector: "postgresql".into(),
            name: "bench".into(),
            db: "bench".into(),
            schema: Some("public".into()),
            table: table.into(),
            position: SourcePosition::new(PgPosition {
                commit_lsn: n,
                lsn: n,
                index: 0,
            }),
            tx_id: Some(n),
            ts_ms: 1_700_000_000_000,
            snapshot: SnapshotMarker::True,
        },
        ts_ms: 1_700_000_000_000,
        transaction: None,
        key_change: None,
        schema: None,
    }
}

fn int(i: u64) -> Value {
    Value::Int(i as i64)
}

fn order(id: u64, fanout: u64, status: &str) -> Event {
    let customer = if id <= fanout {
        1
    } else {
        id % (CUSTOMERS - 1) + 2
    };
    change(
        "orders",
        Op::Create,
        vec![
            ("id", int(id)),
            ("customer_id", int(customer)),
            ("status", Value::Text(status.into())),
            ("total", int(id)),
        ],
        id,
    )
}

fn line(id: u64, qty: u64) -> Event {
    change(
        "line_items",
        Op::Create,
        vec![
            ("id", int(id)),
            ("order_id", int((id - 1) / LINES_PER_ORDER + 1)),
            ("product_id", int(id % PRODUCTS + 1)),
            ("line", int((id - 1) % LINES_PER_ORDER + 1)),
            ("qty", int(qty)),
        ],
        id,
    )
}

fn customer(id: u64, name: &str) -> Event {
    change(
        "customers",
        Op::Update,
        vec![
            ("id", int(id)),
            ("name", Value::Text(name.into())),
            ("email", Value::Text(format!("c{id}@example.com"))),
        ],
        id,
    )
}

/// The view's state and where it stands in the log it is fed.
struct State {
    view: View,
    offset: u64,
}

impl State {
    /// Feeds `events` as one batch that ends a transaction; the documents, serialized as a
    /// sink would.
    fn apply(&mut self, events: &[Event]) -> anyhow::Result<usize> {
        // The documents go nowhere: every one given before is applied.
        let applied = self.offset;
        self.offset += events.len() as u64;
        let documents = self.view.apply(events, self.offset, true, applied)?;
        let mut bytes = 0;
        for d in &documents {
            bytes += serde_json::to_string(&d.body)?.len();
        }
        std::hint::black_box(bytes);
        Ok(documents.len())
    }
}

/// Builds the state of `orders` orders from a snapshot of the four tables, in batches.
fn snapshot(state: &mut State, orders: u64, fanout: u64) -> anyhow::Result<u64> {
    let mut documents = 0u64;
    let mut batch = Vec::with_capacity(SNAPSHOT_BATCH);
    let mut flush = |batch: &mut Vec<Event>, state: &mut State| -> anyhow::Result<()> {
        documents += state.apply(batch)? as u64;
        batch.clear();
        Ok(())
    };
    for id in 1..=CUSTOMERS {
        let mut c = customer(id, &format!("customer {id}"));
        c.op = Op::Read;
        batch.push(c);
    }
    for id in 1..=PRODUCTS {
        batch.push(change(
            "products",
            Op::Read,
            vec![
                ("id", int(id)),
                ("name", Value::Text(format!("product {id}"))),
                ("price", Value::Decimal("1.50".into())),
            ],
            id,
        ));
    }
    flush(&mut batch, state)?;
    for id in 1..=orders {
        batch.push(order(id, fanout, "new"));
        if batch.len() == SNAPSHOT_BATCH {
            flush(&mut batch, state)?;
        }
    }
    flush(&mut batch, state)?;
    for id in 1..=orders * LINES_PER_ORDER {
        batch.push(line(id, (id - 1) % LINES_PER_ORDER + 1));
        if batch.len() == SNAPSHOT_BATCH {
            flush(&mut batch, state)?;
        }
    }
    flush(&mut batch, state)?;
    Ok(documents)
}

/// Runs the join for the orders `filter` names, reading every document; how long it took.
async fn join(
    client: &tokio_postgres::Client,
    filter: &str,
    ids: &[i32],
) -> anyhow::Result<(Duration, usize)> {
    let started = Instant::now();
    let rows = if ids.is_empty() {
        client.query(&format!("{JOIN}{filter}"), &[]).await?
    } else {
        client.query(&format!("{JOIN}{filter}"), &[&ids]).await?
    };
    let bytes: usize = rows.iter().map(|r| r.get::<_, &str>(0).len()).sum();
    std::hint::black_box(bytes);
    Ok((started.elapsed(), rows.len()))
}

/// The figures: peak RSS of the state's build, the fan-out and the steady load.
pub fn measure(url: &str, orders: u64, fanout: u64, updates: u64) -> anyhow::Result<Vec<Figure>> {
    anyhow::ensure!(fanout <= orders, "--fanout is at most --orders");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("view.redb");
    let mut state = State {
        view: View::open(&path, &view_config()?, |_| Some(vec!["id".into()]))?,
        offset: 0,
    };
    let started = Instant::now();
    let built = snapshot(&mut state, orders, fanout)?;
    let build_time = started.elapsed();
    let peak = crate::pg::peak_rss_kib() * 1024.0 / 1e6;
    let on_disk = std::fs::metadata(&path)?.len() as f64 / 1e6;
    let mut figures = vec![Figure {
        what: "a view's state built from a snapshot (peak RSS)".into(),
        workload: format!(
            "{} orders, {} line items: {} documents built in {:.1} s ({:.0}/s), {on_disk:.0} MB on disk",
            thousands(orders),
            thousands(orders * LINES_PER_ORDER),
            thousands(built),
            build_time.as_secs_f64(),
            built as f64 / build_time.as_secs_f64()
        ),
        measure: Measure::PeakRss { mb: peak },
        target: Target::new(200.0, 24),
    }];

    let runtime = tokio::runtime::Runtime::new()?;
    let db = format!("siphon_bench_views_{}", std::process::id());
    let sql = SHOP
        .replace("$CUSTOMERS", &CUSTOMERS.to_string())
        .replace("$PRODUCTS", &PRODUCTS.to_string())
        .replace("$FANOUT", &fanout.to_string())
        .replace("$ORDERS", &orders.to_string());
    let (fan, steady) = crate::pg::in_database(url, &db, |db_url| {
        crate::pg::psql(db_url, &sql)?;
        runtime.block_on(async {
            let (client, conn) = tokio_postgres::connect(db_url, tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            let fan = fan_out(&client, &mut state, fanout).await?;
            let steady = steady(&client, &mut state, (orders, fanout), updates).await?;
            anyhow::Ok((fan, steady))
        })
    })?;
    figures.push(Figure {
        what: "a view's fan-out: one customer renamed".into(),
        workload: format!(
            "{} of {} orders' documents, 3 lines each",
            thousands(fanout),
            thousands(orders)
        ),
        measure: Measure::Rates(fan),
        target: Target::new(0.5, 24),
    });
    figures.push(Figure {
        what: "a view under a steady update load".into(),
        workload: format!(
            "{} updates (order status, line qty) in batches of {LOAD_BATCH}",
            thousands(updates)
        ),
        measure: Measure::Rates(steady),
        target: None,
    });
    Ok(figures)
}

/// The fan-out: one customer renamed, its orders' documents built again; reference,
/// siphon, siphon, reference.
async fn fan_out(
    client: &tokio_postgres::Client,
    state: &mut State,
    fanout: u64,
) -> anyhow::Result<Rates> {
    let mut fanned = |n: u64| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let documents = state.apply(&[customer(1, &format!("renamed {n}"))])?;
        anyhow::ensure!(documents as u64 == fanout, "{documents} documents");
        Ok(started.elapsed())
    };
    let (first, rows) = join(client, "o.customer_id = 1", &[]).await?;
    anyhow::ensure!(rows as u64 == fanout, "{rows} rows");
    let siphon = [fanned(1)?, fanned(2)?];
    let (last, _) = join(client, "o.customer_id = 1", &[]).await?;
    Ok(Rates::timed(
        "documents",
        "PostgreSQL's json_build_object join for those orders",
        fanout,
        &siphon,
        &[first, last],
    ))
}

/// The steady load: batches of updates to orders and lines; reference, siphon, siphon,
/// reference.
async fn steady(
    client: &tokio_postgres::Client,
    state: &mut State,
    (orders, fanout): (u64, u64),
    updates: u64,
) -> anyhow::Result<Rates> {
    let batches = (updates as usize).div_ceil(LOAD_BATCH);
    let ids = |round: u64, batch: usize| -> Vec<u64> {
        (0..LOAD_BATCH as u64)
            .map(|i| {
                let n = round * updates + (batch * LOAD_BATCH) as u64 + i;
                n.wrapping_mul(2_654_435_761) % orders + 1
            })
            .collect()
    };
    let reference = |round: u64| async move {
        let (mut time, mut documents) = (Duration::ZERO, 0);
        for b in 0..batches {
            let ids: Vec<i32> = ids(round, b).iter().map(|&i| i as i32).collect();
            let (t, n) = join(client, "o.id = any($1)", &ids).await?;
            time += t;
            documents += n;
        }
        anyhow::Ok((time, documents))
    };
    let mut load = |round: u64| -> anyhow::Result<(Duration, usize)> {
        let (mut time, mut documents) = (Duration::ZERO, 0);
        for b in 0..batches {
            let events: Vec<Event> = ids(round, b)
                .into_iter()
                .enumerate()
                .map(|(i, id)| {
                    if i % 2 == 0 {
                        order(id, fanout, &format!("status {round}"))
                    } else {
                        line(id * LINES_PER_ORDER, round + 10)
                    }
                })
                .collect();
            let started = Instant::now();
            documents += state.apply(&events)?;
            time += started.elapsed();
        }
        Ok((time, documents))
    };
    let r1 = reference(0).await?;
    let s1 = load(0)?;
    let s2 = load(1)?;
    let r2 = reference(1).await?;
    // Each side's rate over the documents it built (a batch's repeated orders once).
    let rate = |(t, n): (Duration, usize)| n as f64 / t.as_secs_f64();
    Ok(Rates {
        unit: "documents",
        reference: "PostgreSQL's join for each batch's orders".into(),
        siphon: vec![rate(s1), rate(s2)],
        reference_rates: vec![rate(r1), rate(r2)],
    })
}
