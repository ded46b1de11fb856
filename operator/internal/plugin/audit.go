package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/sluice-gitops/sluice/operator/api/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	tfapplier "github.com/sluice-gitops/sluice/operator/internal/applier/terraform"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
)

// Audit results, from best to worst.
const (
	AuditProven     = "proven"
	AuditDrifted    = "drifted"
	AuditUnapproved = "unapproved"
	AuditUnknown    = "unknown"
)

// Attestation is what `kubectl sluice audit -o json` prints per release: a
// record a compliance tool can store.
type Attestation struct {
	Release   string   `json:"release"`
	Namespace string   `json:"namespace"`
	Result    string   `json:"result"`
	Evidence  []string `json:"evidence"`
	// Change is the Applied ChangeRequest the live state was held to.
	Change    string `json:"change,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Operation string `json:"operation,omitempty"`
	Digests   struct {
		Approval string `json:"approval,omitempty"`
		Content  string `json:"content,omitempty"`
		Manifest string `json:"manifest,omitempty"`
		Plan     string `json:"plan,omitempty"`
		PlanFile string `json:"planFile,omitempty"`
		Artifact string `json:"artifact,omitempty"`
	} `json:"digests"`
	HelmRevision int32              `json:"helmRevision,omitempty"`
	Approvers    []AttestedApprover `json:"approvers"`
	// Rule is the effective rule the gate recorded for the change.
	Rule       *sluicev1.ApprovalRule `json:"rule,omitempty"`
	GateReason string                 `json:"gateReason,omitempty"`
	ApprovedAt string                 `json:"approvedAt,omitempty"`
	AppliedAt  string                 `json:"appliedAt,omitempty"`
	// PolicyBundleDigest is empty: ChangeRequests do not record the digest
	// of the policy bundle the validator ran (yet).
	PolicyBundleDigest string `json:"policyBundleDigest"`
	TraceID            string `json:"traceID,omitempty"`
}

// AttestedApprover is one standing approval that counted.
type AttestedApprover struct {
	Identity string `json:"identity"`
	Source   string `json:"source"`
	Approval string `json:"approval"`
	At       string `json:"at"`
}

type auditOptions struct{ output string }

func newAuditCommand(a *app) *cobra.Command {
	o := &auditOptions{}
	cmd := &cobra.Command{
		Use:   "audit [RELEASE...]",
		Short: "Prove, per release, that what runs is what was approved",
		Long: `audit checks, for each Release (all of the namespace by default), from the
API server alone: its last applied ChangeRequest is Applied, its recorded
digests recompute, its Approvals bind to its approvalDigest and satisfy the
effective rule the gate recorded, and (Helm) the live release record hashes
to the approved manifestDigest and every object it installed still matches,
or (Argo CD) the release's Application is still pinned to the approved
commit and Argo CD reports it Synced and Healthy there.

One line per release: proven, drifted, unapproved or unknown, with the
evidence. The exit code is non-zero unless every release is proven.`,
		Example: `  kubectl sluice audit -n sluice-system
  kubectl sluice audit checkout-prod -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputTable, outputJSON); err != nil {
				return err
			}
			if err := a.connect(); err != nil {
				return err
			}
			return a.audit(cmd, o, args)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json (an attestation per release; default: one line per release).")
	return cmd
}

