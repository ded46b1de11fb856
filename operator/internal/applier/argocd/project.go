package argocd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"

	argoapp "github.com/argoproj/argo-cd/v2/pkg/apis/application"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// AppProjectGVK is Argo CD's AppProject kind.
var AppProjectGVK = schema.GroupVersionKind{Group: argoapp.Group, Version: "v1alpha1", Kind: argoapp.AppProjectKind}

// Labels on the AppProjects Sluice manages: the Repository they bound.
const (
	LabelRepositoryNamespace = "gitops.sluice.dev/repository-namespace"
	LabelRepositoryName      = "gitops.sluice.dev/repository"
)

// ProjectName is the AppProject of a Repository: "sluice-<namespace>-<name>",
// or a hashed name when that is longer than a label allows.
func ProjectName(repo *sluicev1.Repository) string {
	n := "sluice-" + repo.Namespace + "-" + repo.Name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(repo.Namespace + "/" + repo.Name))
	return "sluice-" + hex.EncodeToString(sum[:])[:40]
}

// desiredProject is the AppProject bounding what Argo CD may deploy for the
// Repository: sources its URL only, Applications from its control
// namespace only, destinations its target and extra namespaces on the
// destination cluster, and no cluster-scoped kind but those it allows.
func (a *Applier) desiredProject(repo *sluicev1.Repository) *unstructured.Unstructured {
	var dests []any
	for _, ns := range slices.Concat(repo.Spec.TargetNamespaces, repo.Spec.AllowedExtraNamespaces) {
		dests = append(dests, map[string]any{"server": a.opts.Server, "namespace": ns})
	}
	clusterKinds := []any{}
	for _, gk := range repo.Spec.AllowedClusterKinds {
		clusterKinds = append(clusterKinds, map[string]any{"group": gk.Group, "kind": gk.Kind})
	}
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(AppProjectGVK)
	p.SetNamespace(a.opts.Namespace)
	p.SetName(ProjectName(repo))
	p.SetLabels(map[string]string{LabelRepositoryNamespace: repo.Namespace, LabelRepositoryName: repo.Name})
	p.Object["spec"] = map[string]any{
		"description":              fmt.Sprintf("Sluice: what Repository %s/%s may deploy through Argo CD", repo.Namespace, repo.Name),
		"sourceRepos":              []any{repo.Spec.URL},
		"sourceNamespaces":         []any{repo.Namespace},
		"destinations":             dests,
		"clusterResourceWhitelist": clusterKinds,
	}
	return p
}

// ensureProject creates or updates the Repository's AppProject with the
// operator's own rights (the Repository's ServiceAccount must not be able
// to widen its own bounds) and returns its name. It writes nothing when the
// project is as wanted.
func (a *Applier) ensureProject(ctx context.Context, repo *sluicev1.Repository) (string, error) {
	want := a.desiredProject(repo)
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(AppProjectGVK)
	err := a.own.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := a.own.Create(ctx, want); err != nil {
			return "", fmt.Errorf("create the AppProject %s/%s: %w", want.GetNamespace(), want.GetName(), err)
		}
		return want.GetName(), nil
	case err != nil:
		return "", fmt.Errorf("read the AppProject %s/%s: %w", want.GetNamespace(), want.GetName(), err)
	}
	l := cur.GetLabels()
	if l[LabelRepositoryNamespace] != repo.Namespace || l[LabelRepositoryName] != repo.Name {
		return "", applier.Permanent(sluicev1.ReasonOwnershipConflict,
			"the Argo CD AppProject %s/%s exists and is not Sluice's for this Repository; it is left alone", cur.GetNamespace(), cur.GetName())
	}
	spec, _, _ := unstructured.NestedMap(cur.Object, "spec")
	wantSpec := want.Object["spec"].(map[string]any)
	if projectSpecEqual(spec, wantSpec) {
		return cur.GetName(), nil
	}
	next := cur.DeepCopy()
	next.Object["spec"] = wantSpec
	if err := a.own.Update(ctx, next); err != nil {
		return "", fmt.Errorf("update the AppProject %s/%s: %w", cur.GetNamespace(), cur.GetName(), err)
	}
	return cur.GetName(), nil
}

// projectSpecEqual compares the fields Sluice sets (Argo CD may add
// others, such as roles or sync windows, which are kept out of it).
func projectSpecEqual(cur, want map[string]any) bool {
	for k, w := range want {
		c := cur[k]
		if l, ok := w.([]any); ok && len(l) == 0 && c == nil {
			continue
		}
		if !reflect.DeepEqual(c, w) {
			return false
		}
	}
	return true
}
