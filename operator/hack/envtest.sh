#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver and etcd) from the
# Go module proxy into bin/k8s/<k8s-version>-<os>-<arch>/. Upstream's envtest
# release tarballs cannot be downloaded on our machines, so we compile them.
# Does nothing when both binaries are already there, except relinking a
# kube-apiserver built before it was version-stamped (link only, ~15 s).
# ENVTEST_DEST overrides the destination folder (used to test this script
# without touching the shared one).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.6}
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${ENVTEST_DEST:-"$root/bin/k8s/${K8S_VERSION}-$(go env GOOS)-$(go env GOARCH)"}

# An unstamped kube-apiserver reports v0.0.0-master+$Format:%H$, and Helm's
# kubeVersion checks (charts/sluice: >=1.30.0-0) refuse it: relink it.
if [ -x "$dest/kube-apiserver" ] && ! "$dest/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes v$K8S_VERSION"; then
  echo "envtest: kube-apiserver in ${dest#$root/} reports '$("$dest/kube-apiserver" --version 2>&1 | head -1)', relinking it stamped v$K8S_VERSION"
  relink=1
fi

if [ -x "$dest/kube-apiserver" ] && [ -x "$dest/etcd" ] && [ -z "${relink:-}" ]; then
  echo "envtest: control plane $K8S_VERSION / etcd $ETCD_VERSION present in ${dest#$root/}"
  exit 0
fi
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The throwaway modules must not see the project's go.work.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0

if [ ! -x "$dest/etcd" ]; then
  echo "envtest: building etcd v$ETCD_VERSION (about 30 s)..."
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init envtest.local/etcd >/dev/null 2>&1
  go mod edit -require=go.etcd.io/etcd/server/v3@v$ETCD_VERSION
  for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
    go mod edit -replace=go.etcd.io/etcd/$m=go.etcd.io/etcd/$m@v$ETCD_VERSION
  done
  printf 'package main\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\nfunc main() {}\n' > tools.go
  go mod tidy >/dev/null
  # etcd's main package lives in the server module since 3.5.
  go build -trimpath -o "$dest/etcd.tmp" go.etcd.io/etcd/server/v3 2>/dev/null \
    || go build -trimpath -o "$dest/etcd.tmp" go.etcd.io/etcd/server/v3/etcdmain
  mv "$dest/etcd.tmp" "$dest/etcd"
fi

if [ ! -x "$dest/kube-apiserver" ] || [ -n "${relink:-}" ]; then
  echo "envtest: building kube-apiserver v$K8S_VERSION (about 5 minutes on 2 cores, once; a relink reuses the build cache)..."
  mkdir -p "$work/kube" && cd "$work/kube"
  go mod init envtest.local/kube >/dev/null 2>&1
  go mod edit -require=k8s.io/kubernetes@v$K8S_VERSION
  kdir=$(go mod download -json k8s.io/kubernetes@v$K8S_VERSION | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  # Every staging module is replaced by its published v0.x twin.
  minor=${K8S_VERSION#1.}
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$kdir/go.mod"); do
    go mod edit -replace="$m=$m@v0.$minor"
  done
  printf 'package main\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\nfunc main() {}\n' > tools.go
  go mod tidy >/dev/null
  # The version stamp: without it the binary reports v0.0.0-master and Helm
  # refuses charts with a kubeVersion constraint.
  ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${minor%%.*} -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
  done
  go build -trimpath -ldflags "$ld" -o "$dest/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
fi
echo "envtest: done, binaries in ${dest#$root/}"
