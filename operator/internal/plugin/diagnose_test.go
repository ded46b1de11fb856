package plugin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
)

// diagNS is the control namespace of the diagnose tests, with a Repository
// the syncer fetched without error.
const diagNS = "team-diag"

var diagOnce sync.Once

func diagRepository(t *testing.T) {
	t.Helper()
	diagOnce.Do(func() {
		ctx := context.Background()
		err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: diagNS}})
		require.NoError(t, client.IgnoreAlreadyExists(err))
		repo := &sluicev1.Repository{
			ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: diagNS},
			Spec:       sluicev1.RepositorySpec{URL: "https://git.example.com/platform/infra.git", TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer"},
		}
		require.NoError(t, env.Client.Create(ctx, repo))
		repo.Status.LastFetchedCommit = strings.Repeat("ab", 20)
		repo.Status.LastSyncedCommit = repo.Status.LastFetchedCommit
		repo.Status.Conditions = []metav1.Condition{{Type: sluicev1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "synced", LastTransitionTime: metav1.Now()}}
		require.NoError(t, env.Client.Status().Update(ctx, repo))
	})
}

// appliedChange makes a change of a new release in diagNS, applied as the
// operator would record it, and the release's target namespace; it
// returns the change and its Release.
func appliedChange(t *testing.T) (*sluicev1.ChangeRequest, *sluicev1.Release) {
	t.Helper()
	diagRepository(t)
	ctx := context.Background()
	cr := newChange(t, diagNS, "prod", sluicev1.ApprovalRule{Required: 1})
	now := metav1.Now()
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseApplied
		s.ApprovedBy = []sluicev1.Identity{"k8s:carol"}
		s.ApprovedAt = &now
		s.Apply = &sluicev1.ApplyResult{Applier: "helm", HelmRevision: 1, Message: "installed", StartedAt: &now, FinishedAt: &now}
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: sluicev1.ConditionApproved, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonApprovalsMet, Message: "1 of 1 approvals"})
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: sluicev1.ConditionApplied, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonSucceeded, Message: "Helm revision 1"})
	})
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: diagNS, Name: cr.Spec.Release}, rel))
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedTargetNamespace = cr.Name, cr.Spec.Revision, cr.Spec.TargetNamespace
	require.NoError(t, env.Client.Status().Update(ctx, rel))
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cr.Spec.TargetNamespace}}))
	return cr, rel
}

// createPod creates a pod in ns and writes its status as a kubelet would
// (envtest runs none).
func createPod(t *testing.T, p *corev1.Pod, status corev1.PodStatus) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "web", Image: "registry.invalid/web:2"}}
	}
	require.NoError(t, env.Client.Create(ctx, p))
	p.Status = status
	require.NoError(t, env.Client.Status().Update(ctx, p))
	return p
}

var pullFailed = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
	Name: "web", Image: "registry.invalid/web:2",
	State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
		Message: `failed to pull and unpack image "registry.invalid/web:2": failed to resolve reference: not found: Head "https://robot:s3cret@registry.invalid/v2/web/manifests/2"`}},
}}}

var crashing = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
	Name: "worker", Image: "registry.invalid/worker:1", RestartCount: 4,
	State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 1m20s restarting failed container"}},
	LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2, Message: "config file missing"}},
}}}

// stuckRelease is an applied release with two stuck pods: one labelled with
// the release's instance label that cannot pull its image, and one with no
// such label, owned by a ReplicaSet of a Deployment Helm installed for the
// release, crash-looping. A stuck pod of another release shares the
// namespace.
func stuckRelease(t *testing.T) (*sluicev1.ChangeRequest, *sluicev1.Release) {
	t.Helper()
	ctx := context.Background()
	cr, rel := appliedChange(t)
	ns := cr.Spec.TargetNamespace
	createPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{podhealth.InstanceLabel: rel.Name}}}, pullFailed)

	labels := map[string]string{"app": "worker"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns, Annotations: map[string]string{"meta.helm.sh/release-name": rel.Name, "meta.helm.sh/release-namespace": ns}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "registry.invalid/worker:1"}}}}},
	}
	require.NoError(t, env.Client.Create(ctx, dep))
	yes := true
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-5d8f", Namespace: ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: dep.Spec.Template},
	}
	require.NoError(t, env.Client.Create(ctx, rs))
	createPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "worker-5d8f-x1", Namespace: ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "registry.invalid/worker:1"}}}}, crashing)

	createPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other-1", Namespace: ns, Labels: map[string]string{podhealth.InstanceLabel: "other"}}}, pullFailed)

	// What the operator records on the Release (the controller's tests
	// cover how); it outlives the pods and their Events.
	rel.Status.Conditions = []metav1.Condition{{Type: sluicev1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonImagePullFailed,
		Message: "pod web-1 container web image registry.invalid/web:2: ErrImagePull: not found", LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(ctx, rel))
	return cr, rel
}

