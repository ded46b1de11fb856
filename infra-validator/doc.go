// Package infravalidator is the Sluice validator module: Terraform plan and
// Helm checks against Rego policies, as a library and a CLI.
package infravalidator
