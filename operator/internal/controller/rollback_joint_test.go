package controller

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// The joint rollback tests run this package's operator (manager, gate,
// applier, verification with a measurer that fails the revisions marked
// bad) and the real gitops-syncer binary, built from the workspace,
// against one envtest API server and a real git repository.

var (
	syncerBinOnce sync.Once
	syncerBin     string
	syncerBinErr  error
)

// buildSyncer builds the gitops-syncer binary once per test run.
func buildSyncer(t testing.TB) string {
	t.Helper()
	syncerBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rollback-syncer-")
		if err != nil {
			syncerBinErr = err
			return
		}
		// The binary (~165 MB) goes with the test binary's control plane,
		// not with the test that built it: later tests run it too.
		env.Cleanup(func() { _ = os.RemoveAll(dir) })
		cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./gitops-syncer/cmd/gitops-syncer")
		cmd.Dir = "../../.."
		cmd.Env = append(os.Environ(), "GOWORK=")
		if out, err := cmd.CombinedOutput(); err != nil {
			syncerBinErr = fmt.Errorf("go build gitops-syncer: %v: %s", err, out)
			return
		}
		syncerBin = filepath.Join(dir, "gitops-syncer")
	})
	require.NoError(t, syncerBinErr)
	return syncerBin
}

// startSyncerProcess runs the syncer binary for namespace ns until the
// test ends; its output is printed when the test fails.
func startSyncerProcess(t testing.TB, ns string) {
	t.Helper()
	bin := buildSyncer(t)
	kc, err := env.AdminKubeconfig("syncer-" + ns)
	require.NoError(t, err)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("artifact-token-of-the-rollback-tests"), 0o600))
	logPath := filepath.Join(dir, "syncer.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, "--namespaces="+ns, "--allow-file-urls", "--data-dir="+filepath.Join(dir, "data"),
		"--artifact-bind-address=127.0.0.1:0", "--artifact-token-file="+token, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--state-bind-address=127.0.0.1:0", "--terraform-runner-spare=false")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("syncer output:\n%s", out)
		}
	})
}

// infraRepo is a git repository (the git command) holding the golden-path
// chart and one service, web, with one environment, prod.
type infraRepo struct {
	t    testing.TB
	dir  string
	rule string
	ns   string
}

func (r *infraRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=dave", "GIT_AUTHOR_EMAIL=dave@example.com", "GIT_COMMITTER_NAME=dave", "GIT_COMMITTER_EMAIL=dave@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+r.dir)
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

func newInfraRepo(t testing.TB, targetNS, rule string) *infraRepo {
	r := &infraRepo{t: t, dir: t.TempDir(), rule: rule, ns: targetNS}
	r.git("init", "-q", "-b", "main")
	require.NoError(t, copyDir("../../../charts/service", filepath.Join(r.dir, "charts", "service")))
	return r
}

