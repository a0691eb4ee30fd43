//! `siphon check`.

use std::process::ExitCode;

use crate::config::Config;

pub(super) async fn check(config: &Config, connect: bool) -> anyhow::Result<ExitCode> {
    println!("configuration OK: data_dir {}", config.data_dir.display());
    for (name, p) in &config.pipelines {
        let sinks: Vec<String> = p
            .sinks
            .iter()
            .map(|(n, s)| format!("{n} ({})", s.spec.kind()))
            .collect();
        println!(
            "  pipeline {name}: source {} → sinks {}",
            p.source_kind(),
            sinks.join(", ")
        );
    }
    if !connect {
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = 0;
    for (name, p) in &config.pipelines {
        if let Some(source) = &p.source {
            let mut built = source.build(name);
            report(
                &mut failed,
                &format!("{name}: source {}", source.kind()),
                built.check().await,
            );
            if !p.views.is_empty() {
                let tables = match built.tables().await {
                    Ok(tables) => built.columns().await.map(|columns| (tables, columns)),
                    Err(e) => Err(e),
                };
                for (view, config) in &p.views {
                    let fits = match &tables {
                        Ok((tables, columns)) => siphon_view::View::check(
                            config,
                            |table| {
                                tables
                                    .iter()
                                    .find(|t| &t.name == table)
                                    .map(|t| t.key_columns.clone())
                            },
                            |table| columns.as_ref()?.get(table).cloned(),
                        )
                        .map_err(|e| siphon_core::Error::permanent(e.to_string())),
                        Err(e) => Err(siphon_core::Error::permanent(format!(
                            "the source's tables cannot be read: {e}"
                        ))),
                    };
                    report(&mut failed, &format!("{name}: view {view}"), fits);
                }
            }
        }
        let log = p.log.clone();
        let reached = tokio::task::spawn_blocking(move || log.check())
            .await
            .unwrap_or_else(|e| Err(siphon_core::Error::permanent(e.to_string())));
        report(
            &mut failed,
            &format!("{name}: log {}", p.log.kind()),
            reached,
        );
        for (sink_name, s) in &p.sinks {
            let result = match s.spec.build(name, sink_name) {
                Ok(mut sink) => sink.check().await,
                Err(e) => Err(e),
            };
            report(
                &mut failed,
                &format!("{name}: sink {sink_name} ({})", s.spec.kind()),
                result,
            );
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn report(failed: &mut usize, what: &str, result: siphon_core::Result<()>) {
    match result {
        Ok(()) => println!("  ok      {what}"),
        Err(e) => {
            *failed += 1;
            println!("  FAILED  {what}: {e}");
        }
    }
}
