use super::*;

const MINIMAL: &str = r#"
[pipelines.shop.source]
kind = "generator"

[pipelines.shop.sinks.out]
kind = "stdout"
"#;

fn error_of(toml: &str) -> ConfigError {
    Config::from_toml(toml).expect_err("the config should be refused")
}

#[test]
fn minimal_config_gets_defaults() {
    let c = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("./siphon-data"));
    assert_eq!(c.admin.listen.to_string(), "127.0.0.1:8083");
    let p = &c.pipelines["shop"];
    assert_eq!(p.log.kind(), "file");
    assert_eq!(p.sinks["out"].delivery, DeliveryConfig::default());
}

#[test]
fn the_example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!c.pipelines.is_empty());
}

/// The example's lines between `# >>> name` and `# <<< name`, uncommented.
fn commented_block(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with(&format!("# >>> {name}")))
        .skip(1)
        .take_while(|l| !l.starts_with(&format!("# <<< {name}")))
        .map(|l| {
            format!(
                "{}\n",
                l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#'))
            )
        })
        .collect()
}

/// The commented Kafka pipeline of the example loads once uncommented, so that what it
/// documents stays true.
#[cfg(feature = "kafka")]
#[test]
fn the_example_kafka_pipeline_loads_uncommented() {
    let block = commented_block("kafka");
    assert!(block.contains("kind = \"kafka\""), "{block}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kafka.toml");
    std::fs::write(
        &config,
        format!("data_dir = \"{}\"\n{block}", dir.path().display()),
    )
    .unwrap();
    let c = Config::load(&config).unwrap_or_else(|e| panic!("{e}\n{block}"));
    let p = &c.pipelines["orders"];
    assert_eq!(p.log.kind(), "kafka");
    assert_eq!(p.sinks["topics"].spec.kind(), "kafka");
}

/// The example's commented message sinks load once uncommented.
#[test]
fn the_example_message_sinks_load_uncommented() {
    for (block, sink, kind) in [
        ("hook", "hook", "http"),
        ("nats", "events", "nats"),
        ("rabbitmq", "rabbit", "rabbitmq"),
    ] {
        let block = commented_block(block);
        assert!(block.contains(&format!("kind = \"{kind}\"")), "{block}");
        let c = Config::from_toml(&format!(
            "[pipelines.demo.source]\nkind = \"generator\"\n{block}"
        ))
        .unwrap_or_else(|e| panic!("{e}\n{block}"));
        assert_eq!(c.pipelines["demo"].sinks[sink].spec.kind(), kind);
    }
}

#[test]
fn unknown_key_is_named_with_its_pipeline() {
    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.log]\nsegment_sise = \"1MiB\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.log.segment_sise", "{e}");
    assert!(
        e.message.contains("unknown key `segment_sise`") && e.message.contains("segment_size"),
        "{e}"
    );

    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.sinks.out2]\nkind = \"file\"\npath = \"x\"\nmax_filez = 3\n"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.out2.max_filez", "{e}");

    let e = error_of(&format!("datadir = \"x\"\n{MINIMAL}"));
    assert_eq!(e.key, "datadir", "{e}");
    assert!(
        e.message.contains("data_dir"),
        "the message lists the allowed keys: {e}"
    );
}

#[test]
fn wrong_type_is_named() {
    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.sinks.other]\nkind = \"stdout\"\nbatch_size = \"lots\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.other.batch_size", "{e}");
    assert!(
        e.message.contains("lots"),
        "the message shows the bad value: {e}"
    );

    let e = error_of(&format!(
        "{MINIMAL}\n[admin]\nlisten = \"not an address\"\n"
    ));
    assert_eq!(e.key, "admin.listen", "{e}");
}

#[test]
fn bad_duration_and_size_are_named_with_examples() {
    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.log]\nretention = \"a week\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.log.retention", "{e}");
    assert!(
        e.message.contains("\"a week\"") && e.message.contains("\"7d\""),
        "{e}"
    );

    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.log]\nmax_size = \"huge\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.log.max_size", "{e}");
    assert!(e.message.contains("512MiB"), "{e}");
}

