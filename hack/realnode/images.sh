#!/usr/bin/env bash
# Builds the e2e node's own images into bin/images/e2e/ (docker-archive
# tarballs that up.sh imports; no registry): the pod sandbox (pause), CoreDNS
# and the tests' workload (testapp), with the image tool's build verb
# (bin/images-tool, `make images-tool`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
out="$root/bin/images/e2e"
bins="$out/bin"
mkdir -p "$bins"
export CGO_ENABLED=0

tool="$root/bin/images-tool"
[ -x "$tool" ] || { echo "e2e-images: $tool missing (make images-tool)" >&2; exit 1; }
# mkimage builds one FROM-scratch image of the given files.
mkimage() { "$tool" build "$@"; }

t0=$(date +%s)
(cd "$root/e2e" && go build -trimpath -ldflags '-s -w' -o "$bins/pause" ./cmd/pause && go build -trimpath -ldflags '-s -w' -o "$bins/testapp" ./cmd/testapp)
coredns="$root/bin/node/coredns-v$COREDNS_VERSION/coredns"
[ -x "$coredns" ] || { echo "e2e-images: $coredns missing (make node)" >&2; exit 1; }
# The sandbox image is the name containerd's sandbox_image asks for.
mkimage -o "$out/pause.tar" -t registry.k8s.io/pause:3.10 -entrypoint /pause -user 65535:65535 /pause="$bins/pause"
# CoreDNS runs as root: it binds port 53 (a non-root user's added
# NET_BIND_SERVICE is not effective without ambient capabilities) and
# charts/sluice's DNS egress rule names port 53 on the CoreDNS pods.
mkimage -o "$out/coredns.tar" -t "sluice.local/coredns:v$COREDNS_VERSION" -entrypoint "/coredns -conf /etc/coredns/Corefile" \
  -user 0:0 /coredns="$coredns" /etc/coredns/Corefile="$here/coredns/Corefile"
# A registry Sluice's default policies allow (docker.io, implied), like the
# chart's own images: the Helm applier tests deploy it through the gate.
mkimage -o "$out/testapp.tar" -t sluice-gitops/testapp:e2e -entrypoint /testapp -user 65532:65532 /testapp="$bins/testapp"
echo "e2e-images: pause, coredns, testapp in ${out#$root/} ($(( $(date +%s) - t0 )) s)"
