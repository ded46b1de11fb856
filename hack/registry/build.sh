#!/usr/bin/env bash
# Builds the CNCF distribution registry (distribution/v3) into
# bin/registry/<version>/registry, for the syncer's tests against a real OCI
# registry that sends real push notifications
# (gitops-syncer/internal/chartrepotest/distregtest). The registry is built
# from this folder's own module (a tiny main with the htpasswd auth and the
# inmemory/filesystem storage drivers), so its dependencies never enter a
# project module's go.mod. Does nothing when the binary is there.
set -euo pipefail

REGISTRY_VERSION=${REGISTRY_VERSION:-v3.1.2}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dest="$root/bin/registry/$REGISTRY_VERSION"

if [ -x "$dest/registry" ]; then
  echo "registry: distribution $REGISTRY_VERSION present in ${dest#$root/}"
  exit 0
fi
want=$(sed -n 's|^require github.com/distribution/distribution/v3 \(v[^ ]*\)$|\1|p' "$here/go.mod")
if [ "$want" != "$REGISTRY_VERSION" ]; then
  echo "registry: hack/registry/go.mod requires distribution $want, not $REGISTRY_VERSION" >&2
  exit 1
fi
mkdir -p "$dest"
# The registry's module must not see the project's go.work.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
start=$(date +%s)
echo "registry: building distribution $REGISTRY_VERSION (about 40 CPU-seconds cold, seconds with a warm Go cache)..."
(cd "$here" && go build -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" -o "$dest/registry.tmp" .)
mv "$dest/registry.tmp" "$dest/registry"
"$dest/registry" --version
echo "registry: built in $(( $(date +%s) - start ))s, binary in ${dest#$root/}"
