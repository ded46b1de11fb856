package changespec

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// VerificationBlockOf is environment envName's verification block in svc
// as written (nil for none, or when svc is nil: a manifest that did not
// parse).
func VerificationBlockOf(svc *manifest.Service, envName string) map[string]any {
	if svc == nil {
		return nil
	}
	env, ok := svc.Environment(envName)
	if !ok {
		return nil
	}
	return env.Verification
}

// resolveVerification is the verification a change carries: the block
// (decoded strictly into the API's schema) over the Repository's
// defaults, validated. A block that does not decode or validate is an
// error the caller turns into a deny finding: a change is never applied
// with checks other than those written.
func resolveVerification(repo *sluicev1.Repository, block map[string]any) (*sluicev1.VerificationSpec, error) {
	var env *sluicev1.VerificationSpec
	if block != nil {
		data, err := json.Marshal(block)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", sluicev1.ErrInvalidVerification, err)
		}
		if env, err = sluicev1.DecodeVerification(data); err != nil {
			return nil, err
		}
	}
	v := sluicev1.ResolveVerification(repo.Spec.Verification, env)
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}
