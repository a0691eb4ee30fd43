# siphon: multi-stage build. The runtime image holds only the binary, as a non-root user.
# (Not built on the development machines, which have no Docker engine; see the README.)
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# DuckDB's C++ compiled in (duckdb-bundled): the image needs no libduckdb.so beside it.
# librdkafka (the Kafka log) is compiled from its bundled source against OpenSSL's headers.
RUN apt-get update && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
RUN cargo build --release --locked --bin siphon --features duckdb-bundled

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/siphon --create-home siphon
COPY --from=build /src/target/release/siphon /usr/local/bin/siphon
COPY config.example.toml /etc/siphon/siphon.toml
USER siphon
WORKDIR /var/lib/siphon
# The admin API listens on every interface of the container, so it needs a token: pass
# SIPHON__ADMIN__TOKEN (or mount admin.token_file); siphon refuses to start without one.
ENV SIPHON__DATA_DIR=/var/lib/siphon/data \
    SIPHON__ADMIN__LISTEN=0.0.0.0:8083
VOLUME ["/var/lib/siphon"]
EXPOSE 8083
ENTRYPOINT ["siphon"]
CMD ["run", "--config", "/etc/siphon/siphon.toml"]
