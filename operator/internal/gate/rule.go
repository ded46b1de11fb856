// Package gate is the approval gate of the design (§4 "The gate") as pure
// functions over API objects: no client, no clock, no I/O. The operator's
// ChangeRequest reconciler and `kubectl sluice describe` both call it, so
// what a user is told is what the operator decides.
//
// The gate passes a change when
//
//	no deny finding
//	∧ no standing reject for its approvalDigest
//	∧ ( risk ≤ rule.autoApproveRisk ∧ no "unverifiable" finding
//	  ∨ distinct allowed non-author approvers with a standing approve
//	    given on this change ≥ rule.required )
//
// An approve counts only for the change it was given on, or for the merge
// of the pull request whose preview it was given on (GivenOn): content
// that comes back in a later change needs a new approval. A reject vetoes
// the content in every change that carries it. Where rule is the strictest of the matching ApprovalPolicies, the
// Release's applied rule and the change's own rule (see Strictest).
package gate

import (
	"fmt"
	"slices"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// GroupPrefix marks an approver entry that matches every Kubernetes user in
// a group: "k8s-group:<group>".
const GroupPrefix = "k8s-group:"

// UserPrefix marks a Kubernetes user identity: "k8s:<username>".
const UserPrefix = "k8s:"

// Source is one rule that takes part in the effective rule, with where it
// came from (shown to users, e.g. "ApprovalPolicy/prod-floor").
type Source struct {
	Origin string
	Rule   sluicev1.ApprovalRule
}

// Rule is an effective approval rule: the strictest combination of its
// sources.
type Rule struct {
	// Required is the number of distinct allowed approvers needed (the
	// largest of the sources).
	Required int32
	// ApproverLists are the non-empty approver lists of the sources; an
	// approver must be allowed by every one of them. No list means anyone
	// allowed to approve (RBAC or repository write access) may.
	ApproverLists []sluicev1.ApproverList
	// NoApprovers is true when nobody can approve: a source said so, or the
	// lists have nobody in common. It never turns into "anyone".
	NoApprovers bool
	// AllowAuthor is true only when every source allows authors.
	AllowAuthor bool
	// AutoApproveRisk is the lowest of the sources ("none" lowest).
	AutoApproveRisk sluicev1.AutoApproveRisk
	// RollbackAuto is true only when every source says rollback: auto
	// (approval, the default, wins).
	RollbackAuto bool
	// Origins lists where the sources came from, in order.
	Origins []string
	// NewToNamespace is true when the change goes to a namespace its
	// Release has not applied to, so the rules protecting that namespace
	// through other Releases took part (see Sources).
	NewToNamespace bool
}

// riskRank orders risks; an unknown or empty risk ranks highest so that it
// never auto-approves.
func riskRank(r sluicev1.Risk) int {
	switch r {
	case sluicev1.RiskLow:
		return 1
	case sluicev1.RiskMedium:
		return 2
	case sluicev1.RiskHigh:
		return 3
	}
	return 4
}

// autoRank orders autoApproveRisk values; empty or unknown is "none".
func autoRank(a sluicev1.AutoApproveRisk) int {
	switch a {
	case sluicev1.AutoApproveLow:
		return 1
	case sluicev1.AutoApproveMedium:
		return 2
	case sluicev1.AutoApproveHigh:
		return 3
	}
	return 0
}

// normalizeAutoApprove maps empty and unknown values to "none".
func normalizeAutoApprove(a sluicev1.AutoApproveRisk) sluicev1.AutoApproveRisk {
	if autoRank(a) == 0 {
		return sluicev1.AutoApproveNone
	}
	return a
}

// Strictest combines rules into the strictest one: required is the maximum,
// autoApproveRisk the minimum, allowAuthor holds only if every rule allows
// it, and an approver must be allowed by every non-empty approver list (the
// lists are kept, not flattened, because a k8s-group: entry can only be
// matched against the groups stamped on an Approval). When the lists have
// nobody in common the result says NoApprovers explicitly. With no sources
// the rule is the strictest possible: nobody may approve and nothing
// auto-approves, though Required is 0.
func Strictest(sources ...Source) Rule {
	r := Rule{AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh, RollbackAuto: true}
	if len(sources) == 0 {
		return Rule{NoApprovers: true, AutoApproveRisk: sluicev1.AutoApproveNone}
	}
	var lists []sluicev1.ApproverList
	for _, s := range sources {
		r.Origins = append(r.Origins, s.Origin)
		if s.Rule.Required > r.Required {
			r.Required = s.Rule.Required
		}
		r.AllowAuthor = r.AllowAuthor && s.Rule.AllowAuthor
		r.RollbackAuto = r.RollbackAuto && s.Rule.Rollback.OrDefault() == sluicev1.RollbackAuto
		if autoRank(s.Rule.AutoApproveRisk) < autoRank(r.AutoApproveRisk) {
			r.AutoApproveRisk = normalizeAutoApprove(s.Rule.AutoApproveRisk)
		}
		r.NoApprovers = r.NoApprovers || s.Rule.NoApprovers
		if len(s.Rule.Approvers) > 0 {
			lists = append(lists, normalizeList(s.Rule.Approvers))
		}
		for _, l := range s.Rule.AllOf {
			// An empty list here means "must be in an empty list":
			// nobody. Only Approvers uses empty for "anyone".
			if len(l) == 0 {
				r.NoApprovers = true
				continue
			}
			lists = append(lists, normalizeList(l))
		}
	}
	r.AutoApproveRisk = normalizeAutoApprove(r.AutoApproveRisk)
	r.ApproverLists = reduceLists(lists)
	if !satisfiable(r.ApproverLists) {
		r.NoApprovers = true
	}
	return r
}

// normalizeList sorts and de-duplicates a list (a copy).
func normalizeList(l []sluicev1.Identity) sluicev1.ApproverList {
	out := make(sluicev1.ApproverList, len(l))
	for i, id := range l {
		out[i] = id.Canonical()
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// reduceLists drops duplicate lists and every list that contains another
// one: whoever is allowed by the smaller list is allowed by the larger, so
// the larger adds no constraint.
func reduceLists(lists []sluicev1.ApproverList) []sluicev1.ApproverList {
	slices.SortStableFunc(lists, func(a, b sluicev1.ApproverList) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return slices.Compare(a, b)
	})
	var out []sluicev1.ApproverList
	for _, l := range lists {
		redundant := false
		for _, kept := range out {
			if isSubset(kept, l) {
				redundant = true
				break
			}
		}
		if !redundant {
			out = append(out, l)
		}
	}
	return out
}

// isSubset reports whether every entry of a is in b (both sorted).
func isSubset(a, b sluicev1.ApproverList) bool {
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			return false
		}
	}
	return true
}

