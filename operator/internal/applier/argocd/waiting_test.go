package argocd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// errorLog is a log sink that keeps every error logged.
type errorLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *errorLog) Init(logr.RuntimeInfo)          {}
func (l *errorLog) Enabled(int) bool               { return true }
func (l *errorLog) Info(int, string, ...any)       {}
func (l *errorLog) WithValues(...any) logr.LogSink { return l }
func (l *errorLog) WithName(string) logr.LogSink   { return l }
func (l *errorLog) Error(err error, msg string, kv ...any) {
	l.add(fmt.Sprintf("%s: %v %v", msg, err, kv))
}

func (l *errorLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, s)
}

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// looks counts the calls of an applier.
type looks struct {
	applier.Applier
	n atomic.Int32
}

func (l *looks) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	l.n.Add(1)
	return l.Applier.Apply(ctx, req)
}

// metric sums the samples of a metric whose labels include want
// (histograms: the sample count).
func metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	// Gather returns what it collected; a collector that reads the
	// cache fails until the manager's cache started.
	families, _ := ctrlmetrics.Registry.Gather()
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// A sync that Argo CD takes a while to finish is waiting, not failing: the
// change is looked at three times (and more) without an error in the logs,
// an error backoff or a failed or retried apply in the metrics, its status
// says that it waits for Argo CD, and it is applied once Argo CD is done.
func TestOperator_aSyncThatTakesThreeLooksIsWaitingNotFailing(t *testing.T) {
	logs := &errorLog{}
	ctrl.SetLogger(logr.New(logs))
	t.Cleanup(func() { ctrl.SetLogger(logr.Discard()) })

	f := newFixture(t, true)
	var counted *looks
	ctx := f.startOperator(300*time.Millisecond, func(a applier.Applier) applier.Applier {
		counted = &looks{Applier: a}
		return counted
	})
	errorsBefore := metric(t, "controller_runtime_reconcile_errors_total", map[string]string{"controller": "changerequest"})

	f.autoApprove(ctx)

	// No kubelet: the chart's Deployment stays Progressing, and so does
	// Argo CD's sync, until the test makes it available.
	cr := f.change("message: approved\ndeployment: true\n", nil)

	got := &sluicev1.ChangeRequest{}
	require.Eventually(t, func() bool {
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), got))
		return counted.n.Load() >= 3 && meta.IsStatusConditionTrue(got.Status.Conditions, sluicev1.ConditionProgressing)
	}, 90*time.Second, 100*time.Millisecond, "not looked at three times while waiting (Progressing)")
	require.Equal(t, sluicev1.PhaseApplying, got.Status.Phase)
	for _, typ := range []string{sluicev1.ConditionProgressing, sluicev1.ConditionReady, sluicev1.ConditionApplied} {
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		require.NotNil(t, c, typ)
		require.Equal(t, sluicev1.ReasonWaitingForArgoCD, c.Reason, typ)
		require.Contains(t, c.Message, "waiting for Argo CD to sync revision "+cr.Spec.Revision[:10], typ)
		require.NotContains(t, c.Message, "failed", typ)
	}
	// The Deployment becomes available once Argo CD created it (as a
	// kubelet would make it).
	dep := &appsv1.Deployment{}
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: f.target, Name: f.release.Name}, dep) == nil
	}, 90*time.Second, 200*time.Millisecond, "Argo CD did not create the Deployment: %s", argo.Logs())
	first := startedAt(f.application())
	require.NotEmpty(t, first)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	require.NoError(t, env.Client.Status().Update(ctx, dep))
	got, err := env.WaitChangePhase(ctx, client.ObjectKeyFromObject(cr), sluicev1.PhaseApplied, 90*time.Second)
	require.NoError(t, err)
	require.Nil(t, meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionProgressing), "no longer waiting")

	require.Empty(t, logs.all(), "waiting logs no error")
	require.Equal(t, errorsBefore, metric(t, "controller_runtime_reconcile_errors_total", map[string]string{"controller": "changerequest"}), "no error backoff")
	for _, result := range []string{"retry", "failed"} {
		require.Zero(t, metric(t, "sluice_apply_duration_seconds", map[string]string{"applier": Name, "result": result}), result)
	}
	require.Zero(t, metric(t, "sluice_changes_failed_total", map[string]string{"applier": Name}))
	require.Equal(t, 1.0, metric(t, "sluice_changes_applied_total", map[string]string{"applier": Name}))
	require.True(t, strings.HasPrefix(got.Status.Apply.Message, "Argo CD Application"), got.Status.Apply.Message)
	require.Equal(t, first, startedAt(f.application()), "the running sync was not asked for again")
}