// A release whose pod cannot pull its image: diagnose prints the workload
// step first, naming the pod, the image and the registry's message, with
// what to do, and lists every pod the release's objects own (the labelled
// one and the one a Helm-installed Deployment owns), not another
// release's.
func TestDiagnose_aReleaseWithAStuckPodNamesTheImageFirst(t *testing.T) {
	cr, rel := stuckRelease(t)

	out, _, err := sluiceAs(t, env.Config, "diagnose", rel.Name, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	first, steps, ok := strings.Cut(out, "Steps:")
	require.True(t, ok, out)
	require.Contains(t, first, "Change:   "+cr.Name+" (Applied)")
	require.Contains(t, first, "First failing step: workload: 2 of 2 pods stuck: pod web-1 container web image registry.invalid/web:2: ErrImagePull: failed to pull and unpack image")
	require.Contains(t, first, "What to do: check that the image and tag exist")
	require.Regexp(t, `source\s+ok\s+Repository infra last fetched abababab`, steps)
	require.Regexp(t, `validation\s+ok\s+verdict warn, risk medium, 1 findings`, steps)
	require.Regexp(t, `gate\s+ok\s+passed: ApprovalsMet`, steps)
	require.Regexp(t, `apply\s+ok\s+applied by helm, Helm revision 1`, steps)
	require.Regexp(t, `verification\s+not reached\s+the change has no verification`, steps)
	require.Contains(t, steps, "the operator recorded Degraded=ImagePullFailed")
	require.Regexp(t, `web-1\s+Pending\s+web\s+registry.invalid/web:2\s+Waiting: ErrImagePull\s+0`, steps)
	require.Regexp(t, `worker-5d8f-x1 \(ReplicaSet/worker-5d8f\)\s+Running\s+worker\s+registry.invalid/worker:1\s+Waiting: CrashLoopBackOff\s+4\s+Error \(exit code 2\): config file missing`, steps)
	require.NotContains(t, out, "other-1")
	require.NotContains(t, out, "s3cret", "no credentials of a URL in a kubelet's message")
	require.Contains(t, out, "https://***@registry.invalid/v2/web/manifests/2")

	// The same by the change's name, as JSON.
	out, _, err = sluiceAs(t, env.Config, "diagnose", cr.Name, "-n", diagNS, "-o", "json")
	require.NoError(t, err)
	var d plugin.Diagnosis
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Equal(t, cr.Name, d.Change)
	require.True(t, d.ReleaseFound)
	require.NotNil(t, d.First)
	require.Equal(t, "workload", d.First.Name)
	require.Equal(t, plugin.StepFailing, d.First.Status)
	require.Len(t, d.Steps, 7)
	require.Equal(t, cr.Spec.TargetNamespace, d.WorkloadNamespace)
	require.Len(t, d.Pods, 2)
	require.Equal(t, "web-1", d.Pods[0].Name)
	require.Equal(t, sluicev1.ReasonImagePullFailed, d.Pods[0].Problems[0].Reason)
	require.Equal(t, "registry.invalid/web:2", d.Pods[0].Problems[0].Image)
	require.Equal(t, sluicev1.ReasonCrashLooping, d.Pods[1].Problems[0].Reason)
	require.Equal(t, "ReplicaSet/worker-5d8f", d.Pods[1].Owner)
	require.NotContains(t, out, "s3cret")
}

// carol may read Sluice's objects but not the target namespace's pods:
// diagnose says so and shows what the operator recorded on the Release.
func TestDiagnose_withoutPodAccessShowsTheRecordedDegradedCondition(t *testing.T) {
	_, rel := stuckRelease(t)
	out, _, err := sluice(t, "diagnose", rel.Name, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "First failing step: workload: you may not list pods in namespace "+rel.Spec.TargetNamespace)
	require.Contains(t, out, "the operator recorded the release Degraded: ImagePullFailed: pod web-1 container web image registry.invalid/web:2")
	require.Contains(t, out, "What to do: check that the image and tag exist")
}

// A change at the gate: diagnose waits there and says who must still
// approve; a second approved change waits for the lock its predecessor
// holds.
func TestDiagnose_saysWhoMustApproveAndWhoHoldsTheLock(t *testing.T) {
	diagRepository(t)
	ctx := context.Background()
	cr := newChange(t, diagNS, "prod", sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"github:erin"}})
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhaseAwaitingApproval })

	out, _, err := sluice(t, "diagnose", cr.Spec.Release, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "Waiting at: gate: AwaitingApprovals: 0 of 1 approvals")
	require.Contains(t, out, "What to do: ask for approval: 1 more approval from any of github:erin; an allowed approver runs kubectl sluice approve "+cr.Name)
	require.Regexp(t, `lock\s+ok\s+free`, out)
	require.Regexp(t, `apply\s+not reached\s+phase AwaitingApproval`, out)
	require.Regexp(t, `workload\s+not reached\s+nothing of the release was applied yet`, out)

	// Another change of the same release holds the lock, applying; this
	// one is approved and waits for it.
	holder := cr.DeepCopy()
	holder.ObjectMeta = metav1.ObjectMeta{Name: cr.Name + "-r2", Namespace: diagNS, Labels: cr.Labels}
	holder.Spec.Attempt = 2
	require.NoError(t, syncer.Create(ctx, holder))
	started := metav1.NewTime(time.Now().Add(-3 * time.Minute))
	setStatus(t, holder, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseApplying
		s.Apply = &sluicev1.ApplyResult{Applier: "helm", StartedAt: &started}
	})
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhaseApproved })
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: diagNS, Name: cr.Spec.Release}, rel))
	rel.Status.CurrentChange = holder.Name
	require.NoError(t, env.Client.Status().Update(ctx, rel))

	out, _, err = sluice(t, "diagnose", cr.Name, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "Waiting at: lock: held by change "+holder.Name+" (Applying) since "+started.UTC().Format(time.RFC3339)+" (3m")
	require.Contains(t, out, "What to do: this change applies when "+holder.Name+" ends: kubectl sluice diagnose "+holder.Name)

	// Diagnosing the release follows the change holding the lock.
	out, _, err = sluice(t, "diagnose", cr.Spec.Release, "-n", diagNS)
	require.NoError(t, err)
	require.Contains(t, out, "Change:   "+holder.Name+" (Applying)")
	require.Contains(t, out, "Waiting at: apply: applying with helm since")
}

