package helm

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chartutil"
)

// renderCapabilities are the .Capabilities a chart is rendered with: Helm's
// defaults (the API versions compiled into this build, which the validator
// shares) with the Kubernetes version the validator renders for. Setting
// them on the action configuration also keeps Helm from asking the cluster,
// whose answers the validator never saw.
func renderCapabilities(kubeVersion string) (*chartutil.Capabilities, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	if kubeVersion == "" {
		return caps, nil
	}
	v, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", kubeVersion, err)
	}
	caps.KubeVersion = *v
	return caps, nil
}
