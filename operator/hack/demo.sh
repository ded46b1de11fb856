#!/usr/bin/env bash
# make demo: a change goes from git push to applied, on this machine only.
#
# Starts an embedded control plane (real kube-apiserver + etcd), makes a local
# git repository from services/ and charts/ (cart with a small Terraform
# stack), runs the gitops-syncer and the operator against it, and walks one
# push through the approval gate to a Terraform apply of the approved plan
# file and a Helm install, then a second push through auto-approval to Helm
# revision 2.
# Everything lives in demo/ (git-ignored) and is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bin="$root/bin"
demo="$root/demo"
ns=sluice-demo
pids=()

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

rm -rf "$demo" && mkdir -p "$demo"
kc="$demo/kubeconfig"
sluice() { "$bin/kubectl-sluice" --kubeconfig "$kc" -n "$ns" "$@"; }

step "Starting the control plane (kube-apiserver + etcd, Sluice and Argo CD CRDs)"
"$bin/controlplane" start --kubeconfig "$kc" --users alice:sre >"$demo/controlplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [ -s "$kc-alice" ] && break; sleep 0.5; done
[ -s "$kc-alice" ] || { cat "$demo/controlplane.log"; exit 1; }
cat "$demo/controlplane.log"

step "Creating the infra repository (services/ and charts/ of this checkout) and pushing it"
git init -q --bare -b main "$demo/infra.git"
git clone -q "$demo/infra.git" "$demo/work" 2>/dev/null
cp -r services charts "$demo/work/"
# cart gets a Terraform stack too (terraform_data needs no provider download),
# so the demo shows an approved plan file applied before the chart.
mkdir -p "$demo/work/services/cart/terraform"
cat >"$demo/work/services/cart/terraform/main.tf" <<'TF'
variable "env" {
  type = string
}

resource "terraform_data" "orders_queue" {
  input = "cart-${var.env}-orders"
}

output "orders_queue" {
  value = terraform_data.orders_queue.output
}
TF
sed -i -e 's/^values: \[values.yaml\]$/values: [values.yaml]\nterraform: {dir: terraform}/' \
  -e 's/^    values: \[values-\(staging\|prod\)\.yaml\]$/&\n    terraform: {vars: {env: \1}}/' "$demo/work/services/cart/service.yaml"
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com add -A
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com commit -qm "Add cart and checkout"
git -C "$demo/work" push -q origin HEAD:main
git -C "$demo/work" log --oneline -1

step "Creating the control namespace, target namespaces, the deployer ServiceAccount, the Repository and the production ApprovalPolicy"
cat >"$demo/setup.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $ns}
---
apiVersion: v1
kind: Namespace
metadata: {name: cart-staging}
---
apiVersion: v1
kind: Namespace
metadata: {name: cart-prod}
---
apiVersion: v1
kind: Namespace
metadata: {name: checkout-staging}
---
apiVersion: v1
kind: Namespace
metadata: {name: checkout-prod}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: infra-deployer, namespace: $ns}
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
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sluice-demo-deployer}
rules:
  - apiGroups: ["", "apps", "policy"]
    resources: ["*"]
    verbs: ["*"]
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
YAML
cat >>"$demo/setup.yaml" <<YAML
---
# Terraform runs in a sandboxed runner holding one run credential; the
# syncer's and the operator's state servers keep the state (Secrets) and
# its lock (Leases) in the control namespace with their own identities, and
# the Terraform applier reads the plan Secrets as infra-deployer.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: terraform-state, namespace: $ns}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: infra-deployer-terraform-state, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: terraform-state}
subjects:
  - {kind: ServiceAccount, name: infra-deployer, namespace: $ns}
  - {kind: ServiceAccount, name: sluice-syncer, namespace: sluice-system}
  - {kind: ServiceAccount, name: sluice-operator, namespace: sluice-system}
YAML
for t in cart-staging cart-prod; do
cat >>"$demo/setup.yaml" <<YAML
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: infra-deployer, namespace: $t}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sluice-demo-deployer}
subjects: [{kind: ServiceAccount, name: infra-deployer, namespace: $ns}]
YAML
done
cat >>"$demo/setup.yaml" <<YAML
---
apiVersion: gitops.sluice.dev/v1alpha1
kind: Repository
metadata: {name: infra, namespace: $ns}
spec:
  url: file://$demo/infra.git
  ref: {branch: main}
  interval: 5s
  targetNamespaces: ["cart-*"]
  serviceAccountName: infra-deployer
