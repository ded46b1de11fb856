package gate

import (
	"fmt"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Inputs is everything besides the change and its Approvals that the gate
// reads: the change's Release, the ApprovalPolicies and the Releases of the
// control namespace, the target Namespace object and the Persons.
type Inputs struct {
	// Release is the change's Release.
	Release *sluicev1.Release
	// Policies are the ApprovalPolicies of the control namespace.
	Policies []sluicev1.ApprovalPolicy
	// Releases are the Releases of the control namespace (the change's own
	// Release among them or not); those targeting the change's namespace
	// make the rule of a release new to that namespace.
	Releases []sluicev1.Release
	// Namespace is the change's target Namespace object, nil when it does
	// not exist (a namespaceSelector then matches nothing).
	Namespace *corev1.Namespace
	// People say which identities are one person.
	People People
	// RollbackTarget is the verified change a rollback returns to
	// (spec.rollback.to), nil when the change is no rollback or that
	// change is gone.
	RollbackTarget *sluicev1.ChangeRequest
}

// PolicySelects reports whether an ApprovalPolicy selects a Release whose
// change targets namespace (the Namespace object, nil when missing, gives
// its labels): same control namespace, and either form of selection the
// policy sets matches (see ApprovalPolicySpec); a policy with no selector
// selects every Release. The release form matches the Release's own
// environment, which is right only where a match can add a rule, never
// remove one (the other releases of a namespace); a change is judged by
// changeSelected. A selector that does not parse selects the Release (the
// floor fails closed) and the error says why.
func PolicySelects(p *sluicev1.ApprovalPolicy, rel *sluicev1.Release, namespace string, nsObj *corev1.Namespace) (bool, error) {
	return policySelects(p, rel, &rel.Spec.Environment, namespace, nsObj)
}

// changeSelected reports whether an ApprovalPolicy selects a change of
// rel acting in namespace: as PolicySelects, except that the release form
// matches the environment the change itself records (spec.source, for a
// Delete what was applied), never the Release's spec, which a push
// rewrites. A change that records no environment is selected by every
// policy naming environments: the floor fails closed.
func changeSelected(p *sluicev1.ApprovalPolicy, rel *sluicev1.Release, cr *sluicev1.ChangeRequest, namespace string, nsObj *corev1.Namespace) (bool, error) {
	var env *sluicev1.EnvironmentName
	if src := cr.SourceOf(); src != nil {
		env = &src.Environment
	}
	return policySelects(p, rel, env, namespace, nsObj)
}

// policySelects is PolicySelects for environment env (nil: unknown).
func policySelects(p *sluicev1.ApprovalPolicy, rel *sluicev1.Release, env *sluicev1.EnvironmentName, namespace string, nsObj *corev1.Namespace) (bool, error) {
	if p.Namespace != rel.Namespace {
		return false, nil
	}
	byNamespace := len(p.Spec.Namespaces) > 0 || p.Spec.NamespaceSelector != nil
	byRelease := len(p.Spec.Environments) > 0 || p.Spec.ReleaseSelector != nil
	if !byNamespace && !byRelease {
		return true, nil
	}
	if byNamespace {
		ok, err := namespaceSelected(p, namespace, nsObj)
		if ok || err != nil {
			return true, err
		}
	}
	if !byRelease {
		return false, nil
	}
	return releaseSelected(p, rel, env)
}

// namespaceSelected reports whether the namespace form of a policy matches
// a target namespace: a glob of spec.namespaces, or spec.namespaceSelector
// against the Namespace object's labels.
func namespaceSelected(p *sluicev1.ApprovalPolicy, namespace string, nsObj *corev1.Namespace) (bool, error) {
	for _, pat := range p.Spec.Namespaces {
		ok, err := path.Match(string(pat), namespace)
		if err != nil {
			return true, fmt.Errorf("ApprovalPolicy %s: invalid namespaces pattern %q, applied to every release: %w", p.Name, pat, err)
		}
		if ok {
			return true, nil
		}
	}
	if p.Spec.NamespaceSelector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
	if err != nil {
		return true, fmt.Errorf("ApprovalPolicy %s: invalid namespaceSelector, applied to every release: %w", p.Name, err)
	}
	if nsObj == nil || nsObj.Name != namespace {
		return false, nil
	}
	return sel.Matches(labels.Set(nsObj.Labels)), nil
}

// releaseSelected reports whether the release form of a policy matches a
// Release in environment env: env in spec.environments (empty: any; env
// nil, unknown, is selected by a policy naming environments, failing
// closed) and the Release's labels matching spec.releaseSelector (unset:
// any).
func releaseSelected(p *sluicev1.ApprovalPolicy, rel *sluicev1.Release, env *sluicev1.EnvironmentName) (bool, error) {
	if len(p.Spec.Environments) > 0 {
		if env == nil {
			return true, nil
		}
		if !slices.Contains(p.Spec.Environments, *env) {
			return false, nil
		}
	}
	if p.Spec.ReleaseSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.ReleaseSelector)
	if err != nil {
		return true, fmt.Errorf("ApprovalPolicy %s: invalid releaseSelector, applied to every release: %w", p.Name, err)
	}
	return sel.Matches(labels.Set(rel.Labels)), nil
}

