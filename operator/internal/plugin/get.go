package plugin

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// resourceName is how kubectl names the ChangeRequest resource in output.
const resourceName = "changerequest.gitops.sluice.dev"

type getOptions struct {
	allNamespaces bool
	selector      string
	output        string
}

func newGetCommand(a *app) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get [CHANGE...]",
		Short: "List changes with their release, phase, risk, approvals and age",
		Example: `  kubectl sluice get
  kubectl sluice get -A -l gitops.sluice.dev/release=checkout-prod
  kubectl sluice get checkout-prod-1a2b3c4d5e -o yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputTable, outputWide, outputJSON, outputYAML, outputName); err != nil {
				return err
			}
			if o.allNamespaces && len(args) > 0 {
				return fmt.Errorf("a CHANGE name cannot be combined with --all-namespaces")
			}
			if o.selector != "" && len(args) > 0 {
				return fmt.Errorf("a CHANGE name cannot be combined with --selector")
			}
			if err := a.connect(); err != nil {
				return err
			}
			return a.get(cmd, o, args)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List changes in every namespace.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "Label selector to filter on, e.g. gitops.sluice.dev/release=checkout-prod.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json, yaml or name (default: a table).")
	return cmd
}

func (a *app) get(cmd *cobra.Command, o *getOptions, names []string) error {
	ctx := cmd.Context()
	list := &sluicev1.ChangeRequestList{}
	if len(names) > 0 {
		for _, name := range names {
			cr, err := a.getChange(cmd, name)
			if err != nil {
				return err
			}
			list.Items = append(list.Items, *cr)
		}
	} else {
		var opts []client.ListOption
		if !o.allNamespaces {
			opts = append(opts, client.InNamespace(a.namespace))
		}
		if o.selector != "" {
			sel, err := labels.Parse(o.selector)
			if err != nil {
				return fmt.Errorf("invalid --selector %q: %w", o.selector, err)
			}
			opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
		}
		if err := a.client.List(ctx, list, opts...); err != nil {
			return fmt.Errorf("list changes: %w", err)
		}
	}

	out := a.opts.Out
	switch o.output {
	case outputJSON, outputYAML:
		if len(names) == 1 {
			return printObject(out, &list.Items[0], o.output)
		}
		return printObject(out, list, o.output)
	case outputName:
		for _, cr := range list.Items {
			fmt.Fprintf(out, "%s/%s\n", resourceName, cr.Name)
		}
		return nil
	}
	if len(list.Items) == 0 {
		if o.allNamespaces {
			fmt.Fprintln(a.opts.ErrOut, "No changes found.")
		} else {
			fmt.Fprintf(a.opts.ErrOut, "No changes found in %s namespace.\n", a.namespace)
		}
		return nil
	}
	// SHARD (the change's shard key, "-" for none) shows when a listed
	// change has one, and always with -o wide: an unsharded install keeps
	// its columns.
	sharded := o.output == outputWide
	for i := range list.Items {
		sharded = sharded || sluicev1.ShardOf(&list.Items[i]) != ""
	}
	headers := []string{"NAME", "RELEASE", "OPERATION", "PHASE", "RISK", "APPROVALS"}
	if sharded {
		headers = append(headers, "SHARD")
	}
	headers = append(headers, "AGE")
	if o.output == outputWide {
		headers = append(headers, "VERDICT", "REVISION", "DELIVERY", "DIGEST")
	}
	if o.allNamespaces {
		headers = append([]string{"NAMESPACE"}, headers...)
	}
	t := newTable(out, headers...)
	now := a.opts.Now()
	for i := range list.Items {
		cr := &list.Items[i]
		row := []string{cr.Name, cr.Spec.Release, string(cr.OperationOf()), phaseOf(cr), orNone(string(cr.Spec.Verdict.Risk)), approvalsColumn(cr)}
		if sharded {
			row = append(row, orNone(sluicev1.ShardOf(cr)))
		}
		row = append(row, age(now, cr.CreationTimestamp))
		if o.output == outputWide {
			row = append(row, orNone(string(cr.Spec.Verdict.Result)), sluicev1.ShortSHA(cr.Spec.Revision), orNone(string(cr.Spec.Delivery)), string(cr.Spec.ApprovalDigest))
		}
		if o.allNamespaces {
			row = append([]string{cr.Namespace}, row...)
		}
		t.row(row...)
	}
	return t.flush()
}

// getChange reads one ChangeRequest in the current namespace, with a clear
// error when it does not exist.
func (a *app) getChange(cmd *cobra.Command, name string) (*sluicev1.ChangeRequest, error) {
	cr := &sluicev1.ChangeRequest{}
	err := a.client.Get(cmd.Context(), client.ObjectKey{Namespace: a.namespace, Name: name}, cr)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("change %q not found in namespace %q (list them with: kubectl sluice get -n %s)", name, a.namespace, a.namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("get change %s/%s: %w", a.namespace, name, err)
	}
	return cr, nil
}

// phaseOf is the change's phase; a change the operator has not looked at
// yet is Pending.
func phaseOf(cr *sluicev1.ChangeRequest) string {
	if cr.Status.Phase == "" {
		return string(sluicev1.PhasePending)
	}
	return string(cr.Status.Phase)
}

// approvalsColumn is "<counted>/<required>", with "-" for a requirement the
// operator has not worked out yet.
func approvalsColumn(cr *sluicev1.ChangeRequest) string {
	required := "-"
	if cr.Status.EffectiveRule != nil {
		required = strconv.Itoa(int(cr.Status.EffectiveRule.Required))
	}
	return strconv.Itoa(int(cr.Status.Approvals)) + "/" + required
}