// Bad input: an unknown name fails with a clear error; a change whose
// Release is gone and a Release with no change are diagnosed as such.
func TestDiagnose_badInput(t *testing.T) {
	diagRepository(t)
	ctx := context.Background()

	_, _, err := sluice(t, "diagnose", "nope", "-n", diagNS)
	require.ErrorContains(t, err, `no release or change named "nope" in namespace "team-diag"`)
	_, _, err = sluice(t, "diagnose", "-n", diagNS)
	require.ErrorContains(t, err, "kubectl sluice diagnose needs exactly one RELEASE or CHANGE name, got 0")
	_, _, err = sluice(t, "diagnose", "a", "b", "-n", diagNS)
	require.ErrorContains(t, err, "got 2")
	_, _, err = sluice(t, "diagnose", "a", "-n", diagNS, "-o", "wide")
	require.ErrorContains(t, err, `unknown output format "wide"`)

	// A change naming a Release that is not there (a Release is removed
	// only by an approved Delete, so the change is made without one).
	base := newChange(t, diagNS, "prod", sluicev1.ApprovalRule{Required: 1})
	orphan := base.DeepCopy()
	orphan.ObjectMeta = metav1.ObjectMeta{Name: sluicev1.ChangeRequestName("ghost-prod", base.Spec.Revision, 1), Namespace: diagNS,
		Labels: map[string]string{sluicev1.LabelRelease: "ghost-prod"}}
	orphan.Spec.Release = "ghost-prod"
	orphan.Spec.ApprovalDigest = orphan.ExpectedApprovalDigest()
	require.NoError(t, syncer.Create(ctx, orphan))
	out, _, err := sluice(t, "diagnose", orphan.Name, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "Release:  "+diagNS+"/"+orphan.Spec.Release+" (not found)")
	require.Contains(t, out, "First failing step: source: Release "+orphan.Spec.Release+" does not exist (change "+orphan.Name+" names it)")
	require.Contains(t, out, "What to do: the syncer creates the Release from service.yaml")
	require.Regexp(t, `workload\s+not reached\s+no Release`, out)

	lonely := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "lonely-prod", Namespace: diagNS},
		Spec: sluicev1.ReleaseSpec{Repository: "infra", Service: "lonely", Environment: "prod", SourcePath: "services/lonely",
			TargetNamespace: "lonely-prod", Chart: sluicev1.ChartSource{Path: "charts/service"}},
	}
	require.NoError(t, syncer.Create(ctx, lonely))
	out, _, err = sluice(t, "diagnose", lonely.Name, "-n", diagNS, "-o", "json")
	require.NoError(t, err)
	var d plugin.Diagnosis
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Empty(t, d.Change)
	require.NotNil(t, d.First)
	require.Equal(t, "validation", d.First.Name)
	require.Equal(t, plugin.StepWaiting, d.First.Status)
	require.Equal(t, "Release lonely-prod has no change yet", d.First.Summary)
	for _, st := range d.Steps[2:] {
		require.Equal(t, plugin.StepNotReached, st.Status, st.Name)
	}
}

