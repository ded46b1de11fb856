package changespec

import (
	"fmt"
	"slices"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// SourceOf is what a change of svc's environment envName acts on, as the
// manifest says: the service folder, chart, values files (the service's,
// then the environment's) and Terraform stack. An environment deploying a
// Kustomize overlay or a manifests folder names it in the chart source
// instead of the service's chart. Every ChangeRequest records
// it (spec.source); appliers read it there, never from a Release's spec.
func SourceOf(svc *manifest.Service, envName string) (*sluicev1.ChangeSource, error) {
	env, ok := svc.Environment(envName)
	if !ok {
		return nil, fmt.Errorf("environment %q not in the manifest", envName)
	}
	c := svc.ChartOf(envName)
	chart := sluicev1.ChartSource{Repo: c.Repo, Name: c.Name, Version: c.Version}
	if d := svc.ChartDirOf(envName); d != "" {
		chart = sluicev1.ChartSource{Path: sluicev1.RelativePath(d)}
	}
	switch env.Source() {
	case manifest.SourceKustomize:
		chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: sluicev1.RelativePath(svc.KustomizeDir(env.Name))}}
	case manifest.SourceManifests:
		m := env.Manifests
		chart = sluicev1.ChartSource{Manifests: &sluicev1.ManifestsSource{
			Path: sluicev1.RelativePath(svc.ManifestsDir(env.Name)), Recurse: m.Recurse,
			Include: slices.Clone(m.Include), Exclude: slices.Clone(m.Exclude),
		}}
	}
	var values []sluicev1.RelativePath
	for _, v := range append(append([]string{}, svc.Values...), env.Values...) {
		values = append(values, sluicev1.RelativePath(v))
	}
	var tf *sluicev1.TerraformSource
	if d := svc.TerraformDir(); d != "" {
		tf = &sluicev1.TerraformSource{Dir: sluicev1.RelativePath(d)}
		if env.Terraform != nil {
			tf.Vars, tf.Workspace = env.Terraform.Vars, env.Terraform.Workspace
		}
	}
	return &sluicev1.ChangeSource{
		Service:     svc.Name,
		Environment: sluicev1.EnvironmentName(env.Name),
		Path:        sluicev1.RelativePath(svc.Dir),
		Chart:       chart,
		Values:      values,
		Terraform:   tf,
	}, nil
}
