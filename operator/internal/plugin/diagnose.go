package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
)

// The status of a diagnosis step.
const (
	// StepOK: nothing wrong at this step.
	StepOK = "ok"
	// StepWaiting: the step waits on a person or on another change.
	StepWaiting = "waiting"
	// StepFailing: the step failed or is stuck; someone must act.
	StepFailing = "failing"
	// StepNotReached: the change has not got this far.
	StepNotReached = "not reached"
	// StepUnknown: diagnose could not read what the step needs (RBAC).
	StepUnknown = "unknown"
)

// The diagnosis steps, in the order a change goes through them.
const (
	stepSource       = "source"
	stepValidation   = "validation"
	stepGate         = "gate"
	stepLock         = "lock"
	stepApply        = "apply"
	stepWorkload     = "workload"
	stepVerification = "verification"
)

// maxDiagnoseMessage bounds a kubelet's or a condition's message in the
// report (a registry's message can run long).
const maxDiagnoseMessage = 512

// maxOwnerLookups bounds the reads diagnose makes to find the owners of pods
// that do not carry the release's instance label.
const maxOwnerLookups = 20

// Helm's annotations on every object it installs.
const (
	helmReleaseName      = "meta.helm.sh/release-name"
	helmReleaseNamespace = "meta.helm.sh/release-namespace"
)

// Diagnosis is what diagnose found, also printed by -o json.
type Diagnosis struct {
	// Namespace is the control namespace.
	Namespace string `json:"namespace"`
	// Release is the Release diagnosed; ReleaseFound is false when it
	// does not exist (a change whose Release is gone).
	Release      string `json:"release"`
	ReleaseFound bool   `json:"releaseFound"`
	// Change is the ChangeRequest followed (the one named, or the
	// Release's change in flight, else its newest); "" when the Release
	// has none.
	Change string `json:"change,omitempty"`
	// Phase is the change's phase.
	Phase string `json:"phase,omitempty"`
	// First is the first failing step, else the first waiting one; nil
	// when every step is ok or not reached.
	First *DiagnosisStep `json:"first,omitempty"`
	// Steps are source, validation, gate, lock, apply, workload and
	// verification, in that order.
	Steps []DiagnosisStep `json:"steps"`
	// WorkloadNamespace is where the pods were looked for.
	WorkloadNamespace string `json:"workloadNamespace,omitempty"`
	// Pods are the pods the release's objects own, by name.
	Pods []PodDiagnosis `json:"pods,omitempty"`
}

// DiagnosisStep is one step of the way from git to a running workload.
type DiagnosisStep struct {
	Name string `json:"name"`
	// Status is ok, waiting, failing, not reached or unknown.
	Status string `json:"status"`
	// Summary says in one line what was found.
	Summary string `json:"summary"`
	// Details are further lines (findings, stuck containers, evidence).
	Details []string `json:"details,omitempty"`
	// Todo says what to do when the step is failing or waiting.
	Todo string `json:"todo,omitempty"`
}

// PodDiagnosis is one pod of the release.
type PodDiagnosis struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
	// Owner is the pod's controller, "Kind/name".
	Owner string `json:"owner,omitempty"`
	Node  string `json:"node,omitempty"`
	// Unschedulable is the scheduler's message when it cannot place the
	// pod.
	Unschedulable string               `json:"unschedulable,omitempty"`
	Containers    []ContainerDiagnosis `json:"containers"`
	// Problems are what is stuck in the pod (podhealth).
	Problems []podhealth.Problem `json:"problems,omitempty"`
}

