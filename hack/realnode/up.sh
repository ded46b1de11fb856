#!/usr/bin/env bash
# Brings up a real one-node Kubernetes cluster on this machine (see
# README.md "End-to-end on a real node"): containerd + runc + the CNI bridge
# from Debian packages, etcd, the API server, controller-manager, scheduler,
# kubelet and kube-proxy v1.37.2 built by `make node`, CoreDNS as a pod and
# kube-router's NetworkPolicy firewall. Images are imported from the
# docker-archive tarballs in the folders given as arguments (no registry).
# Exits 3 with a clear message when the machine cannot host a node (not root,
# packages or binaries missing, another node up); down.sh removes everything.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

# unable prints why the node cannot come up here and exits 3 (make e2e stops).
unable() { echo "realnode: cannot bring a node up on this machine: $*" >&2; exit 3; }

# check refuses early, before anything is started, when the machine lacks
# something the node needs.
check() {
  [ "$(id -u)" = 0 ] || unable "needs root (kubelet, containerd, iptables and network namespaces are host-global)"
  local c
  for c in containerd containerd-shim-runc-v2 runc ctr iptables ipset conntrack openssl nsenter; do
    command -v $c >/dev/null || unable "command $c missing (make e2e-deps installs the Debian packages)"
  done
  [ -x /usr/lib/cni/bridge ] || unable "CNI plugins missing in /usr/lib/cni (Debian containernetworking-plugins)"
  for c in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy; do
    [ -x "$KBIN/$c" ] || unable "$KBIN/$c missing (make node)"
  done
  [ -x "$KBIN/kubectl" ] || command -v kubectl >/dev/null || unable "no kubectl (make node)"
  [ -x "$ETCD_BIN" ] || unable "$ETCD_BIN missing (make envtest)"
  [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || unable "no memory cgroup"
  [ ! -e "$RN/up" ] || unable "a node is already up (state in $RN); run hack/realnode/down.sh first"
  # The images, containerd's snapshots, etcd and the pods' logs live under
  # $RN: a full disk would show up as pods evicted or stuck mid-test.
  local free_kib need_kib=$((${REALNODE_MIN_FREE_GIB:-3} * 1024 * 1024))
  free_kib=$(df -Pk "$(dirname "$RN")" | awk 'NR == 2 {print $4}')
  [ -z "$free_kib" ] || [ "$free_kib" -ge "$need_kib" ] ||
    unable "only $((free_kib / 1024)) MiB free on the disk of $(dirname "$RN"); the node needs ${REALNODE_MIN_FREE_GIB:-3} GiB (REALNODE_MIN_FREE_GIB)"
  local port
  for port in 6443 10250 10249 23790 23800; do
    if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then unable "port $port is in use (another cluster on this machine?)"; fi
  done
  ip link show cni0 >/dev/null 2>&1 && unable "interface cni0 exists (another node on this machine?)"
  return 0
}

# wait_for DESC SECONDS CMD... polls CMD until it succeeds; a component that
# never comes up ends the script (with its log's tail) instead of hanging.
wait_for() {
  local desc=$1 limit=$2 i; shift 2
  for ((i = 0; i < limit * 4; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  echo "realnode: $desc not ready after ${limit}s" >&2
  return 1
}

# bg NAME CMD... starts a host process of the node, logging to $RN/log.
bg() {
  local name=$1; shift
  # Own session: a signal to the caller's process group (Ctrl-C, timeout)
  # does not kill the node behind down.sh's back.
  setsid nohup "$@" >>"$RN/log/$name.log" 2>&1 &
  echo $! >"$RN/$name.pid"
}

check
if [ "${1:-}" = --check ]; then exit 0; fi
NODE=$(hostname | tr 'A-Z' 'a-z')
NODE_IP=$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$NODE_IP" ] || unable "no IPv4 default route (the node IP is its source address)"
t0=$(date +%s%N)
# since prints the seconds since t0 with one decimal.
since() { local d=$(( ($(date +%s%N) - t0) / 100000000 )); echo "$((d / 10)).$((d % 10))"; }
mkdir -p "$RN"/{log,pki,kubeconfig,containerd,cni/net.d,cni/ipam,kubelet-root,pod-logs,dns}
touch "$RN/up"
echo "$NODE" >"$RN/node-name"

kc=$KBIN/kubectl; [ -x "$kc" ] || kc=$(command -v kubectl)
"$here/pki.sh" "$RN" "$NODE" "$NODE_IP" "$kc" >"$RN/log/pki.log" 2>&1 || { tail "$RN/log/pki.log" >&2; exit 1; }
for f in containerd.toml cni.conflist kubelet.yaml kube-proxy.yaml coredns.yaml; do
  sed -e "s#@RN@#$RN#g" -e "s#@NODE@#$NODE#g" -e "s#@COREDNS_VERSION@#$COREDNS_VERSION#g" "$here/config/$f" >"$RN/$f"
done
mv "$RN/cni.conflist" "$RN/cni/net.d/10-realnode.conflist"

sysctl -n net.ipv4.ip_forward >"$RN/ip_forward"   # down.sh restores it
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
bg containerd containerd --config "$RN/containerd.toml"
wait_for containerd 30 ctr --address "$CTR_SOCK" version
n=0
for d in "$@"; do
  for t in "$d"/*.tar; do
    [ -e "$t" ] || continue
    ctr_ images import --no-unpack "$t" >/dev/null || { echo "realnode: importing $t failed" >&2; exit 1; }
    n=$((n + 1))
  done
done
echo "realnode: containerd up, $n images imported ($(since) s)"

P=$RN/pki
bg etcd "$ETCD_BIN" --name realnode --data-dir "$RN/etcd-data" --listen-client-urls http://127.0.0.1:23790 \
  --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
  --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster realnode=http://127.0.0.1:23800 --unsafe-no-fsync
"$here/apiserver.sh" start
wait_for "API server" 120 kubectl get --raw /readyz
echo "realnode: API server ready ($(since) s)"
K=$RN/kubeconfig/kube-controller-manager.conf
bg kcm "$KBIN/kube-controller-manager" --kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
  --bind-address=127.0.0.1 --leader-elect=false --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" --use-service-account-credentials=true \
  --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 --node-cidr-mask-size=24 --service-cluster-ip-range=10.96.0.0/16
K=$RN/kubeconfig/kube-scheduler.conf
bg sched "$KBIN/kube-scheduler" --kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
  --bind-address=127.0.0.1 --leader-elect=false
bg kubelet "$KBIN/kubelet" --config="$RN/kubelet.yaml" --kubeconfig="$RN/kubeconfig/kubelet.conf" \
  --root-dir="$RN/kubelet-root" --node-ip="$NODE_IP" --hostname-override="$NODE"
bg kube-proxy "$KBIN/kube-proxy" --config="$RN/kube-proxy.yaml"
# ClusterIP traffic kube-proxy has not translated yet must not leak to the
# default gateway (something there answers HTTP 404 for any address): refuse
# it, so early requests fail retryably.
iptables -C FORWARD -d 10.96.0.0/16 -j REJECT 2>/dev/null || iptables -I FORWARD -d 10.96.0.0/16 -j REJECT
wait_for "node $NODE" 120 kubectl wait --for=condition=Ready "node/$NODE" --timeout=2s
echo "realnode: node Ready ($(since) s)"
# Pods are refused until the ServiceAccount controller made "default".
wait_for "default ServiceAccount" 120 kubectl get sa default
kubectl apply -f "$RN/coredns.yaml" >/dev/null
if [ ! -x "$KUBE_ROUTER_BIN" ]; then
  # The node still serves the other tests; the NetworkPolicy test fails on this marker.
  echo "realnode: WARNING: $KUBE_ROUTER_BIN missing (make node): NetworkPolicies are NOT enforced" >&2
  touch "$RN/no-firewall"
else bg kube-router "$KUBE_ROUTER_BIN" --kubeconfig="$RN/kubeconfig/admin.conf" --hostname-override="$NODE" \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false
fi
kubectl -n kube-system rollout status deploy/coredns --timeout=180s >/dev/null
echo "realnode: CoreDNS ready, node up in $(since) s (KUBECONFIG=$KUBECONFIG)"
