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

	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/kit/tracing"
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
	// PolicyBundleDigest is the digest of the policy bundle the syncer
	// validated the change with (its spec.policyBundleDigest); empty for a
	// change made before syncers recorded it.
	PolicyBundleDigest string `json:"policyBundleDigest"`
	// TerraformState is the state the apply left, as the change records
	// it (lineage, serial, resources digest).
	TerraformState *sluicev1.TerraformApplyResult `json:"terraformState,omitempty"`
	TraceID        string                         `json:"traceID,omitempty"`
	// Verification is the verification after apply of the change: its
	// outcome (phase), who settled it when it was inconclusive, and the
	// measurements kept as evidence; absent for a change without one.
	Verification *AttestedVerification `json:"verification,omitempty"`
}

// AttestedVerification is a change's verification as audit records it.
type AttestedVerification struct {
	Phase  string                       `json:"phase"`
	Spec   *sluicev1.VerificationSpec   `json:"spec,omitempty"`
	Status *sluicev1.VerificationStatus `json:"status,omitempty"`
}

// verificationOf is cr's verification for an attestation (nil for none).
func verificationOf(cr *sluicev1.ChangeRequest) *AttestedVerification {
	if cr.Spec.Verification == nil && cr.Status.Verification == nil {
		return nil
	}
	return &AttestedVerification{Phase: phaseOf(cr), Spec: cr.Spec.Verification, Status: cr.Status.Verification}
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
	run := &auditRun{a: a}
	out := make([]Attestation, 0, len(rels))
	for i := range rels {
		out = append(out, a.auditRelease(ctx, &rels[i], run))
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

// auditRun is one audit command's shared state: what the provers reuse
// across releases.
type auditRun struct {
	a    *app
	helm *drift.HelmChecker
}

// helmChecker compares live objects as the plugin's own user; it is made
// on first use.
func (r *auditRun) helmChecker() (*drift.HelmChecker, error) {
	if r.helm != nil {
		return r.helm, nil
	}
	cfg := r.a.restConfig
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("discover the API server's kinds: %w", err)
	}
	r.helm = &drift.HelmChecker{Config: cfg, Mapper: mapper, Direct: true}
	return r.helm, nil
}

// proof is what one prover found about one part of a release.
type proof struct {
	// Result is AuditProven, AuditDrifted or AuditUnknown.
	Result   string
	Evidence []string
}

func (p *proof) say(format string, args ...any) {
	p.Evidence = append(p.Evidence, fmt.Sprintf(format, args...))
}

// prover holds one part of what runs (the Terraform state, the delivered
// workload) to the release's applied change, from the API server alone.
// It is called only for a change that is Applied and approved.
type prover func(ctx context.Context, r *auditRun, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) proof

// deliveryProvers prove the workload of a change by its delivery; a
// delivery without one is unknown. Each delivery's file adds its own.
var deliveryProvers = map[sluicev1.Delivery]prover{
	sluicev1.DeliveryHelm:   proveHelm,
	sluicev1.DeliveryArgoCD: proveArgoCD,
}

// auditRelease proves one release or says why not.
func (a *app) auditRelease(ctx context.Context, rel *sluicev1.Release, run *auditRun) Attestation {
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
	at.PolicyBundleDigest = string(cr.Spec.PolicyBundleDigest)
	at.TraceID = tracing.TraceID(tracing.Extract(ctx, cr.Annotations[sluicev1.AnnotationTraceParent]))
	at.Verification = verificationOf(cr)
	if cr.Status.Apply != nil {
		at.HelmRevision = cr.Status.Apply.HelmRevision
		at.TerraformState = cr.Status.Apply.Terraform
		if cr.Status.Apply.FinishedAt != nil {
			at.AppliedAt = cr.Status.Apply.FinishedAt.UTC().Format(time.RFC3339)
		}
	}
	if cr.Status.ApprovedAt != nil {
		at.ApprovedAt = cr.Status.ApprovedAt.UTC().Format(time.RFC3339)
	}
	if !cr.Status.Phase.WasApplied() {
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

	// Each part of the release is held to the change: the Terraform
	// state when the change applied a plan, then the workload by its
	// delivery. Drifted wins over unknown, unknown over proven.
	var parts []proof
	// The applied change says what it applied, not the Release's spec,
	// which a later push may have rewritten.
	stack := cr.StackOf()
	hasPlan := stack != nil && cr.Spec.PlanDigest != ""
	switch {
	case hasPlan:
		parts = append(parts, proveTerraform(ctx, run, rel, cr, stack))
	case cr.Spec.PlanDigest != "":
		parts = append(parts, proof{Result: AuditUnknown, Evidence: []string{fmt.Sprintf("%s applied a Terraform plan but records no Terraform stack (spec.source), so its state cannot be found", cr.Name)}})
	}
	switch prove, ok := deliveryProvers[cr.Spec.Delivery.OrDefault()]; {
	case hasPlan && cr.Spec.ManifestDigest == "":
		// No manifests were approved with the change: the drift
		// controller skips the workload of such a change as well.
		parts = append(parts, proof{Result: AuditProven, Evidence: []string{"the change approved no manifests, only the Terraform plan"}})
	case ok:
		parts = append(parts, prove(ctx, run, rel, cr))
	default:
		parts = append(parts, proof{Result: AuditUnknown, Evidence: []string{fmt.Sprintf("delivery %s is not checked live by audit", cr.Spec.Delivery)}})
	}
	at.Result = AuditProven
	for _, p := range parts {
		at.Evidence = append(at.Evidence, p.Evidence...)
		switch {
		case p.Result == AuditDrifted:
			at.Result = AuditDrifted
		case p.Result != AuditProven && at.Result == AuditProven:
			at.Result = AuditUnknown
		}
	}
	return at
}

// proveHelm holds the live Helm release to the change: its record hashes
// to manifestDigest and every object it installed matches (the drift
// controller's Helm check, as the plugin's user).
func proveHelm(ctx context.Context, r *auditRun, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) proof {
	p := proof{Result: AuditUnknown}
	checker, err := r.helmChecker()
	if err != nil {
		p.say("the live Helm release cannot be compared: %v", err)
		return p
	}
	repo := &sluicev1.Repository{}
	_ = r.a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo)
	rep, err := checker.Check(ctx, rel, repo, cr)
	switch {
	case err != nil:
		p.say("the live Helm release cannot be compared: %v", err)
		return p
	case rep.Drifted():
		p.Result = AuditDrifted
		p.say("%s", drift.Summary(cr.Name, rep.Objects))
		return p
	}
	var rev int32
	if cr.Status.Apply != nil {
		rev = cr.Status.Apply.HelmRevision
	}
	p.Result = AuditProven
	p.say("Helm revision %d hashes to manifestDigest and its %d objects match the live ones", rev, rep.Checked)
	return p
}

// proveTerraform holds the release's Terraform state, as the API server
// stores it (the state Secret, read as the plugin's user), to the state
// the applied change's apply recorded (status.apply.terraform):
//
//   - the same lineage and serial and the same resources digest: proven,
//     the state is the one the apply left;
//   - another serial but the same resources digest: proven, the state was
//     written since but holds exactly what the apply left;
//   - the apply's serial but other resources (a state written by hand
//     with the serial kept), another lineage, other resources, or no
//     state at all: drifted;
//   - the drift controller's plan of this change found Terraform drift
//     (the real infrastructure differs even if the state does not):
//     drifted.
//
// A change applied before applies recorded their state is held to its
// approved plan's prior state only, which cannot prove it: unknown.
func proveTerraform(ctx context.Context, r *auditRun, rel *sluicev1.Release, cr *sluicev1.ChangeRequest, stack *sluicev1.TerraformSource) proof {
	p := proof{Result: AuditUnknown}
	ws := stack.Workspace
	if ws == "" {
		ws = "default"
	}
	name := tfapplier.StateSecretName(ws, rel.Name)
	st := &corev1.Secret{}
	if err := r.a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: name}, st); err != nil {
		if apierrors.IsNotFound(err) {
			p.Result = AuditDrifted
			p.say("the Terraform state Secret %s is gone", name)
			return p
		}
		p.say("the Terraform state Secret %s cannot be read: %v", name, err)
		return p
	}
	cur, err := tfapplier.StoredState(st.Data["tfstate"])
	if err != nil {
		p.say("the Terraform state in %s cannot be read: %v", name, err)
		return p
	}
	p.say("Terraform state lineage %s serial %d, resources %s (%d)", cur.Lineage, cur.Serial, cur.ResourcesDigest, cur.Resources)
	if tfDrift := terraformDriftOf(rel, cr); len(tfDrift) > 0 {
		p.Result = AuditDrifted
		p.say("the drift controller's plan of %s: %s", cr.Name, drift.Summary(cr.Name, tfDrift))
		return p
	}
	var rec *sluicev1.TerraformApplyResult
	if cr.Status.Apply != nil {
		rec = cr.Status.Apply.Terraform
	}
	if rec == nil {
		return provePriorState(ctx, r, rel, cr, cur, p)
	}
	sameSerial := cur.Serial == uint64(max(rec.Serial, 0))
	sameResources := cur.ResourcesDigest == string(rec.ResourcesDigest)
	switch {
	case cur.Lineage != rec.Lineage:
		p.Result = AuditDrifted
		p.say("the apply left lineage %s: the state was replaced", rec.Lineage)
	case sameSerial && sameResources:
		p.Result = AuditProven
		p.say("the state is the one the apply of %s left (serial %d, same resources)", cr.Name, rec.Serial)
	case sameResources:
		p.Result = AuditProven
		p.say("the state was written after the apply of %s (serial %d), but holds exactly the resources it left", cr.Name, rec.Serial)
	case sameSerial:
		p.Result = AuditDrifted
		p.say("the state has the serial the apply of %s left (%d) but other resources than its %s: it was rewritten behind Sluice's back", cr.Name, rec.Serial, rec.ResourcesDigest)
	default:
		p.Result = AuditDrifted
		p.say("the state was written after the apply of %s (serial %d) and its resources differ from the %s it left", cr.Name, rec.Serial, rec.ResourcesDigest)
	}
	return p
}

