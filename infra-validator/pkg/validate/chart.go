package validate

import (
	"context"
	"fmt"
	"path"
	"strings"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// ChartRequest says which chart to check and how to render it.
type ChartRequest struct {
	// Chart is a chart folder or packaged chart; ValuesFiles are merged in order.
	Chart string
	// Loaded and Generated: see helmcheck.Options (a chart generated from
	// a Kustomize overlay or a manifests folder by package sources).
	Loaded      *chart.Chart
	Generated   bool
	ValuesFiles []string
	// ReleaseName and Namespace are the Helm release's.
	ReleaseName string
	Namespace   string
	// KubeVersion overrides Options.Helm.KubeVersion for this render.
	KubeVersion string
	// Previous is the manifest applied before, for the risk of the change;
	// empty means a first install.
	Previous string
	// SourcePrefix is joined before chart-relative file names in findings
	// (e.g. the chart's path in the repository).
	SourcePrefix string
	// Confine, when set, denies every object outside Namespace that it
	// does not allow (helm.namespace); nil checks nothing (a bare chart
	// lint). CheckService always sets it.
	Confine *helmcheck.Confinement
}

// ChartCheck is the result of checking one chart.
type ChartCheck struct {
	// Verdict: render, schema and decoding findings, the risk of the change,
	// and the policy findings on the rendered objects.
	Verdict report.Verdict
	// Render is the renderer's result: manifestDigest, objects, risk reasons.
	Render *helmcheck.Result
}

// CheckChart validates the values against the chart's schema, renders the
// chart (client-only, with a time limit), decodes every object strictly and
// evaluates the Kubernetes policies on the rendered objects. Template and
// schema errors are findings; an error is returned only for a request that
// cannot be attempted (no chart, bad release name or namespace).
func (v *Validator) CheckChart(ctx context.Context, req ChartRequest) (*ChartCheck, error) {
	res, err := helmcheck.Render(ctx, v.helmOptions(req))
	if err != nil {
		return nil, err
	}
	docs := make([]policy.Document, 0, len(res.Objects))
	for _, o := range res.Objects {
		src := joinSource(req.SourcePrefix, o.Source)
		if req.Generated {
			src = helmcheck.GeneratedSource(o.Source)
		}
		docs = append(docs, policy.Document{Path: src, Value: withNamespace(o)})
	}
	policyFindings, err := v.engine.Eval(ctx, policy.KindKubernetes, docs)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", req.Chart, err)
	}
	findings := append(append([]report.Finding(nil), res.Findings...), policyFindings...)
	return &ChartCheck{Verdict: report.NewVerdict(res.Risk, findings), Render: res}, nil
}

// helmOptions are the renderer's options for req: the Validator's
// Kubernetes version and timeout unless req overrides the version.
func (v *Validator) helmOptions(req ChartRequest) helmcheck.Options {
	kube := req.KubeVersion
	if kube == "" {
		kube = v.opts.Helm.KubeVersion
	}
	return helmcheck.Options{
		Chart:        req.Chart,
		Loaded:       req.Loaded,
		Generated:    req.Generated,
		ValuesFiles:  req.ValuesFiles,
		ReleaseName:  req.ReleaseName,
		Namespace:    req.Namespace,
		KubeVersion:  kube,
		Timeout:      v.opts.Helm.Timeout,
		Previous:     req.Previous,
		SourcePrefix: req.SourcePrefix,
		Confine:      req.Confine,
	}
}

// withNamespace returns the object as policies should see it: with the
// namespace Helm installs it into when the template sets none (the object is
// copied, never changed in place).
func withNamespace(o helmcheck.Object) map[string]any {
	obj := o.Object
	if o.Namespace == "" || obj == nil {
		return obj
	}
	meta, _ := obj["metadata"].(map[string]any)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return obj
	}
	newMeta := make(map[string]any, len(meta)+1)
	for k, val := range meta {
		newMeta[k] = val
	}
	newMeta["namespace"] = o.Namespace
	out := make(map[string]any, len(obj))
	for k, val := range obj {
		out[k] = val
	}
	out["metadata"] = newMeta
	return out
}

// joinSource turns a rendered object's template name ("<chart>/templates/x.yaml")
// into a path relative to the chart folder, joined to prefix, as the
// renderer names files in its own findings.
func joinSource(prefix, source string) string {
	if source == "" {
		return ""
	}
	if _, rest, ok := strings.Cut(source, "/"); ok {
		source = rest
	}
	if prefix == "" {
		return source
	}
	return path.Join(prefix, source)
}
