#!/usr/bin/env bash
# dump.sh: what helps tell why an e2e run failed or timed out, while the
# node is still up: nodes, pods, recent Events, Sluice's ChangeRequests and
# Releases, and the logs of Sluice's pods (with the previous container's
# when one restarted). Every call is bounded, so a dead API server cannot
# hang the teardown that follows.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
ns=${SLUICE_NS:-sluice-system}
k() { kubectl --request-timeout=20s "$@" 2>&1; }

echo "===== e2e dump ($(date -u +%H:%M:%S) UTC)"
echo "----- nodes"; k get nodes -o wide
echo "----- pods"; k get pods -A -o wide
echo "----- ChangeRequests, Releases, Repositories"
k get changerequests,releases,repositories -A -o wide
echo "----- last 60 Events"; k get events -A --sort-by=.lastTimestamp | tail -60
# Argo CD's too: its repo-server runs the Sluice plugin sidecar.
for ns in "$ns" argocd; do
for p in $(kubectl --request-timeout=20s -n "$ns" get pods -o name 2>/dev/null); do
  echo "----- logs of $ns/${p#pod/} (last 200 lines)"
  k -n "$ns" logs "$p" --all-containers --tail=200 --timestamps
  if k -n "$ns" logs "$p" --all-containers --previous --tail=1 >/dev/null; then
    echo "----- previous container of $ns/${p#pod/}"
    k -n "$ns" logs "$p" --all-containers --previous --tail=100 --timestamps
  fi
done
done
echo "===== end of dump"
