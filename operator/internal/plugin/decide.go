package plugin

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Dry-run modes, as kubectl's --dry-run.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

// maxComment is the Approval API's limit on comments.
const maxComment = 1024

type decideOptions struct {
	comment string
	dryRun  string
	output  string
}

var decideHelp = map[sluicev1.Decision]struct{ short, long string }{
	sluicev1.DecisionApprove: {
		"Approve a change in your own Kubernetes name",
		"counts towards the change's required approvals when the effective\nrule allows you",
	},
	sluicev1.DecisionReject: {
		"Reject (veto) a change in your own Kubernetes name",
		"vetoes the change while it stands, when the effective rule allows\nyou or you are an author",
	},
	sluicev1.DecisionRevoke: {
		"Withdraw your earlier approve or reject of a change",
		"replaces your earlier decision on the change: the newest decision\nof an approver stands",
	},
}

// decideScope says which changes a decision applies to (docs/design.md
// §4 "Approvals").
var decideScope = map[sluicev1.Decision]string{
	sluicev1.DecisionApprove: `It counts for this change only (for a pull request's preview, also for
the change of the tracked branch that merges the pull request with
identical content), never for a later change that brings the same
content back: that is a new change to approve.`,
	sluicev1.DecisionReject: `It vetoes the content (the release and approvalDigest): every change
of the release with identical content, now or pushed again later, until
you revoke it. Vetoes are kept as long as the content can come back.`,
	sluicev1.DecisionRevoke: `It withdraws your decisions on the change's content (the release and
approvalDigest): your approve of this change and your veto of the content.`,
}

func newDecideCommand(a *app, decision sluicev1.Decision) *cobra.Command {
	o := &decideOptions{}
	help := decideHelp[decision]
	cmd := &cobra.Command{
		Use:   string(decision) + " CHANGE",
		Short: help.short,
		Long: fmt.Sprintf(`%s.

Creates an Approval with decision %q for the change's approvalDigest and
release, as you: the approver is "k8s:" + your user name and the groups are
your groups, both as the API server reports them (a SelfSubjectReview).

The decision %s.

%s`, help.short, decision, help.long, decideScope[decision]),
		Example: fmt.Sprintf(`  kubectl sluice %[1]s checkout-prod-1a2b3c4d5e --comment "looks right"
  kubectl sluice %[1]s checkout-prod-1a2b3c4d5e --dry-run -o yaml`, decision),
		Args: exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputTable, outputJSON, outputYAML, outputName); err != nil {
				return err
			}
			switch o.dryRun {
			case dryRunNone, dryRunClient, dryRunServer:
			default:
				return fmt.Errorf("invalid --dry-run %q: use none, client or server", o.dryRun)
			}
			if len(o.comment) > maxComment {
				return fmt.Errorf("--comment is %d characters long; at most %d fit in an Approval", len(o.comment), maxComment)
			}
			if err := a.connect(); err != nil {
				return err
			}
			return a.decide(cmd, decision, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.comment, "comment", "", "A comment recorded with the decision.")
	cmd.Flags().StringVar(&o.dryRun, "dry-run", dryRunNone, `"client" prints the Approval without sending it; "server" has the API server check it (admission included) without storing it.`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = dryRunClient
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json, yaml or name (default: a summary line; YAML with --dry-run).")
	return cmd
}

// decide records the current user's decision on a change.
func (a *app) decide(cmd *cobra.Command, decision sluicev1.Decision, name string, o *decideOptions) error {
	ctx := cmd.Context()
	cr, err := a.getChange(cmd, name)
	if err != nil {
		return err
	}
	phase := sluicev1.ChangeRequestPhase(phaseOf(cr))
	// A preview's approvals carry over to the change of the tracked branch
	// that merges its pull request with identical content, so deciding on
	// a preview is meaningful.
	if phase.IsTerminal() && phase != sluicev1.PhasePreview {
		return fmt.Errorf("change %s is %s: a decision can no longer change it", name, phase)
	}
	if cr.Spec.ApprovalDigest == "" || !sluicev1.ValidDigest(string(cr.Spec.ApprovalDigest)) {
		return fmt.Errorf("change %s has no valid approvalDigest; it cannot be decided on", name)
	}

	review := &authenticationv1.SelfSubjectReview{}
	if err := a.client.Create(ctx, review); err != nil {
		return fmt.Errorf("ask the API server who you are (SelfSubjectReview): %w", err)
	}
	user := review.Status.UserInfo
	if user.Username == "" {
		return fmt.Errorf("the API server did not say who you are (empty user name in the SelfSubjectReview)")
	}

	ap := &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: approvalPrefix(cr.Name, decision),
			Namespace:    cr.Namespace,
			Labels:       map[string]string{sluicev1.LabelRelease: cr.Spec.Release},
		},
		Spec: sluicev1.ApprovalSpec{
			Release: cr.Spec.Release,
			// The decision is on this change: an approve counts for it (or
			// for the merge of this preview's pull request) and no other.
			ChangeRequest:  cr.Name,
			ApprovalDigest: cr.Spec.ApprovalDigest,
			Decision:       decision,
			Approver:       sluicev1.Identity("k8s:" + user.Username),
			Groups:         user.Groups,
			Source:         sluicev1.SourceKubernetes,
			Comment:        o.comment,
		},
	}

	// The Approval goes to the shard serving its change (admission refuses
	// any other key).
	sluicev1.SetShard(ap, sluicev1.ShardOf(cr))

	out := a.opts.Out
	if o.dryRun == dryRunClient {
		format := o.output
		if format == outputTable || format == outputName {
			format = outputYAML
		}
		return printObject(out, ap, format)
	}
	var opts []client.CreateOption
	if o.dryRun == dryRunServer {
		opts = append(opts, client.DryRunAll)
	}
	if err := a.client.Create(ctx, ap, opts...); err != nil {
		return fmt.Errorf("record your %s of change %s: %w", decision, name, err)
	}
	switch o.output {
	case outputJSON, outputYAML:
		return printObject(out, ap, o.output)
	case outputName:
		fmt.Fprintf(out, "approval.gitops.sluice.dev/%s\n", ap.Name)
		return nil
	}
	suffix := ""
	if o.dryRun == dryRunServer {
		suffix = " (server dry run)"
	}
	fmt.Fprintf(out, "approval.gitops.sluice.dev/%s created%s: %s %s change %s (%s)\n",
		ap.Name, suffix, ap.Spec.Approver, pastTense(decision), name, cr.Spec.ApprovalDigest)
	if o.dryRun == dryRunNone {
		a.noteIfIgnored(cmd, name, ap)
	}
	return nil
}

