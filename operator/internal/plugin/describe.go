package plugin

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
)

// Description is what describe shows, also printed by -o json|yaml.
type Description struct {
	// ChangeRequest is the change as stored.
	ChangeRequest *sluicev1.ChangeRequest `json:"changeRequest"`
	// ReleaseFound is false when the change's Release does not exist.
	ReleaseFound bool `json:"releaseFound"`
	// TargetNamespace is the namespace the change acts in and whose
	// policies judge it: for a Delete, where the workload was applied.
	TargetNamespace string `json:"targetNamespace"`
	// EffectiveRule is the strictest of the selecting ApprovalPolicies, the
	// Release's applied rule and the change's own rule, worked out now.
	EffectiveRule sluicev1.ApprovalRule `json:"effectiveRule"`
	// EffectiveRuleText is the effective rule in words.
	EffectiveRuleText string `json:"effectiveRuleText"`
	// RuleSources says where the effective rule came from.
	RuleSources []string `json:"ruleSources"`
	// NewToNamespace is true when the change goes to a namespace its
	// Release has not applied to, so the rules protecting that namespace
	// through other Releases are among RuleSources.
	NewToNamespace bool `json:"newToNamespace,omitempty"`
	// RuleWarnings are ApprovalPolicies with invalid selectors, and inputs
	// of the operator's decision the user may not read.
	RuleWarnings []string `json:"ruleWarnings,omitempty"`
	// Gate is the gate's verdict on the live Approvals.
	Gate GateSummary `json:"gate"`
	// Approvals are the Approvals that bind to this change (its release and
	// approvalDigest), oldest first.
	Approvals []ApprovalSummary `json:"approvals"`
	// Quarantined is the entry of the Release's quarantine that catches
	// the change (a change with its approvalDigest or content failed
	// verification): it is never auto-approved. Nil when none does.
	Quarantined *sluicev1.QuarantineEntry `json:"quarantined,omitempty"`
}

// GateSummary is the gate's decision as describe reports it.
type GateSummary struct {
	Passed     bool                `json:"passed"`
	Reason     string              `json:"reason"`
	Message    string              `json:"message"`
	ApprovedBy []sluicev1.Identity `json:"approvedBy,omitempty"`
	RejectedBy []sluicev1.Identity `json:"rejectedBy,omitempty"`
	// StillNeeded is who must still approve; empty once nothing is missing.
	StillNeeded string `json:"stillNeeded"`
	// MoreApprovals is how many more distinct allowed approvers must approve.
	MoreApprovals int32               `json:"moreApprovals"`
	Candidates    []sluicev1.Identity `json:"candidates,omitempty"`
}

// ApprovalSummary is one Approval of the change and whether it counts.
type ApprovalSummary struct {
	Name     string                  `json:"name"`
	Approver sluicev1.Identity       `json:"approver"`
	Groups   []string                `json:"groups,omitempty"`
	Decision sluicev1.Decision       `json:"decision"`
	Source   sluicev1.ApprovalSource `json:"source"`
	Comment  string                  `json:"comment,omitempty"`
	// Effect is counts, vetoes, superseded, author, not-allowed, revoked,
	// other-change (an approve given on another change with this content)
	// or same-person (another identity of the approver already counts).
	Effect  string      `json:"effect"`
	Created metav1.Time `json:"created"`
}

func newDescribeCommand(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "describe CHANGE",
		Short:   "Show a change's verdict, findings, digests, effective rule, approvals and who is still needed",
		Example: `  kubectl sluice describe checkout-prod-1a2b3c4d5e -n team-a`,
		Args:    exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			if err := a.connect(); err != nil {
				return err
			}
			d, err := a.describe(cmd, args[0])
			if err != nil {
				return err
			}
			if output != outputTable {
				if err := setKinds(d.ChangeRequest); err != nil {
					return err
				}
				return printData(a.opts.Out, d, output)
			}
			return a.printDescription(a.opts.Out, d)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml (default: text).")
	return cmd
}