---
# The production floor follows the namespace, not the environment name a
# pusher writes in service.yaml: a new "prod2" deploying to cart-prod is
# held to it too.
apiVersion: gitops.sluice.dev/v1alpha1
kind: ApprovalPolicy
metadata: {name: prod-floor, namespace: $ns}
spec:
  namespaces: ["*-prod"]
  rule: {required: 1, allowAuthor: false, autoApproveRisk: none}
YAML
"$bin/controlplane" apply --kubeconfig "$kc" "$demo/setup.yaml"

step "Installing the admission policies: only the syncer writes changes, an Approval is always in its creator's own name"
"$bin/controlplane" admission --kubeconfig "$kc" --namespace sluice-system --syncer sluice-syncer --operator sluice-operator
echo "(the syncer and the operator below act as those ServiceAccounts, so the policies apply to them)"

step "Starting the gitops-syncer and the operator"
# The artifact server serves only the operator, which presents this token.
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$demo/artifact-token")
"$bin/gitops-syncer" --kubeconfig "$kc-syncer" --allow-file-urls --namespaces "$ns" \
  --data-dir "$demo/syncer" --artifact-bind-address 127.0.0.1:19090 --artifact-base-url http://127.0.0.1:19090 \
  --artifact-token-file "$demo/artifact-token" \
  --metrics-bind-address 0 --health-probe-bind-address 127.0.0.1:18081 \
  --state-bind-address 127.0.0.1:18092 --terraform-runner local >"$demo/syncer.log" 2>&1 &
pids+=($!)
"$bin/operator" --kubeconfig "$kc-operator" --namespaces "$ns" --leader-elect=false \
  --artifact-base-url http://127.0.0.1:19090/ --artifact-token-file "$demo/artifact-token" --metrics-bind-address 0 \
  --health-probe-bind-address 127.0.0.1:18082 --pprof-bind-address 0 \
  --state-bind-address 127.0.0.1:18093 --terraform-runner local >"$demo/operator.log" 2>&1 &
pids+=($!)
echo "logs: demo/syncer.log, demo/operator.log"
sleep 2
echo "every terraform plan and apply runs in a sandboxed child:"
grep -ho '"msg":"[^"]*\(sandboxed child\|NOT confined\)[^"]*"[^}]*' "$demo/syncer.log" "$demo/operator.log" | sed 's/^/  /' || true

head=$(git -C "$demo/work" rev-parse HEAD)
short=${head:0:10}
step "Waiting for the syncer to turn commit $short into ChangeRequests"
for _ in $(seq 1 180); do
  [ "$(sluice get -o name 2>/dev/null | grep -c "$short" || true)" -ge 4 ] && break
  sleep 1
done
sluice get
echo "(checkout-* are Rejected on purpose: the Repository allows only cart-* target namespaces)"

step "Both cart changes are new objects (risk medium): each needs one approval"
sluice describe "cart-staging-$short" | grep -E '^(Verdict|Effective rule|Gate|Still needed):'
step "alice (group sre) approves both in her own name; terraform applies each approved plan file in a sandboxed runner, then Helm installs the chart as infra-deployer"
for r in cart-staging cart-prod; do
  "$bin/kubectl-sluice" --kubeconfig "$kc-alice" -n "$ns" approve "$r-$short" --comment "reviewed in the demo"
done
sluice wait "cart-staging-$short" --for applied --timeout 180s
sluice wait "cart-prod-$short" --for applied --timeout 180s
sluice describe "cart-prod-$short"

step "alice tries to record an approval in bob's name: the API server refuses it"
digest=$(sluice get "cart-prod-$short" -o json | sed -n 's/.*"approvalDigest": *"\(sha256:[0-9a-f]*\)".*/\1/p' | head -1)
cat >"$demo/forged.yaml" <<YAML
apiVersion: gitops.sluice.dev/v1alpha1
kind: Approval
metadata: {name: forged-by-alice, namespace: $ns}
spec:
  release: cart-prod
  changeRequest: cart-prod-$short
  approvalDigest: $digest
  decision: approve
  approver: k8s:bob
  source: kubernetes