// hasGroupEntry reports whether a list names any k8s-group: entry.
func hasGroupEntry(l sluicev1.ApproverList) bool {
	for _, x := range l {
		if strings.HasPrefix(string(x), GroupPrefix) {
			return true
		}
	}
	return false
}

// satisfiable reports whether some approver could be allowed by every list.
// A listed person identity qualifies when each list names it, or (for a k8s:
// user) has a k8s-group: entry the user might be in; an unlisted k8s: user
// qualifies when every list has a group entry.
func satisfiable(lists []sluicev1.ApproverList) bool {
	if len(lists) <= 1 {
		return true
	}
	allHaveGroups := true
	for _, l := range lists {
		allHaveGroups = allHaveGroups && hasGroupEntry(l)
	}
	if allHaveGroups {
		return true
	}
	for _, l := range lists {
		for _, x := range l {
			if strings.HasPrefix(string(x), GroupPrefix) {
				continue
			}
			ok := true
			for _, other := range lists {
				if _, found := slices.BinarySearch(other, x); found {
					continue
				}
				if strings.HasPrefix(string(x), UserPrefix) && hasGroupEntry(other) {
					continue
				}
				ok = false
				break
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// inList reports whether the approver is allowed by one list: named in it,
// or a Kubernetes user whose stamped groups include a k8s-group: entry.
// Groups count only for Approvals from source kubernetes, where admission
// stamps them from the request.
func inList(l sluicev1.ApproverList, approver sluicev1.Identity, groups []string, source sluicev1.ApprovalSource) bool {
	for _, x := range l {
		if x == approver {
			return true
		}
		if source == sluicev1.SourceKubernetes && strings.HasPrefix(string(approver), UserPrefix) {
			if g, ok := strings.CutPrefix(string(x), GroupPrefix); ok && slices.Contains(groups, g) {
				return true
			}
		}
	}
	return false
}

// Allows reports whether the approver (with the groups and source of the
// Approval) is allowed by the rule's approver lists. Authors are not checked
// here. A group identity itself never approves.
func (r Rule) Allows(approver sluicev1.Identity, groups []string, source sluicev1.ApprovalSource) bool {
	if r.NoApprovers || strings.HasPrefix(string(approver), GroupPrefix) {
		return false
	}
	for _, l := range r.ApproverLists {
		if !inList(l, approver, groups, source) {
			return false
		}
	}
	return true
}

// AnyoneMayApprove reports whether the rule names no approvers at all.
func (r Rule) AnyoneMayApprove() bool { return !r.NoApprovers && len(r.ApproverLists) == 0 }

// Candidates lists the entries (identities and k8s-group: entries) that
// appear in every approver list: those who surely may approve. It is empty
// when anyone may approve or nobody can; Kubernetes users matched only
// through different groups of different lists are not listed.
func (r Rule) Candidates() []sluicev1.Identity {
	if r.NoApprovers || len(r.ApproverLists) == 0 {
		return nil
	}
	var out []sluicev1.Identity
	for _, x := range r.ApproverLists[0] {
		inAll := true
		for _, l := range r.ApproverLists[1:] {
			if _, found := slices.BinarySearch(l, x); !found {
				inAll = false
				break
			}
		}
		if inAll {
			out = append(out, x)
		}
	}
	return out
}

// API returns the rule in its API form (for status.effectiveRule and
// Release.status.appliedRule): the first approver list as Approvers and the
// others in AllOf, so Strictest(Source{Rule: r.API()}) is r again.
func (r Rule) API() sluicev1.ApprovalRule {
	out := sluicev1.ApprovalRule{
		Required:        r.Required,
		AllowAuthor:     r.AllowAuthor,
		AutoApproveRisk: normalizeAutoApprove(r.AutoApproveRisk),
		NoApprovers:     r.NoApprovers,
		Rollback:        sluicev1.RollbackApproval,
	}
	if r.RollbackAuto {
		out.Rollback = sluicev1.RollbackAuto
	}
	if len(r.ApproverLists) > 0 {
		out.Approvers = slices.Clone(r.ApproverLists[0])
		for _, l := range r.ApproverLists[1:] {
			out.AllOf = append(out.AllOf, slices.Clone(l))
		}
	}
	return out
}

// String is a one-line description, e.g.
// "2 approvals from [k8s-group:sre] and [github:alice k8s:bob], authors excluded, auto-approve low".
func (r Rule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d approval", r.Required)
	if r.Required != 1 {
		b.WriteString("s")
	}
	switch {
	case r.NoApprovers:
		b.WriteString(", nobody may approve")
	case len(r.ApproverLists) == 0:
		b.WriteString(" from anyone allowed")
	default:
		b.WriteString(" from ")
		for i, l := range r.ApproverLists {
			if i > 0 {
				b.WriteString(" and ")
			}
			fmt.Fprintf(&b, "%v", []sluicev1.Identity(l))
		}
	}
	if r.AllowAuthor {
		b.WriteString(", authors may approve")
	} else {
		b.WriteString(", authors excluded")
	}
	fmt.Fprintf(&b, ", auto-approve %s", normalizeAutoApprove(r.AutoApproveRisk))
	if r.RollbackAuto {
		b.WriteString(", rollback auto")
	}
	return b.String()
}
