// Package operator is the Sluice operator module: the ChangeRequest and
// Release reconcilers, the approval gate, the appliers and the kubectl-sluice
// plugin live under cmd/ and internal/.
package operator
