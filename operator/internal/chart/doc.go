// Package chart holds the tests of the Helm chart that installs Sluice
// (charts/sluice at the repository root): it renders the chart with the
// Helm v3 SDK through the validator's own checks, guards the chart's copies
// of the CRDs, the admission policies and the user roles against drift from
// their sources, and installs the chart from its folder with the Helm SDK
// into a real API server to show the admission policies enforced for the
// chart's ServiceAccounts and each component's RBAC granting what its code
// asks for (real Terraform plans as the syncer included), and no more.
//
// The package has no code of its own; `go test` is its only entry point.
// `go test ./internal/chart -run TestChart_copies -update` rewrites the
// chart's copies from their sources.
package chart
