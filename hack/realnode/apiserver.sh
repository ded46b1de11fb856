#!/usr/bin/env bash
# apiserver.sh start|stop: the node's kube-apiserver alone, so the e2e fault
# test can restart it while everything else keeps running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
P=$RN/pki
case ${1:-} in
start)
  NODE_IP=$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  setsid nohup "$KBIN/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP --allow-privileged=true >>"$RN/log/apiserver.log" 2>&1 &
  echo $! >"$RN/apiserver.pid"
  ;;
stop)
  # Stop it before etcd: with etcd gone it retries for over 30 s.
  [ -f "$RN/apiserver.pid" ] || exit 0
  pid=$(cat "$RN/apiserver.pid")
  kill "$pid" 2>/dev/null || exit 0
  for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  ;;
*) echo "usage: apiserver.sh start|stop" >&2; exit 2 ;;
esac
