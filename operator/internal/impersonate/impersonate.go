// Package impersonate gives the appliers the identity they apply with: the
// Repository's ServiceAccount (Flux-style), never the operator's own rights,
// and only into the target namespaces the Repository allows (DESIGN.md §4).
package impersonate

import (
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// ServiceAccountUser is the user name Kubernetes gives a ServiceAccount.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// User returns the user the operator impersonates for repo: its
// ServiceAccount in the Repository's own (control) namespace. A missing or
// malformed name is a permanent failure: only a human can fix the spec.
func User(repo *sluicev1.Repository) (string, error) {
	if repo == nil {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "the change has no Repository to take a ServiceAccount from")
	}
	sa := repo.Spec.ServiceAccountName
	if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "Repository %s/%s: serviceAccountName %q is not a valid name", repo.Namespace, repo.Name, sa)
	}
	if errs := validation.IsDNS1123Label(repo.Namespace); len(errs) > 0 {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "Repository %q has no valid namespace", repo.Name)
	}
	return ServiceAccountUser(repo.Namespace, sa), nil
}

// Config returns a copy of base that impersonates repo's ServiceAccount.
// Groups are left to the API server, which adds a ServiceAccount's own
// groups (system:serviceaccounts, system:serviceaccounts:<namespace>) when
// only its user name is impersonated.
func Config(base *rest.Config, repo *sluicev1.Repository) (*rest.Config, error) {
	user, err := User(repo)
	if err != nil {
		return nil, err
	}
	if base == nil {
		return nil, fmt.Errorf("no base rest config to impersonate from")
	}
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg, nil
}

// Client returns a controller-runtime client that impersonates repo's
// ServiceAccount.
func Client(base *rest.Config, repo *sluicev1.Repository, scheme *runtime.Scheme) (client.Client, error) {
	cfg, err := Config(base, repo)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Impersonate.UserName, err)
	}
	return c, nil
}

// NamespaceAllowed reports whether namespace matches one of the glob
// patterns (path.Match syntax: *, ?, [a-z]). A malformed pattern matches
// nothing and is reported.
func NamespaceAllowed(patterns []string, namespace string) (bool, error) {
	var bad error
	for _, p := range patterns {
		ok, err := path.Match(p, namespace)
		if err != nil {
			if bad == nil {
				bad = fmt.Errorf("targetNamespaces pattern %q: %w", p, err)
			}
			continue
		}
		if ok {
			return true, nil
		}
	}
	return false, bad
}

// CheckNamespace fails with reason NamespaceNotAllowed unless repo allows
// deploying into namespace.
func CheckNamespace(repo *sluicev1.Repository, namespace string) error {
	if repo == nil {
		return applier.Permanent(sluicev1.ReasonInvalidSpec, "the change has no Repository to check the target namespace against")
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return applier.Permanent(sluicev1.ReasonNamespaceNotAllowed, "target namespace %q is not a valid namespace name", namespace)
	}
	ok, err := NamespaceAllowed(repo.Spec.TargetNamespaces, namespace)
	if ok {
		return nil
	}
	msg := fmt.Sprintf("target namespace %q is not in Repository %s/%s targetNamespaces %v", namespace, repo.Namespace, repo.Name, repo.Spec.TargetNamespaces)
	if err != nil {
		msg += " (" + err.Error() + ")"
	}
	return applier.Permanent(sluicev1.ReasonNamespaceNotAllowed, "%s", msg)
}