// ContainerDiagnosis is one container of a pod.
type ContainerDiagnosis struct {
	Name     string `json:"name"`
	Init     bool   `json:"init,omitempty"`
	Image    string `json:"image"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	// State is Running, Waiting or Terminated, with the kubelet's reason.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// LastTermination is the previous run's end: reason, exit code,
	// message.
	LastTermination string `json:"lastTermination,omitempty"`
}

func newDiagnoseCommand(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "diagnose RELEASE|CHANGE",
		Short: "Walk a release or change from git to its pods and say where it is stuck and what to do",
		Long: `diagnose follows one change through every step: source (the Repository's
last fetch), validation (verdict and findings), gate (who must still approve),
lock (who holds the release's apply lock), apply (the applier's outcome),
workload (every pod of the release: waiting reasons, restarts, last
termination, unschedulable pods, image pull errors with the image) and
verification. It prints the first failing step first, with what to do.

Given a Release, it follows the change holding the release's lock, else its
newest change. Reading pods needs read access to the target namespace
("view"); without it the workload step shows what the operator recorded on
the Release (its Degraded condition).`,
		Example: `  kubectl sluice diagnose checkout-prod -n team-a
  kubectl sluice diagnose checkout-prod-1a2b3c4d5e -n team-a -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("kubectl sluice diagnose needs exactly one RELEASE or CHANGE name, got %d; see --help", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			if err := a.connect(); err != nil {
				return err
			}
			d, err := a.diagnose(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if output != outputTable {
				return printData(a.opts.Out, d, output)
			}
			return a.printDiagnosis(a.opts.Out, d)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml (default: text).")
	return cmd
}

// diagnosis is what one run of diagnose read.
type diagnosis struct {
	rel *sluicev1.Release // nil when not found
	cr  *sluicev1.ChangeRequest
	// changes are the Release's ChangeRequests when they were listed.
	changes []sluicev1.ChangeRequest
}

// diagnose resolves name (a Release, else a ChangeRequest, in the current
// namespace) and walks every step.
func (a *app) diagnose(ctx context.Context, name string) (*Diagnosis, error) {
	s, err := a.resolveDiagnosis(ctx, name)
	if err != nil {
		return nil, err
	}
	d := &Diagnosis{Namespace: a.namespace, ReleaseFound: s.rel != nil}
	if s.rel != nil {
		d.Release = s.rel.Name
	} else {
		d.Release = s.cr.Spec.Release
	}
	if s.cr != nil {
		d.Change, d.Phase = s.cr.Name, phaseOf(s.cr)
	}
	steps := []func(context.Context, *diagnosis, *Diagnosis) DiagnosisStep{
		a.diagnoseSource, a.diagnoseValidation, a.diagnoseGate, a.diagnoseLock,
		a.diagnoseApply, a.diagnoseWorkload, a.diagnoseVerification,
	}
	for _, step := range steps {
		d.Steps = append(d.Steps, step(ctx, s, d))
	}
	for _, want := range []string{StepFailing, StepWaiting} {
		if i := slices.IndexFunc(d.Steps, func(st DiagnosisStep) bool { return st.Status == want }); i >= 0 {
			d.First = &d.Steps[i]
			break
		}
	}
	return d, nil
}

// resolveDiagnosis reads the Release named name and the change to follow,
// or else the ChangeRequest named name and its Release.
func (a *app) resolveDiagnosis(ctx context.Context, name string) (*diagnosis, error) {
	s := &diagnosis{}
	rel := &sluicev1.Release{}
	err := a.client.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: name}, rel)
	switch {
	case err == nil:
		s.rel = rel
		var list sluicev1.ChangeRequestList
		if err := a.client.List(ctx, &list, client.InNamespace(a.namespace), client.MatchingLabels{sluicev1.LabelRelease: name}); err != nil {
			return nil, fmt.Errorf("list the changes of release %s/%s: %w", a.namespace, name, err)
		}
		s.changes = list.Items
		s.cr = followedChange(rel, list.Items)
		return s, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get release %s/%s: %w", a.namespace, name, err)
	}
	cr := &sluicev1.ChangeRequest{}
	err = a.client.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: name}, cr)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("no release or change named %q in namespace %q (list changes with: kubectl sluice get -n %s; releases with: kubectl get releases -n %s)",
			name, a.namespace, a.namespace, a.namespace)
	case err != nil:
		return nil, fmt.Errorf("get change %s/%s: %w", a.namespace, name, err)
	}
	s.cr = cr
	err = a.client.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: cr.Spec.Release}, rel)
	switch {
	case err == nil:
		s.rel = rel
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get release %s/%s: %w", a.namespace, cr.Spec.Release, err)
	}
	return s, nil
}

// followedChange is the change of rel diagnose follows: the one holding
// the lock, else the newest that is not a preview; nil when there is none.
func followedChange(rel *sluicev1.Release, changes []sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	var newest *sluicev1.ChangeRequest
	for i := range changes {
		cr := &changes[i]
		if cr.Name == rel.Status.CurrentChange {
			return cr
		}
		if isPreview(cr) {
			continue
		}
		if newest == nil || cmp.Or(cr.CreationTimestamp.Compare(newest.CreationTimestamp.Time), strings.Compare(cr.Name, newest.Name)) > 0 {
			newest = cr
		}
	}
	return newest
}

func isPreview(cr *sluicev1.ChangeRequest) bool {
	return cr.Status.Phase == sluicev1.PhasePreview || (cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview)
}