// countingTransport counts the requests sent through it.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// countingConfig is cfg with every request counted in n.
func countingConfig(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt: rt, n: n} }
	return c
}

// The figures of diagnose on a release with a failing pod: API requests
// (bounded: a handful of reads, whatever the namespace holds) and wall
// time, logged.
func TestDiagnose_figures(t *testing.T) {
	_, rel := stuckRelease(t)
	var n atomic.Int64
	cfg := countingConfig(env.Config, &n)
	start := time.Now()
	_, _, err := sluiceAs(t, cfg, "diagnose", rel.Name, "-n", diagNS)
	require.NoError(t, err)
	elapsed := time.Since(start)
	byRelease := n.Load()
	t.Logf("diagnose RELEASE with a failing pod (2 stuck pods, one found through its owners): %d API requests, %.1f ms wall", byRelease, float64(elapsed.Microseconds())/1000)

	n.Store(0)
	_, _, err = sluiceAs(t, cfg, "diagnose", rel.Status.AppliedChange, "-n", diagNS)
	require.NoError(t, err)
	t.Logf("diagnose CHANGE of the same release: %d API requests", n.Load())
	// Release (or change and Release), the changes, the Repository, the
	// pods, and two owners (ReplicaSet, Deployment); the gate is not
	// re-run for an applied change. Discovery may add a few.
	require.LessOrEqual(t, byRelease, int64(12), "diagnose reads a bounded number of objects")
}

// The first change of a release is still Applying (Helm waits for its pods
// to be ready) and its pod cannot pull its image: the workload step looks
// at the pods being made and comes first, not "apply waiting" (the real
// node showed the stuck pod hidden behind the waiting applier).
func TestDiagnose_aFirstChangeStillApplyingShowsItsStuckPod(t *testing.T) {
	diagRepository(t)
	ctx := context.Background()
	cr := newChange(t, diagNS, "prod", sluicev1.ApprovalRule{Required: 1})
	now := metav1.Now()
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseApplying
		s.ApprovedBy = []sluicev1.Identity{"k8s:carol"}
		s.ApprovedAt = &now
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: sluicev1.ConditionApproved, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonApprovalsMet, Message: "1 of 1 approvals"})
	})
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: diagNS, Name: cr.Spec.Release}, rel))
	rel.Status.CurrentChange = cr.Name
	require.NoError(t, env.Client.Status().Update(ctx, rel))
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cr.Spec.TargetNamespace}}))
	createPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: cr.Spec.TargetNamespace, Labels: map[string]string{podhealth.InstanceLabel: rel.Name}}}, pullFailed)

	out, _, err := sluiceAs(t, env.Config, "diagnose", rel.Name, "-n", diagNS)
	require.NoError(t, err)
	t.Log("\n" + out)
	first, steps, ok := strings.Cut(out, "Steps:")
	require.True(t, ok, out)
	require.Contains(t, first, "First failing step: workload: 1 of 1 pods stuck: pod web-1 container web image registry.invalid/web:2: ErrImagePull")
	require.Contains(t, steps, "the pods of change "+cr.Name+", being applied")
}
