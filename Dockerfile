# syntax=docker/dockerfile:1
# The stepwell image: a release build on Debian bookworm, run on distroless
# (glibc, no shell, no package manager) as its nonroot user (uid 65532).
#
#   docker build -t stepwell .
#   docker run -v stepwell-data:/data stepwell
#
# By default it listens on 127.0.0.1:50051: in a pod the sidecar and its
# application share loopback, and nothing else can reach the port. To serve
# the network, set STEPWELL_LISTEN=0.0.0.0:50051 with STEPWELL_TLS_CERT,
# STEPWELL_TLS_KEY and STEPWELL_AUTH_FILE (docs/guides/security.md; the sidecar
# refuses to start without them), as docker-compose.yml does.
#
# By default the store is the SQLite file /data/stepwell.db; set
# STEPWELL_DATABASE_URL=postgres://... for a shared store (docker-compose.yml).
# The image has no shell, so health checks run the binary itself:
# `stepwell healthcheck --target 127.0.0.1:50051` exits 0 when SERVING (add
# `--tls-ca` when the sidecar serves TLS, as docker-compose.yml does).

FROM rust:1-bookworm AS build
WORKDIR /src
# No system protoc is needed: build.rs compiles the protos with protox.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
COPY migrations migrations
COPY src src
# The workspace's other member (the benchmark) must be present for --locked.
COPY bench bench
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin stepwell \
    && cp target/release/stepwell /usr/local/bin/stepwell
# The mount point of the SQLite volume, owned by the runtime's nonroot user:
# a new named volume starts as a copy of it, so the sidecar can create its file.
RUN mkdir /data

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/stepwell /usr/local/bin/stepwell
COPY --from=build --chown=65532:65532 /data /data
ENV STEPWELL_DATABASE_URL=sqlite:///data/stepwell.db
VOLUME ["/data"]
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/stepwell"]
CMD ["serve", "--listen", "127.0.0.1:50051"]
