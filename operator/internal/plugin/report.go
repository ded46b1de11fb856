package plugin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/operator/internal/compliance"
)

type reportOptions struct {
	output string
	wide   bool
}

func newReportCommand(a *app) *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report [NAMESPACE]",
		Short: "Show the live compliance of target namespaces: each result with its object, policy and provenance",
		Long: `kubectl sluice report reads the openreports.io Reports the operator keeps
of the live objects of every target namespace: every object evaluated with
the same policy bundle the validator checks changes with.

Without NAMESPACE it lists every target namespace's summary. With one it
prints that namespace's results, errors first, then failures and warnings:
the object, the policy, whether Sluice applied the object and, when it did,
the Release, the ChangeRequest and who approved it. The summary counts every
result; a Report keeps at most its limit of them (OMITTED says how many it
left out).`,
		Example: `  kubectl sluice report
  kubectl sluice report checkout-prod
  kubectl sluice report checkout-prod -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputTable, outputWide, outputJSON, outputYAML); err != nil {
				return err
			}
			if err := a.connect(); err != nil {
				return err
			}
			if len(args) == 0 {
				return a.reportList(cmd, o)
			}
			return a.reportOne(cmd, o, args[0])
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json or yaml (default: a table).")
	return cmd
}

// reportList prints one row per namespace's Report.
func (a *app) reportList(cmd *cobra.Command, o *reportOptions) error {
	list := &openreports.ReportList{}
	err := a.client.List(cmd.Context(), list, client.MatchingLabels{compliance.LabelManagedBy: compliance.Source})
	if err != nil {
		return reportReadError(err, "list the compliance Reports of every namespace")
	}
	items := list.Items[:0]
	for _, r := range list.Items {
		if r.Name == compliance.ReportName {
			items = append(items, r)
		}
	}
	list.Items = items
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Namespace < list.Items[j].Namespace })
	if o.output == outputJSON || o.output == outputYAML {
		return printObject(a.opts.Out, list, o.output)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(a.opts.ErrOut, "No compliance Reports found: no Repository targets an existing namespace, the operator runs without --compliance, or its first pass has not ended.")
		return nil
	}
	headers := []string{"NAMESPACE", "PASS", "FAIL", "WARN", "ERROR", "OMITTED", "AGE"}
	if o.output == outputWide {
		headers = append(headers, "BUNDLE")
	}
	t := newTable(a.opts.Out, headers...)
	now := a.opts.Now()
	for i := range list.Items {
		r := &list.Items[i]
		row := []string{r.Namespace, strconv.Itoa(r.Summary.Pass), strconv.Itoa(r.Summary.Fail), strconv.Itoa(r.Summary.Warn), strconv.Itoa(r.Summary.Error),
			orZero(r.Annotations[compliance.AnnotationOmitted]), age(now, r.CreationTimestamp)}
		if o.output == outputWide {
			row = append(row, orNone(r.Annotations[compliance.AnnotationBundleDigest]))
		}
		t.row(row...)
	}
	return t.flush()
}

// reportOne prints a namespace's summary and results.
func (a *app) reportOne(cmd *cobra.Command, o *reportOptions, ns string) error {
	r := &openreports.Report{}
	err := a.client.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: compliance.ReportName}, r)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no compliance Report in namespace %q: it is not a target namespace of any Repository, or the operator runs without --compliance or has not finished its first pass (list the Reports with: kubectl sluice report)", ns)
	}
	if err != nil {
		return reportReadError(err, "read the compliance Report of namespace "+ns)
	}
	if o.output == outputJSON || o.output == outputYAML {
		return printObject(a.opts.Out, r, o.output)
	}
	out := a.opts.Out
	s := r.Summary
	fmt.Fprintf(out, "Namespace:  %s\n", ns)
	fmt.Fprintf(out, "Summary:    %d pass, %d fail, %d warn, %d error\n", s.Pass, s.Fail, s.Warn, s.Error)
	fmt.Fprintf(out, "Bundle:     %s\n", orNone(r.Annotations[compliance.AnnotationBundleDigest]))
	if n := r.Annotations[compliance.AnnotationOmitted]; n != "" && n != "0" {
		fmt.Fprintf(out, "Omitted:    %s results beyond the Report's limit (the summary counts them)\n", n)
	}
	if len(r.Results) == 0 {
		fmt.Fprintln(out, "\nNo failures, warnings or errors.")
		return nil
	}
	fmt.Fprintln(out)
	headers := []string{"RESULT", "OBJECT", "POLICY", "MANAGED", "CHANGE", "APPROVERS", "MESSAGE"}
	if o.output == outputWide {
		headers = append(headers, "RELEASE")
	}
	t := newTable(out, headers...)
	for _, res := range r.Results {
		p := res.Properties
		managed := "no"
		if p[compliance.PropertyManaged] == "true" {
			managed = "yes"
		}
		// The OBJECT column names the object; the default policies' messages
		// start with it too.
		msg := oneLine(strings.TrimPrefix(res.Description, subjectID(res)+": "))
		if o.output != outputWide {
			msg = shorten(msg, 100)
		}
		row := []string{string(res.Result), subjectOf(res), policyOf(res), managed, orNone(p[compliance.PropertyChangeRequest]), orNone(p[compliance.PropertyApprovers]), msg}
		if o.output == outputWide {
			row = append(row, orNone(p[compliance.PropertyRelease]))
		}
		t.row(row...)
	}
	return t.flush()
}

// reportReadError says what to do when Reports cannot be read.
func reportReadError(err error, what string) error {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: the openreports.io Report kind is not installed (the Sluice chart installs it with compliance on): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func subjectOf(r openreports.ReportResult) string {
	if len(r.Subjects) == 0 {
		return "<namespace>"
	}
	s := r.Subjects[0]
	return s.Kind + "/" + s.Name
}

// subjectID names the result's object as the default policies do
// (Kind/namespace/name).
func subjectID(r openreports.ReportResult) string {
	if len(r.Subjects) == 0 {
		return ""
	}
	s := r.Subjects[0]
	if s.Namespace == "" {
		return s.Kind + "/" + s.Name
	}
	return s.Kind + "/" + s.Namespace + "/" + s.Name
}

func policyOf(r openreports.ReportResult) string {
	if r.Rule == "" {
		return r.Policy
	}
	return r.Policy + "/" + r.Rule
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// oneLine keeps a message on one table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