// describe gathers the change, its Release, the ApprovalPolicies and the
// Approvals of the namespace, and runs the gate over them exactly as the
// operator does.
func (a *app) describe(cmd *cobra.Command, name string) (*Description, error) {
	ctx := cmd.Context()
	cr, err := a.getChange(cmd, name)
	if err != nil {
		return nil, err
	}
	d := &Description{ChangeRequest: cr, ReleaseFound: true}

	rel := &sluicev1.Release{}
	err = a.client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel)
	switch {
	case apierrors.IsNotFound(err):
		// Without its Release only the change's own rule (and policies
		// that select every environment) can be shown.
		d.ReleaseFound = false
		rel = &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: cr.Spec.Release, Namespace: cr.Namespace}}
	case err != nil:
		return nil, fmt.Errorf("get release %s/%s: %w", cr.Namespace, cr.Spec.Release, err)
	}
	in, warnings, err := gateinput.LoadForDisplay(ctx, a.client, cr, rel)
	if err != nil {
		return nil, err
	}
	var approvals sluicev1.ApprovalList
	if err := a.client.List(ctx, &approvals, client.InNamespace(cr.Namespace)); err != nil {
		return nil, fmt.Errorf("list approvals in %s: %w", cr.Namespace, err)
	}

	dec, ruleErrs := gate.Decide(in, cr, approvals.Items)
	rule := dec.Rule
	d.RuleWarnings = warnings
	for _, e := range ruleErrs {
		d.RuleWarnings = append(d.RuleWarnings, e.Error())
	}
	d.TargetNamespace = gate.TargetNamespace(rel, cr)
	d.EffectiveRule = rule.API()
	d.EffectiveRuleText = rule.String()
	d.RuleSources = rule.Origins
	d.NewToNamespace = rule.NewToNamespace
	d.Gate = GateSummary{
		Passed:        dec.Passed,
		Reason:        dec.Reason,
		Message:       dec.Message,
		ApprovedBy:    dec.ApprovedBy,
		RejectedBy:    dec.RejectedBy,
		StillNeeded:   stillNeeded(cr, dec),
		MoreApprovals: dec.Needed.Approvals,
		Candidates:    dec.Needed.Candidates,
	}
	if dec.Passed || dec.Rejected() {
		d.Gate.MoreApprovals = 0
		d.Gate.Candidates = nil
	}
	d.Approvals = approvalSummaries(cr, dec, approvals.Items)
	d.Quarantined = rel.Quarantined(cr)
	return d, nil
}

