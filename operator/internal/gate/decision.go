package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// IgnoreReason says why an Approval does not count.
type IgnoreReason string

const (
	// IgnoredOtherDigest: the Approval is for another approvalDigest.
	IgnoredOtherDigest IgnoreReason = "OtherDigest"
	// IgnoredOtherRelease: the Approval names another release (or
	// namespace), even if the content is the same.
	IgnoredOtherRelease IgnoreReason = "OtherRelease"
	// IgnoredSuperseded: the same approver decided again later.
	IgnoredSuperseded IgnoreReason = "Superseded"
	// IgnoredOtherChange: an approve given on another change with the same
	// content (or on no named change). An approve counts only for the
	// change it was given on, or for the merge of the pull request whose
	// preview it was given on (see GivenOn): content that comes back later
	// is a new change to approve.
	IgnoredOtherChange IgnoreReason = "OtherChange"
	// IgnoredAuthor: the approver is an author and the rule excludes authors.
	IgnoredAuthor IgnoreReason = "Author"
	// IgnoredNotAllowed: the approver is not in the rule's approver lists.
	IgnoredNotAllowed IgnoreReason = "NotAllowed"
	// IgnoredRevoked: the approver's standing decision is a revoke.
	IgnoredRevoked IgnoreReason = "Revoked"
	// IgnoredSamePerson: another identity of the same person (per the
	// Persons) already counts; one person counts once.
	IgnoredSamePerson IgnoreReason = "SamePerson"
)

// Ignored is one Approval that does not count, and why.
type Ignored struct {
	Approval string
	Approver sluicev1.Identity
	Decision sluicev1.Decision
	Why      IgnoreReason
}

// Needed says what is still missing for the approval branch of the gate.
type Needed struct {
	// Approvals is how many more distinct allowed approvers must approve
	// (0 when enough have).
	Approvals int32
	// Anyone is true when the rule names no approvers: anyone allowed to
	// approve may (authors only if the rule allows them).
	Anyone bool
	// Nobody is true when no approver can ever be allowed; only
	// auto-approval (or Required 0) can pass.
	Nobody bool
	// Candidates are entries in every approver list who have not approved
	// yet (authors removed unless allowed); k8s-group: entries mean any
	// member of the group.
	Candidates []sluicev1.Identity
	// Lists are the rule's approver lists; an approver must be in each.
	Lists []sluicev1.ApproverList
}

// Decision is the gate's verdict on one change.
type Decision struct {
	// Passed is true when the change may be applied.
	Passed bool
	// Reason is a condition reason constant of the API package:
	// DigestMismatch, PolicyDenied, Vetoed (all terminal), AutoApproved,
	// ApprovalsMet (passed) or AwaitingApprovals.
	Reason string
	// Message is a one-line summary for conditions and users.
	Message string
	// Rule is the effective rule the change was judged by.
	Rule Rule
	// ApprovedBy are the distinct allowed approvers with a standing
	// approve, sorted.
	ApprovedBy []sluicev1.Identity
	// RejectedBy are the approvers whose standing reject vetoes the change.
	RejectedBy []sluicev1.Identity
	// Ignored are the Approvals that do not count, and why.
	Ignored []Ignored
	// Needed is what is still missing when waiting for approvals.
	Needed Needed
	// DenyFindings and UnverifiableFindings count the verdict's findings of
	// those severities.
	DenyFindings         int
	UnverifiableFindings int
}

// Rejected reports whether the decision ends the change (phase Rejected).
func (d Decision) Rejected() bool {
	switch d.Reason {
	case sluicev1.ReasonDigestMismatch, sluicev1.ReasonPolicyDenied, sluicev1.ReasonVetoed:
		return true
	}
	return false
}

// Phase is the ChangeRequest phase the decision leads to before the
// hand-off: Rejected, Approved or AwaitingApproval.
func (d Decision) Phase() sluicev1.ChangeRequestPhase {
	switch {
	case d.Rejected():
		return sluicev1.PhaseRejected
	case d.Passed:
		return sluicev1.PhaseApproved
	}
	return sluicev1.PhaseAwaitingApproval
}