func (a *app) audit(cmd *cobra.Command, o *auditOptions, names []string) error {
	ctx := cmd.Context()
	var rels []sluicev1.Release
	if len(names) == 0 {
		var list sluicev1.ReleaseList
		if err := a.client.List(ctx, &list, client.InNamespace(a.namespace)); err != nil {
			return fmt.Errorf("list Releases in %s: %w", a.namespace, err)
		}
		rels = list.Items
	}
	for _, n := range names {
		rel := sluicev1.Release{}
		if err := a.client.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: n}, &rel); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("release %q not found in namespace %q", n, a.namespace)
			}
			return fmt.Errorf("get release %s/%s: %w", a.namespace, n, err)
		}
		rels = append(rels, rel)
	}
	checker, err := a.helmChecker()
	if err != nil {
		return err
	}
	out := make([]Attestation, 0, len(rels))
	for i := range rels {
		out = append(out, a.auditRelease(ctx, &rels[i], checker))
	}

	if o.output == outputJSON {
		enc := json.NewEncoder(a.opts.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.opts.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RELEASE\tRESULT\tCHANGE\tEVIDENCE")
		for _, at := range out {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", at.Release, at.Result, orNone(at.Change), strings.Join(at.Evidence, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	bad := 0
	for _, at := range out {
		if at.Result != AuditProven {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d release(s) not proven", bad, len(out))
	}
	return nil
}

// helmChecker compares live objects as the plugin's own user.
func (a *app) helmChecker() (*drift.HelmChecker, error) {
	cfg := a.restConfig
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("discover the API server's kinds: %w", err)
	}
	return &drift.HelmChecker{Config: cfg, Mapper: mapper, Direct: true}, nil
}

// auditRelease proves one release or says why not.
func (a *app) auditRelease(ctx context.Context, rel *sluicev1.Release, checker *drift.HelmChecker) Attestation {
	at := Attestation{Release: rel.Name, Namespace: rel.Namespace, Result: AuditUnknown, Approvers: []AttestedApprover{}}
	say := func(format string, args ...any) { at.Evidence = append(at.Evidence, fmt.Sprintf(format, args...)) }
	if rel.Status.AppliedChange == "" {
		say("nothing applied yet")
		return at
	}
	cr := &sluicev1.ChangeRequest{}
	if err := a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Status.AppliedChange}, cr); err != nil {
		say("the applied ChangeRequest %s cannot be read: %v", rel.Status.AppliedChange, err)
		return at
	}
	at.Change, at.Revision, at.Operation = cr.Name, cr.Spec.Revision, string(cr.Spec.Operation)
	at.Digests.Approval, at.Digests.Content = string(cr.Spec.ApprovalDigest), string(cr.Spec.ContentDigest)
	at.Digests.Manifest, at.Digests.Plan = string(cr.Spec.ManifestDigest), string(cr.Spec.PlanDigest)
	at.Digests.PlanFile, at.Digests.Artifact = string(cr.Spec.PlanFileSHA256), string(cr.Spec.Artifact.SHA256)
	at.Rule = cr.Status.EffectiveRule
	at.TraceID = tracing.TraceID(tracing.Extract(ctx, cr.Annotations[sluicev1.AnnotationTraceParent]))
	if cr.Status.Apply != nil {
		at.HelmRevision = cr.Status.Apply.HelmRevision
		if cr.Status.Apply.FinishedAt != nil {
			at.AppliedAt = cr.Status.Apply.FinishedAt.UTC().Format(time.RFC3339)
		}
	}
	if cr.Status.ApprovedAt != nil {
		at.ApprovedAt = cr.Status.ApprovedAt.UTC().Format(time.RFC3339)
	}
	if cr.Status.Phase != sluicev1.PhaseApplied {
		say("%s is %s, not Applied", cr.Name, phaseOf(cr))
		return at
	}
	if want := cr.ExpectedApprovalDigest(); cr.Spec.ApprovalDigest != want {
		at.Result = AuditUnapproved
		say("approvalDigest %s does not recompute (%s)", cr.Spec.ApprovalDigest, want)
		return at
	}
	say("approvalDigest recomputes")

	// The approvals, judged by the rule the gate recorded for the change.
	d, via, err := a.approvedBy(ctx, rel, cr)
	if err != nil {
		say("the approvals cannot be read: %v", err)
		return at
	}
	at.GateReason = d.Reason
	if !d.Passed {
		at.Result = AuditUnapproved
		say("the approvals do not satisfy the recorded rule: %s", d.Message)
		return at
	}
	for _, id := range d.ApprovedBy {
		at.Approvers = append(at.Approvers, via[id])
	}
	say("gate: %s (%s)", d.Reason, d.Message)

	result := AuditProven
	if rel.Spec.Terraform != nil && cr.Spec.PlanDigest != "" {
		tfResult, evidence := a.auditTerraform(ctx, rel, cr)
		at.Evidence = append(at.Evidence, evidence...)
		if tfResult == AuditDrifted {
			at.Result = AuditDrifted
			return at
		}
		result = tfResult
	}
	tfOnly := rel.Spec.Terraform != nil && cr.Spec.PlanDigest != "" && cr.Spec.ManifestDigest == ""
	switch {
	case tfOnly:
		// No manifests were approved with the change: the drift
		// controller skips the Helm part of such a change as well.
		say("the change approved no manifests, only the Terraform plan")
	case cr.Spec.Delivery == sluicev1.DeliveryHelm:
		repo := &sluicev1.Repository{}
		_ = a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo)
		rep, err := checker.Check(ctx, rel, repo, cr)
		switch {
		case err != nil:
			say("the live Helm release cannot be compared: %v", err)
			return at
		case rep.Drifted():
			at.Result = AuditDrifted
			say("%s", drift.Summary(cr.Name, rep.Objects))
			return at
		}
		say("Helm revision %d hashes to manifestDigest and its %d objects match the live ones", at.HelmRevision, rep.Checked)
	case cr.Spec.Delivery == sluicev1.DeliveryArgoCD:
		r, ev := a.auditArgoCD(ctx, rel, cr)
		at.Evidence = append(at.Evidence, ev...)
		if r != AuditProven {
			at.Result = r
			return at
		}
	default:
		result = AuditUnknown
		say("delivery %s is not checked live by audit", cr.Spec.Delivery)
	}
	at.Result = result
	return at
}

