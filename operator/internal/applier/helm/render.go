package helm

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
)

// renderCapabilities are the .Capabilities a chart is rendered with, the
// same as the validator's client-only render (helmcheck): Helm's default API
// versions (compiled into this build, which the validator shares) and the
// Kubernetes version the validator renders for, helmcheck.DefaultKubeVersion
// unless set. Setting them on the action configuration also keeps Helm from
// asking the cluster, whose answers the validator never saw.
func renderCapabilities(kubeVersion string) (*chartutil.Capabilities, error) {
	if kubeVersion == "" {
		kubeVersion = helmcheck.DefaultKubeVersion
	}
	v, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", kubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *v
	return caps, nil
}
