// Package approved loads what an approved change renders, from the
// verified content of its artifact only: the chart (a chart folder of the
// repository, a chart a chart repository served, fetched into the
// artifact by the syncer, or the chart generated from a Kustomize overlay
// or a manifests folder) and its values files, exactly as the validator
// took them. The Helm applier installs it and the Argo CD plugin renders
// it, so both deliver what was approved, from the same function.
//
// Nothing is read from the Release's spec (which a later push rewrites)
// and nothing is fetched: a chart repository's bytes come from the
// artifact, bound to the approvalDigest, and must hash to the change's
// chart digest.
package approved

import (
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// Inputs are a change's chart and values files, loaded from its verified
// content.
type Inputs struct {
	// Chart is the loaded chart.
	Chart *chart.Chart
	// ValuesFiles are the absolute paths, inside the content folder, of
	// the values files in the order the validator merged them (none for a
	// generated chart).
	ValuesFiles []string
	// Generated says the chart was generated from a Kustomize overlay or
	// a manifests folder (helmcheck.Options.Generated).
	Generated bool
}

// Values merges the values files as the validator merged them.
func (in *Inputs) Values(dir string) (map[string]any, error) {
	vals, err := helmcheck.MergeValues(in.ValuesFiles)
	if err != nil {
		return nil, invalid("values: %v", ScrubPath(err, dir))
	}
	return vals, nil
}

func invalid(format string, args ...any) error {
	return applier.Permanent(sluicev1.ReasonInvalidSpec, "the approved content: "+format, args...)
}

// Load loads the chart and values files the approved change names (its
// spec.source: service folder, environment, chart, values files) from the
// verified content in dir, after checking that the service manifest there
// agrees with the change and delivers the environment by delivery. Its
// errors are permanent applier failures (InvalidSpec, or ChartMismatch
// for a fetched chart that is not the approved one) naming repository
// paths only.
func Load(dir string, cr *sluicev1.ChangeRequest, src *sluicev1.ChangeSource, delivery sluicev1.Delivery) (*Inputs, error) {
	svc, err := manifest.Load(dir, string(src.Path))
	if err != nil {
		return nil, invalid("%v", ScrubPath(err, dir))
	}
	env, ok := svc.Environment(string(src.Environment))
	if !ok {
		return nil, invalid("service %q has no environment %q", svc.Name, src.Environment)
	}
	if env.Namespace != cr.Spec.TargetNamespace {
		return nil, invalid("environment %q deploys to namespace %q, the change says %q", env.Name, env.Namespace, cr.Spec.TargetNamespace)
	}
	got := string(env.Delivery)
	if got == "" {
		got = string(sluicev1.DeliveryHelm)
	}
	if got != string(delivery) {
		return nil, invalid("environment %q is delivered by %q, not %s", env.Name, got, delivery)
	}
	if src.Chart.Generated() {
		return generated(dir, svc, env, src)
	}
	chartDir := string(src.Chart.Path)
	var remote *chart.Chart
	if chartDir == "" {
		ch, err := remoteChart(dir, svc, env.Name, src.Chart)
		if err != nil {
			return nil, err
		}
		remote = ch
	} else if d := svc.ChartDirOf(env.Name); d != chartDir {
		return nil, invalid("chart %q differs from the change's %q", d, chartDir)
	}
	values := make([]string, 0, len(src.Values))
	for _, v := range src.Values {
		values = append(values, string(v))
	}
	if want := slices.Concat(svc.Values, env.Values); !slices.Equal(values, want) {
		return nil, invalid("values files %v differ from the change's %v", want, values)
	}
	// The change's values files, resolved against its service folder as
	// the validator resolved them.
	files, err := svc.ValuesFiles(env.Name)
	if err != nil {
		return nil, invalid("%v", err)
	}
	ch := remote
	if ch == nil {
		chartPath, err := manifest.ConfinedPath(dir, chartDir)
		if err != nil {
			return nil, invalid("chart folder: %v", err)
		}
		if ch, err = helmcheck.LoadChart(chartPath); err != nil {
			return nil, invalid("chart %s: %v", chartDir, ScrubPath(err, dir))
		}
	}
	abs := make([]string, 0, len(files))
	for _, f := range files {
		p, err := manifest.ConfinedPath(dir, f)
		if err != nil {
			return nil, invalid("values file: %v", err)
		}
		abs = append(abs, p)
	}
	return &Inputs{Chart: ch, ValuesFiles: abs}, nil
}

// remoteChart loads the chart the approved change took from a chart
// repository: the bytes the syncer put in the verified artifact
// (sources.RemoteChartDir), which must be the change's repository, chart,
// exact version and digest, and hash to that digest. It never fetches:
// a tag moved or bytes changed in the repository since the approval
// change nothing that is delivered.
func remoteChart(dir string, svc *manifest.Service, env string, want sluicev1.ChartSource) (*chart.Chart, error) {
	if want.Repo == "" || want.Digest == "" {
		return nil, applier.Permanent(sluicev1.ReasonInvalidSpec, "the approved change names no chart folder and no chart repository with a digest")
	}
	if c := svc.ChartOf(env); c.Repo != want.Repo || c.Name != want.Name {
		return nil, invalid("chart %s from %s differs from the change's %s from %s", c.Name, c.Repo, want.Name, want.Repo)
	}
	ch, got, err := sources.RemoteChart(dir, svc, env)
	if err != nil {
		return nil, applier.Permanent(sluicev1.ReasonChartMismatch, "the approved content: %v", ScrubPath(err, dir))
	}
	if got.Version != want.Version || sluicev1.Digest(got.Digest) != want.Digest {
		return nil, applier.Permanent(sluicev1.ReasonChartMismatch, "the approved content holds chart %s %s (%s), the change approved %s (%s)", got.Name, got.Version, got.Digest, want.Version, want.Digest)
	}
	return ch, nil
}

// generated builds the chart the validator generated for an environment
// deploying a Kustomize overlay or a manifests folder, with the same
// function (sources.EnvironmentChart), from the verified content, after
// checking that the manifest there names the change's overlay or folder.
func generated(dir string, svc *manifest.Service, env *manifest.Environment, src *sluicev1.ChangeSource) (*Inputs, error) {
	switch {
	case src.Chart.Kustomize != nil:
		if d := svc.KustomizeDir(env.Name); d != string(src.Chart.Kustomize.Path) {
			return nil, invalid("kustomize overlay %q differs from the change's %q", d, src.Chart.Kustomize.Path)
		}
	case src.Chart.Manifests != nil:
		m := src.Chart.Manifests
		if env.Manifests == nil || svc.ManifestsDir(env.Name) != string(m.Path) || env.Manifests.Recurse != m.Recurse ||
			!slices.Equal(env.Manifests.Include, m.Include) || !slices.Equal(env.Manifests.Exclude, m.Exclude) {
			return nil, invalid("the manifests folder of environment %q differs from the change's %q", env.Name, m.Path)
		}
	}
	if len(src.Values) > 0 {
		return nil, invalid("values files %v go with a chart, not with a generated one", src.Values)
	}
	ch, err := sources.EnvironmentChart(dir, svc, env.Name)
	if err != nil {
		return nil, invalid("%v", ScrubPath(err, dir))
	}
	return &Inputs{Chart: ch, Generated: true}, nil
}

// ScrubPath removes the private extraction folder from an error message,
// so it names repository paths only.
func ScrubPath(err error, dir string) string {
	msg := err.Error()
	if real, rerr := filepath.EvalSymlinks(dir); rerr == nil {
		msg = strings.ReplaceAll(msg, real+"/", "")
	}
	return strings.ReplaceAll(msg, dir+"/", "")
}
