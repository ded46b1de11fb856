package applier

import "context"

// Destroyer is implemented by appliers that can carry out the Terraform
// part of an approved Delete change (the Terraform applier's chain).
type Destroyer interface {
	// CheckDestroyPlan fails with reason StalePlan when the change's plan
	// file was made against another version of the state than the current
	// one, before anything is removed.
	CheckDestroyPlan(ctx context.Context, req Request) error
	// ApplyDestroyPlan applies the change's approved destroy plan file
	// through the same path as an Apply change's plan: the file's sha256 is
	// checked, never a fresh plan is made, and a stale plan is a permanent
	// failure with reason StalePlan that destroyed nothing. It is
	// idempotent: a plan already applied is found in place.
	ApplyDestroyPlan(ctx context.Context, req Request) (Result, error)
	// DeleteState deletes the release's Terraform state (and its lock)
	// after the destroy plan was applied; nothing left is no error.
	DeleteState(ctx context.Context, req Request) error
}
