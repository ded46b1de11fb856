# Shared settings of up.sh and down.sh (sourced). One node per machine: the
# ports, cni0, iptables and /run/netns are host-global, so the state folder
# is fixed too and doubles as the lock.
K8S_VERSION=${K8S_VERSION:-1.37.2}
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-2.1.0}
ETCD_VERSION=${ETCD_VERSION:-3.6.6}
# The forge of the pull-request test (make gitea builds it).
GITEA_VERSION=${GITEA_VERSION:-v1.27.3}
# Argo CD of the argocd delivery test (make argocd builds it).
ARGOCD_VERSION=${ARGOCD_VERSION:-v2.14.21}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# RN holds all state; short, because the containerd socket path must stay
# under 108 characters.
RN=${REALNODE_DIR:-/tmp/sluice-realnode}
KBIN="$root/bin/node/kubernetes-v$K8S_VERSION"
ETCD_BIN="$root/bin/k8s/$K8S_VERSION-linux-amd64/etcd"
KUBE_ROUTER_BIN="$root/bin/node/kube-router-v$KUBE_ROUTER_VERSION/kube-router"
CTR_SOCK="$RN/containerd/containerd.sock"
export KUBECONFIG="$RN/kubeconfig/admin.conf"
# kubectl of the node's own version (no version skew warning).
# Falls back to the kubectl in PATH (a version skew warning at most).
kubectl() { if [ -x "$KBIN/kubectl" ]; then "$KBIN/kubectl" "$@"; else command kubectl "$@"; fi; }
ctr_() { ctr --address "$CTR_SOCK" -n k8s.io "$@"; }
