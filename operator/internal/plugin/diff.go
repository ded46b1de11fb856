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
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Colour modes of diff.
const (
	colorAuto   = "auto"
	colorAlways = "always"
	colorNever  = "never"
)

// Formats of diff.
const (
	diffText     = "text"
	diffMarkdown = "markdown"
)

func newDiffCommand(a *app) *cobra.Command {
	color, format := colorAuto, diffText
	cmd := &cobra.Command{
		Use:   "diff CHANGE",
		Short: "Show a change's Terraform plan and manifest diff against the last applied revision, as the pull request shows them",
		Long: `diff prints the review Sluice stored with the change: the Terraform plan
(sensitive and unknown values shown as such) and the rendered manifest as a
unified diff per object against the release's last applied revision, with
Secrets as keys only, and the approval state as it is now. --format markdown
prints the pull-request comment Sluice posts (or would post) for the change.

The review is the ConfigMap "<CHANGE>-review" the syncer stores beside every
ChangeRequest (admission lets nobody else write one); it holds what the pull
request shows, redacted like the findings. diff refuses a ConfigMap of that
name that is not labelled a review, that the ChangeRequest does not control,
or whose approval-digest annotation is not the change's approvalDigest. The sluice-viewer and
sluice-approver roles grant "get" on ConfigMaps for it.`,
		Example: `  kubectl sluice diff checkout-prod-1a2b3c4d5e -n team-a
  kubectl sluice diff checkout-prod-1a2b3c4d5e -n team-a --format markdown`,
		Args: exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch color {
			case colorAuto, colorAlways, colorNever:
			default:
				return fmt.Errorf("--color must be auto, always or never, not %q", color)
			}
			if format != diffText && format != diffMarkdown {
				return fmt.Errorf("--format must be text or markdown, not %q", format)
			}
			if err := a.connect(); err != nil {
				return err
			}
			cr, err := a.getChange(cmd, args[0])
			if err != nil {
				return err
			}
			cm := &corev1.ConfigMap{}
			err = a.client.Get(cmd.Context(), client.ObjectKey{Namespace: cr.Namespace, Name: review.ConfigMapName(cr.Name)}, cm)
			var s *review.Section
			stored := false
			switch {
			case err == nil:
				if err := checkReview(cm, cr); err != nil {
					return err
				}
				if s, stored, err = review.FromConfigMap(cm, cr); err != nil {
					return fmt.Errorf("change %s: %w", cr.Name, err)
				}
			case apierrors.IsNotFound(err):
			case apierrors.IsForbidden(err):
				return fmt.Errorf("read the review of %s: %w (the sluice-viewer and sluice-approver roles grant it)", cr.Name, err)
			default:
				return fmt.Errorf("read the review of %s: %w", cr.Name, err)
			}
			if stored {
				s = review.WithApproval(s, cr)
			} else {
				fmt.Fprintf(a.opts.ErrOut, "No review is stored for %s; showing what the ChangeRequest holds (no plan or manifest diff).\n", cr.Name)
				if s, err = review.Build(review.Input{Change: cr}); err != nil {
					return err
				}
			}
			if format == diffMarkdown {
				for i, body := range review.Markdown([]*review.Section{s}, review.LimitGitHub, 0) {
					if i > 0 {
						fmt.Fprintln(a.opts.Out)
					}
					fmt.Fprint(a.opts.Out, body)
				}
				return nil
			}
			return review.Text(a.opts.Out, s, color == colorAlways || (color == colorAuto && isTerminal(a.opts.Out)))
		},
	}
	cmd.Flags().StringVar(&color, "color", colorAuto, "Colour the output: auto (when a terminal), always or never.")
	cmd.Flags().StringVar(&format, "format", diffText, "text (the plan and diff for a terminal) or markdown (the pull-request comment).")
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

// UntrustedReviewError says why the ConfigMap named as a change's review
// is not shown: it is not the review Sluice stored for that change.
type UntrustedReviewError struct {
	Change, ConfigMap, Reason string
}

func (e *UntrustedReviewError) Error() string {
	return fmt.Sprintf("refusing to show %s as the review of %s: %s (only the gitops-syncer writes reviews; ask your platform team who wrote this one)", e.ConfigMap, e.Change, e.Reason)
}

// checkReview returns an *UntrustedReviewError unless cm is the review
// the syncer stored for cr: labelled as a review (admission lets only the
// syncer write those), controlled by cr, and stamped with cr's
// approvalDigest. Anyone who may write ConfigMaps in the control
// namespace could otherwise plant one with an owner reference to the
// change, and an approver would approve what it shows.
func checkReview(cm *corev1.ConfigMap, cr *sluicev1.ChangeRequest) error {
	bad := func(reason string) error {
		return &UntrustedReviewError{Change: cr.Name, ConfigMap: cm.Name, Reason: reason}
	}
	switch {
	case cm.Labels[review.LabelReview] != "true":
		return bad("it is not labelled " + review.LabelReview)
	case !metav1.IsControlledBy(cm, cr):
		return bad("the ChangeRequest does not control it")
	case cr.Spec.ApprovalDigest == "" || cm.Annotations[review.AnnotationApprovalDigest] != string(cr.Spec.ApprovalDigest):
		return bad(fmt.Sprintf("its approval digest %q is not the change's %q", cm.Annotations[review.AnnotationApprovalDigest], cr.Spec.ApprovalDigest))
	}
	return nil
}