// approvalSummaries lists the Approvals bound to the change with their
// effect on the gate.
func approvalSummaries(cr *sluicev1.ChangeRequest, dec gate.Decision, all []sluicev1.Approval) []ApprovalSummary {
	why := map[string]gate.IgnoreReason{}
	for _, ig := range dec.Ignored {
		why[ig.Approval] = ig.Why
	}
	var out []ApprovalSummary
	for _, ap := range all {
		if ap.Spec.Release != cr.Spec.Release || ap.Spec.ApprovalDigest != cr.Spec.ApprovalDigest {
			continue
		}
		s := ApprovalSummary{
			Name: ap.Name, Approver: ap.Spec.Approver, Groups: ap.Spec.Groups, Decision: ap.Spec.Decision,
			Source: ap.Spec.Source, Comment: ap.Spec.Comment, Created: ap.CreationTimestamp,
		}
		switch w, ignored := why[ap.Name]; {
		case ignored && w == gate.IgnoredSuperseded:
			s.Effect = "superseded"
		case ignored && w == gate.IgnoredAuthor:
			s.Effect = "author"
		case ignored && w == gate.IgnoredNotAllowed:
			s.Effect = "not-allowed"
		case ignored && w == gate.IgnoredRevoked:
			s.Effect = "revoked"
		case ignored && w == gate.IgnoredSamePerson:
			s.Effect = "same-person"
		case ignored && w == gate.IgnoredOtherChange:
			s.Effect = "other-change"
		case ignored:
			s.Effect = strings.ToLower(string(w))
		case slices.Contains(dec.RejectedBy, ap.Spec.Approver):
			s.Effect = "vetoes"
		case slices.Contains(dec.ApprovedBy, ap.Spec.Approver):
			s.Effect = "counts"
		default:
			// The gate stopped before counting (a deny finding or a
			// digest mismatch).
			s.Effect = "not-counted"
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(x, y ApprovalSummary) int {
		if c := x.Created.Compare(y.Created.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// stillNeeded says, in one line, who must still act for the change to pass.
func stillNeeded(cr *sluicev1.ChangeRequest, dec gate.Decision) string {
	phase := sluicev1.ChangeRequestPhase(phaseOf(cr))
	preview := ""
	if phase == sluicev1.PhasePreview || (cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview) {
		// A preview is never applied, but its approvals carry over to the
		// merge commit when the content is identical.
		preview = "for the merge commit with this content: "
	}
	switch {
	case phase.IsTerminal() && preview == "":
		return fmt.Sprintf("nobody: the change is %s", phase)
	case dec.Rejected():
		return fmt.Sprintf("%snobody: the change cannot pass (%s)", preview, dec.Message)
	case dec.Passed:
		return fmt.Sprintf("%snobody: the gate passes (%s)", preview, dec.Message)
	}
	n := dec.Needed
	var who string
	switch {
	case n.Nobody:
		return preview + "nobody is allowed to approve under the effective rule; only auto-approval can pass it"
	case n.Anyone:
		who = "anyone allowed to approve (RBAC for k8s: users, write access for pull-request reviews)"
	case len(n.Candidates) > 0:
		who = "any of " + joinIdentities(n.Candidates)
	default:
		var lists []string
		for _, l := range n.Lists {
			lists = append(lists, "["+joinIdentities(l)+"]")
		}
		who = "someone in every one of " + strings.Join(lists, " and ")
	}
	more := "approval"
	if n.Approvals != 1 {
		more = "approvals"
	}
	s := fmt.Sprintf("%s%d more %s from %s", preview, n.Approvals, more, who)
	if !dec.Rule.AllowAuthor && len(cr.Spec.Authors) > 0 {
		s += "; authors do not count (" + joinIdentities(cr.Spec.Authors) + ")"
	}
	if len(dec.ApprovedBy) > 0 {
		s += "; already approved by " + joinIdentities(dec.ApprovedBy)
	}
	return s
}

func joinIdentities(ids []sluicev1.Identity) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}

// printDescription writes the text form of describe.
func (a *app) printDescription(w io.Writer, d *Description) error {
	cr := d.ChangeRequest
	now := a.opts.Now()
	t := newTable(w)
	field := func(k, v string) { t.row(k+":", v) }

	field("Name", cr.Name)
	field("Namespace", cr.Namespace)
	rel := cr.Spec.Release
	if !d.ReleaseFound {
		rel += " (not found)"
	}
	field("Release", rel)
	field("Operation", string(cr.OperationOf()))
	rev := cr.Spec.Revision
	if cr.Spec.Attempt > 1 {
		rev += fmt.Sprintf(" (attempt %d)", cr.Spec.Attempt)
	}
	field("Revision", rev)
	if cr.Spec.PreviousRevision != "" {
		field("Previous revision", cr.Spec.PreviousRevision)
	}
	if pr := cr.Spec.PullRequest; pr != nil {
		s := fmt.Sprintf("#%d (head %s)", pr.Number, sluicev1.ShortSHA(pr.HeadSHA))
		if pr.Preview {
			s += ", preview: never applied"
		}
		if pr.Fork {
			s += ", from a fork"
		}
		field("Pull request", s)
	}
	if msg, _, _ := strings.Cut(cr.Spec.CommitMessage, "\n"); msg != "" {
		field("Commit message", msg)
	}
	field("Authors", orNone(joinIdentities(cr.Spec.Authors)))
	if cr.IsDelete() {
		// Where the Delete acts: where the workload was applied, which is
		// also the namespace whose policies judge it.
		field("Target namespace", d.TargetNamespace+" (where it was applied)")
		field("Delivery", string(cr.DeliveryOf()))
	} else {
		field("Target namespace", cr.Spec.TargetNamespace)
		field("Delivery", orNone(string(cr.Spec.Delivery)))
	}
	field("Phase", phaseOf(cr))
	field("Age", age(now, cr.CreationTimestamp))
	field("Verdict", fmt.Sprintf("%s, risk %s", orNone(string(cr.Spec.Verdict.Result)), orNone(string(cr.Spec.Verdict.Risk))))
	if ps := cr.Spec.PlanSummary; ps != nil {
		field("Plan", fmt.Sprintf("%d to add, %d to change, %d to destroy, %d to replace", ps.Add, ps.Change, ps.Destroy, ps.Replace))
	}
	field("Diff", fmt.Sprintf("kubectl sluice diff %s -n %s (the plan and the manifest diff)", cr.Name, cr.Namespace))
	for _, kv := range deletionFields(cr) {
		field(kv[0], kv[1])
	}
	for _, kv := range rollbackFields(d) {
		field(kv[0], kv[1])
	}
	field("Digests", "")
	field("  approval", string(cr.Spec.ApprovalDigest))
	field("  content", string(cr.Spec.ContentDigest))
	field("  manifest", orNone(string(cr.Spec.ManifestDigest)))
	field("  plan", orNone(string(cr.Spec.PlanDigest)))
	field("  plan file", orNone(string(cr.Spec.PlanFileSHA256)))
	field("  artifact", fmt.Sprintf("%s (%s)", cr.Spec.Artifact.URL, cr.Spec.Artifact.SHA256))
	field("Effective rule", d.EffectiveRuleText)
	// One line per source: which policies (and applied rules) made the
	// rule, and why a release new to its namespace is held to more.
	for _, src := range d.RuleSources {
		field("  from", src)
	}
	if d.NewToNamespace {
		field("  note", fmt.Sprintf("new to namespace: Release %s has not applied to %s before, so the rules protecting that namespace apply", cr.Spec.Release, d.TargetNamespace))
	}
	for _, warn := range d.RuleWarnings {
		field("  warning", warn)
	}
	verdict := d.Gate.Reason
	if d.Gate.Message != "" {
		verdict += ": " + d.Gate.Message
	}
	field("Gate", verdict)
	field("Still needed", d.Gate.StillNeeded)
	if err := t.flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "Findings:")
	if len(cr.Spec.Verdict.Findings) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		ft := newTable(w, "  SEVERITY", "POLICY", "RESOURCE", "WHERE", "MESSAGE")
		for _, f := range cr.Spec.Verdict.Findings {
			where := f.File
			if f.Line > 0 {
				where = fmt.Sprintf("%s:%d", f.File, f.Line)
			}
			ft.row("  "+string(f.Severity), orNone(f.Policy), orNone(f.Resource), orNone(where), f.Message)
		}
		if err := ft.flush(); err != nil {
			return err
		}
		if cr.Spec.Verdict.FindingsTruncated > 0 {
			fmt.Fprintf(w, "  … and %d more findings\n", cr.Spec.Verdict.FindingsTruncated)
		}
	}

	fmt.Fprintln(w, "Approvals:")
	if len(d.Approvals) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		at := newTable(w, "  APPROVER", "DECISION", "SOURCE", "EFFECT", "AGE", "NAME", "COMMENT")
		for _, ap := range d.Approvals {
			comment, _, _ := strings.Cut(ap.Comment, "\n")
			at.row("  "+string(ap.Approver), string(ap.Decision), string(ap.Source), ap.Effect, age(now, ap.Created), ap.Name, orNone(comment))
		}
		if err := at.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "Conditions:")
	if len(cr.Status.Conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		ct := newTable(w, "  TYPE", "STATUS", "REASON", "AGE", "MESSAGE")
		for _, c := range cr.Status.Conditions {
			ct.row("  "+c.Type, string(c.Status), c.Reason, age(now, c.LastTransitionTime), c.Message)
		}
		if err := ct.flush(); err != nil {
			return err
		}
	}
	if ap := cr.Status.Apply; ap != nil {
		fmt.Fprintf(w, "Apply:\n  %s", orNone(ap.Applier))
		if ap.HelmRevision > 0 {
			fmt.Fprintf(w, ", Helm revision %d", ap.HelmRevision)
		}
		if ap.Message != "" {
			fmt.Fprintf(w, ": %s", ap.Message)
		}
		fmt.Fprintln(w)
	}
	return printVerification(w, cr, now)
}

// printVerification writes the verification's progress and its
// measurements (the evidence: value, query, time), newest last.
func printVerification(w io.Writer, cr *sluicev1.ChangeRequest, now time.Time) error {
	v := cr.Status.Verification
	if v == nil {
		return nil
	}
	fmt.Fprintf(w, "Verification:\n  started %s ago", age(now, v.StartedAt))
	if v.FinishedAt != nil {
		fmt.Fprintf(w, ", finished %s ago", age(now, *v.FinishedAt))
	}
	if v.Message != "" {
		fmt.Fprintf(w, ": %s", v.Message)
	}
	fmt.Fprintln(w)
	if len(v.Measurements) == 0 {
		return nil
	}
	if v.MeasurementsDropped > 0 {
		fmt.Fprintf(w, "  (%d older measurements not kept)\n", v.MeasurementsDropped)
	}
	t := newTable(w, "  CHECK", "PHASE", "VALUE", "AGE", "QUERY", "MESSAGE")
	for _, m := range v.Measurements {
		t.row("  "+m.Check, string(m.Phase), orNone(m.Value), age(now, metav1.Time{Time: m.Time.Time}), m.Query, m.Message)
	}
	return t.flush()
}

// rollbackFields are describe's lines on rollbacks: what a rollback undoes
// and returns to, its revert pull request in git, and the quarantine entry that catches the change (the
// gate's line says how it was judged).
func rollbackFields(d *Description) [][2]string {
	var out [][2]string
	if rb := d.ChangeRequest.Spec.Rollback; rb != nil {
		out = append(out, [2]string{"Rollback", fmt.Sprintf("of %s (its verification failed), back to the verified %s", rb.Of, rb.To)})
		// The syncer's revert of the failed commit in git (or why none).
		if u := d.ChangeRequest.Annotations[sluicev1.AnnotationRevertPullRequest]; u != "" {
			out = append(out, [2]string{"Revert PR", u})
		} else if why := d.ChangeRequest.Annotations[sluicev1.AnnotationRevertDeclined]; why != "" {
			out = append(out, [2]string{"Revert PR", why})
		}
	}
	if q := d.Quarantined; q != nil {
		what := "approvalDigest"
		if q.ApprovalDigest != d.ChangeRequest.Spec.ApprovalDigest {
			what = "content " + string(q.ContentDigest)
		}
		out = append(out, [2]string{"Quarantined", fmt.Sprintf("yes: %s failed its verification with this %s; never auto-approved, needs at least 1 explicit approval", q.ChangeRequest, what)})
	}
	return out
}