// TargetNamespace is the namespace a change of rel acts in, the one that
// picks the ApprovalPolicies protecting it: an Apply change's
// spec.targetNamespace; for a Delete the namespace the workload was
// applied to (spec.deletion.targetNamespace, else the Release's
// status.appliedTargetNamespace), never the namespace a later, unapplied
// push wrote into the Release's spec.
func TargetNamespace(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) string {
	return cr.NamespaceOf(rel.Status.AppliedTargetNamespace)
}

// NewToNamespace reports whether a change goes to a namespace its Release
// has not applied to: nothing applied yet, or the last applied change went
// elsewhere (including Releases applied before the operator recorded the
// namespace, which are judged strictly once).
func NewToNamespace(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) bool {
	return rel.Status.AppliedTargetNamespace != TargetNamespace(rel, cr)
}

// Sources returns the rules that make up a change's effective rule: every
// ApprovalPolicy selecting the Release, the Release's applied rule, and the
// change's own rule. When the change is new to its target namespace (see
// NewToNamespace) they also include, so that a new environment name or a
// moved Release is no new start, every release-form policy selecting
// another Release of the control namespace that targets or last applied to
// that namespace, and those Releases' applied rules. Errors are policies
// with an invalid selector, which are included anyway.
func Sources(in Inputs, cr *sluicev1.ChangeRequest) ([]Source, []error) {
	rel := in.Release
	target := TargetNamespace(rel, cr)
	var out []Source
	var errs []error
	picked := map[string]bool{}
	for i := range in.Policies {
		p := &in.Policies[i]
		ok, err := changeSelected(p, rel, cr, target, in.Namespace)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			picked[p.Name] = true
			out = append(out, Source{Origin: "ApprovalPolicy/" + p.Name, Rule: p.Spec.Rule})
		}
	}
	if rel.Status.AppliedRule != nil {
		out = append(out, Source{Origin: "Release/" + rel.Name + " status.appliedRule", Rule: *rel.Status.AppliedRule})
	}
	if NewToNamespace(rel, cr) {
		for i := range in.Releases {
			o := &in.Releases[i]
			// Other Releases' specs only add rules here (never remove
			// one), so a push that writes them cannot loosen this rule.
			if o.Name == rel.Name || o.Namespace != rel.Namespace ||
				(o.Spec.TargetNamespace != target && o.Status.AppliedTargetNamespace != target) {
				continue
			}
			for j := range in.Policies {
				p := &in.Policies[j]
				if picked[p.Name] || (len(p.Spec.Environments) == 0 && p.Spec.ReleaseSelector == nil) {
					continue
				}
				// Errors were reported above for the same selector.
				if ok, _ := releaseSelected(p, o, &o.Spec.Environment); ok && p.Namespace == rel.Namespace {
					picked[p.Name] = true
					out = append(out, Source{Origin: fmt.Sprintf("ApprovalPolicy/%s (selects Release/%s in namespace %s; new to namespace)", p.Name, o.Name, target), Rule: p.Spec.Rule})
				}
			}
			if o.Status.AppliedRule != nil {
				out = append(out, Source{Origin: fmt.Sprintf("Release/%s status.appliedRule (in namespace %s; new to namespace)", o.Name, target), Rule: *o.Status.AppliedRule})
			}
		}
	}
	out = append(out, Source{Origin: "ChangeRequest/" + cr.Name + " spec.rule", Rule: cr.Spec.Rule})
	return out, errs
}

// EffectiveRule is Strictest(Sources(in, cr)), marked NewToNamespace when
// the change is new to its target namespace.
func EffectiveRule(in Inputs, cr *sluicev1.ChangeRequest) (Rule, []error) {
	src, errs := Sources(in, cr)
	r := Strictest(src...)
	r.NewToNamespace = NewToNamespace(in.Release, cr)
	return r, errs
}

// Decide is the whole gate: the effective rule from the inputs, then
// EvaluateFor with the inputs' People; a change that re-applies its
// Release's applied digest passes without new approvals (reapplied), and
// so does an exact rollback to verified content under rule rollback: auto
// (rolledBack). A change caught by the Release's quarantine is judged by
// quarantineRule and takes none of those auto paths. Rule errors are
// policies with an invalid selector (included anyway).
func Decide(in Inputs, cr *sluicev1.ChangeRequest, approvals []sluicev1.Approval) (Decision, []error) {
	rule, errs := EffectiveRule(in, cr)
	if in.Release != nil {
		if q := in.Release.Quarantined(cr); q != nil {
			d := EvaluateFor(cr, quarantineRule(rule), approvals, in.People)
			return quarantined(d, q), errs
		}
	}
	d := EvaluateFor(cr, rule, approvals, in.People)
	d = reapplied(d, in.Release, cr)
	return rolledBack(d, in, cr), errs
}
