package compliance

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Helm's ownership annotations, which the Helm applier's installs set on
// every object of a release.
const (
	helmReleaseName      = "meta.helm.sh/release-name"
	helmReleaseNamespace = "meta.helm.sh/release-namespace"
)

// How Argo CD marks the objects of an Application (named after its
// Release, in the Release's control namespace): the tracking annotation
// "<app>:<group>/<kind>:<namespace>/<name>", or the instance label, where
// an Application outside Argo CD's own namespace is "<namespace>_<app>".
const (
	argoTrackingID    = "argocd.argoproj.io/tracking-id"
	argoInstanceLabel = "app.kubernetes.io/instance"
)

// provenance returns how objects of namespace ns came to be: an object
// Helm installed for a Release whose last applied change targeted ns, or
// Argo CD synced for one whose applied change was delivered by Argo CD,
// names that Release, its applied ChangeRequest and the change's
// approvers. Two
// Releases of one name applied to ns (from different control namespaces)
// name neither: the object is not attributed rather than attributed
// wrongly. Everything else is unmanaged.
func (s *Scanner) provenance(ctx context.Context, ns string) (func(*unstructured.Unstructured) Provenance, error) {
	rels := &sluicev1.ReleaseList{}
	if err := s.o.Cache.List(ctx, rels); err != nil {
		return nil, fmt.Errorf("list Releases: %w", err)
	}
	byName := map[string]*sluicev1.Release{}
	ambiguous := map[string]bool{}
	for i := range rels.Items {
		r := &rels.Items[i]
		if r.Status.AppliedTargetNamespace != ns || r.Status.AppliedChange == "" {
			continue
		}
		if _, dup := byName[r.Name]; dup {
			ambiguous[r.Name] = true
		}
		byName[r.Name] = r
	}
	known := map[string]Provenance{}
	// argo holds the releases the applied change delivered through Argo
	// CD, by the names Argo CD marks their objects with.
	argo := map[string]Provenance{}
	for name, r := range byName {
		if ambiguous[name] {
			continue
		}
		p := Provenance{Release: r.Namespace + "/" + r.Name, ChangeRequest: r.Namespace + "/" + r.Status.AppliedChange}
		cr := &sluicev1.ChangeRequest{}
		switch err := s.o.Cache.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Status.AppliedChange}, cr); {
		case err == nil:
			for _, id := range cr.Status.ApprovedBy {
				p.Approvers = append(p.Approvers, string(id))
			}
			// The delivery of the applied change, not the Release's
			// current spec, which any push rewrites.
			if cr.Spec.Delivery == sluicev1.DeliveryArgoCD {
				argo[r.Name] = p
				argo[r.Namespace+"_"+r.Name] = p
			}
		case client.IgnoreNotFound(err) != nil:
			return nil, fmt.Errorf("read ChangeRequest %s: %w", p.ChangeRequest, err)
		}
		known[name] = p
	}
	return func(o *unstructured.Unstructured) Provenance {
		a := o.GetAnnotations()
		if a[helmReleaseNamespace] == ns {
			if p, ok := known[a[helmReleaseName]]; ok {
				return p
			}
		}
		app := o.GetLabels()[argoInstanceLabel]
		if id, ok := a[argoTrackingID]; ok {
			app, _, _ = strings.Cut(id, ":")
		}
		return argo[app]
	}, nil
}
