package controller

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// benchOperator is an operator binary running as its own process (so its
// heap and API requests are its own), serving one shard.
type benchOperator struct {
	shard   string
	cmd     *exec.Cmd
	metrics string
	// pprof is the process's pprof address.
	pprof string
}

// heapProfile writes the process's heap profile, after a GC, into dir
// (SLUICE_BENCH_SHARD_PROFILES): what its heap holds.
func (o *benchOperator) heapProfile(t *testing.T, dir, name string) {
	if dir == "" {
		return
	}
	resp, err := http.Get("http://" + o.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Logf("heap profile of %q: %v", o.shard, err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(filepath.Join(dir, name))
	require.NoError(t, err)
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	require.NoError(t, err)
}

// metric sums the samples of the named metric on the process's /metrics,
// keeping those whose labels contain every fragment in match.
func (o *benchOperator) metric(t *testing.T, name string, match func(labels string) bool) float64 {
	t.Helper()
	resp, err := http.Get("http://" + o.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue // another metric with this prefix
		}
		if match != nil && !match(labels) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// byLabel sums the named metric's samples by the value of one label.
func (o *benchOperator) byLabel(t *testing.T, name, label string) map[string]float64 {
	out := map[string]float64{}
	o.metric(t, name, func(labels string) bool {
		for _, l := range strings.Split(labels, ",") {
			if k, v, _ := strings.Cut(l, "="); k == label {
				v = strings.Trim(v, `"`)
				out[v] += o.sample(t, name, labels)
			}
		}
		return false
	})
	return out
}

// sample is the value of the one sample of name with exactly labels.
func (o *benchOperator) sample(t *testing.T, name, labels string) float64 {
	return o.metric(t, name, func(l string) bool { return l == labels })
}

// breakdown says where a process's time and requests went: requests by
// method (and how many before the first change) and by response code,
// reconciles by controller and result, the work queues' mean wait and
// work.
func (o *benchOperator) breakdown(t *testing.T, startup map[string]float64) string {
	var parts []string
	reqs := o.byLabel(t, "rest_client_requests_total", "method")
	var methods []string
	for m, v := range reqs {
		methods = append(methods, fmt.Sprintf("%s %.0f (start-up %.0f)", m, v, startup[m]))
	}
	slices.Sort(methods)
	parts = append(parts, "requests "+strings.Join(methods, ", "))
	parts = append(parts, fmt.Sprintf("by code %v", o.byLabel(t, "rest_client_requests_total", "code")))
	rec := o.byLabel(t, "controller_runtime_reconcile_total", "result")
	parts = append(parts, fmt.Sprintf("reconciles %v", rec))
	for _, q := range []string{"changerequest", "release"} {
		is := func(labels string) bool { return strings.Contains(labels, `name="`+q+`"`) }
		wait := o.metric(t, "workqueue_queue_duration_seconds_sum", is) / max(o.metric(t, "workqueue_queue_duration_seconds_count", is), 1)
		work := o.metric(t, "workqueue_work_duration_seconds_sum", is) / max(o.metric(t, "workqueue_work_duration_seconds_count", is), 1)
		parts = append(parts, fmt.Sprintf("%s queue wait %.0f ms, work %.0f ms (%.0f items)", q, wait*1000, work*1000, o.metric(t, "workqueue_work_duration_seconds_count", is)))
	}
	return strings.Join(parts, "; ")
}

// terminal counts the changes the process's sluice_changerequests gauge
// shows in a terminal phase.
func (o *benchOperator) terminal(t *testing.T) float64 {
	return o.metric(t, "sluice_changerequests", func(labels string) bool {
		for _, l := range strings.Split(labels, ",") {
			if k, v, _ := strings.Cut(l, "="); k == "phase" {
				return sluicev1.ChangeRequestPhase(strings.Trim(v, `"`)).IsTerminal()
			}
		}
		return false
	})
}

// heap is the process's live heap after a collection
// (go_gc_heap_live_bytes: what the last GC found live, not the garbage
// made since). Two collections are asked for through the pprof endpoint
// first, so the second finds what the process holds now; the second
// also drops what a sync.Pool kept from before the first (the metrics'
// gzip writers: a cache, not the process's data).
func (o *benchOperator) heap(t *testing.T) float64 {
	for range 2 {
		resp, err := http.Get("http://" + o.pprof + "/debug/pprof/heap?gc=1&debug=1")
		require.NoError(t, err, "a GC through the pprof endpoint of %q", o.shard)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	live := o.metric(t, "go_gc_heap_live_bytes", nil)
	require.Greater(t, live, 0.0, "the operator %q exports go_gc_heap_live_bytes", o.shard)
	return live / (1 << 20)
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startBenchOperator runs the operator binary for shard key over nss,
// with the record-only test applier and nothing else that is not the
// gate and the lock (no compliance, drift, Terraform or Argo CD).
func startBenchOperator(t *testing.T, bin, kubeconfig, shard string, nss []string) *benchOperator {
	t.Helper()
	// pprof serves the GC heap reads before each heap figure.
	o := &benchOperator{shard: shard, metrics: freeLocalAddr(t), pprof: freeLocalAddr(t)}
	args := []string{"--shard=" + shard}
	if os.Getenv("SLUICE_BENCH_SHARD_NAMESPACED") != "" {
		// One informer per namespace and kind, each with its own
		// buffers: a fixed heap that grows with the namespaces.
		args = append(args, "--namespaces="+strings.Join(nss, ","))
	}
	o.cmd = exec.Command(bin, append(args, "--test-applier=helm",
		"--metrics-bind-address="+o.metrics, "--health-probe-bind-address=0", "--pprof-bind-address="+o.pprof,
		"--leader-elect=false", "--compliance=false", "--drift=false", "--terraform-apply=false", "--argocd-apply=false",
		"--concurrency=4", "--zap-log-level=error")...)
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	o.cmd.Stdout, o.cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, o.cmd.Start())
	t.Cleanup(func() { o.stop() })
	require.Eventually(t, func() bool { return o.metric(t, "sluice_changerequests", nil) >= 0 }, time.Minute, 200*time.Millisecond, "operator %q serves metrics", shard)
	return o
}

func (o *benchOperator) stop() {
	if o.cmd.Process != nil && o.cmd.ProcessState == nil {
		_ = o.cmd.Process.Kill()
		_ = o.cmd.Wait()
	}
}

// shardBenchObjects makes, per namespace, one Repository and perNS
// Releases each with one auto-approved change; the namespaces are spread
// over shards (none when shards is empty). Each Release deploys to its own
// target namespace (svcNNNNN-prod, the service-environment layout), or,
// with sharedTarget, all to one (checkout-prod: every change new to a
// namespace then weighs every Release of its control namespace).
func shardBenchObjects(nss []string, perNS int, shards []string, sharedTarget bool) (repos, rels, changes []client.Object) {
	rule := sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	keys := shards
	if len(keys) == 0 {
		keys = []string{""}
	}
	n := 0
	for j, ns := range nss {
		// A namespace's Repository, and so its Releases, belong to one
		// shard (the record-only applier keeps one record per namespace:
		// one writer each, as with one operator).
		key := keys[j%len(keys)]
		repo := &sluicev1.Repository{
			ObjectMeta: metav1.ObjectMeta{Name: "infra" + key, Namespace: ns},
			Spec:       sluicev1.RepositorySpec{URL: "https://git.example.com/infra.git", TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer"},
		}
		sluicev1.SetShard(repo, key)
		repos = append(repos, repo)
		for i := range perNS {
			n++
			name := fmt.Sprintf("svc%05d-prod", i)
			target := name
			if sharedTarget {
				target = "checkout-prod"
			}
			rel := &sluicev1.Release{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: sluicev1.ReleaseSpec{
					Repository: "infra" + key, Service: fmt.Sprintf("svc%05d", i), Environment: "prod", Delivery: sluicev1.DeliveryHelm,
					SourcePath: "services/x", TargetNamespace: target, Chart: sluicev1.ChartSource{Path: "charts/service"}, Rule: rule,
				},
			}
			sluicev1.SetShard(rel, key)
			rels = append(rels, rel)
			rev := fmt.Sprintf("%010x%030x", n, 0x5a)
			cr := &sluicev1.ChangeRequest{
				ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(name, rev, 1), Namespace: ns, Labels: map[string]string{sluicev1.LabelRelease: name}},
				Spec: sluicev1.ChangeRequestSpec{
					Release: name, Revision: rev, TargetNamespace: target, Delivery: sluicev1.DeliveryHelm,
					Artifact:      sluicev1.ArtifactReference{URL: "http://syncer/a.tar.gz", SHA256: sluicev1.SHA256Digest([]byte(rev))},
					ContentDigest: sluicev1.SHA256Digest([]byte("content" + rev)),
					Verdict:       sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
					Rule:          rule,
				},
			}
			cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
			sluicev1.SetShard(cr, key)
			changes = append(changes, cr)
		}
	}
	return repos, rels, changes
}

// apiServerRequests reads the API server's own count of the requests it
// served, by verb and resource ("PATCH releases/status"), from every
// client: the per-resource view the operators' client metrics (by method
// only) lack.
func apiServerRequests(t *testing.T) map[string]float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err, "read the API server's metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	require.NoError(t, err, "parse the API server's metrics")
	out := map[string]float64{}
	fam := fams["apiserver_request_total"]
	if fam == nil {
		return out
	}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// perChangeBreakdown prints what the API server served between two reads
// of apiServerRequests, per change, largest first (under 0.01 left out).
func perChangeBreakdown(before, after map[string]float64, changes int) string {
	type row struct {
		key string
		n   float64
	}
	var rows []row
	for k, v := range after {
		if d := (v - before[k]) / float64(changes); d >= 0.01 {
			rows = append(rows, row{k, d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.key, b.key)) })
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = fmt.Sprintf("%s %.2f", r.key, r.n)
	}
	return strings.Join(parts, ", ")
}

// releasesSettled reports whether the n Releases in nss all carry the
// operator's finalizer and a summary of their generation.
func releasesSettled(t *testing.T, nss []string, n int) bool {
	t.Helper()
	settled := 0
	for _, ns := range nss {
		var list sluicev1.ReleaseList
		require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(ns)))
		for _, rel := range list.Items {
			if slices.Contains(rel.Finalizers, sluicev1.ReleaseFinalizer) && rel.Status.ObservedGeneration == rel.Generation {
				settled++
			}
		}
	}
	return settled == n
}

// shardRun is one run's figures.
type shardRun struct {
	took     time.Duration
	heap     map[string]float64
	requests map[string]float64
	// startup is each process's requests before the first change (its
	// caches' lists and watches, the Releases' set-up); requests
	// includes them.
	startup map[string]float64
}

// runShardBench creates the objects for shards (none: one unsharded
// operator), starts one operator process per shard, and waits until every
// change is terminal.
func runShardBench(t *testing.T, bin, kubeconfig string, total, perNS int, shards []string) shardRun {
	t.Helper()
	var nss []string
	for i := 0; i*perNS < total; i++ {
		nss = append(nss, env.Namespace(t, "bench-shard-"))
	}
	repos, rels, changes := shardBenchObjects(nss, perNS, shards, os.Getenv("SLUICE_BENCH_SHARD_SHARED_TARGET") != "")
	keys := shards
	if len(keys) == 0 {
		keys = []string{""}
	}
	ops := map[string]*benchOperator{}
	for _, key := range keys {
		ops[key] = startBenchOperator(t, bin, kubeconfig, key, nss)
	}
	createAll(t, repos)
	createAll(t, rels)
	// The Releases' set-up (finalizer, first summary) is done before the
	// first change, so the counts after it are the changes' own: a race
	// between the creates here and the operators would fold set-up writes
	// into the first change's by chance, and more so the slower operator.
	settle := time.Now()
	for !releasesSettled(t, nss, len(rels)) {
		require.Less(t, time.Since(settle), 30*time.Minute, "the Releases never settled (finalizer and first summary)")
		time.Sleep(time.Second)
	}
	startup := map[string]map[string]float64{}
	for key, o := range ops {
		startup[key] = o.byLabel(t, "rest_client_requests_total", "method")
	}
	served := apiServerRequests(t)
	start := time.Now()
	createAll(t, changes)
	want := float64(len(changes))
	for {
		done := 0.0
		for _, o := range ops {
			done += max(o.terminal(t), 0)
		}
		if done >= want {
			break
		}
		require.Less(t, time.Since(start), 60*time.Minute, "changes never finished: %v of %v terminal", done, want)
		time.Sleep(time.Second)
	}
	run := shardRun{took: time.Since(start), heap: map[string]float64{}, requests: map[string]float64{}, startup: map[string]float64{}}
	// Every client's, the bench's own creates of the changes (POST
	// changerequests 1.00) included.
	benchLine("shards: %d process(es): API server requests per change by resource (all clients): %s", len(keys), perChangeBreakdown(served, apiServerRequests(t), len(changes)))
	for key, o := range ops {
		run.heap[key] = o.heap(t)
		run.requests[key] = o.metric(t, "rest_client_requests_total", nil)
		for _, v := range startup[key] {
			run.startup[key] += v
		}
		benchLine("shards: process %q: %s", key, o.breakdown(t, startup[key]))
		o.heapProfile(t, os.Getenv("SLUICE_BENCH_SHARD_PROFILES"), fmt.Sprintf("heap-%d-%s.pprof", len(keys), cmp.Or(key, "unsharded")))
		o.stop()
	}
	// Leave the API server as it was for the next run: the namespaces go.
	for _, ns := range nss {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	return run
}

// TestBench_shardsVersusOneOperator is issue 24's figure: the same
// releases, each with one auto-approved change, to terminal on one
// unsharded operator and on four shard operators (each its own process),
// in the same run: time (and the ratio), each process's heap and its API
// requests per change.
func TestBench_shardsVersusOneOperator(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("benchmark: run with SLUICE_BENCH=1 (make bench)")
	}
	total, perNS := envInt("SLUICE_BENCH_SHARD_RELEASES", 10000), envInt("SLUICE_BENCH_SHARD_PER_NAMESPACE", 250)
	shards := []string{"s0", "s1", "s2", "s3"}
	// SLUICE_BENCH_OPERATOR_BIN runs a binary built before (another
	// commit's, to compare two versions of the code on one machine).
	bin := os.Getenv("SLUICE_BENCH_OPERATOR_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "operator")
		build := exec.Command("go", "build", "-o", bin, "../../cmd/operator")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		require.NoError(t, build.Run(), "build the operator")
	}
	kubeconfig, err := env.AdminKubeconfig("bench-operator")
	require.NoError(t, err)

	one := runShardBench(t, bin, kubeconfig, total, perNS, nil)
	four := runShardBench(t, bin, kubeconfig, total, perNS, shards)

	// Per change: the requests after the Releases' set-up.
	perChange := func(r shardRun, key string) float64 { return (r.requests[key] - r.startup[key]) / float64(total) }
	layout := "each Release its own target namespace"
	if os.Getenv("SLUICE_BENCH_SHARD_SHARED_TARGET") != "" {
		layout = "all Releases one target namespace"
	}
	benchLine("shards: %d Releases with one auto-approved change each (%d per namespace, %s), record-only applier, each operator its own process", total, perNS, layout)
	benchLine("shards: one unsharded operator: all terminal in %.1fs; live heap after GC %.1f MiB; API requests %.0f (set-up %.0f) = %.2f per change after set-up",
		one.took.Seconds(), one.heap[""], one.requests[""], one.startup[""], perChange(one, ""))
	var sharded float64
	var maxHeap float64
	var parts []string
	for _, key := range shards {
		sharded += perChange(four, key)
		maxHeap = max(maxHeap, four.heap[key])
		parts = append(parts, fmt.Sprintf("%s live heap after GC %.1f MiB, %.0f requests (set-up %.0f)", key, four.heap[key], four.requests[key], four.startup[key]))
	}
	benchLine("shards: four shard operators: all terminal in %.1fs (time ratio sharded/unsharded %.2f); %s; API requests %.2f per change after set-up",
		four.took.Seconds(), four.took.Seconds()/one.took.Seconds(), strings.Join(parts, "; "), sharded)
	benchLine("shards: largest shard heap / unsharded heap = %.2f (target <= 0.33); API requests per change sharded/unsharded = %.2f (target <= 1)",
		maxHeap/one.heap[""], sharded/perChange(one, ""))
}
