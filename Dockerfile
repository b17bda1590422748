# syntax=docker/dockerfile:1
# pelwarden image: `make image` (docker build -t pelwarden:dev .).
# A static binary on distroless, run as the nonroot user (uid 65532), which
# the Helm chart's securityContext expects.

# The builder runs on the build host and cross-compiles, so a multi-platform
# build (--platform linux/amd64,linux/arm64) needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/ cmd/
COPY internal/ internal/
COPY proto/ proto/
ARG TARGETOS=linux
ARG TARGETARCH
# The release pelwarden reports in `pelwarden version` (main.version).
ARG VERSION=dev
# Cache mounts keep modules and build results between builds; without
# BuildKit, drop the --mount flags and the build still works, only slower.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/pelwarden ./cmd/pelwarden

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pelwarden /pelwarden
USER nonroot:nonroot
# 9090: gRPC (KEDA ExternalScaler, diagnostics, health); 8080: /metrics, /healthz, /readyz.
EXPOSE 9090 8080
ENTRYPOINT ["/pelwarden"]
CMD ["serve"]
