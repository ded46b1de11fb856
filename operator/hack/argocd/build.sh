#!/usr/bin/env bash
# Builds Argo CD (application controller, repo-server, config-management-
# plugin server) from the Go module proxy into bin/argocd/<version>/, for the
# tests and `make demo-argocd`. Argo CD's go.mod has replace lines, so
# `go install module@version` cannot build it: the module's source is copied
# into a folder of its own and built there, with its own go.mod. Argo CD is
# one binary that acts as each component by its name (argv[0]); the
# components are symlinks to it. Does nothing when the binary is there.
set -euo pipefail

ARGOCD_VERSION=${ARGOCD_VERSION:-v2.14.21}
module=github.com/argoproj/argo-cd/v2
root=$(cd "$(dirname "$0")/../../.." && pwd)
dest="$root/bin/argocd/$ARGOCD_VERSION"
components="argocd-application-controller argocd-repo-server argocd-cmp-server"

link() {
  for c in $components; do ln -sfn argocd "$dest/$c"; done
}

# Static, as upstream's Makefile builds it (CGO_FLAG=0): the Sluice plugin
# sidecar runs this binary inside the operator image, which is FROM scratch
# (no C library). A binary an older build.sh linked with cgo is rebuilt.
if [ -x "$dest/argocd" ] && ldd "$dest/argocd" >/dev/null 2>&1; then
  echo "argocd: $dest/argocd is dynamically linked (built with cgo): rebuilding it static"
elif [ -x "$dest/argocd" ]; then
  link
  echo "argocd: Argo CD $ARGOCD_VERSION present in ${dest#$root/}"
  exit 0
fi
mkdir -p "$dest"
# Argo CD's module must not see the project's go.work.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
src=$(go mod download -json "$module@$ARGOCD_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
  echo "argocd: cannot download $module@$ARGOCD_VERSION from the module proxy" >&2
  exit 1
fi
work="$dest/src"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
# The module cache is read-only; the build needs a writable copy.
mkdir -p "$work"
(cd "$src" && tar -cf - .) | (cd "$work" && tar -xf -)
chmod -R u+w "$work"
echo "argocd: building Argo CD $ARGOCD_VERSION (about 10 CPU-minutes cold, cached by Go afterwards)..."
start=$(date +%s)
# -trimpath: the build cache then does not depend on the folder, so a
# fresh clone (another folder) reuses what an earlier build compiled.
(cd "$work" && go build -trimpath -o "$dest/argocd.tmp" ./cmd)
mv "$dest/argocd.tmp" "$dest/argocd"
link
echo "argocd: built in $(( $(date +%s) - start ))s, binaries in ${dest#$root/}"