// diagnoseSource reports the Release and its Repository: whether it
// exists, the last fetched commit, the fetch's error, and whether the
// syncer could plan the release at the newest commit (Synced).
func (a *app) diagnoseSource(ctx context.Context, s *diagnosis, d *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepSource}
	if s.rel == nil {
		st.Status = StepFailing
		st.Summary = fmt.Sprintf("Release %s does not exist (change %s names it)", d.Release, s.cr.Name)
		st.Todo = fmt.Sprintf("the syncer creates the Release from service.yaml: check that the service and environment are still in git and that its Repository syncs (kubectl get repositories -n %s); a change without its Release is never applied", d.Namespace)
		return st
	}
	repo := &sluicev1.Repository{}
	err := a.client.Get(ctx, client.ObjectKey{Namespace: s.rel.Namespace, Name: s.rel.Spec.Repository}, repo)
	switch {
	case apierrors.IsNotFound(err):
		st.Status = StepFailing
		st.Summary = fmt.Sprintf("Repository %s (named by Release %s) does not exist", s.rel.Spec.Repository, s.rel.Name)
		st.Todo = "create the Repository again, or delete the Release if the service is gone"
		return st
	case apierrors.IsForbidden(err):
		st.Status = StepUnknown
		st.Summary = fmt.Sprintf("you may not read Repository %s", s.rel.Spec.Repository)
	case err != nil:
		st.Status = StepUnknown
		st.Summary = fmt.Sprintf("reading Repository %s failed: %v", s.rel.Spec.Repository, err)
	default:
		st.Status, st.Summary, st.Todo = repositoryState(repo)
	}
	if c := meta.FindStatusCondition(s.rel.Status.Conditions, sluicev1.ConditionSynced); c != nil {
		line := fmt.Sprintf("Release %s Synced=%s %s: %s", s.rel.Name, c.Status, c.Reason, clip(c.Message))
		st.Details = append(st.Details, line)
		if c.Status == metav1.ConditionFalse && st.Status != StepFailing {
			st.Status = StepFailing
			st.Summary = fmt.Sprintf("the syncer could not plan release %s at the newest commit: %s", s.rel.Name, clip(c.Message))
			st.Todo = "fix what the message names in git and push; until then no new change is made for this release"
		}
	}
	return st
}

// repositoryState is the source step from the Repository's status.
func repositoryState(repo *sluicev1.Repository) (status, summary, todo string) {
	fetched := "nothing fetched yet"
	if repo.Status.LastFetchedCommit != "" {
		fetched = "last fetched " + sluicev1.ShortSHA(repo.Status.LastFetchedCommit)
	}
	if c := meta.FindStatusCondition(repo.Status.Conditions, sluicev1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		return StepFailing, fmt.Sprintf("Repository %s is stalled (%s): %s: %s", repo.Name, fetched, c.Reason, clip(c.Message)),
			fmt.Sprintf("fix the Repository (URL, ref, credentials Secret) as the message says: kubectl describe repository %s -n %s", repo.Name, repo.Namespace)
	}
	c := meta.FindStatusCondition(repo.Status.Conditions, sluicev1.ConditionReady)
	switch {
	case c == nil:
		return StepWaiting, fmt.Sprintf("Repository %s: the syncer has not reported yet (%s)", repo.Name, fetched),
			"check that the gitops-syncer runs and watches this namespace"
	case c.Status == metav1.ConditionFalse:
		return StepFailing, fmt.Sprintf("Repository %s cannot be synced (%s): %s: %s", repo.Name, fetched, c.Reason, clip(c.Message)),
			fmt.Sprintf("fix what the message names; the syncer retries every interval (kubectl describe repository %s -n %s)", repo.Name, repo.Namespace)
	case c.Status == metav1.ConditionUnknown:
		return StepWaiting, fmt.Sprintf("Repository %s is syncing (%s): %s", repo.Name, fetched, clip(c.Message)), "wait for the sync to finish"
	}
	return StepOK, fmt.Sprintf("Repository %s %s, synced %s", repo.Name, fetched, orNone(sluicev1.ShortSHA(repo.Status.LastSyncedCommit))), ""
}

// diagnoseValidation reports the change's verdict and its deny findings.
func (a *app) diagnoseValidation(_ context.Context, s *diagnosis, d *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepValidation}
	if s.cr == nil {
		st.Status = StepWaiting
		st.Summary = fmt.Sprintf("Release %s has no change yet", d.Release)
		st.Todo = "the syncer makes a change when the release's inputs change in git: push one, or see the source step for why none was made"
		return st
	}
	v := s.cr.Spec.Verdict
	counts := map[sluicev1.Severity]int{}
	for _, f := range v.Findings {
		counts[f.Severity]++
		if f.Severity == sluicev1.SeverityDeny {
			st.Details = append(st.Details, findingLine(f))
		}
	}
	st.Summary = fmt.Sprintf("verdict %s, risk %s, %d findings (%d deny, %d warn)", orNone(string(v.Result)), orNone(string(v.Risk)),
		len(v.Findings)+int(v.FindingsTruncated), counts[sluicev1.SeverityDeny], counts[sluicev1.SeverityWarn])
	switch {
	case v.Result == sluicev1.VerdictFail || counts[sluicev1.SeverityDeny] > 0:
		st.Status = StepFailing
		st.Todo = fmt.Sprintf("fix the deny findings in git and push: a change with one can never be approved (all findings: kubectl sluice describe %s -n %s)", s.cr.Name, s.cr.Namespace)
	case v.Result == "":
		st.Status = StepWaiting
		st.Summary = "the change has no verdict yet"
	default:
		st.Status = StepOK
	}
	return st
}

