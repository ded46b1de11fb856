#!/usr/bin/env bash
# make e2e: brings the real node up with every image of bin/images/amd64
# (make images) and bin/images/e2e (make e2e-images), runs the e2e module's
# tests against it and always tears it down, leaving nothing behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
E2E_TIMEOUT=${E2E_TIMEOUT:-45m}
E2E_RUN=${E2E_RUN:-.}

# Refuse before touching anything (exit 3 with the reason): a second node,
# or a machine that cannot host one, must not be torn down by our trap.
"$here/up.sh" --check
trap '"$here/down.sh"' EXIT
trap 'exit 130' INT TERM
"$here/up.sh" "$root/bin/images/amd64" "$root/bin/images/e2e"
cd "$root"
SLUICE_E2E=1 REALNODE_DIR="$RN" go test -count=1 -timeout "$E2E_TIMEOUT" -run "$E2E_RUN" -v ./e2e/... 2>&1 | tee "$RN/log/e2e-test.log"
