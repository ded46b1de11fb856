package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Conditions wait accepts.
const (
	waitApplied  = "applied"
	waitApproved = "approved"
)

// retryDelay is the pause before watching again after the watch ended
// without an answer.
const retryDelay = time.Second

type waitOptions struct {
	condition string
	timeout   time.Duration
}

func newWaitCommand(a *app) *cobra.Command {
	o := &waitOptions{}
	cmd := &cobra.Command{
		Use:   "wait CHANGE --for applied|approved",
		Short: "Wait until a change is applied or approved",
		Long: `Wait until a change is applied or approved.

--for approved is met once the change passed the gate (phase Approved,
Applying or Applied); --for applied once it is Applied. Wait fails at once when
the change reaches a terminal phase that can never meet the condition
(Rejected, Failed, Superseded, Preview), when it is deleted, or when the
timeout passes.`,
		Example: `  kubectl sluice wait checkout-prod-1a2b3c4d5e --for applied --timeout 10m`,
		Args:    exactlyOneChange,
		RunE: func(cmd *cobra.Command, args []string) error {
			cond := strings.ToLower(o.condition)
			if cond != waitApplied && cond != waitApproved {
				return fmt.Errorf("--for must be %q or %q, not %q", waitApplied, waitApproved, o.condition)
			}
			if err := a.connect(); err != nil {
				return err
			}
			return a.wait(cmd, args[0], cond, o.timeout)
		},
	}
	cmd.Flags().StringVar(&o.condition, "for", "", "The condition to wait for: applied or approved.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "How long to wait; 0 waits without limit.")
	return cmd
}

// errUnreachable says the change ended in a phase that never meets the
// condition.
var errUnreachable = errors.New("condition can never be met")

// met reports whether the change meets the condition, or errUnreachable
// (wrapped with a message) when it never will.
func met(cr *sluicev1.ChangeRequest, cond string) (bool, error) {
	phase := sluicev1.ChangeRequestPhase(phaseOf(cr))
	switch cond {
	case waitApplied:
		if phase.WasApplied() {
			return true, nil
		}
	case waitApproved:
		if phase == sluicev1.PhaseApproved || phase == sluicev1.PhaseApplying || phase.WasApplied() {
			return true, nil
		}
	}
	if phase.IsTerminal() {
		why := ""
		if c := apimeta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionReady); c != nil && c.Message != "" {
			why = ": " + c.Message
		}
		return false, fmt.Errorf("change %s ended %s%s; it will never be %s: %w", cr.Name, phase, why, cond, errUnreachable)
	}
	return false, nil
}

// wait watches the change until it meets the condition. The watch starts at
// the resourceVersion just read, so no update is missed between the read and
// the watch; a watch that ends early is started again from a fresh read.
func (a *app) wait(cmd *cobra.Command, name, cond string, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := "unknown"
	for {
		cr, err := a.getChange(cmd, name)
		if err != nil {
			if ctx.Err() != nil {
				return a.waitTimedOut(name, cond, timeout, last)
			}
			return err
		}
		last = phaseOf(cr)
		if done, err := met(cr, cond); done || err != nil {
			return a.waitResult(cr, cond, err)
		}
		w, err := a.client.Watch(ctx, &sluicev1.ChangeRequestList{},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: cr.ResourceVersion, AllowWatchBookmarks: true}},
			client.InNamespace(a.namespace), client.MatchingFields{"metadata.name": name})
		if err != nil {
			if ctx.Err() != nil {
				return a.waitTimedOut(name, cond, timeout, last)
			}
			return fmt.Errorf("watch change %s/%s: %w", a.namespace, name, err)
		}
		done, result := a.consume(ctx, w, cond, &last)
		w.Stop()
		if done {
			return result
		}
		if ctx.Err() != nil {
			return a.waitTimedOut(name, cond, timeout, last)
		}
		select {
		case <-ctx.Done():
			return a.waitTimedOut(name, cond, timeout, last)
		case <-time.After(retryDelay):
		}
	}
}

// consume reads watch events until the condition is decided (done) or the
// watch ends (not done: read again and watch again).
func (a *app) consume(ctx context.Context, w watch.Interface, cond string, last *string) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				cr, _ := ev.Object.(*sluicev1.ChangeRequest)
				name := ""
				if cr != nil {
					name = cr.Name
				}
				return true, fmt.Errorf("change %s was deleted while waiting for it to be %s", name, cond)
			case watch.Error:
				// Usually "too old resource version": read again.
				if status, ok := ev.Object.(*metav1.Status); ok && status.Code != 0 && status.Code != 410 {
					return true, fmt.Errorf("watch change: %w", apierrors.FromObject(status))
				}
				return false, nil
			case watch.Added, watch.Modified:
				cr, ok := ev.Object.(*sluicev1.ChangeRequest)
				if !ok {
					continue
				}
				*last = phaseOf(cr)
				if done, err := met(cr, cond); done || err != nil {
					return true, a.waitResult(cr, cond, err)
				}
			}
		}
	}
}

func (a *app) waitResult(cr *sluicev1.ChangeRequest, cond string, err error) error {
	if err != nil {
		return err
	}
	fmt.Fprintf(a.opts.Out, "%s/%s condition met: %s (phase %s)\n", resourceName, cr.Name, cond, phaseOf(cr))
	return nil
}

func (a *app) waitTimedOut(name, cond string, timeout time.Duration, last string) error {
	return fmt.Errorf("timed out after %s waiting for change %s to be %s (last phase %s)", timeout, name, cond, last)
}
