// Package crds embeds the generated CustomResourceDefinitions of the Sluice
// API, so tests and installers can apply exactly what controller-gen wrote,
// and the openreports.io Report CRD the operator's live compliance writes
// (openreports.io_reports.yaml, copied unchanged from the module
// github.com/openreports/reports-api at the version operator/go.mod
// requires; controller-gen leaves it alone).
package crds

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// FS holds one gitops.sluice.dev_<plural>.yaml file per kind, and
// openreports.io_reports.yaml.
var FS fs.FS = files

// Load decodes every embedded CRD.
func Load() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(entries))
	for _, name := range entries {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("decode %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