YAML
if "$bin/controlplane" create --kubeconfig "$kc-alice" "$demo/forged.yaml" 2>"$demo/forged.err"; then
  echo "the forged approval was accepted: the admission policies are not enforced"; exit 1
fi
sed 's/^/  /' "$demo/forged.err"

step "A second push: cart staging scales to 3 replicas: low risk, so staging auto-approves it; prod reads nothing that changed"
sed -i 's/^replicaCount:.*/replicaCount: 3/' "$demo/work/services/cart/values-staging.yaml"
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com commit -qam "cart: 3 replicas in staging"
git -C "$demo/work" push -q origin HEAD:main
head2=$(git -C "$demo/work" rev-parse HEAD)
for _ in $(seq 1 120); do sluice get -o name 2>/dev/null | grep -q "cart-staging-${head2:0:10}" && break; sleep 1; done
sluice wait "cart-staging-${head2:0:10}" --for applied --timeout 180s
sluice get -l gitops.sluice.dev/release=cart-staging
sluice describe "cart-staging-${head2:0:10}" | grep -E '^(Phase|Verdict|Gate):|Helm revision' 
step "The comment Sluice posts in a pull request for this change (kubectl sluice diff --format markdown): the manifest diff against the applied revision and the approval state"
sluice diff "cart-staging-${head2:0:10}" --format markdown
# A change is per release: prod's inputs (its own entry and the shared
# fields of service.yaml, values.yaml, values-prod.yaml, the chart, the
# stack) are the same at ${head2:0:10}, so the syncer made no prod change.
if sluice get -o name 2>/dev/null | grep -q "cart-prod-${head2:0:10}"; then
  echo "cart-prod got a ChangeRequest for a push that changes nothing it reads"; exit 1
fi
echo "cart-prod: unchanged at ${head2:0:10} (only values-staging.yaml changed, which prod does not read): no ChangeRequest, nothing to approve"

step "Done: both pushes went from git to the cluster through the gate; nothing else was applied"
sluice get

# ---- Deletion is a change: removing cart's staging environment ------------
step "Turning prune on, then removing cart's staging environment in git: the syncer proposes a Delete change and removes nothing"
cat >"$demo/prune.yaml" <<YAML
apiVersion: gitops.sluice.dev/v1alpha1
kind: Repository
metadata: {name: infra, namespace: $ns}
spec:
  url: file://$demo/infra.git
  ref: {branch: main}
  interval: 5s
  targetNamespaces: ["cart-*"]
  serviceAccountName: infra-deployer
  prune: true
YAML
"$bin/controlplane" apply --kubeconfig "$kc" "$demo/prune.yaml"
sed -i '/^  - name: staging$/,/^  - name: prod$/{/^  - name: prod$/!d}' "$demo/work/services/cart/service.yaml"
git -C "$demo/work" -c user.name=Dev -c user.email=dev@example.com commit -qam "cart: retire staging"
git -C "$demo/work" push -q origin HEAD:main
head3=$(git -C "$demo/work" rev-parse HEAD)
del="cart-staging-del-${head3:0:10}"
for _ in $(seq 1 120); do sluice get -o name 2>/dev/null | grep -q "$del" && break; sleep 1; done
for _ in $(seq 1 60); do sluice get "$del" 2>/dev/null | grep -q AwaitingApproval && break; sleep 1; done
sluice get -l gitops.sluice.dev/release=cart-staging
sluice describe "$del" | grep -E '^(Operation|Removes [a-zA-Z]+|Destroys|Plan|Verdict|Phase|Still needed):'
echo "(cart-staging is still installed: nothing goes before the Delete is approved)"

step "alice approves the Delete: Helm uninstalls cart-staging, terraform applies the approved destroy plan, then the Release goes"
"$bin/kubectl-sluice" --kubeconfig "$kc-alice" -n "$ns" approve "$del" --comment "staging is retired"
sluice wait "$del" --for applied --timeout 180s
sluice describe "$del" | grep -E '^(Release|Operation|Phase|Deletion):'

step "Done: the removal went through the gate like any change; cart-staging is gone"
sluice get