func findingLine(f sluicev1.Finding) string {
	where := f.File
	if f.Line > 0 {
		where = fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return fmt.Sprintf("%s %s %s (%s): %s", f.Severity, orNone(f.Policy), orNone(f.Resource), orNone(where), clip(f.Message))
}

// diagnoseGate reports the gate: for a change still at it, the gate's
// decision on the live Approvals exactly as the operator makes it (as
// describe does) and who must still approve; for a change past it, what
// the operator recorded.
func (a *app) diagnoseGate(ctx context.Context, s *diagnosis, _ *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepGate}
	cr := s.cr
	if cr == nil {
		return notReached(st, "no change")
	}
	switch phase := sluicev1.ChangeRequestPhase(phaseOf(cr)); phase {
	case sluicev1.PhaseApproved, sluicev1.PhaseApplying, sluicev1.PhaseApplied, sluicev1.PhaseVerifying, sluicev1.PhaseVerified,
		sluicev1.PhaseVerificationFailed, sluicev1.PhaseFailed:
		st.Status = StepOK
		st.Summary = "passed"
		if c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionApproved); c != nil {
			st.Summary = fmt.Sprintf("passed: %s: %s", c.Reason, clip(c.Message))
		}
		if len(cr.Status.ApprovedBy) > 0 {
			st.Details = append(st.Details, "approved by "+joinIdentities(cr.Status.ApprovedBy))
		}
		return st
	case sluicev1.PhaseSuperseded:
		st.Status = StepFailing
		st.Summary = "superseded: a newer change of the release was approved or applied first"
		st.Todo = fmt.Sprintf("this change will never be applied: diagnose the release instead (kubectl sluice diagnose %s -n %s)", cr.Spec.Release, cr.Namespace)
		return st
	}
	rel := s.rel
	if rel == nil {
		rel = &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: cr.Spec.Release, Namespace: cr.Namespace}}
	}
	in, warnings, err := gateinput.LoadForDisplay(ctx, a.client, cr, rel)
	if err == nil {
		var approvals sluicev1.ApprovalList
		// Every Approval of the namespace, as the operator and describe
		// read them: the gate picks those of this release and digest.
		if err = a.client.List(ctx, &approvals, client.InNamespace(cr.Namespace)); err == nil {
			return gateStep(st, cr, approvals.Items, in, warnings)
		}
	}
	st.Status = StepUnknown
	st.Summary = "the gate's inputs could not be read: " + err.Error()
	return st
}

// gateStep is the gate step from the gate's decision.
func gateStep(st DiagnosisStep, cr *sluicev1.ChangeRequest, approvals []sluicev1.Approval, in gate.Inputs, warnings []string) DiagnosisStep {
	dec, ruleErrs := gate.Decide(in, cr, approvals)
	st.Details = append(st.Details, "effective rule: "+dec.Rule.String())
	st.Details = append(st.Details, warnings...)
	for _, e := range ruleErrs {
		st.Details = append(st.Details, e.Error())
	}
	st.Summary = fmt.Sprintf("%s: %s", dec.Reason, clip(dec.Message))
	preview := isPreview(cr)
	switch {
	case dec.Rejected():
		st.Status = StepFailing
		switch dec.Reason {
		case sluicev1.ReasonVetoed:
			st.Todo = fmt.Sprintf("rejected by %s: they can withdraw it (kubectl sluice revoke %s -n %s), or push a different change", joinIdentities(dec.RejectedBy), cr.Name, cr.Namespace)
		case sluicev1.ReasonPolicyDenied:
			st.Todo = "fix the deny findings in git and push"
		default:
			st.Todo = "the change's digests do not match its content: push again so the syncer records it anew"
		}
	case dec.Passed && preview:
		st.Status = StepOK
		st.Details = append(st.Details, "a preview is never applied; its approvals carry over to the merge commit with this content")
	case dec.Passed:
		st.Status = StepOK
		st.Details = append(st.Details, "the operator has not acted on it yet")
	default:
		st.Status = StepWaiting
		if preview {
			st.Status = StepOK // a preview waits on nothing: it is never applied
		}
		st.Details = append(st.Details, "still needed: "+stillNeeded(cr, dec))
		st.Todo = fmt.Sprintf("ask for approval: %s; an allowed approver runs kubectl sluice approve %s -n %s", stillNeeded(cr, dec), cr.Name, cr.Namespace)
	}
	return st
}

