// Package config embeds the installation manifests that live beside it, so
// that tests and the demo apply exactly the files the chart ships.
package config

import _ "embed"

// AdmissionPolicies is admission/policies.yaml: the ValidatingAdmissionPolicies
// and bindings that guard Approvals, Releases, ChangeRequests, plan Secrets and
// ApprovalPolicies. Apply it with operator/internal/admission.
//
//go:embed admission/policies.yaml
var AdmissionPolicies []byte

// UserRoles is rbac/users.yaml: the ClusterRoles sluice-viewer and
// sluice-approver for the users of kubectl sluice.
//
//go:embed rbac/users.yaml
var UserRoles []byte