#[test]
fn missing_required_key_is_named() {
    let e = error_of(
        "[pipelines.shop.source]\nkind = \"generator\"\n[pipelines.shop.sinks.f]\nkind = \"file\"\n",
    );
    assert_eq!(e.key, "pipelines.shop.sinks.f.path", "{e}");
    assert!(e.message.contains("required key is missing"), "{e}");

    let e = error_of("[pipelines.shop.sinks.f]\nkind = \"stdout\"\n");
    assert_eq!(e.key, "pipelines.shop.source", "{e}");

    let e = error_of(
        "[pipelines.shop.source]\ntables = []\n[pipelines.shop.sinks.f]\nkind = \"stdout\"\n",
    );
    assert_eq!(e.key, "pipelines.shop.source.kind", "{e}");
    assert!(e.message.contains("generator"), "{e}");

    let e = error_of("data_dir = \"x\"\n");
    assert_eq!(e.key, "pipelines", "{e}");
}

#[test]
fn unknown_kind_lists_the_allowed_kinds() {
    let e = error_of(
        "[pipelines.shop.source]\nkind = \"oracle\"\n[pipelines.shop.sinks.f]\nkind = \"stdout\"\n",
    );
    assert_eq!(e.key, "pipelines.shop.source.kind", "{e}");
    assert!(
        e.message.contains("\"oracle\"") && e.message.contains("generator"),
        "{e}"
    );

    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.sinks.x]\nkind = \"mongodb\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.x.kind", "{e}");
    assert!(e.message.contains("stdout, file"), "{e}");
}

#[test]
fn bad_values_checked_after_parsing_are_named() {
    let e = error_of(&format!(
        "{MINIMAL}\n[pipelines.shop.log]\nsegment_size = \"64MiB\"\nmax_size = \"100MiB\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.log", "{e}");
    assert!(e.message.contains("max_size"), "{e}");

    let e = error_of(
        "[pipelines.Shop.source]\nkind = \"generator\"\n[pipelines.Shop.sinks.f]\nkind = \"stdout\"\n",
    );
    assert_eq!(e.key, "pipelines.Shop", "{e}");

    let e = error_of(
        "[pipelines.shop.source]\nkind = \"generator\"\ntables = [\"nodot\"]\n[pipelines.shop.sinks.f]\nkind = \"stdout\"\n",
    );
    assert_eq!(e.key, "pipelines.shop.source.tables[0]", "{e}");
    assert!(e.message.contains("nodot"), "{e}");
}

#[test]
fn delivery_keys_match_the_struct() {
    let json = serde_json::to_value(DeliveryConfig::default()).unwrap();
    let mut fields: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    let mut keys = DeliveryConfig::KEYS.to_vec();
    keys.sort_unstable();
    assert_eq!(fields, keys);
}

#[test]
fn secrets_do_not_print() {
    let c = Config::from_toml(&format!("{MINIMAL}\n[admin]\ntoken = \"s3cret-token\"\n")).unwrap();
    assert!(!format!("{c:?}").contains("s3cret"));
}

/// An admin API reachable beyond this machine with no token is refused, naming the key and
/// the ways out; a token, loopback or `allow_unauthenticated` in so many words lets it start.
#[test]
fn an_admin_api_beyond_loopback_without_a_token_is_refused() {
    let open = format!("{MINIMAL}\n[admin]\nlisten = \"0.0.0.0:8083\"\n");
    let e = error_of(&open);
    assert_eq!(e.key, "admin.listen", "{e}");
    for fix in [
        "admin.token",
        "admin.token_file",
        "127.0.0.1",
        "allow_unauthenticated",
    ] {
        assert!(e.message.contains(fix), "{fix} not named: {e}");
    }
    for allowed in [
        format!("{open}token = \"s3cret-token\"\n"),
        format!("{open}allow_unauthenticated = true\n"),
        format!("{MINIMAL}\n[admin]\nlisten = \"[::1]:8083\"\n"),
        format!("{open}enabled = false\n"),
    ] {
        Config::from_toml(&allowed).unwrap_or_else(|e| panic!("{allowed}: {e}"));
    }
}

const SOURCE: &str = "[pipelines.shop.source]\nkind = \"generator\"\n";

#[test]
fn sink_settings_errors_name_the_key_and_the_allowed_values() {
    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.cache]\nkind = \"redis\"\nmode = \"upsertt\"\n"
    ));
    assert!(e.key.starts_with("pipelines.shop.sinks.cache"), "{e}");
    assert!(
        e.message.contains("upsert") && e.message.contains("invalidate"),
        "{e}"
    );

    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.cache]\nkind = \"redis\"\nkey = \"{{table}}\"\n"
    ));
    assert!(e.message.contains("{key}"), "{e}");

    // Without {table}, a truncate of one table would delete every table's keys (and the
    // cursor's).
    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.cache]\nkind = \"redis\"\nkey = \"row:{{key}}\"\n"
    ));
    assert!(e.message.contains("{table}"), "{e}");

    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.wh]\nkind = \"postgres\"\nurl = \"postgres://u@h/db\"\ntables = [\"a.b.c\"]\n"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.wh.tables", "{e}");
    assert!(e.message.contains("schema.table"), "{e}");

    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.wh]\nkind = \"postgres\"\nurl = \"postgres://u@h/db\"\non_error = \"skip\"\n"
    ));
    assert!(e.key.ends_with("on_error"), "{e}");
    assert!(e.message.contains("dead_letter"), "{e}");

    let e = error_of(&format!(
        "{SOURCE}[pipelines.shop.sinks.search]\nkind = \"elasticsearch\"\nurl = \"http://h:9200\"\nindex = \"{{tabel}}\"\n"
    ));
    assert!(
        e.message.contains("{tabel}") && e.message.contains("{table}"),
        "{e}"
    );
}

