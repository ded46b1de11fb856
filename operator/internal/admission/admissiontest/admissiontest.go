// Package admissiontest puts Sluice's admission policies in force on a
// test control plane.
package admissiontest

import (
	"context"
	"time"

	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
)

// Enforce installs the admission policies for p and waits (two minutes at
// most) until the API server enforces them: the policies take effect only
// once it has read them and their parameter object.
func Enforce(ctx context.Context, e *testenv.Env, p admission.Params) error {
	if err := admission.Install(ctx, e.Client, p); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return admission.WaitActive(ctx, e.Config, e.Scheme, p)
}