// Newer reports whether Approval a was made after b: by creation time,
// then by resourceVersion when both are numbers (etcd revisions grow), then
// by name so the order is total. For one approver and one content the
// newest decision stands (Standing).
func Newer(a, b *sluicev1.Approval) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if errA == nil && errB == nil && ra != rb {
		return ra > rb
	}
	return a.Name > b.Name
}

// GivenOn reports whether an Approval was given on the change cr: it names
// cr, or cr is a change of the tracked branch that merged a pull request
// (spec.mergedPullRequests) and the Approval names a preview of that pull
// request for cr's release (a review, or an approve of the preview with
// kubectl sluice). Release and digest are checked by Standing; together
// they bind an approve to the transition it was given for, never to a
// later change that brings the same content back.
func GivenOn(a *sluicev1.Approval, cr *sluicev1.ChangeRequest) bool {
	name := a.Spec.ChangeRequest
	switch {
	case name == "":
		return false
	case name == cr.Name:
		return true
	case cr.Spec.PullRequest != nil:
		// A preview counts only what was given on itself.
		return false
	}
	for _, n := range cr.Spec.MergedPullRequests {
		if a.Spec.PullRequest != 0 && a.Spec.PullRequest != n {
			continue
		}
		if isPreviewName(name, cr.Spec.Release, n) {
			return true
		}
	}
	return false
}