// diagnoseLock reports who holds the release's apply lock, and since when.
func (a *app) diagnoseLock(ctx context.Context, s *diagnosis, _ *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepLock}
	cr := s.cr
	switch {
	case cr == nil:
		return notReached(st, "no change")
	case s.rel == nil:
		return notReached(st, "no Release")
	case isPreview(cr):
		return notReached(st, "a preview is never applied")
	}
	holder := s.rel.Status.CurrentChange
	phase := sluicev1.ChangeRequestPhase(phaseOf(cr))
	switch {
	case holder == "":
		st.Status, st.Summary = StepOK, "free"
		if phase == sluicev1.PhaseApproved {
			st.Summary += "; the operator has not taken it for this change yet"
		}
		return st
	case holder == cr.Name:
		st.Status = StepOK
		st.Summary = "held by this change" + since(lockSince(cr), a.opts.Now())
		return st
	}
	h := a.findChange(ctx, s, holder)
	what := "change " + holder
	if h != nil {
		what += fmt.Sprintf(" (%s)", phaseOf(h))
	}
	st.Summary = "held by " + what + since(lockSince(h), a.opts.Now())
	if phase == sluicev1.PhaseApproved {
		st.Status = StepWaiting
		st.Todo = fmt.Sprintf("this change applies when %s ends: kubectl sluice diagnose %s -n %s", holder, holder, cr.Namespace)
	} else {
		st.Status = StepOK
	}
	return st
}

// findChange is the named change of the release, from the list read
// before or read now; nil when it cannot be read.
func (a *app) findChange(ctx context.Context, s *diagnosis, name string) *sluicev1.ChangeRequest {
	if i := slices.IndexFunc(s.changes, func(c sluicev1.ChangeRequest) bool { return c.Name == name }); i >= 0 {
		return &s.changes[i]
	}
	cr := &sluicev1.ChangeRequest{}
	if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.rel.Namespace, Name: name}, cr); err != nil {
		return nil
	}
	return cr
}

// lockSince is when cr took the lock, as near as its status tells: the
// apply's start, else its approval.
func lockSince(cr *sluicev1.ChangeRequest) *metav1.Time {
	switch {
	case cr == nil:
		return nil
	case cr.Status.Apply != nil && cr.Status.Apply.StartedAt != nil:
		return cr.Status.Apply.StartedAt
	default:
		return cr.Status.ApprovedAt
	}
}

func since(t *metav1.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf(" since %s (%s ago)", t.UTC().Format(time.RFC3339), age(now, *t))
}

// diagnoseApply reports the applier's outcome.
func (a *app) diagnoseApply(_ context.Context, s *diagnosis, _ *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepApply}
	cr := s.cr
	if cr == nil {
		return notReached(st, "no change")
	}
	res := cr.Status.Apply
	outcome := ""
	if res != nil {
		outcome = orNone(res.Applier)
		if res.HelmRevision > 0 {
			outcome += fmt.Sprintf(", Helm revision %d", res.HelmRevision)
		}
		if res.Message != "" {
			outcome += ": " + clip(res.Message)
		}
	}
	applied := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionApplied)
	switch phase := sluicev1.ChangeRequestPhase(phaseOf(cr)); {
	case applied != nil && applied.Status == metav1.ConditionTrue:
		st.Status, st.Summary = StepOK, "applied"
		if outcome != "" {
			st.Summary += " by " + outcome
		}
	case phase == sluicev1.PhaseFailed:
		st.Status = StepFailing
		st.Summary = "failed"
		if applied != nil {
			st.Summary = fmt.Sprintf("failed: %s: %s", applied.Reason, clip(applied.Message))
		}
		if outcome != "" {
			st.Details = append(st.Details, "applier: "+outcome)
		}
		st.Todo = applyTodo(cr, applied)
	case phase == sluicev1.PhaseApplying:
		st.Status = StepWaiting
		st.Summary = "applying"
		if res != nil {
			st.Summary += " with " + outcome + since(res.StartedAt, a.opts.Now())
		}
		st.Todo = "wait for the applier; if it does not end, read the operator's log for this change"
	default:
		return notReached(st, "phase "+string(phase))
	}
	return st
}

// applyTodo says what to do about a failed apply, by its reason.
func applyTodo(cr *sluicev1.ChangeRequest, applied *metav1.Condition) string {
	reason := ""
	if applied != nil {
		reason = applied.Reason
	}
	switch reason {
	case sluicev1.ReasonStalePlan:
		return "the Terraform state changed since the plan: ask for a re-plan (the syncer makes a -r2 change) and approve that"
	case sluicev1.ReasonManifestMismatch:
		return "what Helm would install differs from what was approved (a chart reading the live cluster, e.g. lookup): make the chart's output deterministic and push"
	}
	return fmt.Sprintf("fix what the message names (in git, or the Repository's ServiceAccount and namespaces) and push a new change; details: kubectl sluice describe %s -n %s", cr.Name, cr.Namespace)
}

