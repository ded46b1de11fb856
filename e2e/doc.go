// Package e2e tests Sluice installed by its Helm chart on a real one-node
// Kubernetes cluster (hack/realnode/up.sh): pods, probes, NetworkPolicies,
// Landlock inside the runner container, the Helm applier installing charts
// whose pods really run, Argo CD in pods delivering a release through the
// Sluice plugin sidecar.
//
// The tests run only with SLUICE_E2E=1 and a node up (`make e2e` does both
// and tears the node down); otherwise every test is skipped, so a plain
// `go test ./...` passes anywhere.
package e2e
