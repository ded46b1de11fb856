#!/usr/bin/env bash
# Tears down what up.sh brought up and leaves nothing behind: pods first
# (stopping containerd leaves their shims running), then the host
# processes, kube-proxy's and kube-router's iptables chains and ipsets, the
# CNI bridge, its NAT rules, the pod network namespaces and every mount under
# the state folder. Safe to run twice and after a failed up.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
[ "$(id -u)" = 0 ] || { echo "realnode: down needs root" >&2; exit 3; }
[ -d "$RN" ] || { echo "realnode: nothing to tear down ($RN absent)"; exit 0; }
t0=$(date +%s)

# stop NAME...: SIGTERM to the recorded processes, then wait for them.
stop() {
  local n pid
  for n in "$@"; do
    [ -f "$RN/$n.pid" ] || continue
    pid=$(cat "$RN/$n.pid")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null
  done
}

# Nothing recreates pods from here on; the kubelet stops their containers.
stop kcm sched
if [ -f "$RN/apiserver.pid" ] && kill -0 "$(cat "$RN/apiserver.pid")" 2>/dev/null && [ -S "$CTR_SOCK" ]; then
  kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1
  for _ in $(seq 120); do [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break; sleep 0.5; done
fi
stop kubelet kube-proxy kube-router
"$here/apiserver.sh" stop
stop etcd containerd
# Shims of containers the kubelet did not stop in time.
for p in $(pgrep -f containerd-shim-runc-v2); do
  grep -qF "$RN/containerd" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p"
done
# Container processes whose shim is gone (their cgroup is under kubepods).
for p in $(cat /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
[ -x "$KBIN/kube-proxy" ] && "$KBIN/kube-proxy" --cleanup >/dev/null 2>&1
# kube-router's --cleanup-config panics without IPVS: its chains go by hand.
for ch in INPUT FORWARD OUTPUT; do
  while n=$(iptables -L $ch --line-numbers -n 2>/dev/null | awk '$2 ~ /^KUBE-/{print $1; exit}'); [ -n "$n" ]; do iptables -D $ch "$n"; done
done
for t in filter nat mangle; do
  for c in $(iptables -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do iptables -t $t -F "$c"; done
  for c in $(iptables -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do iptables -t $t -X "$c"; done
done
for s in $(ipset list -n 2>/dev/null); do case $s in KUBE-*) ipset destroy "$s" ;; esac; done
mount | awk -v rn="$RN" 'index($3, rn) == 1 || $3 ~ "^/run/netns/cni-" {print $3}' | sort -r | while read -r m; do umount -l "$m"; done
rm -f /run/netns/cni-*
ip link del cni0 2>/dev/null
# By rule number: the bridge plugin's rules carry quoted comments.
while n=$(iptables -t nat -L POSTROUTING --line-numbers -n 2>/dev/null | awk '$2 ~ /^CNI-/{print $1; exit}'); [ -n "$n" ]; do iptables -t nat -D POSTROUTING "$n"; done
for c in $(iptables -t nat -S 2>/dev/null | awk '/^-N CNI-/{print $2}'); do iptables -t nat -F "$c"; iptables -t nat -X "$c"; done
iptables -S FORWARD 2>/dev/null | grep -E 'CNI-|10.96.0.0/16' | sed 's/^-A/-D/' | while read -r r; do iptables $r; done
for c in $(iptables -S 2>/dev/null | awk '/^-N CNI-/{print $2}'); do iptables -F "$c"; iptables -X "$c"; done
[ -f "$RN/ip_forward" ] && sysctl -qw "net.ipv4.ip_forward=$(cat "$RN/ip_forward")"
# Logs survive in $RN.log for a failed run's diagnosis; the state goes.
rm -rf "$RN.log" && cp -r "$RN/log" "$RN.log" 2>/dev/null
rm -rf "$RN"
mounts=$(mount | grep -c -e "$RN" -e /run/netns/cni-)
rules=$(iptables-save 2>/dev/null | grep -c -E 'KUBE-|CNI-')
procs=$(pgrep -fc "$root/bin/node/|$ETCD_BIN|$RN/containerd")
echo "realnode: down in $(( $(date +%s) - t0 )) s; left behind: $mounts mounts, $rules iptables lines, $procs processes"
