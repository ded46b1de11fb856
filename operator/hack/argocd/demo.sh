#!/usr/bin/env bash
# make demo-argocd: one release delivered through a real Argo CD, on this
# machine only.
#
# Starts an embedded control plane (real kube-apiserver + etcd), a real Argo
# CD built by `make argocd` (Redis, repo-server, the Sluice config management
# plugin under argocd-cmp-server, application controller), the gitops-syncer
# and the operator; pushes a service with `delivery: argocd` to a local git
# repository, approves its change, and waits until Argo CD reports the
# approved commit synced and Healthy. Argo CD gets the manifest from the
# plugin (`operator argocd-cmp generate`), which prints it only if it hashes
# to the approved manifestDigest; the Application runs in the Repository's
# AppProject. Everything lives in demo-argocd/ (git-ignored through /demo*)
# and is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
bin="$root/bin"
argo="$bin/argocd/${ARGOCD_VERSION:-v2.14.21}"
demo="$root/demo/argocd"
ns=sluice-demo
pids=()

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cmp_pid=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # argocd-cmp-server does not exit on SIGTERM.
  [ -z "$cmp_pid" ] || { sleep 1; kill -9 "$cmp_pid" 2>/dev/null || true; }
  wait 2>/dev/null || true
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 240); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.5; done; echo "port $1 did not open" >&2; return 1; }

