#!/usr/bin/env bash
# make test-busy: run `make test` RUNS times (default 3) while stress-ng keeps
# every core busy, and print each run's time and result. It is the check of
# "the suites pass on a busy machine": a test that depends on timing fails
# here first. stress-ng comes from Debian; it is installed when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-3}
cpus=${HOG_CPUS:-$(nproc)}
if ! command -v stress-ng >/dev/null; then
	if [ "$(id -u)" != 0 ]; then
		echo "test-busy: stress-ng is missing and only root can install it (apt-get install stress-ng)" >&2
		exit 2
	fi
	apt-get update -qq >/dev/null && apt-get install -y -qq stress-ng >/dev/null
fi
stress-ng --cpu "$cpus" --cpu-method matrixprod --quiet &
hog=$!
trap 'kill $hog 2>/dev/null || true; wait $hog 2>/dev/null || true' EXIT
failed=0
for i in $(seq 1 "$runs"); do
	t0=$(date +%s)
	if make test >"bin/test-busy-$i.log" 2>&1; then result=green; else result=FAILED; failed=1; fi
	echo "== test-busy run $i/$runs under stress-ng --cpu $cpus: $result in $(( $(date +%s) - t0 )) s (log bin/test-busy-$i.log, load $(cut -d' ' -f1-3 /proc/loadavg))"
	if [ $result = FAILED ]; then grep -E '^(--- FAIL|FAIL|panic:)' "bin/test-busy-$i.log" | head -20 || true; fi
done
exit $failed
