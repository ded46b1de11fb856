#!/usr/bin/env bash
# Builds the third-party binaries of the real one-node cluster that `make e2e`
# brings up, from the Go module proxy, once per version into bin/node/
# (git-ignored): kubelet, kube-controller-manager, kube-scheduler, kube-proxy
# a version-stamped kube-apiserver and a kubectl of the same version
# (Kubernetes), CoreDNS and kube-router's
# firewall. Each set is skipped when its folder is complete. Prints what it
# built and how long it took.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-2.1.0}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/hack/realnode"
node="$root/bin/node"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The throwaway modules must not see the project's go.work; binaries run in
# FROM-scratch images or on the host, so they are static.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
minor=${K8S_VERSION#1.}; minor=${minor%%.*}

# timed NAME CMD... runs CMD and prints how long it took.
timed() {
  local name=$1 t0; shift
  t0=$(date +%s)
  "$@"
  echo "node: built $name in $(( $(date +%s) - t0 )) s"
}

# k8s_module DIR prepares a module requiring k8s.io/kubernetes with every
# staging module replaced by its published v0.x twin (as envtest.sh does).
k8s_module() {
  mkdir -p "$1" && cd "$1"
  go mod init realnode.local/kube >/dev/null 2>&1
  go mod edit -require=k8s.io/kubernetes@v$K8S_VERSION
  local kdir m
  kdir=$(go mod download -json k8s.io/kubernetes@v$K8S_VERSION | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$kdir/go.mod"); do
    go mod edit -replace="$m=$m@v0.$minor.${K8S_VERSION##*.}"
  done
  # tools.go keeps every command's dependencies through `go mod tidy`.
  {
    echo 'package main'; echo 'import ('
    for b in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy; do
      echo " _ \"k8s.io/kubernetes/cmd/$b/app\""
    done
    echo ' _ "k8s.io/kubectl/pkg/cmd"'
    echo ')'; echo 'func main() {}'
  } > tools.go
  go mod tidy >/dev/null
}

# k8s_ldflags prints the -X flags that make the binaries report their real
# version (unstamped ones say v0.0.0-master and Helm's kubeVersion refuses them).
k8s_ldflags() {
  local p ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$ld"
}

build_kubernetes() {
  local dest="$node/kubernetes-v$K8S_VERSION" b missing=()
  mkdir -p "$dest"
  for b in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
    [ -x "$dest/$b" ] || missing+=("$b")
  done
  if [ ${#missing[@]} -eq 0 ]; then echo "node: Kubernetes v$K8S_VERSION present in ${dest#$root/}"; return; fi
  echo "node: building ${missing[*]} v$K8S_VERSION (about 5 CPU-minutes after make envtest, once)"
  k8s_module "$work/kube"
  local ld; ld=$(k8s_ldflags)
  for b in "${missing[@]}"; do
    timed "$b" go build -trimpath -ldflags "$ld" -o "$dest/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$dest/$b.tmp" "$dest/$b"
  done
}

build_coredns() {
  local dest="$node/coredns-v$COREDNS_VERSION"
  if [ -x "$dest/coredns" ]; then echo "node: CoreDNS v$COREDNS_VERSION present in ${dest#$root/}"; return; fi
  echo "node: building CoreDNS v$COREDNS_VERSION (only the plugins the cluster uses; about 3 minutes, once)"
  mkdir -p "$dest" "$work/coredns" && cd "$work/coredns"
  go mod init realnode.local/coredns >/dev/null 2>&1
  go mod edit -require=github.com/coredns/coredns@v$COREDNS_VERSION
  # Same client-go as the Kubernetes binaries: reuses their build cache.
  for m in api apimachinery client-go; do go mod edit -replace="k8s.io/$m=k8s.io/$m@v0.$minor.${K8S_VERSION##*.}"; done
  cp "$here/coredns/main.go.txt" main.go
  go mod tidy >/dev/null
  timed coredns go build -trimpath -ldflags '-s -w' -o "$dest/coredns.tmp" .
  mv "$dest/coredns.tmp" "$dest/coredns"
}

build_kube_router() {
  local dest="$node/kube-router-v$KUBE_ROUTER_VERSION" mod=github.com/cloudnativelabs/kube-router/v2
  if [ -x "$dest/kube-router" ]; then echo "node: kube-router v$KUBE_ROUTER_VERSION present in ${dest#$root/}"; return; fi
  echo "node: building kube-router v$KUBE_ROUTER_VERSION (NetworkPolicy firewall; about 4 minutes, once)"
  mkdir -p "$dest" "$work/kube-router" && cd "$work/kube-router"
  go mod init realnode.local/kuberouter >/dev/null 2>&1
  go mod edit -require=$mod@v$KUBE_ROUTER_VERSION
  for m in api apimachinery client-go component-base; do go mod edit -replace="k8s.io/$m=k8s.io/$m@v0.$minor.${K8S_VERSION##*.}"; done
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/kube-router"\n' $mod > tools.go
  go mod tidy >/dev/null
  timed kube-router go build -trimpath -o "$dest/kube-router.tmp" $mod/cmd/kube-router
  mv "$dest/kube-router.tmp" "$dest/kube-router"
}

t0=$(date +%s)
what=${*:-kubernetes coredns kube-router}
for w in $what; do
  case $w in
    kubernetes) build_kubernetes ;;
    coredns) build_coredns ;;
    kube-router) build_kube_router ;;
    *) echo "node: unknown part $w (want kubernetes, coredns, kube-router)" >&2; exit 2 ;;
  esac
done
echo "node: done in $(( $(date +%s) - t0 )) s, binaries in ${node#$root/}"