// diagnoseWorkload reports every pod of the applied release in the
// namespace it was applied to: the pods labelled with the release's
// instance label and those owned by objects Helm installed for it.
func (a *app) diagnoseWorkload(ctx context.Context, s *diagnosis, d *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepWorkload}
	if s.rel == nil {
		return notReached(st, "no Release")
	}
	ns := s.rel.Status.AppliedTargetNamespace
	if ns == "" && s.rel.Status.AppliedChange != "" {
		ns = s.rel.Spec.TargetNamespace
	}
	// A first change still Applying is making its pods now: an applier
	// that waits for them to be ready waits on exactly what is stuck.
	applyingNow := false
	if ns == "" && s.cr != nil && s.cr.Name == s.rel.Status.CurrentChange && s.cr.Status.Phase == sluicev1.PhaseApplying {
		ns, applyingNow = s.cr.Spec.TargetNamespace, true
	}
	if ns == "" {
		return notReached(st, "nothing of the release was applied yet")
	}
	d.WorkloadNamespace = ns
	if applyingNow {
		st.Details = append(st.Details, fmt.Sprintf("the pods of change %s, being applied", s.cr.Name))
	} else if s.cr != nil && s.rel.Status.AppliedChange != s.cr.Name {
		st.Details = append(st.Details, fmt.Sprintf("the pods of change %s, the one applied last", s.rel.Status.AppliedChange))
	}
	// What the operator recorded on the Release outlives the pods' Events.
	degraded := meta.FindStatusCondition(s.rel.Status.Conditions, sluicev1.ConditionDegraded)
	recorded := ""
	if degraded != nil && degraded.Status == metav1.ConditionTrue {
		recorded = fmt.Sprintf("%s: %s", degraded.Reason, clip(degraded.Message))
	}

	var pods corev1.PodList
	if err := a.client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		st.Status = StepUnknown
		st.Summary = fmt.Sprintf("listing the pods of namespace %s failed: %v", ns, err)
		if apierrors.IsForbidden(err) {
			st.Summary = fmt.Sprintf("you may not list pods in namespace %s (the \"view\" role there grants it)", ns)
		}
		if recorded != "" {
			st.Status = StepFailing
			st.Summary += "; the operator recorded the release Degraded: " + recorded
			st.Todo = degradedTodo(degraded.Reason, "", ns)
		}
		return st
	}
	if recorded != "" {
		st.Details = append(st.Details, "the operator recorded Degraded="+recorded)
	}
	owned := a.releasePods(ctx, pods.Items, s.rel.Name, ns, &st)
	var stuck []podhealth.Problem
	notReady := 0
	for i := range owned {
		pd := podDiagnosis(&owned[i])
		d.Pods = append(d.Pods, pd)
		stuck = append(stuck, pd.Problems...)
		if !podReady(&owned[i]) {
			notReady++
		}
	}
	switch {
	case len(stuck) > 0:
		st.Status = StepFailing
		st.Summary = fmt.Sprintf("%d of %d pods stuck: %s", countPods(stuck), len(owned), clip(stuck[0].String()))
		for _, p := range stuck {
			st.Details = append(st.Details, clip(p.String()))
		}
		first := stuck[0]
		st.Todo = degradedTodo(first.Reason, first.Pod+"/"+first.Container, ns)
	case len(owned) == 0:
		st.Status = StepOK
		st.Summary = fmt.Sprintf("no pods of release %s in %s", s.rel.Name, ns)
	case notReady > 0:
		st.Status = StepWaiting
		st.Summary = fmt.Sprintf("%d of %d pods not ready yet, none stuck", notReady, len(owned))
		st.Todo = fmt.Sprintf("wait for them to start; kubectl get pods -n %s -l %s=%s", ns, podhealth.InstanceLabel, s.rel.Name)
	default:
		st.Status = StepOK
		st.Summary = fmt.Sprintf("%d pods running and ready", len(owned))
	}
	return st
}

func countPods(ps []podhealth.Problem) int {
	seen := map[string]bool{}
	for _, p := range ps {
		seen[p.Pod] = true
	}
	return len(seen)
}

// degradedTodo says what to do about a stuck pod, by its Degraded reason.
func degradedTodo(reason, where, ns string) string {
	pod, container, _ := strings.Cut(where, "/")
	logs := "kubectl logs -n " + ns
	if pod != "" {
		logs += " " + pod
		if container != "" {
			logs += " -c " + container
		}
	}
	switch reason {
	case sluicev1.ReasonImagePullFailed:
		return "check that the image and tag exist in the registry and that the target namespace may pull them (imagePullSecrets); fix the image in the values in git and push"
	case sluicev1.ReasonCrashLooping:
		return "the container exits after it starts: read its previous log (" + logs + " --previous), fix the cause and push"
	case sluicev1.ReasonOOMKilled:
		return "the container ran out of memory: raise its memory limit in the values (or lower its use) and push"
	case sluicev1.ReasonUnschedulable:
		return "no node can take the pod: lower its requests or node selectors in the values, or add capacity; the scheduler's message says which"
	case sluicev1.ReasonCreateContainerConfigError:
		return "the container's spec names a ConfigMap, Secret or key that does not exist in " + ns + ": create it or fix the reference in git"
	case sluicev1.ReasonPodFailed:
		return "the pod failed: kubectl describe pod -n " + ns + " " + pod
	}
	return "kubectl describe pods -n " + ns
}