#[test]
fn sink_passwords_do_not_print() {
    let c = Config::from_toml(&format!(
        "{SOURCE}[pipelines.shop.sinks.cache]\nkind = \"redis\"\npassword = \"r3dis-pw\"\n\
         [pipelines.shop.sinks.wh]\nkind = \"postgres\"\nurl = \"postgres://u@h/db\"\npassword = \"pg-pw-9\"\n\
         [pipelines.shop.sinks.search]\nkind = \"elasticsearch\"\nurl = \"http://h:9200\"\nusername = \"u\"\npassword = \"es-pw-7\"\n"
    ))
    .unwrap();
    let printed = format!("{c:?}");
    for secret in ["r3dis-pw", "pg-pw-9", "es-pw-7"] {
        assert!(!printed.contains(secret), "{secret} printed");
    }
}

#[test]
fn a_mysql_source_parses_and_its_errors_name_the_key() {
    let source = "[pipelines.shop.source]\nkind = \"mysql\"\nurl = \"mysql://root@127.0.0.1:3306\"\ntables = [\"shop.*\"]\n";
    let sink = "[pipelines.shop.sinks.out]\nkind = \"stdout\"\n";
    let c = Config::from_toml(&format!("{source}{sink}")).unwrap();
    assert_eq!(c.pipelines["shop"].source_kind(), "mysql");
    let e = error_of(&format!("{source}snapshot = \"sometimes\"\n{sink}"));
    assert!(
        e.message.contains("when_needed"),
        "the message lists the allowed values: {e}"
    );
    let e = error_of(&format!(
        "[pipelines.shop.source]\nkind = \"mysql\"\nurl = \"mysql://root@127.0.0.1:3306\"\ntables = [\"nodot\"]\n{sink}"
    ));
    assert!(e.message.contains("database.table"), "{e}");
}

