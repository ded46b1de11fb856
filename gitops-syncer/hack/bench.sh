#!/usr/bin/env bash
# gitops-syncer benchmarks (run by `make bench` from the repository root).
# Prints:
#   - the cost of one idle poll cycle over 200 unchanged Repositories
#     (target: zero fetches, under 1 CPU-second per cycle);
#   - the time from a new commit being visible on the git server and a
#     reconcile being requested to its ChangeRequest existing (p50/p95 over
#     40 commits of a Helm-only change).
# Both run against envtest, a real git http-backend and the real validator.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -count=1 -run '^$' -bench 'BenchmarkIdlePollCycle|BenchmarkCommitToChangeRequest' -benchtime 1x -timeout 40m \
  ./internal/controller/ | tee "$out" | grep -E '^(Benchmark|ok|FAIL|---)' || true

metric() { # metric <benchmark> <unit>
  awk -v b="$1" -v u="$2" '$1 ~ "^"b { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' "$out"
}
if ! grep -q '^ok' "$out"; then
  echo "gitops-syncer bench: FAILED"; exit 1
fi
echo
echo "gitops-syncer: idle poll cycle over $(metric BenchmarkIdlePollCycle repositories) unchanged repositories:" \
  "$(metric BenchmarkIdlePollCycle fetches/cycle) fetches," \
  "$(metric BenchmarkIdlePollCycle upload-packs/cycle) pack negotiations," \
  "$(metric BenchmarkIdlePollCycle cpu-s/cycle) CPU-seconds," \
  "$(metric BenchmarkIdlePollCycle wall-s/cycle) s wall per cycle (mean of 3)"
echo "gitops-syncer: commit visible + reconcile requested -> ChangeRequest exists over" \
  "$(metric BenchmarkCommitToChangeRequest commits) commits:" \
  "p50 $(metric BenchmarkCommitToChangeRequest p50-ms) ms, p95 $(metric BenchmarkCommitToChangeRequest p95-ms) ms"