// releasePods are the pods of pods that belong to Helm release rel in
// ns: labelled with its instance label, or owned (through up to three
// controllers) by an object Helm installed for it. Owners are read as
// metadata, at most maxOwnerLookups of them; what could not be read is
// noted in st.
func (a *app) releasePods(ctx context.Context, pods []corev1.Pod, rel, ns string, st *DiagnosisStep) []corev1.Pod {
	cache := map[types.UID]*metav1.PartialObjectMetadata{}
	lookups := 0
	var unread []string
	owner := func(ref metav1.OwnerReference) *metav1.PartialObjectMetadata {
		if m, ok := cache[ref.UID]; ok {
			return m
		}
		if lookups >= maxOwnerLookups {
			return nil
		}
		lookups++
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
		if err := a.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, m); err != nil {
			if !apierrors.IsNotFound(err) {
				unread = append(unread, fmt.Sprintf("%s/%s: %v", ref.Kind, ref.Name, err))
			}
			m = nil
		}
		cache[ref.UID] = m
		return m
	}
	ours := func(o metav1.Object) bool {
		return o.GetLabels()[podhealth.InstanceLabel] == rel ||
			(o.GetAnnotations()[helmReleaseName] == rel && o.GetAnnotations()[helmReleaseNamespace] == ns)
	}
	var out []corev1.Pod
	for i := range pods {
		p := &pods[i]
		if ours(p) {
			out = append(out, *p)
			continue
		}
		var o metav1.Object = p
		for depth := 0; depth < 3; depth++ {
			ref := metav1.GetControllerOf(o)
			if ref == nil {
				break
			}
			m := owner(*ref)
			if m == nil {
				break
			}
			if ours(m) {
				out = append(out, *p)
				break
			}
			o = m
		}
	}
	if lookups >= maxOwnerLookups {
		st.Details = append(st.Details, fmt.Sprintf("stopped after reading %d owners: pods without the label %s=%s may be missing", maxOwnerLookups, podhealth.InstanceLabel, rel))
	}
	for _, u := range unread {
		st.Details = append(st.Details, "could not read the owner "+u)
	}
	slices.SortFunc(out, func(x, y corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// podDiagnosis describes one pod: phase, owner, scheduling, every
// container's state, restarts and last termination, and its problems.
func podDiagnosis(p *corev1.Pod) PodDiagnosis {
	pd := PodDiagnosis{Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName, Problems: podhealth.Problems(p)}
	if pd.Phase == "" {
		pd.Phase = string(corev1.PodPending)
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		pd.Owner = ref.Kind + "/" + ref.Name
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			pd.Unschedulable = clip(c.Message)
		}
	}
	images := map[string]string{}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		images[c.Name] = c.Image
	}
	seen := map[string]bool{}
	add := func(cs corev1.ContainerStatus, init bool) {
		seen[cs.Name] = true
		cd := ContainerDiagnosis{Name: cs.Name, Init: init, Image: cmp.Or(images[cs.Name], cs.Image), Ready: cs.Ready, Restarts: cs.RestartCount}
		switch s := cs.State; {
		case s.Waiting != nil:
			cd.State, cd.Message = "Waiting: "+s.Waiting.Reason, clip(s.Waiting.Message)
		case s.Running != nil:
			cd.State = "Running"
		case s.Terminated != nil:
			cd.State, cd.Message = fmt.Sprintf("Terminated: %s (exit code %d)", cmp.Or(s.Terminated.Reason, "Error"), s.Terminated.ExitCode), clip(s.Terminated.Message)
		default:
			cd.State = "Waiting"
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			cd.LastTermination = fmt.Sprintf("%s (exit code %d)", cmp.Or(t.Reason, "Error"), t.ExitCode)
			if t.Message != "" {
				cd.LastTermination += ": " + clip(t.Message)
			}
		}
		pd.Containers = append(pd.Containers, cd)
	}
	for _, cs := range p.Status.InitContainerStatuses {
		add(cs, true)
	}
	for _, cs := range p.Status.ContainerStatuses {
		add(cs, false)
	}
	// Containers with no status yet (an unscheduled pod has none).
	for _, c := range p.Spec.Containers {
		if !seen[c.Name] {
			pd.Containers = append(pd.Containers, ContainerDiagnosis{Name: c.Name, Image: c.Image, State: "not created"})
		}
	}
	return pd
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// diagnoseVerification reports the verification's progress, if the
// change has one.
func (a *app) diagnoseVerification(_ context.Context, s *diagnosis, _ *Diagnosis) DiagnosisStep {
	st := DiagnosisStep{Name: stepVerification}
	cr := s.cr
	if cr == nil {
		return notReached(st, "no change")
	}
	v := cr.Status.Verification
	c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionVerified)
	if v == nil && c == nil {
		if cr.Spec.Verification == nil {
			return notReached(st, "the change has no verification")
		}
		return notReached(st, "not started")
	}
	msg := ""
	if v != nil {
		msg = clip(v.Message)
	}
	reason := sluicev1.ReasonVerifying
	if c != nil {
		reason, msg = c.Reason, clip(cmp.Or(c.Message, msg))
	}
	st.Summary = reason + ": " + msg
	if v != nil {
		for _, m := range v.Measurements {
			if m.Phase != sluicev1.MeasurementSuccessful {
				st.Details = append(st.Details, fmt.Sprintf("%s %s value %s: %s", m.Check, m.Phase, orNone(m.Value), clip(m.Message)))
			}
		}
	}
	switch reason {
	case sluicev1.ReasonVerificationPassed:
		st.Status = StepOK
	case sluicev1.ReasonVerifying:
		st.Status = StepWaiting
		st.Todo = "wait for the verification's checks and soak time"
	default:
		st.Status = StepFailing
		st.Todo = fmt.Sprintf("the applied change did not verify: see the measurements (kubectl sluice describe %s -n %s), fix and push", cr.Name, cr.Namespace)
	}
	return st
}

