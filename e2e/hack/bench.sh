#!/usr/bin/env bash
# make bench's e2e part: N releases (SLUICE_BENCH_N, default 50) through
# Sluice with auto-approval to Ready against the same N bare `helm install
# --wait` (Helm SDK) on a real one-node cluster, alternating in batches
# (SLUICE_BENCH_BATCH, default 10); prints both times, the ratio and the
# node's CPU per release (TestBenchReleasesThroughSluiceVsBareHelm). Needs
# what make e2e needs (root, containerd): elsewhere it says so and fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "e2e bench: cannot run here: a real node needs root (kubelet, containerd, iptables)" >&2
  exit 3
fi
if [ -n "${BENCH_SMOKE:-}" ]; then
  # make bench-smoke: one short iteration, so a broken benchmark fails CI.
  export SLUICE_BENCH_N=${SLUICE_BENCH_N:-2} SLUICE_BENCH_BATCH=${SLUICE_BENCH_BATCH:-1}
fi
make -C "$root" --no-print-directory e2e-deps envtest node e2e-images
E2E_RUN='^TestBenchReleasesThroughSluiceVsBareHelm$' SLUICE_E2E_BENCH=1 E2E_TIMEOUT=${E2E_TIMEOUT:-60m} \
  "$root/hack/realnode/e2e.sh"
