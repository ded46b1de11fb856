// Package gateinput reads what the gate decides on from the API server or a
// cache: the ApprovalPolicies and Releases of the change's control
// namespace, its target Namespace object and the Persons. The operator's
// ChangeRequest reconciler and `kubectl sluice describe` both call it, so
// both judge a change on the same inputs.
package gateinput

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
)

// Load reads the gate's inputs for a change of rel. The other Releases are
// read only when the change is new to its target namespace (the only time
// the gate looks at them). A missing target Namespace is no error (nothing
// can match its labels); every other read error is returned, wrapped with
// what was being read, so the gate never decides on partial inputs.
//
// Lists from a cache are not deep-copied: the gate only reads them, and
// the caller must not change them either.
func Load(ctx context.Context, r client.Reader, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) (gate.Inputs, error) {
	in, _, err := load(ctx, r, cr, rel, false)
	return in, err
}

// LoadForDisplay is Load for a user who may not read cluster-scoped
// objects (a RoleBinding cannot grant them): a forbidden read of the target
// Namespace or the Persons is left out and returned as a warning that says
// the rule shown may be less strict than the operator's. The operator
// always uses Load.
func LoadForDisplay(ctx context.Context, r client.Reader, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) (gate.Inputs, []string, error) {
	return load(ctx, r, cr, rel, true)
}

// releasesAt reads the Releases of namespace that target, or last applied
// to, target: the only other Releases the gate looks at (gate.Sources). The
// API server (or the cache's indexes of the same names) selects them, so a
// change does not read every Release of a busy namespace, once per pass.
func releasesAt(ctx context.Context, r client.Reader, namespace, target string) ([]sluicev1.Release, error) {
	if target == "" {
		var all sluicev1.ReleaseList
		if err := r.List(ctx, &all, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list Releases in %s: %w", namespace, err)
		}
		return all.Items, nil
	}
	var out []sluicev1.Release
	seen := map[string]bool{}
	for _, field := range []string{sluicev1.FieldTargetNamespace, sluicev1.FieldAppliedTargetNamespace} {
		var list sluicev1.ReleaseList
		if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{field: target}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list Releases in %s with %s=%s: %w", namespace, field, target, err)
		}
		for _, o := range list.Items {
			if !seen[o.Name] {
				seen[o.Name] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func load(ctx context.Context, r client.Reader, cr *sluicev1.ChangeRequest, rel *sluicev1.Release, lenient bool) (gate.Inputs, []string, error) {
	in := gate.Inputs{Release: rel}
	var warnings []string
	var policies sluicev1.ApprovalPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(cr.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return in, nil, fmt.Errorf("list ApprovalPolicies in %s: %w", cr.Namespace, err)
	}
	in.Policies = policies.Items
	if gate.NewToNamespace(rel, cr) {
		releases, err := releasesAt(ctx, r, cr.Namespace, gate.TargetNamespace(rel, cr))
		if err != nil {
			return in, nil, err
		}
		in.Releases = releases
	}
	if target := gate.TargetNamespace(rel, cr); target != "" {
		// Only the Namespace's labels are read (policies select by them):
		// metadata only, so the operator's cache holds no more of every
		// Namespace of the cluster than their metadata.
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		err := r.Get(ctx, client.ObjectKey{Name: target}, ns)
		switch {
		case apierrors.IsNotFound(err):
		case lenient && apierrors.IsForbidden(err):
			warnings = append(warnings, fmt.Sprintf("you may not read Namespace %s: policies selecting it by label are not shown, the operator's rule may be stricter", target))
		case err != nil:
			return in, nil, fmt.Errorf("get target Namespace %s: %w", target, err)
		default:
			in.Namespace = &corev1.Namespace{ObjectMeta: ns.ObjectMeta}
		}
	}
	var people sluicev1.PersonList
	err := r.List(ctx, &people, client.UnsafeDisableDeepCopy)
	switch {
	case lenient && apierrors.IsForbidden(err):
		warnings = append(warnings, "you may not read Persons: identities of one person are not joined here, the operator may count fewer approvals")
	case err != nil:
		return in, nil, fmt.Errorf("list Persons: %w", err)
	}
	in.People = gate.NewPeople(people.Items)
	if rb := cr.Spec.Rollback; rb != nil {
		to := &sluicev1.ChangeRequest{}
		err := r.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: rb.To}, to)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return in, nil, fmt.Errorf("get rollback target ChangeRequest %s: %w", rb.To, err)
		default:
			in.RollbackTarget = to
		}
	}
	return in, warnings, nil
}