func notReached(st DiagnosisStep, why string) DiagnosisStep {
	st.Status, st.Summary = StepNotReached, why
	return st
}

// clip bounds a message from a kubelet, a registry or a condition, and
// removes the credentials of any URL in it.
func clip(s string) string {
	return text.Truncate(podhealth.Redact(s), maxDiagnoseMessage-len("…"))
}

// printDiagnosis writes the text form of diagnose: the first failing (or
// waiting) step with what to do, then every step, then the pods.
func (a *app) printDiagnosis(w io.Writer, d *Diagnosis) error {
	rel := d.Release
	if !d.ReleaseFound {
		rel += " (not found)"
	}
	fmt.Fprintf(w, "Release:  %s/%s\n", d.Namespace, rel)
	if d.Change != "" {
		fmt.Fprintf(w, "Change:   %s (%s)\n", d.Change, d.Phase)
	} else {
		fmt.Fprintf(w, "Change:   <none>\n")
	}
	if f := d.First; f != nil {
		word := "First failing step"
		if f.Status == StepWaiting {
			word = "Waiting at"
		}
		fmt.Fprintf(w, "%s: %s: %s\n", word, f.Name, f.Summary)
		if f.Todo != "" {
			fmt.Fprintf(w, "  What to do: %s\n", f.Todo)
		}
	} else {
		fmt.Fprintln(w, "Nothing failing or waiting.")
	}
	fmt.Fprintln(w, "Steps:")
	for _, st := range d.Steps {
		fmt.Fprintf(w, "  %-13s %-12s %s\n", st.Name, st.Status, st.Summary)
		for _, line := range st.Details {
			fmt.Fprintf(w, "  %-13s %-12s   %s\n", "", "", line)
		}
		if st.Todo != "" && (d.First == nil || st.Name != d.First.Name) && st.Status != StepOK {
			fmt.Fprintf(w, "  %-13s %-12s   what to do: %s\n", "", "", st.Todo)
		}
	}
	if d.WorkloadNamespace == "" {
		return nil
	}
	fmt.Fprintf(w, "Pods in %s:\n", d.WorkloadNamespace)
	if len(d.Pods) == 0 {
		fmt.Fprintln(w, "  <none>")
		return nil
	}
	t := newTable(w, "  POD", "PHASE", "CONTAINER", "IMAGE", "STATE", "RESTARTS", "LAST TERMINATION", "MESSAGE")
	for _, p := range d.Pods {
		name := p.Name
		if p.Owner != "" {
			name += " (" + p.Owner + ")"
		}
		if p.Unschedulable != "" {
			t.row("  "+name, p.Phase, "-", "-", "Unschedulable", "-", "-", p.Unschedulable)
		}
		for _, c := range p.Containers {
			cname := c.Name
			if c.Init {
				cname += " (init)"
			}
			t.row("  "+name, p.Phase, cname, c.Image, c.State, fmt.Sprint(c.Restarts), orNone(c.LastTermination), orNone(c.Message))
		}
	}
	return t.flush()
}