// auditTerraform holds the release's Terraform state, as the API server
// stores it, to the applied change: the state Secret must exist, carry
// the lineage of the state the approved plan file was made against, and
// not be older than it; a Drifted condition from the drift controller's
// plan of this change (see package drift) is drift. Proven it never is:
// the apply records no state serial, so a later write by another
// terraform run cannot be told from the apply's own by the serial alone.
func (a *app) auditTerraform(ctx context.Context, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) (string, []string) {
	var ev []string
	say := func(format string, args ...any) { ev = append(ev, fmt.Sprintf(format, args...)) }
	ws := rel.Spec.Terraform.Workspace
	if ws == "" {
		ws = "default"
	}
	name := tfapplier.StateSecretName(ws, rel.Name)
	st := &corev1.Secret{}
	if err := a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: name}, st); err != nil {
		if apierrors.IsNotFound(err) {
			say("the Terraform state Secret %s is gone", name)
			return AuditDrifted, ev
		}
		say("the Terraform state Secret %s cannot be read: %v", name, err)
		return AuditUnknown, ev
	}
	cur, ok := tfapplier.StoredStateVersion(st.Data["tfstate"])
	if !ok {
		say("the Terraform state in %s cannot be read", name)
		return AuditUnknown, ev
	}
	say("Terraform state lineage %s serial %d", cur.Lineage, cur.Serial)
	var plan []byte
	for i := 0; ; i++ {
		s := &corev1.Secret{}
		if err := a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: sluicev1.PlanSecretName(cr.Name, i)}, s); err != nil {
			if !apierrors.IsNotFound(err) || i == 0 {
				plan = nil
			}
			break
		}
		plan = append(plan, s.Data[sluicev1.PlanSecretKey]...)
	}
	if prior, ok := tfapplier.PlanPriorState(plan); ok {
		switch {
		case prior.Lineage != cur.Lineage:
			say("the approved plan was made against lineage %s: the state was replaced", prior.Lineage)
			return AuditDrifted, ev
		case cur.Serial < prior.Serial:
			say("the approved plan was made against serial %d: the state was rolled back", prior.Serial)
			return AuditDrifted, ev
		}
		say("the approved plan was made against serial %d of this lineage", prior.Serial)
	} else {
		say("the approved plan file of %s cannot be read, so its prior state is not compared", cr.Name)
	}
	if d := rel.Status.Drift; d != nil && d.Change == cr.Name {
		var tfObjs []sluicev1.DriftedObject
		for _, o := range d.Objects {
			if o.Kind == drift.TerraformKind {
				tfObjs = append(tfObjs, o)
			}
		}
		if len(tfObjs) > 0 {
			say("the drift controller's plan of %s: %s", cr.Name, drift.Summary(cr.Name, tfObjs))
			return AuditDrifted, ev
		}
	}
	if c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted); c != nil && c.Status == metav1.ConditionFalse {
		say("the drift controller's last plan found no change (%s)", c.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	say("the apply records no state serial, so later writes to the state cannot be excluded")
	return AuditUnknown, ev
}

// approvedBy evaluates the applied change's standing Approvals under the
// effective rule the gate recorded for it. A change that passed as a
// re-apply of its release's digest (ReappliesApproved) is proven by the
// Applied change of the same digest whose approvals satisfy its rule.
func (a *app) approvedBy(ctx context.Context, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) (gate.Decision, map[sluicev1.Identity]AttestedApprover, error) {
	var approvals sluicev1.ApprovalList
	if err := a.client.List(ctx, &approvals, client.InNamespace(rel.Namespace)); err != nil {
		return gate.Decision{}, nil, err
	}
	in, _, err := gateinput.LoadForDisplay(ctx, a.client, cr, rel)
	if err != nil {
		return gate.Decision{}, nil, err
	}
	via := map[sluicev1.Identity]AttestedApprover{}
	for _, ap := range approvals.Items {
		via[ap.Spec.Approver.Canonical()] = AttestedApprover{Identity: string(ap.Spec.Approver), Source: string(ap.Spec.Source), Approval: ap.Name, At: ap.CreationTimestamp.UTC().Format(time.RFC3339)}
	}
	judge := func(c *sluicev1.ChangeRequest) gate.Decision {
		rule, _ := gate.EffectiveRule(in, c)
		if c.Status.EffectiveRule != nil {
			rule = gate.Strictest(gate.Source{Origin: "ChangeRequest/" + c.Name + " status.effectiveRule", Rule: *c.Status.EffectiveRule})
		}
		return gate.EvaluateFor(c, rule, approvals.Items, in.People)
	}
	d := judge(cr)
	if d.Passed {
		return d, via, nil
	}
	var list sluicev1.ChangeRequestList
	if err := a.client.List(ctx, &list, client.InNamespace(rel.Namespace)); err != nil {
		return gate.Decision{}, nil, err
	}
	slices.SortFunc(list.Items, func(x, y sluicev1.ChangeRequest) int { return x.CreationTimestamp.Compare(y.CreationTimestamp.Time) })
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == cr.Name || o.Spec.Release != cr.Spec.Release || o.Spec.ApprovalDigest != cr.Spec.ApprovalDigest || o.Status.Phase != sluicev1.PhaseApplied {
			continue
		}
		if od := judge(o); od.Passed {
			od.Message = fmt.Sprintf("re-applies %s, which passed: %s", o.Name, od.Message)
			return od, via, nil
		}
	}
	return d, via, nil
}
