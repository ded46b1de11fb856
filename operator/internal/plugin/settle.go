package plugin

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// newVerifyCommand is `kubectl sluice verify`, whose one verb settles an
// inconclusive verification.
func newVerifyCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Act on a change's verification after apply",
	}
	cmd.AddCommand(newSettleCommand(a))
	return cmd
}

type settleOptions struct {
	pass, fail bool
	reason     string
	output     string
}

func newSettleCommand(a *app) *cobra.Command {
	o := &settleOptions{}
	cmd := &cobra.Command{
		Use:   "settle CHANGE (--pass | --fail) --reason TEXT",
		Short: "End an inconclusive verification as passed or failed, in your own Kubernetes name",
		Long: `End a verification that stopped as inconclusive (a measurement met neither
condition, or had no data under noData: inconclusive): --pass makes the change
Verified, --fail makes it VerificationFailed.

Creates an Approval with decision verify-pass or verify-fail on the change, as
you (the approver is "k8s:" + your user name, the groups yours, as admission
checks). It counts only when the effective approval rule of the change allows
you to approve it; an author may fail their own change, and pass it only where
the rule lets authors approve. The operator records who settled it and why
(status.verification.settled). The Approval is never a decision on the change
itself: the gate does not count it.`,
		Example: `  kubectl sluice verify settle checkout-prod-1a2b3c4d5e --pass --reason "no traffic at night; dashboards fine"
  kubectl sluice verify settle checkout-prod-1a2b3c4d5e --fail --reason "latency doubled"`,
		Args: exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.pass == o.fail {
				return errors.New("give exactly one of --pass or --fail")
			}
			if o.reason == "" {
				return errors.New("--reason is required: why the verification passed or failed is recorded with it")
			}
			if len(o.reason) > maxComment {
				return fmt.Errorf("--reason is %d characters long; at most %d fit in an Approval", len(o.reason), maxComment)
			}
			if err := checkOutput(o.output, outputTable, outputJSON, outputYAML, outputName); err != nil {
				return err
			}
			if err := a.connect(); err != nil {
				return err
			}
			cr, err := a.getChange(cmd, args[0])
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionVerified)
			if cr.Status.Phase != sluicev1.PhaseVerifying || c == nil || c.Reason != sluicev1.ReasonInconclusive {
				return fmt.Errorf("change %s is %s, not waiting for a person to settle an inconclusive verification", cr.Name, phaseOf(cr))
			}
			decision := sluicev1.DecisionVerifyFail
			if o.pass {
				decision = sluicev1.DecisionVerifyPass
			}
			return a.decide(cmd, decision, cr.Name, &decideOptions{comment: o.reason, dryRun: dryRunNone, output: o.output})
		},
	}
	cmd.Flags().BoolVar(&o.pass, "pass", false, "Settle it as passed: Verified.")
	cmd.Flags().BoolVar(&o.fail, "fail", false, "Settle it as failed: VerificationFailed.")
	cmd.Flags().StringVar(&o.reason, "reason", "", "Why (recorded on the change).")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json, yaml or name (default: a summary line).")
	return cmd
}
