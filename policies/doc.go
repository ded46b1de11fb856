// Package policies holds Sluice's default Rego policies, embedded so the
// validator ships them.
package policies
