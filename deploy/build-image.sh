#!/usr/bin/env bash
# Builds the jobplane container image from this checkout with podman:
# a static binary and the host's CA bundle, on an empty base (FROM scratch).
#
#   deploy/build-image.sh [TAG]      (default localhost/jobplane:dev)
#
# VERSION (default: git describe) is stamped into the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-localhost/jobplane:dev}"
version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
ca="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/jobplane/jobplane/internal/cli.Version=$version" \
  -o "$ctx/jobplane" ./cmd/jobplane
cp "$ca" "$ctx/ca-certificates.crt"
mkdir -p "$ctx/data" "$ctx/tmp"
podman build --quiet --file deploy/Containerfile --tag "$tag" "$ctx"