[ -x "$argo/argocd" ] || { echo "Argo CD is not built: run make argocd" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing: run make redis" >&2; exit 1; }
rm -rf "$demo" && mkdir -p "$demo"/{tmp,plugins,cmp,redis}
kc="$demo/kubeconfig"
sluice() { "$bin/kubectl-sluice" --kubeconfig "$kc" -n "$ns" "$@"; }

step "Starting the control plane (kube-apiserver + etcd, Sluice and Argo CD CRDs)"
"$bin/controlplane" start --kubeconfig "$kc" --users alice:sre >"$demo/controlplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [ -s "$kc-alice" ] && break; sleep 0.5; done
[ -s "$kc-alice" ] || { cat "$demo/controlplane.log"; exit 1; }

step "Pushing the service 'hello' (delivery: argocd, namespace web-prod) to a local git repository"
git init -q --bare -b main "$demo/infra.git"
git clone -q "$demo/infra.git" "$demo/work" 2>/dev/null
mkdir -p "$demo/work/services/hello" "$demo/work/charts/hello/templates"
cat >"$demo/work/services/hello/service.yaml" <<'YAML'
apiVersion: sluice.dev/v1alpha1
kind: Service
name: hello
owners: [team-web]
chart: {path: charts/hello}
environments:
  - name: prod
    namespace: web-prod
    values: [values-prod.yaml]
    delivery: argocd
    approval: {required: 1, autoApproveRisk: none}
YAML
echo 'message: approved in the demo' >"$demo/work/services/hello/values-prod.yaml"
printf 'apiVersion: v2\nname: hello\nversion: 0.1.0\n' >"$demo/work/charts/hello/Chart.yaml"
echo 'message: hello' >"$demo/work/charts/hello/values.yaml"
cat >"$demo/work/charts/hello/templates/hello.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  message: {{ .Values.message | quote }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  type: ClusterIP
  ports: [{port: 80}]
  selector: {app: hello}
YAML
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com add -A
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com commit -qm "Add hello, delivered by Argo CD"
git -C "$demo/work" push -q origin HEAD:main
head=$(git -C "$demo/work" rev-parse HEAD)
short=${head:0:10}
git -C "$demo/work" log --oneline -1

step "Creating the namespaces, Argo CD's settings, the deployer ServiceAccount and the Repository"
cat >"$demo/setup.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $ns}
---
apiVersion: v1
kind: Namespace
metadata: {name: web-prod}
---
apiVersion: v1
kind: Namespace
metadata: {name: argocd}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-rbac-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
---
apiVersion: v1
kind: Secret
metadata: {name: argocd-secret, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
stringData: {server.secretkey: demo-only}
---
apiVersion: v1
kind: Namespace
metadata: {name: sluice-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sluice-syncer, namespace: sluice-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sluice-operator, namespace: sluice-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: infra-deployer, namespace: $ns}
---
# The Repository's ServiceAccount drives Applications in the control
# namespace; Argo CD applies, bounded by the Repository's AppProject.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: argocd-applications, namespace: $ns}
rules:
  - apiGroups: ["argoproj.io"]
    resources: ["applications"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: infra-deployer-applications, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: argocd-applications}
subjects: [{kind: ServiceAccount, name: infra-deployer, namespace: $ns}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sluice-demo-approver}
rules:
  - apiGroups: ["gitops.sluice.dev"]
    resources: ["changerequests", "releases", "approvalpolicies", "approvals"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["gitops.sluice.dev"]
    resources: ["approvals"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-approves, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sluice-demo-approver}
subjects: [{kind: User, name: alice}]
---
apiVersion: gitops.sluice.dev/v1alpha1
kind: Repository
metadata: {name: infra, namespace: $ns}
spec:
  url: file://$demo/infra.git
  ref: {branch: main}
  interval: 5s
  targetNamespaces: ["web-*"]
  serviceAccountName: infra-deployer
YAML
"$bin/controlplane" apply --kubeconfig "$kc" "$demo/setup.yaml"
"$bin/controlplane" admission --kubeconfig "$kc" --namespace sluice-system --syncer sluice-syncer --operator sluice-operator

step "Starting Argo CD: Redis, the Sluice plugin (operator argocd-cmp generate), repo-server, application controller"
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$demo/artifact-token")
redis_port=$(free_port); repo_port=$(free_port); repo_metrics=$(free_port); ctrl_metrics=$(free_port)
export TMPDIR="$demo/tmp" ARGOCD_GPG_ENABLED=false ARGOCD_ASK_PASS_SOCK="$demo/askpass.sock" ARGOCD_PLUGINSOCKFILEPATH="$demo/plugins"
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --dir "$demo/redis" >"$demo/redis.log" 2>&1 &
pids+=($!)
cat >"$demo/cmp/plugin.yaml" <<YAML
apiVersion: argoproj.io/v1alpha1
kind: ConfigManagementPlugin
metadata: {name: sluice}
spec:
  generate:
    command: ["$bin/operator", "argocd-cmp", "generate", "--kubeconfig", "$kc",
              "--artifact-base-url", "http://127.0.0.1:19190/", "--artifact-token-file", "$demo/artifact-token"]
YAML
"$argo/argocd-cmp-server" --config-dir-path "$demo/cmp" --loglevel warn >"$demo/cmp-server.log" 2>&1 &
cmp_pid=$!
pids+=($!)
"$argo/argocd-repo-server" --address 127.0.0.1 --port "$repo_port" --metrics-address 127.0.0.1 --metrics-port "$repo_metrics" \
  --disable-tls --redis "127.0.0.1:$redis_port" --loglevel warn >"$demo/repo-server.log" 2>&1 &
pids+=($!)
ARGOCD_FAKE_IN_CLUSTER=true KUBECONFIG="$kc" "$argo/argocd-application-controller" --kubeconfig "$kc" --namespace argocd \
  --application-namespaces "$ns" --repo-server "127.0.0.1:$repo_port" --repo-server-plaintext \
  --redis "127.0.0.1:$redis_port" --metrics-port "$ctrl_metrics" --loglevel warn >"$demo/controller.log" 2>&1 &
pids+=($!)
wait_port "$repo_port"; wait_port "$ctrl_metrics"
echo "logs: demo/argocd/{redis,cmp-server,repo-server,controller}.log"

step "Starting the gitops-syncer and the operator"
"$bin/gitops-syncer" --kubeconfig "$kc-syncer" --allow-file-urls --namespaces "$ns" \
  --data-dir "$demo/syncer" --artifact-bind-address 127.0.0.1:19190 --artifact-base-url http://127.0.0.1:19190 \
  --artifact-token-file "$demo/artifact-token" \
  --metrics-bind-address 0 --health-probe-bind-address 127.0.0.1:18181 \
  --state-bind-address 127.0.0.1:18192 --terraform-runner local >"$demo/syncer.log" 2>&1 &
pids+=($!)
"$bin/operator" --kubeconfig "$kc-operator" --namespaces "$ns" --leader-elect=false \
  --artifact-base-url http://127.0.0.1:19190/ --artifact-token-file "$demo/artifact-token" --metrics-bind-address 0 \
  --health-probe-bind-address 127.0.0.1:18182 --pprof-bind-address 0 --argocd-namespace argocd \
  --state-bind-address 127.0.0.1:18193 --terraform-runner local >"$demo/operator.log" 2>&1 &
pids+=($!)
echo "logs: demo/argocd/syncer.log, demo/argocd/operator.log"

step "Waiting for the syncer to turn commit $short into a ChangeRequest"
for _ in $(seq 1 180); do sluice get -o name 2>/dev/null | grep -q "hello-prod-$short" && break; sleep 1; done
for _ in $(seq 1 60); do sluice get "hello-prod-$short" 2>/dev/null | grep -q AwaitingApproval && break; sleep 1; done
sluice get

step "alice approves; the operator creates the Repository's AppProject and the Application; Argo CD renders through the Sluice plugin and syncs"
start=$(date +%s)
"$bin/kubectl-sluice" --kubeconfig "$kc-alice" -n "$ns" approve "hello-prod-$short" --comment "reviewed in the demo"
sluice wait "hello-prod-$short" --for applied --timeout 180s
echo "approval to Applied through Argo CD: $(( $(date +%s) - start ))s"
sluice describe "hello-prod-$short"

step "Done: Argo CD applied the approved manifest of $short, and nothing else"