// isPreviewName reports whether name is the name of a preview of pull
// request n for release ("<release>-pr<n>-<10 hex>", see
// sluicev1.PreviewChangeRequestName); branch changes ("<release>-<hex>")
// and deletions ("<release>-del-<hex>") never match.
func isPreviewName(name, release string, n int64) bool {
	head, ok := strings.CutPrefix(name, release+"-pr"+strconv.FormatInt(n, 10)+"-")
	if !ok || len(head) != 10 {
		return false
	}
	for _, c := range head {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Standing returns, for each approver, the Approval that stands for the
// change among those on its content (same namespace, release and
// approvalDigest); the others come back as ignored (other digest, other
// release, superseded). The newest decision of an approver on the content
// stands, with one refinement: when it is an approve and the approver
// approved this very change (GivenOn) with no reject or revoke since, that
// approve stands instead, so approving another change with the same
// content does not take back an approve of this one. A standing approve
// given on another change does not count (IgnoredOtherChange in
// EvaluateFor); a standing reject vetoes every change with the content.
func Standing(cr *sluicev1.ChangeRequest, approvals []sluicev1.Approval) (map[sluicev1.Identity]*sluicev1.Approval, []Ignored) {
	byApprover := map[sluicev1.Identity][]*sluicev1.Approval{}
	var ignored []Ignored
	for i := range approvals {
		a := &approvals[i]
		if a.Spec.Decision.Settles() {
			// A settle of a verification is no decision on the change.
			continue
		}
		switch {
		case a.Spec.Release != cr.Spec.Release || (a.Namespace != "" && cr.Namespace != "" && a.Namespace != cr.Namespace):
			ignored = append(ignored, Ignored{Approval: a.Name, Approver: a.Spec.Approver, Decision: a.Spec.Decision, Why: IgnoredOtherRelease})
			continue
		case a.Spec.ApprovalDigest != cr.Spec.ApprovalDigest:
			ignored = append(ignored, Ignored{Approval: a.Name, Approver: a.Spec.Approver, Decision: a.Spec.Decision, Why: IgnoredOtherDigest})
			continue
		}
		// Provider logins are case-insensitive: GitHub's Alice is alice.
		key := a.Spec.Approver.Canonical()
		byApprover[key] = append(byApprover[key], a)
	}
	standing := make(map[sluicev1.Identity]*sluicev1.Approval, len(byApprover))
	for key, decisions := range byApprover {
		// Newest first.
		slices.SortFunc(decisions, func(x, y *sluicev1.Approval) int {
			switch {
			case x == y:
				return 0
			case Newer(x, y):
				return -1
			}
			return 1
		})
		pick := decisions[0]
		for _, a := range decisions {
			if a.Spec.Decision != sluicev1.DecisionApprove {
				break
			}
			if GivenOn(a, cr) {
				pick = a
				break
			}
		}
		standing[key] = pick
		for _, a := range decisions {
			if a != pick {
				ignored = append(ignored, Ignored{Approval: a.Name, Approver: a.Spec.Approver, Decision: a.Spec.Decision, Why: IgnoredSuperseded})
			}
		}
	}
	return standing, ignored
}

// Evaluate is EvaluateFor with no Persons: every identity is a person of
// its own.
func Evaluate(cr *sluicev1.ChangeRequest, rule Rule, approvals []sluicev1.Approval) Decision {
	return EvaluateFor(cr, rule, approvals, People{})
}

// EvaluateFor applies the gate to a change under an effective rule (usually
// from EffectiveRule) with the Approvals of its namespace; Approvals for
// other changes are ignored, so passing all of them is fine. People say
// which identities are one person: an approver is an author when any
// identity of their person is, and one person's approvals under several
// identities count once.
//
// A reject vetoes when its approver is allowed by the rule or is an author
// (anyone may stop their own change); a reject from someone else is
// ignored like their approve would be.
func EvaluateFor(cr *sluicev1.ChangeRequest, rule Rule, approvals []sluicev1.Approval, people People) Decision {
	d := Decision{Rule: rule}
	for _, f := range cr.Spec.Verdict.Findings {
		switch f.Severity {
		case sluicev1.SeverityDeny:
			d.DenyFindings++
		case sluicev1.SeverityUnverifiable:
			d.UnverifiableFindings++
		}
	}
	if want := cr.ExpectedApprovalDigest(); cr.Spec.ApprovalDigest != want {
		d.Reason = sluicev1.ReasonDigestMismatch
		d.Message = fmt.Sprintf("spec.approvalDigest %s does not match the digest of the change's release and content %s", cr.Spec.ApprovalDigest, want)
		return d
	}
	if d.DenyFindings > 0 || cr.Spec.Verdict.Result == sluicev1.VerdictFail {
		d.Reason = sluicev1.ReasonPolicyDenied
		d.Message = fmt.Sprintf("the validation verdict is %q with %d deny finding(s)", cr.Spec.Verdict.Result, d.DenyFindings)
		return d
	}

	standing, ignored := Standing(cr, approvals)
	d.Ignored = ignored
	approvers := make([]sluicev1.Identity, 0, len(standing))
	for id := range standing {
		approvers = append(approvers, id)
	}
	slices.Sort(approvers)
	// Small slices on the stack, not maps: a change has a few authors
	// and approvers, and this runs on every reconcile.
	var authorBuf, countedBuf [8]sluicev1.Identity
	authors := authorKeys(authorBuf[:0], cr, people)
	counted := countedBuf[:0]
	for _, id := range approvers {
		a := standing[id]
		person := people.Key(id)
		author := slices.Contains(authors, person)
		allowed := rule.Allows(id, a.Spec.Groups, a.Spec.Source)
		ign := Ignored{Approval: a.Name, Approver: id, Decision: a.Spec.Decision}
		switch a.Spec.Decision {
		case sluicev1.DecisionReject:
			if allowed || author {
				d.RejectedBy = append(d.RejectedBy, id)
				continue
			}
			ign.Why = IgnoredNotAllowed
		case sluicev1.DecisionApprove:
			switch {
			case !GivenOn(a, cr):
				ign.Why = IgnoredOtherChange
			case author && !rule.AllowAuthor:
				ign.Why = IgnoredAuthor
			case !allowed:
				ign.Why = IgnoredNotAllowed
			case slices.Contains(counted, person):
				ign.Why = IgnoredSamePerson
			default:
				counted = append(counted, person)
				d.ApprovedBy = append(d.ApprovedBy, id)
				continue
			}
		default:
			ign.Why = IgnoredRevoked
		}
		d.Ignored = append(d.Ignored, ign)
	}
	d.Needed = needed(rule, d.ApprovedBy, authors, counted, people)

	if len(d.RejectedBy) > 0 {
		d.Reason = sluicev1.ReasonVetoed
		d.Message = fmt.Sprintf("rejected by %s", joinIDs(d.RejectedBy))
		return d
	}
	risk := cr.Spec.Verdict.Risk
	if autoRank(rule.AutoApproveRisk) > 0 && riskRank(risk) <= autoRank(rule.AutoApproveRisk) {
		if d.UnverifiableFindings == 0 {
			d.Passed = true
			d.Reason = sluicev1.ReasonAutoApproved
			d.Message = fmt.Sprintf("risk %s is within auto-approve %s", risk, rule.AutoApproveRisk)
			return d
		}
	}
	if int32(len(d.ApprovedBy)) >= rule.Required {
		d.Passed = true
		d.Reason = sluicev1.ReasonApprovalsMet
		if rule.Required == 0 {
			d.Message = "the rule requires no approval"
		} else {
			d.Message = fmt.Sprintf("approved by %s (%d of %d required)", joinIDs(d.ApprovedBy), len(d.ApprovedBy), rule.Required)
		}
		return d
	}
	d.Reason = sluicev1.ReasonAwaitingApprovals
	d.Message = awaitingMessage(d, risk)
	return d
}

// needed works out who could still approve: candidates whose person has
// neither approved already nor (unless allowed) authored the change.
func needed(rule Rule, approvedBy []sluicev1.Identity, authors, counted []sluicev1.Identity, people People) Needed {
	n := Needed{Anyone: rule.AnyoneMayApprove(), Nobody: rule.NoApprovers, Lists: rule.ApproverLists}
	if missing := rule.Required - int32(len(approvedBy)); missing > 0 {
		n.Approvals = missing
	}
	for _, c := range rule.Candidates() {
		person := people.Key(c)
		if slices.Contains(approvedBy, c) || slices.Contains(counted, person) || (!rule.AllowAuthor && slices.Contains(authors, person)) {
			continue
		}
		n.Candidates = append(n.Candidates, c)
	}
	return n
}

// awaitingMessage explains what the change waits for.
func awaitingMessage(d Decision, risk sluicev1.Risk) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d approvals", len(d.ApprovedBy), d.Rule.Required)
	switch {
	case d.Needed.Nobody:
		b.WriteString("; nobody is allowed to approve under the effective rule")
	case d.Needed.Anyone:
		fmt.Fprintf(&b, "; %d more from anyone allowed to approve", d.Needed.Approvals)
	case len(d.Needed.Candidates) > 0:
		fmt.Fprintf(&b, "; %d more from %s", d.Needed.Approvals, joinIDs(d.Needed.Candidates))
	default:
		fmt.Fprintf(&b, "; %d more from someone in every one of %v", d.Needed.Approvals, d.Needed.Lists)
	}
	if autoRank(d.Rule.AutoApproveRisk) > 0 && riskRank(risk) <= autoRank(d.Rule.AutoApproveRisk) && d.UnverifiableFindings > 0 {
		fmt.Fprintf(&b, " (not auto-approved: %d unverifiable finding(s))", d.UnverifiableFindings)
	}
	if n := ignoredFor(d.Ignored, IgnoredOtherChange); n > 0 {
		fmt.Fprintf(&b, "; %d approval(s) given on another change with the same content do not count: an approval counts only for the change it was given on", n)
	}
	return b.String()
}

// ignoredFor counts the ignored Approvals with reason why.
func ignoredFor(ignored []Ignored, why IgnoreReason) int {
	n := 0
	for _, ig := range ignored {
		if ig.Why == why {
			n++
		}
	}
	return n
}

func joinIDs(ids []sluicev1.Identity) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}
