#!/usr/bin/env bash
# Operator benchmarks on envtest, printed as figures (make bench runs this):
#  - time for 1,000 auto-approved ChangeRequests across 100 releases to reach
#    a terminal phase with a no-op applier, the operator's writes per change
#    (by the ChangeRequest and the Release reconciler), the ChangeRequest
#    reconciles that ended in a RequeueAfter, the CPU of kube-apiserver, etcd
#    and the test process, API requests by verb, where a change's time goes
#    (first phase, lock hand-over, apply) and the work queues' waits;
#  - write calls per reconcile at steady state (target 0);
#  - the operator's memory with 10,000 ChangeRequests in its cache;
#  - sharding (issue 24): 10,000 Releases, each with one auto-approved
#    change, to terminal on one unsharded operator and on four shard
#    operators, each an operator binary in its own process, in the same run:
#    the time ratio, each process's heap and API requests per change, and
#    per process where its requests (by method and code) and time (queue
#    wait, reconcile) went (SLUICE_BENCH_SHARD_RELEASES,
#    SLUICE_BENCH_SHARD_PER_NAMESPACE; each Release deploys to its own
#    namespace, SLUICE_BENCH_SHARD_SHARED_TARGET=1 sends all to one;
#    SLUICE_BENCH_OPERATOR_BIN runs a binary built from another commit;
#    SLUICE_BENCH_SHARD_PROFILES=<dir> writes each process's heap profile;
#    the operators watch every namespace, as the chart deploys them;
#    SLUICE_BENCH_SHARD_NAMESPACED=1 passes --namespaces as before);
#  - the pure gate's cost per decision (Go benchmark);
#  - a live compliance pass over 10,000 objects vs conftest test over the
#    same objects (Go benchmark).
#  - a verification pass over 100 releases with 3 checks each against a real
#    Prometheus (make prometheus): CPU per pass and Prometheus requests per pass.
# Knobs: SLUICE_BENCH_RELEASES, SLUICE_BENCH_PER_RELEASE, SLUICE_BENCH_CACHED,
# SLUICE_BENCH_DEADLINE_MINUTES (20: how long the changes may take to end),
# SLUICE_BENCH_SHARD_RELEASES, SLUICE_BENCH_SHARD_PER_NAMESPACE,
# SLUICE_BENCH_SHARD_SHARED_TARGET, SLUICE_BENCH_OPERATOR_BIN;
# SLUICE_BENCH_APISERVER_PROFILE=<file> writes a CPU profile of kube-apiserver
# over the first SLUICE_BENCH_APISERVER_PROFILE_SECONDS (20) of the run.
# BENCH_SMOKE=1 (make bench-smoke) runs one short iteration of each (a few
# releases and changes, one install, one drift pass over 3 releases): its
# figures mean nothing, it shows every benchmark still runs to its end.
set -euo pipefail
cd "$(dirname "$0")/.."
benchtime=() installs=20x passes=3x drift_releases=100 verify_passes=10x
if [ -n "${BENCH_SMOKE:-}" ]; then
	benchtime=(-benchtime 1x) installs=1x passes=1x drift_releases=3 verify_passes=1x
	export SLUICE_BENCH_RELEASES=${SLUICE_BENCH_RELEASES:-2} SLUICE_BENCH_PER_RELEASE=${SLUICE_BENCH_PER_RELEASE:-2} SLUICE_BENCH_CACHED=${SLUICE_BENCH_CACHED:-20}
	export SLUICE_BENCH_SHARD_RELEASES=${SLUICE_BENCH_SHARD_RELEASES:-8} SLUICE_BENCH_SHARD_PER_NAMESPACE=${SLUICE_BENCH_SHARD_PER_NAMESPACE:-4}
fi

# bench runs go test with the arguments given and prints its Benchmark lines;
# a failed run prints its end and stops the script (a broken benchmark must
# fail make bench, not print nothing).
bench() {
	local log
	log=$(mktemp)
	if ! go test "$@" >"$log" 2>&1; then
		tail -40 "$log"
		echo "operator bench: FAILED: go test $*"
		rm -f "$log"
		exit 1
	fi
	grep -E '^Benchmark' "$log" || true
	rm -f "$log"
}

