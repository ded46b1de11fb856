package plugin

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// Colour modes of diff.
const (
	colorAuto   = "auto"
	colorAlways = "always"
	colorNever  = "never"
)

func newDiffCommand(a *app) *cobra.Command {
	color := colorAuto
	cmd := &cobra.Command{
		Use:   "diff CHANGE",
		Short: "Show a change's Terraform plan and manifest diff against the last applied revision, as the pull request shows them",
		Long: `diff prints the review Sluice stored with the change: the Terraform plan
(sensitive and unknown values shown as such) and the rendered manifest as a
unified diff per object against the release's last applied revision, with
Secrets as keys only. It needs "get" on the change's "<CHANGE>-review" Secret.
Changes stored without a review (changes of the tracked branch, for now)
show what the ChangeRequest holds.`,
		Example: `  kubectl sluice diff checkout-prod-pr7-1a2b3c4d5e -n team-a`,
		Args:    exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch color {
			case colorAuto, colorAlways, colorNever:
			default:
				return fmt.Errorf("--color must be auto, always or never, not %q", color)
			}
			if err := a.connect(); err != nil {
				return err
			}
			cr, err := a.getChange(cmd, args[0])
			if err != nil {
				return err
			}
			sec := &corev1.Secret{}
			err = a.client.Get(cmd.Context(), client.ObjectKey{Namespace: cr.Namespace, Name: review.SecretName(cr.Name)}, sec)
			var s *review.Section
			switch {
			case err == nil && metav1.IsControlledBy(sec, cr):
				if s, err = review.Decode(sec.Data[review.SecretKey]); err != nil {
					return fmt.Errorf("change %s: %w", cr.Name, err)
				}
			case err == nil || apierrors.IsNotFound(err):
				fmt.Fprintf(a.opts.ErrOut, "No review is stored for %s; showing what the ChangeRequest holds (no plan or manifest diff).\n", cr.Name)
				if s, err = review.Build(review.Input{Change: cr}); err != nil {
					return err
				}
			default:
				return fmt.Errorf("read the review of %s: %w", cr.Name, err)
			}
			return review.Text(a.opts.Out, s, color == colorAlways || (color == colorAuto && isTerminal(a.opts.Out)))
		},
	}
	cmd.Flags().StringVar(&color, "color", colorAuto, "Colour the output: auto (when a terminal), always or never.")
	return cmd
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