#[test]
fn sinks_alone_and_consumer_groups_need_a_log_several_daemons_read() {
    let e = error_of(&format!("{MINIMAL}consumer_group = true\n"));
    assert_eq!(e.key, "pipelines.shop.sinks.out.consumer_group", "{e}");
    assert!(e.message.contains("kind = \"kafka\""), "{e}");
    let sinks_alone = "[pipelines.shop.log]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\n\
        [pipelines.shop.sinks.out]\nkind = \"stdout\"\nconsumer_group = true\n";
    let c = Config::from_toml(sinks_alone).unwrap_or_else(|e| panic!("{e}"));
    let p = &c.pipelines["shop"];
    assert!(p.source.is_none());
    assert_eq!(p.source_kind(), "none");
    assert!(p.sinks["out"].delivery.consumer_group);
}

#[test]
fn transforms_load_in_order_and_a_bad_one_is_named() {
    let c = Config::from_toml(&format!(
        r#"{MINIMAL}
[[pipelines.shop.sinks.out.transforms]]
kind = "rename_columns"
columns = {{ orderTotal = "total" }}

[[pipelines.shop.sinks.out.transforms]]
kind = "filter"
when = "op != 'd'"

[[pipelines.shop.transforms]]
kind = "drop_columns"
columns = ["secret"]
"#
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let p = &c.pipelines["shop"];
    assert_eq!(p.transforms.len(), 1);
    let sink = &p.sinks["out"].delivery.transforms;
    assert_eq!(
        sink.iter().map(TransformConfig::kind).collect::<Vec<_>>(),
        ["rename_columns", "filter"]
    );
    // Column names keep their case.
    let TransformConfig::RenameColumns(rename) = &sink[0] else {
        panic!("{sink:?}")
    };
    assert!(rename.columns.contains_key("orderTotal"), "{rename:?}");

    let e = error_of(&format!(
        "{MINIMAL}[[pipelines.shop.sinks.out.transforms]]\nkind = \"filter\"\nwhen = \"op ==\"\n"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.out.transforms[0].when", "{e}");
    assert!(e.message.contains("<input>:1:"), "{e}");
    let e = error_of(&format!(
        "{MINIMAL}[[pipelines.shop.transforms]]\nkind = \"mask\"\ncolumns = [\"email\"]\nwith = \"sha1\"\n"
    ));
    assert!(e.key.starts_with("pipelines.shop.transforms"), "{e}");
    assert!(e.message.contains("hmac_sha256"), "{e}");
}

#[test]
fn a_view_is_read_and_a_sink_names_one_of_the_pipelines() {
    const VIEW: &str = r#"
[pipelines.shop.views.order_docs]
root = "public.orders"

[pipelines.shop.views.order_docs.one.customerInfo]
table = "public.customers"
foreign_key = "customer_id"
flatten = "customer_"

[pipelines.shop.views.order_docs.many.lines]
table = "public.line_items"
foreign_key = "order_id"
order_by = "line"
"#;
    let c = Config::from_toml(&format!("{MINIMAL}view = \"order_docs\"\n{VIEW}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let p = &c.pipelines["shop"];
    assert_eq!(p.sinks["out"].delivery.view.as_deref(), Some("order_docs"));
    let view = &p.views["order_docs"];
    // Field names keep their case.
    assert!(view.one.contains_key("customerInfo"), "{view:?}");
    assert_eq!(view.many["lines"].order_by.as_deref(), Some("line"));

    let e = error_of(&format!("{MINIMAL}view = \"orders\"\n{VIEW}"));
    assert_eq!(e.key, "pipelines.shop.sinks.out.view", "{e}");
    assert!(e.message.contains("configured: order_docs"), "{e}");
    let e = error_of(&format!(
        "{MINIMAL}view = \"order_docs\"\ntables = [\"public.orders\"]\n{VIEW}"
    ));
    assert_eq!(e.key, "pipelines.shop.sinks.out.tables", "{e}");
    let e = error_of(&format!(
        "{MINIMAL}{VIEW}\n[pipelines.shop.views.order_docs.many.lines.one.product]\ntable = \"public.products\"\nforeignkey = \"product_id\"\n"
    ));
    assert!(
        e.key.starts_with("pipelines.shop.views.order_docs") && e.message.contains("foreign_key"),
        "{e}"
    );
}
