# logless: one replica per container (`logless server`), configured by LOGLESS_ variables.
#
#   docker build -t logless .
#   docker compose -f deploy/compose/docker-compose.yml up     # three replicas
#
# See docs/deploy.md. The build stage compiles the release binary without the test-only
# fault-injection feature (`cargo build --release -p logless` never enables it).

FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p logless \
    && install -m 0755 target/release/logless /usr/local/bin/logless

FROM debian:bookworm-slim
# curl only for the health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 logless \
    && useradd --system --uid 10001 --gid logless --home-dir /var/lib/logless --shell /usr/sbin/nologin logless \
    && install -d -o logless -g logless -m 0750 /var/lib/logless
COPY --from=build /usr/local/bin/logless /usr/local/bin/logless
COPY LICENSE /usr/share/doc/logless/LICENSE
# Inside the container the listeners bind every interface: the container's network is the
# boundary. Publish only what clients need (see docs/security.md).
ENV LOGLESS_CLIENT_ADDR=0.0.0.0:7379 \
    LOGLESS_PEER_ADDR=0.0.0.0:8379 \
    LOGLESS_HTTP_ADDR=0.0.0.0:9379 \
    LOGLESS_DIR=/var/lib/logless \
    LOGLESS_DURABILITY=mmap \
    LOGLESS_LOG_FORMAT=json
USER logless:logless
VOLUME ["/var/lib/logless"]
EXPOSE 7379 8379 9379
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD curl -fsS http://127.0.0.1:9379/health || exit 1
# SIGTERM (docker stop) makes the replica flush and close its store.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/logless", "server"]
