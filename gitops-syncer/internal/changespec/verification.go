package changespec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

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
// (decoded strictly into the API's schema, its templates read from files
// and converted, see templates.go) over the Repository's defaults,
// validated. A block that does not decode or validate is an error the
// caller turns into a deny finding: a change is never applied with checks
// other than those written.
func resolveVerification(repo *sluicev1.Repository, block map[string]any, files fs.FS, serviceDir string) (*sluicev1.VerificationSpec, error) {
	var env *sluicev1.VerificationSpec
	if block != nil {
		var refs []TemplateRef
		if raw, ok := block["templates"]; ok {
			rest := make(map[string]any, len(block))
			for k, v := range block {
				if k != "templates" {
					rest[k] = v
				}
			}
			block = rest
			data, err := json.Marshal(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: templates: %v", sluicev1.ErrInvalidVerification, err)
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&refs); err != nil {
				return nil, fmt.Errorf("%w: templates: %v", sluicev1.ErrInvalidVerification, err)
			}
		}
		data, err := json.Marshal(block)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", sluicev1.ErrInvalidVerification, err)
		}
		if env, err = sluicev1.DecodeVerification(data); err != nil {
			return nil, err
		}
		if len(refs) > 0 {
			checks, addresses, err := templateChecks(files, serviceDir, refs)
			if err != nil {
				return nil, err
			}
			env.Checks = append(env.Checks, checks...)
			// The verification's (or the Repository's) prometheusURL
			// wins; else the one address the documents agree on.
			if env.PrometheusURL == "" && (repo.Spec.Verification == nil || repo.Spec.Verification.PrometheusURL == "") {
				switch len(addresses) {
				case 0:
				case 1:
					env.PrometheusURL = addresses[0]
				default:
					return nil, fmt.Errorf("%w: the templates name different Prometheus addresses (%s); set prometheusURL in the verification", sluicev1.ErrInvalidVerification, strings.Join(addresses, ", "))
				}
			}
		}
	}
	v := sluicev1.ResolveVerification(repo.Spec.Verification, env)
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}
