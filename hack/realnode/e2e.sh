#!/usr/bin/env bash
# make e2e: brings the real node up with every image of bin/images/amd64
# (make images) and bin/images/e2e (make e2e-images), runs the e2e module's
# tests against it and always tears it down, leaving nothing behind.
#
# Progress is visible: every line of the test run is stamped with the time
# and streamed as it comes (go test -v on one package). A failed or
# timed-out run dumps the pods, Events, Sluice's objects and its pods' logs
# (dump.sh) before the teardown; the node's logs stay in $RN.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
# The whole test run's bound; each wait inside has its own, shorter one
# (SLUICE_E2E_WAIT), so a stuck change fails its test with a message first.
E2E_TIMEOUT=${E2E_TIMEOUT:-40m}
E2E_RUN=${E2E_RUN:-.}

# stamp prefixes each line with the wall-clock time (bash's own printf: no
# fork per line).
stamp() { local l; while IFS= read -r l; do printf '%(%H:%M:%S)T %s\n' -1 "$l"; done; }

# One node per machine: a second make e2e waits for the first to tear its
# node down (saying so) instead of failing on the node it finds.
exec 9>"$RN.lock"
if ! flock -n 9; then
  echo "e2e: another make e2e is using this machine's node; waiting for it to finish"
  flock 9
fi
# With the lock held, a node state found here was left by a run that was
# killed before its teardown (a machine snapshot, a lost session): when none
# of its processes is alive, tear its leftovers down instead of refusing.
# A node brought up by hand (its processes alive) is still refused below.
if [ -e "$RN/up" ] && ! pgrep -f "$RN/" >/dev/null; then
  echo "e2e: $RN holds a node left by an interrupted run, none of its processes alive: tearing it down first"
  "$here/down.sh"
fi
# Refuse before touching anything (exit 3 with the reason): a second node,
# or a machine that cannot host one, must not be torn down by our trap.
"$here/up.sh" --check
t0=$(date +%s)
# Build the test binary first, so a slow compile is not mistaken for a
# silent test.
bin=$(mktemp -d)/e2e.test
(cd "$root" && go test -c -o "$bin" ./e2e)
echo "e2e: test binary built in $(( $(date +%s) - t0 )) s"

trap '"$here/down.sh"; rm -rf "$(dirname "$bin")"' EXIT
trap 'exit 130' INT TERM
"$here/up.sh" "$root/bin/images/amd64" "$root/bin/images/e2e"
t1=$(date +%s)
set +e
(cd "$root/e2e" && SLUICE_E2E=1 REALNODE_DIR="$RN" "$bin" -test.v -test.count=1 -test.timeout "$E2E_TIMEOUT" -test.run "$E2E_RUN" 2>&1) \
  | stamp | tee "$RN/log/e2e-test.log"
rc=${PIPESTATUS[0]}
set -e
echo "e2e: tests ran in $(( $(date +%s) - t1 )) s, exit code $rc"
if [ "$rc" != 0 ]; then
  "$here/dump.sh" 2>&1 | tee "$RN/log/dump.txt" || true
fi
exit "$rc"