// push commits service web at image tag, with the approval block rule.
func (r *infraRepo) push(tag string) string {
	r.t.Helper()
	svc := fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
owners: [team-web]
chart: {path: charts/service}
values: [values.yaml]
environments:
  - name: prod
    namespace: %s
    delivery: helm
    approval: %s
    verification:
      prometheusURL: http://prometheus.invalid:9090
      checks:
        - name: error-rate
          query: sum(rate(errors{revision="{{ .Revision }}"}[1m]))
          successCondition: result < 0.005
          count: 1
`, r.ns, r.rule)
	require.NoError(r.t, os.MkdirAll(filepath.Join(r.dir, "services", "web"), 0o755))
	require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, "services", "web", "service.yaml"), []byte(svc), 0o644))
	values := fmt.Sprintf("image:\n  repository: ghcr.io/example/web\n  tag: %q\nreplicaCount: 1\n", tag)
	require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, "services", "web", "values.yaml"), []byte(values), 0o644))
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", "web "+tag)
	return r.git("rev-parse", "HEAD")
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
}

// jointFixture is one test's namespace, repository, operator and syncer.
type jointFixture struct {
	*fixture
	m    *revisionMeasurer
	repo *infraRepo
	obj  *sluicev1.Repository
}

func newJointFixture(t testing.TB, rule string) *jointFixture {
	ns := "t-" + rand.String(8)
	c := env.Client
	require.NoError(t, c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	target := "web-" + ns
	require.NoError(t, c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}}))
	f := &fixture{t: t, ns: ns, c: c}
	m := &revisionMeasurer{bad: map[string]bool{}, hold: map[string]chan struct{}{}}
	f.op = startOperator(t, ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}, measurer: m})
	repo := newInfraRepo(t, target, rule)
	startSyncerProcess(t, ns)
	return &jointFixture{fixture: f, m: m, repo: repo}
}

// sync asks the syncer for a pass and waits until it handled it.
func (j *jointFixture) sync() {
	j.t.Helper()
	if j.obj == nil {
		j.obj = &sluicev1.Repository{
			ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: j.ns},
			Spec: sluicev1.RepositorySpec{
				URL: "file://" + j.repo.dir, Ref: &sluicev1.GitReference{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Hour},
				ServicesPath: "services", TargetNamespaces: []string{"web-*"}, ServiceAccountName: "deployer",
			},
		}
		require.NoError(j.t, j.c.Create(ctx(j.t), j.obj))
	}
	v := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sluicev1.AnnotationReconcileRequestedAt, v)
	require.NoError(j.t, j.c.Patch(ctx(j.t), j.obj.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(patch))))
	require.Eventually(j.t, func() bool {
		got := &sluicev1.Repository{}
		return j.c.Get(ctx(j.t), client.ObjectKeyFromObject(j.obj), got) == nil && got.Status.LastHandledReconcileAt == v
	}, waitFor, 20*time.Millisecond, "the syncer did not handle reconcile %s", v)
}

// pushChange pushes web at tag (marked bad when bad) and returns its
// ChangeRequest once the syncer created it.
func (j *jointFixture) pushChange(tag string, bad bool) *sluicev1.ChangeRequest {
	cr, _ := j.pushChangeTimed(tag, bad)
	return cr
}

// pushChangeTimed is pushChange, and also returns when the change was
// first seen (looked for every 5ms from before the sync).
func (j *jointFixture) pushChangeTimed(tag string, bad bool) (*sluicev1.ChangeRequest, time.Time) {
	j.t.Helper()
	sha := j.repo.push(tag)
	if bad {
		j.markBad(sha)
	}
	key := client.ObjectKey{Namespace: j.ns, Name: sluicev1.ChangeRequestName("web-prod", sha, 1)}
	seen := make(chan time.Time, 1)
	stop := make(chan struct{})
	go func() {
		for {
			if err := j.c.Get(ctx(j.t), key, &sluicev1.ChangeRequest{}); err == nil {
				seen <- time.Now()
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	j.sync()
	cr := &sluicev1.ChangeRequest{}
	require.NoError(j.t, j.c.Get(ctx(j.t), key, cr))
	var at time.Time
	select {
	case at = <-seen:
	case <-time.After(waitFor):
	}
	close(stop)
	return cr, at
}

func (j *jointFixture) markBad(sha string) {
	j.m.mu.Lock()
	j.m.bad[sha] = true
	j.m.mu.Unlock()
}

// waitChange polls a ChangeRequest until cond holds and returns it with
// the time it was first seen so.
func (j *jointFixture) waitChange(name, what string, cond func(*sluicev1.ChangeRequest) bool) (*sluicev1.ChangeRequest, time.Time) {
	j.t.Helper()
	var got *sluicev1.ChangeRequest
	var at time.Time
	deadline := time.Now().Add(waitFor)
	for {
		cr := &sluicev1.ChangeRequest{}
		if err := j.c.Get(ctx(j.t), client.ObjectKey{Namespace: j.ns, Name: name}, cr); err == nil && cond(cr) {
			got, at = cr, time.Now()
			break
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("ChangeRequest %s: %s; Release: %s; changes: %s", name, what, releaseDump(j.fixture), j.phases())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return got, at
}

func inPhase(p sluicev1.ChangeRequestPhase) func(*sluicev1.ChangeRequest) bool {
	return func(cr *sluicev1.ChangeRequest) bool { return cr.Status.Phase == p }
}

func wasApplied(cr *sluicev1.ChangeRequest) bool { return cr.Status.Phase.WasApplied() }

// rollbacks lists the rollback ChangeRequests of the namespace.
func (j *jointFixture) rollbacks() []string {
	var list sluicev1.ChangeRequestList
	require.NoError(j.t, j.c.List(ctx(j.t), &list, client.InNamespace(j.ns)))
	var out []string
	for _, cr := range list.Items {
		if cr.Spec.Rollback != nil {
			out = append(out, cr.Name)
		}
	}
	slices.Sort(out)
	return out
}

// failedAt is the time of the measurement that failed a change.
func failedAt(cr *sluicev1.ChangeRequest) time.Time {
	ms := cr.Status.Verification.Measurements
	return ms[len(ms)-1].Time.Time
}

// Under rollback: auto (and no auto-approval by risk), v1 and v2 are
// approved by a person; v2 fails its check, the operator asks for a
// rollback and the syncer builds it from git; the gate passes it without
// approvals (RollbackAutoApproved, saying why), it is applied and
// verifies. It logs the figures.
func TestRollbackJoint_rollbackAutoPassesWithoutApprovals(t *testing.T) {
	j := newJointFixture(t, `{required: 1, autoApproveRisk: none, approvers: ["k8s:alice"], rollback: auto}`)
	v1 := j.pushChange("1.0.0", false)
	j.decide(v1, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(v1.Name, "verified", inPhase(sluicev1.PhaseVerified))
	v2 := j.pushChange("2.0.0", true)
	j.decide(v2, "k8s:alice", sluicev1.DecisionApprove)
	failed, _ := j.waitChange(v2.Name, "verification failed", inPhase(sluicev1.PhaseVerificationFailed))

	rbName := sluicev1.RollbackChangeRequestName("web-prod", v2.Name, 1)
	rb, rbCreated := j.waitChange(rbName, "the rollback is created", func(*sluicev1.ChangeRequest) bool { return true })
	require.Equal(t, &sluicev1.RollbackSpec{Of: v2.Name, To: v1.Name}, rb.Spec.Rollback)
	require.Equal(t, v1.Spec.ContentDigest, rb.Spec.ContentDigest)
	require.Equal(t, v1.Spec.Revision, rb.Spec.Revision)
	_, rbApplied := j.waitChange(rbName, "the rollback is applied", wasApplied)
	rb, _ = j.waitChange(rbName, "the rollback verifies", inPhase(sluicev1.PhaseVerified))
	approved := condition(rb, sluicev1.ConditionApproved)
	require.Equal(t, sluicev1.ReasonRollbackAuto, approved.Reason)
	require.Contains(t, approved.Message, "rule rollback=auto, and its content is exactly the verified content of "+v1.Name)
	require.Zero(t, rb.Status.Approvals)
	// The Release records the rollback as applied, and as its last
	// verified change once a later pass has seen it verify.
	rel := j.releaseWhen("web-prod", "the rollback is recorded as applied and verified", func(r *sluicev1.Release) bool {
		return r.Status.AppliedChange == rbName && r.Status.LastVerified != nil && r.Status.LastVerified.ChangeRequest == rbName
	})
	require.Equal(t, v2.Name, rel.Status.Quarantine[0].ChangeRequest)
	t.Logf("figures: failing measurement → rollback ChangeRequest seen %s; rollback (RollbackAutoApproved) created → applied %s",
		rbCreated.Sub(failedAt(failed)).Round(time.Millisecond), rbApplied.Sub(rbCreated).Round(time.Millisecond))
}

// A rule that auto-approves low risk: v2 (an image change, low risk)
// applies without a person, fails, and is rolled back (the rollback is
// low risk too). Git returning to v1 is "unchanged"; pushing v2's
// content again under a new commit is held by the quarantine for an
// approval although its risk is low, and says why. It logs the figures
// (v2 is the normal auto-approved apply the rollback compares with).
func TestRollbackJoint_quarantineHoldsFailedContent(t *testing.T) {
	j := newJointFixture(t, `{required: 1, autoApproveRisk: low, approvers: ["k8s:alice"]}`)
	v1 := j.pushChange("1.0.0", false)
	j.decide(v1, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(v1.Name, "verified", inPhase(sluicev1.PhaseVerified))
	v2, v2Created := j.pushChangeTimed("2.0.0", true)
	_, v2Applied := j.waitChange(v2.Name, "applied without a person", wasApplied)
	failed, _ := j.waitChange(v2.Name, "verification failed", inPhase(sluicev1.PhaseVerificationFailed))
	rbName := sluicev1.RollbackChangeRequestName("web-prod", v2.Name, 1)
	_, rbCreated := j.waitChange(rbName, "the rollback is created", func(*sluicev1.ChangeRequest) bool { return true })
	_, rbApplied := j.waitChange(rbName, "the rollback is applied", wasApplied)
	j.waitChange(rbName, "the rollback verifies", inPhase(sluicev1.PhaseVerified))
	t.Logf("figures: failing measurement → rollback ChangeRequest seen %s; rollback created → applied %s; v2 (a normal auto-approved change) created → applied %s",
		rbCreated.Sub(failedAt(failed)).Round(time.Millisecond), rbApplied.Sub(rbCreated).Round(time.Millisecond), v2Applied.Sub(v2Created).Round(time.Millisecond))

	// Git returns to v1: nothing to do.
	j.repo.push("1.0.0")
	j.sync()
	require.Equal(t, []string{rbName}, j.rollbacks())
	// v2's content again, under a new commit: quarantined.
	again := j.pushChange("2.0.0", false)
	require.Equal(t, v2.Spec.ContentDigest, again.Spec.ContentDigest)
	require.Equal(t, sluicev1.RiskLow, again.Spec.Verdict.Risk)
	waiting, _ := j.waitChange(again.Name, "held by the quarantine", inPhase(sluicev1.PhaseAwaitingApproval))
	msg := condition(waiting, sluicev1.ConditionApproved).Message
	require.Contains(t, msg, "quarantined: verification of "+v2.Name+" failed")
	require.Contains(t, msg, "never auto-approved")
}

// Under the default rule (rollback: approval) the rollback waits for an
// approval, says why, and is applied once a person approves it.
func TestRollbackJoint_defaultRuleWaitsForAnApproval(t *testing.T) {
	j := newJointFixture(t, `{required: 1, autoApproveRisk: none, approvers: ["k8s:alice"]}`)
	v1 := j.pushChange("1.0.0", false)
	j.decide(v1, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(v1.Name, "verified", inPhase(sluicev1.PhaseVerified))
	v2 := j.pushChange("2.0.0", true)
	j.decide(v2, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(v2.Name, "verification failed", inPhase(sluicev1.PhaseVerificationFailed))

	rbName := sluicev1.RollbackChangeRequestName("web-prod", v2.Name, 1)
	rb, _ := j.waitChange(rbName, "waits for an approval", inPhase(sluicev1.PhaseAwaitingApproval))
	require.Contains(t, condition(rb, sluicev1.ConditionApproved).Message, "the effective rule says rollback=approval")
	j.decide(rb, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(rbName, "verified once approved", inPhase(sluicev1.PhaseVerified))
}

// A rollback that itself fails its verification is not rolled back again:
// the Release says RollbackOfRollback, and no second rollback is built.
// A pusher's `rollback: auto` on a plain change (with a required
// approval) does not let it through either.
func TestRollbackJoint_aFailedRollbackIsNotRolledBackAgain(t *testing.T) {
	j := newJointFixture(t, "{required: 0, autoApproveRisk: high, rollback: auto}")
	v1 := j.pushChange("1.0.0", false)
	j.waitChange(v1.Name, "verified", inPhase(sluicev1.PhaseVerified))
	// From now on v1's revision measures bad too: the rollback fails.
	j.markBad(v1.Spec.Revision)
	v2 := j.pushChange("2.0.0", true)
	j.waitChange(v2.Name, "verification failed", inPhase(sluicev1.PhaseVerificationFailed))
	rbName := sluicev1.RollbackChangeRequestName("web-prod", v2.Name, 1)
	j.waitChange(rbName, "the rollback fails its verification", inPhase(sluicev1.PhaseVerificationFailed))
	rel := j.releaseWhen("web-prod", "decided on the failed rollback, the earlier request taken back", func(r *sluicev1.Release) bool {
		return r.Status.Rollback != nil && r.Status.Rollback.Of == rbName && len(sluicev1.RollbackRequests(r.Annotations)) == 0
	})
	require.Equal(t, sluicev1.ReasonRollbackOfRollback, rel.Status.Rollback.Reason)
	for k := range rel.Annotations {
		require.False(t, strings.HasPrefix(k, sluicev1.AnnotationRollbackPrefix), "annotation %s", k)
	}
	j.sync()
	require.Equal(t, []string{rbName}, j.rollbacks())

	// A pusher turns on rollback: auto with a required approval: a plain
	// change still waits for it.
	j.repo.rule = `{required: 1, autoApproveRisk: none, approvers: ["k8s:alice"], rollback: auto}`
	v3 := j.pushChange("3.0.0", false)
	waiting, _ := j.waitChange(v3.Name, "waits", inPhase(sluicev1.PhaseAwaitingApproval))
	require.NotEqual(t, sluicev1.ReasonRollbackAuto, condition(waiting, sluicev1.ConditionApproved).Reason)
}

// releaseDump is web-prod's status and annotations, for a failure message.
func releaseDump(f *fixture) string {
	rel := &sluicev1.Release{}
	if err := f.c.Get(ctx(f.t), client.ObjectKey{Namespace: f.ns, Name: "web-prod"}, rel); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("annotations %v, rollback %+v, lastVerified %+v, conditions %+v", rel.Annotations, rel.Status.Rollback, rel.Status.LastVerified, rel.Status.Conditions)
}

// phases lists the namespace's changes with their phases.
func (j *jointFixture) phases() string {
	var list sluicev1.ChangeRequestList
	if err := j.c.List(ctx(j.t), &list, client.InNamespace(j.ns)); err != nil {
		return err.Error()
	}
	var out []string
	for _, cr := range list.Items {
		out = append(out, cr.Name+"="+string(cr.Status.Phase))
	}
	return strings.Join(out, " ")
}

// BenchmarkRollback measures the rollback's figures (issue 23) with this
// package's operator and the real syncer binary on one API server: per
// iteration (after a first install a person approves) a good version
// verifies, a bad one (auto-approved by risk,
// the normal apply the rollback compares with) fails its check, and the
// rollback is created by the syncer and auto-approved. It reports the
// medians of: failing measurement → rollback ChangeRequest seen, rollback
// created → applied, and the bad version's created → applied.
func BenchmarkRollback(b *testing.B) {
	j := newJointFixture(b, `{required: 1, autoApproveRisk: low, approvers: ["k8s:alice"]}`)
	// The first install is not low risk: a person approves it.
	first := j.pushChange("1.0.0", false)
	j.decide(first, "k8s:alice", sluicev1.DecisionApprove)
	j.waitChange(first.Name, "verified", inPhase(sluicev1.PhaseVerified))
	var toRollback, rollbackApply, normalApply []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		good, _ := j.pushChangeTimed(fmt.Sprintf("good-%d", i), false)
		j.waitChange(good.Name, "verified", inPhase(sluicev1.PhaseVerified))
		bad, created := j.pushChangeTimed(fmt.Sprintf("bad-%d", i), true)
		_, applied := j.waitChange(bad.Name, "applied without a person", wasApplied)
		failed, _ := j.waitChange(bad.Name, "verification failed", inPhase(sluicev1.PhaseVerificationFailed))
		rbName := sluicev1.RollbackChangeRequestName("web-prod", bad.Name, 1)
		_, rbCreated := j.waitChange(rbName, "the rollback is created", func(*sluicev1.ChangeRequest) bool { return true })
		_, rbApplied := j.waitChange(rbName, "the rollback is applied", wasApplied)
		j.waitChange(rbName, "the rollback verifies", inPhase(sluicev1.PhaseVerified))
		toRollback = append(toRollback, rbCreated.Sub(failedAt(failed)))
		rollbackApply = append(rollbackApply, rbApplied.Sub(rbCreated))
		normalApply = append(normalApply, applied.Sub(created))
	}
	b.StopTimer()
	median := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(toRollback), "fail-to-rollback-ms")
	b.ReportMetric(median(rollbackApply), "rollback-apply-ms")
	b.ReportMetric(median(normalApply), "normal-apply-ms")
	b.ReportMetric(median(rollbackApply)/median(normalApply), "rollback/normal")
}