// noteIfIgnored tells the user, on the error stream, when the gate does not
// count the decision just recorded (an author under a rule that excludes
// authors, or someone the effective rule does not allow). It is advice
// only: when the gate cannot be evaluated (no rights to read the policies,
// say) it says nothing.
func (a *app) noteIfIgnored(cmd *cobra.Command, name string, ap *sluicev1.Approval) {
	d, err := a.describe(cmd, name)
	if err != nil {
		return
	}
	for _, s := range d.Approvals {
		if s.Name != ap.Name {
			continue
		}
		switch s.Effect {
		case "author":
			fmt.Fprintf(a.opts.ErrOut, "note: your %s does not count: you are an author of change %s and the effective rule excludes authors\n", ap.Spec.Decision, name)
		case "not-allowed":
			fmt.Fprintf(a.opts.ErrOut, "note: your %s does not count: the effective rule (%s) does not allow %s\n", ap.Spec.Decision, d.EffectiveRuleText, ap.Spec.Approver)
		}
	}
}

// approvalPrefix is the generateName of a decision's Approval:
// "<change>-<decision>-", cut so the generated name stays a DNS label.
func approvalPrefix(change string, decision sluicev1.Decision) string {
	suffix := "-" + string(decision) + "-"
	// generateName appends 5 characters; keep the whole name within 63.
	if max := 63 - 5 - len(suffix); len(change) > max {
		change = strings.TrimRight(change[:max], "-.")
	}
	return change + suffix
}

func pastTense(d sluicev1.Decision) string {
	switch d {
	case sluicev1.DecisionApprove:
		return "approved"
	case sluicev1.DecisionReject:
		return "rejected"
	case sluicev1.DecisionVerifyPass:
		return "settled as passed the verification of"
	case sluicev1.DecisionVerifyFail:
		return "settled as failed the verification of"
	case sluicev1.DecisionRevoke:
		return "revoked a decision on"
	}
	return string(d)
}
