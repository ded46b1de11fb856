package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// noopApplier applies nothing, instantly.
type noopApplier struct{}

func (noopApplier) Name() string { return "noop" }
func (noopApplier) Apply(context.Context, applier.Request) (applier.Result, error) {
	return applier.Result{Message: "no-op"}, nil
}

// reconcileCounts sums controller-runtime's reconcile counter by
// controller and result.
func reconcileCounts(t *testing.T) string {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var parts []string
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetValue())
				}
				parts = append(parts, fmt.Sprintf("%s=%.0f", strings.Join(labels, "/"), v))
			}
		}
	}
	return "reconciles " + strings.Join(parts, " ")
}

// reconcileCount is controller-runtime's reconcile counter for one
// controller and result.
func reconcileCount(t *testing.T, controllerName, result string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == controllerName && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// envInt reads a positive integer knob, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchLine prints one figure for hack/bench.sh.
func benchLine(format string, args ...any) {
	fmt.Printf("BENCH "+format+"\n", args...)
}

// createAll creates objects with a few parallel writers.
func createAll(t *testing.T, objs []client.Object) {
	t.Helper()
	var wg sync.WaitGroup
	ch := make(chan client.Object)
	errs := make(chan error, len(objs))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range ch {
				if err := env.Client.Create(context.Background(), o); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, o := range objs {
		ch <- o
	}
	close(ch)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func rssKiB() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "n/a"
}

// queued is the items in every controller's work queue (workqueue_depth).
func queued(t *testing.T) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range families {
		if mf.GetName() == "workqueue_depth" {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// heapMiB runs a GC and returns the live heap (the bytes of reachable
// objects, MemStats.HeapAlloc) and the heap in use (whole spans,
// HeapInuse, which also counts the free room in partly used spans and so
// grows with churn, not only with what is held).
func heapMiB() (live, inUse float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20), float64(m.HeapInuse) / (1 << 20)
}

// writeHeapProfile writes a heap profile to path (after a GC, so it shows
// what is held); an empty path writes none.
func writeHeapProfile(t *testing.T, path string) {
	t.Helper()
	if path == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, pprof.WriteHeapProfile(f))
}

// TestBench_gateThroughputWritesAndMemory prints the figures of `make
// bench`. It runs only with SLUICE_BENCH=1 (hack/bench.sh sets it).
func TestBench_gateThroughputWritesAndMemory(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("benchmark: run with SLUICE_BENCH=1 (make bench)")
	}
	releases, perRelease, cached := envInt("SLUICE_BENCH_RELEASES", 100), envInt("SLUICE_BENCH_PER_RELEASE", 10), envInt("SLUICE_BENCH_CACHED", 10000)
	// 5,000 changes (SLUICE_BENCH_PER_RELEASE=50) need more than the
	// default on a loaded 2-core machine (about 0.5 s per change at load 30).
	deadline := time.Duration(envInt("SLUICE_BENCH_DEADLINE_MINUTES", 20)) * time.Minute
	f := newFixture(t)
	op := startOperator(t, f.ns, operatorConfig{applier: noopApplier{}, concurrency: 4})
	liveBefore, _ := heapMiB()

	rule := sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	var rels []client.Object
	for i := range releases {
		rels = append(rels, &sluicev1.Release{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc%03d-prod", i), Namespace: f.ns},
			Spec: sluicev1.ReleaseSpec{
				Repository: "infra", Service: fmt.Sprintf("svc%03d", i), Environment: "prod",
				SourcePath: "services/x", TargetNamespace: "checkout-prod", Chart: sluicev1.ChartSource{Path: "charts/service"}, Rule: rule,
			},
		})
	}
	createAll(t, rels)
	// The Releases' own set-up (finalizer, first summary) is not a
	// change's write: let it settle before counting.
	require.Eventually(t, func() bool {
		var list sluicev1.ReleaseList
		require.NoError(t, op.mgr.GetCache().List(context.Background(), &list, client.InNamespace(f.ns)))
		settled := 0
		for _, r := range list.Items {
			if len(r.Finalizers) > 0 && r.Status.ObservedGeneration == r.Generation {
				settled++
			}
		}
		return settled == releases
	}, 5*time.Minute, 100*time.Millisecond)

	var changes []client.Object
	for i := range releases {
		for j := range perRelease {
			rev := fmt.Sprintf("%010x%030x", i*perRelease+j+1, 0xbe)
			name := fmt.Sprintf("svc%03d-prod", i)
			cr := &sluicev1.ChangeRequest{
				ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(name, rev, 1), Namespace: f.ns},
				Spec: sluicev1.ChangeRequestSpec{
					Release: name, Revision: rev, TargetNamespace: "checkout-prod",
					Artifact:      sluicev1.ArtifactReference{URL: "http://syncer/a.tar.gz", SHA256: sluicev1.SHA256Digest([]byte(rev))},
					ContentDigest: sluicev1.SHA256Digest([]byte("content" + rev)),
					Verdict:       sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
					Rule:          rule,
				},
			}
			cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
			changes = append(changes, cr)
		}
	}
	// last names each release's newest change (never pruned).
	last := map[string]bool{}
	for i := range releases {
		last[changes[i*perRelease+perRelease-1].GetName()] = true
	}
	clock := newPhaseClock(t, op)
	cpuBefore, requestsBefore := readCPU(t), apiRequests(t)
	profiled := profileAPIServer(t, envInt("SLUICE_BENCH_APISERVER_PROFILE_SECONDS", 20))
	start := time.Now()
	createAll(t, changes)
	created := time.Since(start)
	phases := map[sluicev1.ChangeRequestPhase]int{}
	writesBefore, releaseWritesBefore := op.client.writes.Load(), op.releaseClient.writes.Load()
	requeuesBefore := reconcileCount(t, "changerequest", "requeue_after")
	for {
		// Poll the operator's cache: listing a thousand objects from the
		// API server several times a second would load it more than
		// the operator does.
		var list sluicev1.ChangeRequestList
		require.NoError(t, op.mgr.GetCache().List(context.Background(), &list, client.InNamespace(f.ns), client.UnsafeDisableDeepCopy))
		clear(phases)
		terminal, lastDone := 0, 0
		for _, cr := range list.Items {
			phases[cr.Status.Phase]++
			if cr.Status.Phase.IsTerminal() {
				terminal++
				if last[cr.Name] {
					lastDone++
				}
			}
		}
		if terminal == len(changes) {
			break
		}
		// More changes per release than the Release keeps: the older
		// terminal ones are pruned, so the run is over when nothing is
		// open and every release's last change is terminal.
		if perRelease > (&ReleaseReconciler{}).keep() && terminal == len(list.Items) && lastDone == releases {
			phases["(pruned)"] = len(changes) - len(list.Items)
			break
		}
		require.Less(t, time.Since(start), deadline, "changes never finished within SLUICE_BENCH_DEADLINE_MINUTES (%v): %v", deadline, phases)
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	benchLine("%d auto-approved ChangeRequests across %d releases, no-op applier: all terminal in %.1fs (creating them took %.1fs); phases %v",
		len(changes), releases, took.Seconds(), created.Seconds(), phases)
	writes, releaseWrites := op.client.writes.Load()-writesBefore, op.releaseClient.writes.Load()-releaseWritesBefore
	benchLine("on the way: %d operator writes, %s", writes, reconcileCounts(t))
	benchLine("writes per change: %.2f (%.2f by the ChangeRequest reconciler, %.2f by the Release reconciler; target 4); 1000-change time %.1fs; ChangeRequest reconciles ending in RequeueAfter: %.0f",
		float64(writes)/float64(len(changes)), float64(writes-releaseWrites)/float64(len(changes)), float64(releaseWrites)/float64(len(changes)),
		took.Seconds(), reconcileCount(t, "changerequest", "requeue_after")-requeuesBefore)
	cpuAfter := readCPU(t)
	benchLine("CPU during the run: kube-apiserver %.1fs, etcd %.1fs, test process (operator + test client) %.1fs, in %.1fs of wall time on %d cores; API requests %s",
		cpuAfter.apiserver-cpuBefore.apiserver, cpuAfter.etcd-cpuBefore.etcd, cpuAfter.self-cpuBefore.self, took.Seconds(), runtime.NumCPU(),
		requestsSince(requestsBefore, apiRequests(t)))
	clock.report()
	clock.stop()
	benchLine("work queues (whole test): %s", queueFigures(t))
	profiled()

	// Steady state: wait for the locks to be handed back, then reconcile
	// everything once more and count writes.
	require.Eventually(t, func() bool {
		var list sluicev1.ReleaseList
		require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(f.ns)))
		for _, r := range list.Items {
			if r.Status.CurrentChange != "" || r.Status.AppliedChange == "" {
				return false
			}
		}
		return true
	}, 5*time.Minute, 200*time.Millisecond)
	time.Sleep(3 * time.Second)
	op.client.writes.Store(0)
	reconciles := 0
	for _, o := range changes {
		_, err := op.changes.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		require.NoError(t, err)
		reconciles++
	}
	for _, o := range rels {
		_, err := op.release.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		require.NoError(t, err)
		reconciles++
	}
	steady := op.client.writes.Load()
	benchLine("steady state: %d writes in %d reconciles = %.3f writes per reconcile (target 0)", steady, reconciles, float64(steady)/float64(reconciles))

	// Memory with 10,000 ChangeRequests in the cache: the rest are
	// changes of releases that do not exist (each stays Pending).
	// (Changes the Release pruned are not in the cache: fill up to
	// cached from what is there.)
	var present sluicev1.ChangeRequestList
	require.NoError(t, op.mgr.GetCache().List(context.Background(), &present, client.InNamespace(f.ns)))
	var more []client.Object
	for i := len(changes); i < len(changes)+cached-len(present.Items); i++ {
		rev := fmt.Sprintf("%010x%030x", i+1, 0xcafe)
		name := fmt.Sprintf("gone%03d-prod", i%100)
		cr := changes[0].(*sluicev1.ChangeRequest).DeepCopy()
		cr.ObjectMeta = metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(name, rev, 1), Namespace: f.ns}
		cr.Spec.Release, cr.Spec.Revision = name, rev
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		more = append(more, cr)
	}
	createAll(t, more)
	added := len(more)
	more, changes = nil, nil // only the operator's cache should hold them
	inCache := 0
	require.Eventually(t, func() bool {
		var list sluicev1.ChangeRequestList
		require.NoError(t, op.mgr.GetCache().List(context.Background(), &list, client.InNamespace(f.ns)))
		decided, gone := 0, 0
		for _, cr := range list.Items {
			if cr.Status.Phase != "" {
				decided++
			}
			if strings.HasPrefix(cr.Spec.Release, "gone") {
				gone++
			}
		}
		inCache = len(list.Items)
		return gone == added && decided == len(list.Items)
	}, 10*time.Minute, time.Second)
	// The in-memory span exporter of the tests keeps every span; the
	// operator's own exporter sends them away.
	spans.Reset()
	// Read the heap once the operator is idle (no work queued for two
	// seconds): what a busy operator allocates while the GC runs would
	// count as held.
	idle := 0
	require.Eventually(t, func() bool {
		if queued(t) == 0 {
			idle++
		} else {
			idle = 0
		}
		return idle >= 2
	}, 5*time.Minute, time.Second, "the operator's work queues empty")
	live, inUse := heapMiB()
	writeHeapProfile(t, os.Getenv("SLUICE_BENCH_HEAP_PROFILE"))
	benchLine("memory with %d ChangeRequests in the operator's cache after %d changes: live heap after GC %.1f MiB (%.1f MiB before the changes), heap in use %.1f MiB, process RSS %s (the test process: operator + test client)",
		inCache, releases*perRelease, live, liveBefore, inUse, rssKiB())
}