echo "operator: gate evaluation (go test -bench)"
bench -run '^$' -bench . "${benchtime[@]}" -benchmem ./internal/gate/

echo "operator: envtest run (takes a few minutes)"
out=$(SLUICE_BENCH=1 go test -count=1 -timeout 60m -run '^TestBench_' -v ./internal/controller/ 2>&1) || { echo "$out" | tail -50; exit 1; }
echo "$out" | sed -n 's/^BENCH /  /p'

# --- Helm applier (issue 7; package hack/bench-helm) ---
# The Helm applier (download, digest checks, extraction, impersonation,
# manifestDigest post-renderer, install) against a bare Helm SDK install of
# the same chart (with discovery, and with the capabilities pinned as the
# applier pins them), one fresh namespace per install, alternating per
# iteration (applier, bare, pinned): medians and their ratios.
echo "operator: Helm applier vs bare Helm SDK install, alternating (go test -bench, ${installs%x} installs each), load average $(cut -d' ' -f1-3 /proc/loadavg)"
bench -count=1 -run '^$' -bench 'BenchmarkHelmApplierVsBare' -benchtime "$installs" ./hack/bench-helm/

# A drift pass over 100 Helm releases of 20 objects each with nothing
# drifted: the operator's CPU time per pass and its writes (must be 0).
echo "operator: drift pass, $drift_releases releases x 20 objects (go test -bench, ${passes%x} passes)"
bench -count=1 -timeout 20m -run '^$' -bench 'BenchmarkDriftPass' -benchtime "$passes" ./internal/drift/

# Live compliance (issue 25): one full pass over 10,000 live objects of a
# namespace with the default bundle (CPU per pass and per object, and a
# pass that finds nothing changed) against `conftest test` over the same
# objects exported to files with the same policies and data, in the same
# run; conftest is installed into bin/tools as the infra-validator bench
# does.
tools=$(cd .. && pwd)/bin/tools
if [ ! -x "$tools/conftest" ]; then
	echo "installing conftest v0.71.1 into bin/tools (a few minutes when the module cache is cold)"
	mkdir -p "$tools"
	(cd .. && GOWORK=off GOFLAGS=-buildvcs=false GOBIN="$tools" go install github.com/open-policy-agent/conftest@v0.71.1)
fi
compliance_objects=10000
[ -n "${BENCH_SMOKE:-}" ] && compliance_objects=200
echo "operator: live compliance pass over $compliance_objects objects vs conftest test (go test -bench)"
CONFTEST=$tools/conftest COMPLIANCE_OBJECTS=$compliance_objects bench -count=1 -timeout 30m -run '^$' -bench 'BenchmarkCompliancePass' -benchtime 1x ./internal/compliance/
# A verification pass (issue 23): 100 releases x 3 PromQL checks, every check
# due, against the real Prometheus the verify tests start: this process's CPU
# per pass (Prometheus client and judging, not the status writes) and the
# query requests Prometheus served per pass.
echo "operator: verification pass, 100 releases x 3 checks, real Prometheus (go test -bench, ${verify_passes%x} passes)"
bench -count=1 -run '^$' -bench 'BenchmarkVerificationPass' -benchtime "$verify_passes" ./internal/verify/
# Rollback (issue 23): this package's operator and the real syncer binary on
# one API server; per iteration a bad version fails its check and is rolled
# back. Medians of: failing measurement -> rollback ChangeRequest, rollback
# created -> applied, and a normal auto-approved change created -> applied.
rollbacks=5x
[ -n "${BENCH_SMOKE:-}" ] && rollbacks=1x
echo "operator: rollback after a failed verification, real syncer binary (go test -bench, ${rollbacks%x} rollbacks)"
bench -count=1 -timeout 20m -run '^$' -bench 'BenchmarkRollback' -benchtime "$rollbacks" ./internal/controller/
