#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver and etcd) from the
# Go module proxy into bin/k8s/<k8s-version>-<os>-<arch>/. Upstream's envtest
# release tarballs cannot be downloaded on our machines, so we compile them.
# Does nothing when both binaries are already there.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.6}
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/bin/k8s/${K8S_VERSION}-$(go env GOOS)-$(go env GOARCH)"

if [ -x "$dest/kube-apiserver" ] && [ -x "$dest/etcd" ]; then
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

if [ ! -x "$dest/kube-apiserver" ]; then
  echo "envtest: building kube-apiserver v$K8S_VERSION (about 5 minutes on 2 cores, once)..."
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
  go build -trimpath -o "$dest/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
fi
echo "envtest: done, binaries in ${dest#$root/}"