// terraformDriftOf is the Terraform part of the drift the drift
// controller last found against cr.
func terraformDriftOf(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) []sluicev1.DriftedObject {
	d := rel.Status.Drift
	if d == nil || d.Change != cr.Name {
		return nil
	}
	var out []sluicev1.DriftedObject
	for _, o := range d.Objects {
		if o.Kind == drift.TerraformKind {
			out = append(out, o)
		}
	}
	return out
}

// provePriorState holds the state of a change whose apply recorded none
// to the prior state its approved plan file was made against: a replaced
// lineage or an older serial is drift; anything else is unknown, since a
// later write cannot be told from the apply's own.
func provePriorState(ctx context.Context, r *auditRun, rel *sluicev1.Release, cr *sluicev1.ChangeRequest, cur tf.StateRecord, p proof) proof {
	var plan []byte
	for i := 0; ; i++ {
		s := &corev1.Secret{}
		if err := r.a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: sluicev1.PlanSecretName(cr.Name, i)}, s); err != nil {
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
			p.Result = AuditDrifted
			p.say("the approved plan was made against lineage %s: the state was replaced", prior.Lineage)
			return p
		case cur.Serial < prior.Serial:
			p.Result = AuditDrifted
			p.say("the approved plan was made against serial %d: the state was rolled back", prior.Serial)
			return p
		}
		p.say("the approved plan was made against serial %d of this lineage", prior.Serial)
	} else {
		p.say("the approved plan file of %s cannot be read, so its prior state is not compared", cr.Name)
	}
	if c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted); c != nil && c.Status == metav1.ConditionFalse {
		p.say("the drift controller's last plan found no change (%s)", c.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	p.say("the apply of %s recorded no state, so later writes to the state cannot be excluded", cr.Name)
	return p
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
		if o.Name == cr.Name || o.Spec.Release != cr.Spec.Release || o.Spec.ApprovalDigest != cr.Spec.ApprovalDigest || !o.Status.Phase.WasApplied() {
			continue
		}
		if od := judge(o); od.Passed {
			od.Message = fmt.Sprintf("re-applies %s, which passed: %s", o.Name, od.Message)
			return od, via, nil
		}
	}
	return d, via, nil
}
