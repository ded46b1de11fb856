package helmcheck

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// Scope says where an object of a kind lives.
type Scope int

const (
	// ScopeUnknown: the kind is not one the validator knows (a custom
	// resource whose CRD it has not seen); Helm puts such an object into the
	// release namespace only if the cluster serves it as namespaced.
	ScopeUnknown Scope = iota
	// ScopeNamespaced: the object lives in its metadata.namespace, or the
	// release namespace when it names none (Helm sets it).
	ScopeNamespaced
	// ScopeCluster: the object has no namespace; any metadata.namespace it
	// names is dropped by the API server.
	ScopeCluster
)

// Confinement is where a release's objects may go besides its target
// namespace: the Repository's allowedExtraNamespaces and
// allowedClusterKinds. The zero value allows nothing beyond the target
// namespace.
type Confinement struct {
	// ExtraNamespaces are glob patterns (path.Match) of namespaces objects
	// may name besides the target namespace.
	ExtraNamespaces []string
	// ClusterKinds are the cluster-scoped kinds allowed by name. A custom
	// kind whose scope the validator cannot know is allowed only when
	// listed here.
	ClusterKinds []schema.GroupKind
}

// ErrOutsideNamespace is wrapped by every refusal of Confinement.Check.
var ErrOutsideNamespace = errors.New("OutsideNamespace")

// Check says whether an object of kind gk with scope, naming explicitNS in
// its metadata (or nothing), may be installed by a release whose target
// namespace is target. The error (wrapping ErrOutsideNamespace) says why
// not, naming the object as what.
func (c Confinement) Check(gk schema.GroupKind, scope Scope, explicitNS, target, what string) error {
	switch scope {
	case ScopeCluster:
		if c.clusterKind(gk) {
			return nil
		}
		return fmt.Errorf("%w: %s is cluster-scoped, outside namespace %s; the Repository's allowedClusterKinds does not list %s",
			ErrOutsideNamespace, what, target, kindName(gk))
	case ScopeUnknown:
		if !c.clusterKind(gk) {
			return fmt.Errorf("%w: %s is of a kind whose scope is not known without its CRD, so it may be cluster-scoped; list %s in the Repository's allowedClusterKinds to accept it",
				ErrOutsideNamespace, what, kindName(gk))
		}
		// Allowed in any scope; if it is namespaced, the namespace rule
		// below still holds.
	}
	if explicitNS == "" || explicitNS == target || c.extraNamespace(explicitNS) {
		return nil
	}
	return fmt.Errorf("%w: %s is in namespace %s, not the release's namespace %s, and the Repository's allowedExtraNamespaces does not match it",
		ErrOutsideNamespace, what, explicitNS, target)
}

func (c Confinement) clusterKind(gk schema.GroupKind) bool {
	for _, k := range c.ClusterKinds {
		if k == gk {
			return true
		}
	}
	return false
}

func (c Confinement) extraNamespace(ns string) bool {
	for _, p := range c.ExtraNamespaces {
		if ok, err := path.Match(p, ns); err == nil && ok {
			return true
		}
	}
	return false
}

// kindName is "Kind.group" (kubectl's form), or the kind in the core group.
func kindName(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

// KindScope is the scope of a kind as the validator knows it without a
// cluster: every resource kind Kubernetes serves (the built-in table,
// checked against an API server by the operator's tests) and a few
// well-known custom kinds. Anything else is ScopeUnknown.
func KindScope(gk schema.GroupKind) Scope {
	if namespaced, ok := builtinScopes[gk]; ok {
		if namespaced {
			return ScopeNamespaced
		}
		return ScopeCluster
	}
	if namespaced, ok := customScopes[gk]; ok {
		if namespaced {
			return ScopeNamespaced
		}
		return ScopeCluster
	}
	return ScopeUnknown
}

// BuiltinKinds returns the built-in table: group/kind to namespaced.
func BuiltinKinds() map[schema.GroupKind]bool {
	out := make(map[schema.GroupKind]bool, len(builtinScopes))
	for k, v := range builtinScopes {
		out[k] = v
	}
	return out
}

// IsList reports a kind Helm's client flattens into its items ("List" and
// any "...List" kind with items), which would hide those items from every
// check.
func IsList(o Object) bool {
	if o.Kind == "List" {
		return true
	}
	_, items := o.Object["items"]
	return strings.HasSuffix(o.Kind, "List") && items
}

// confine adds a deny finding for every object outside the target
// namespace that the Confinement does not allow (hooks and crds/ included:
// Helm installs them too).
func (c *checker) confine(objs []Object) {
	conf := c.opts.Confine
	if conf == nil {
		return
	}
	for _, o := range objs {
		what := o.Kind + " " + o.Name
		if o.Hook {
			what = "hook " + what
		}
		if IsList(o) {
			c.add(report.SeverityDeny, "helm.namespace", o.ID(), c.chartFile(o.Source), 0,
				fmt.Sprintf("%s: a %s is installed item by item, hiding its items from the checks; render each object as its own document", what, o.Kind))
			continue
		}
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil {
			continue // strictDecode reports it
		}
		gk := schema.GroupKind{Group: gv.Group, Kind: o.Kind}
		if err := conf.Check(gk, KindScope(gk), o.ExplicitNamespace, c.opts.Namespace, what); err != nil {
			c.add(report.SeverityDeny, "helm.namespace", o.ID(), c.chartFile(o.Source), 0,
				strings.TrimPrefix(err.Error(), ErrOutsideNamespace.Error()+": "))
		}
	}
}
