package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The benchmark's namespaces: one for the releases Sluice delivers (the
// Repository's "api-*" targets) and one for the bare Helm installs.
const (
	benchSluiceNS = "api-bench"
	benchBareNS   = "bare-bench"
)

// benchConfig is the benchmark's size: n releases each way, delivered in
// batches of batch, the two ways alternating batch by batch.
type benchConfig struct{ n, batch int }

// benchFromEnv reads SLUICE_BENCH_N (default 50) and SLUICE_BENCH_BATCH
// (default 10).
func benchFromEnv() benchConfig {
	atoi := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	cfg := benchConfig{n: atoi("SLUICE_BENCH_N", 50), batch: atoi("SLUICE_BENCH_BATCH", 10)}
	if cfg.batch > cfg.n {
		cfg.batch = cfg.n
	}
	return cfg
}

// benchTotals accumulates one way's figures over its batches.
type benchTotals struct {
	wall     time.Duration
	nodeCPU  time.Duration
	testCPU  time.Duration
	releases int
}

// TestBenchReleasesThroughSluiceVsBareHelm (make bench, SLUICE_E2E_BENCH=1):
// n releases of one small Deployment each (the golden-path chart, the test
// app, one replica) delivered through Sluice — one push per batch, every
// change auto-approved, timed from the push until each ChangeRequest is
// Applied, which with the chart's helm.wait means its pods are Ready —
// against the same releases installed bare with the Helm SDK (`helm
// install --wait`, the batch in parallel) on the same node. The two ways
// alternate batch by batch, each batch's first way alternating too, so a
// machine getting busier or quieter weighs on both. It reports both times,
// the ratio (the goal: at most 1.3) and the node's CPU per release
// (the pods' cgroup and the node's host processes; the bare installs' Helm
// client runs in this test process and is reported apart).
func TestBenchReleasesThroughSluiceVsBareHelm(t *testing.T) {
	if os.Getenv("SLUICE_E2E_BENCH") != "1" {
		t.Skip("the benchmark runs in make bench (SLUICE_E2E_BENCH=1)")
	}
	c := need(t)
	cfg := benchFromEnv()
	repo := c.serveGit(t)
	c.benchNamespaces(t)
	var sl, bare benchTotals
	for i, round := 0, 0; i < cfg.n; i, round = i+cfg.batch, round+1 {
		k := min(cfg.batch, cfg.n-i)
		ways := []func(){
			func() { c.benchSluiceBatch(t, repo, i, k, &sl) },
			func() { c.benchBareBatch(t, i, k, &bare) },
		}
		if round%2 == 1 {
			ways[0], ways[1] = ways[1], ways[0]
		}
		for _, w := range ways {
			w()
		}
	}
	report := func(name string, b benchTotals) string {
		return fmt.Sprintf("%s: %d releases in %s (%.2f s per release), node CPU %.2f s per release, test-process CPU %.2f s per release",
			name, b.releases, b.wall.Round(time.Millisecond), b.wall.Seconds()/float64(b.releases),
			b.nodeCPU.Seconds()/float64(b.releases), b.testCPU.Seconds()/float64(b.releases))
	}
	ratio := sl.wall.Seconds() / bare.wall.Seconds()
	for _, l := range []string{
		fmt.Sprintf("bench: N=%d, batches of %d, alternating", cfg.n, cfg.batch),
		"bench: " + report("through Sluice (push → Applied, pods Ready)", sl),
		"bench: " + report("bare helm install --wait (Helm SDK)", bare),
		fmt.Sprintf("bench: ratio Sluice/bare %.2f× (goal ≤ 1.3×)", ratio),
	} {
		if testing.Verbose() {
			t.Log(l)
		} else {
			fmt.Println(l) // make bench's output shows it without -v too
		}
	}
}

// benchNamespaces creates the benchmark's namespaces and lets the
// Repository's deployer deploy into the Sluice one.
func (c *cluster) benchNamespaces(t *testing.T) {
	t.Helper()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchSluiceNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchBareNS}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer", Namespace: benchSluiceNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-deployer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "infra-deployer", Namespace: controlNS}}},
	} {
		if err := c.c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// benchName is the service (and bare release) name of release i.
func benchName(i int) string { return fmt.Sprintf("b%02d", i) }

// benchSluiceBatch pushes k auto-approved services (from index first) in
// one commit and waits until each change is Applied.
func (c *cluster) benchSluiceBatch(t *testing.T, repo *gitServer, first, k int, tot *benchTotals) {
	t.Helper()
	for i := first; i < first+k; i++ {
		writeBenchService(t, repo.work, c.root, benchName(i))
	}
	m := startMeter(t, c)
	head := repo.commit(t, fmt.Sprintf("bench: services %s to %s", benchName(first), benchName(first+k-1)))
	for i := first; i < first+k; i++ {
		c.waitChange(t, benchName(i)+"-bench-"+head[:10], sluicev1.PhaseApplied)
	}
	wall, node, self := m.stop(t)
	t.Logf("Sluice batch %s..%s: %s wall, node CPU %s", benchName(first), benchName(first+k-1), wall.Round(time.Millisecond), node.Round(time.Millisecond))
	tot.add(wall, node, self, k)
}

// benchBareBatch installs k releases (from index first) with the Helm SDK
// in parallel, each waiting for its pods, then uninstalls them untimed so
// the node holds no more pods than the Sluice side leaves.
func (c *cluster) benchBareBatch(t *testing.T, first, k int, tot *benchTotals) {
	t.Helper()
	vals := map[string]any{
		"image":        map[string]any{"repository": "sluice-gitops/testapp", "tag": "e2e", "pullPolicy": "IfNotPresent"},
		"replicaCount": 1,
		"resources":    benchResources,
	}
	chart := filepath.Join(c.root, "charts", "service")
	m := startMeter(t, c)
	var wg sync.WaitGroup
	errs := make([]error, k)
	for j := 0; j < k; j++ {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			_, errs[j] = c.helmInstall(context.Background(), benchBareNS, benchName(first+j), chart, vals)
		}(j)
	}
	wg.Wait()
	wall, node, self := m.stop(t)
	for j, err := range errs {
		if err != nil {
			t.Fatalf("helm install %s: %v", benchName(first+j), err)
		}
	}
	t.Logf("bare batch %s..%s: %s wall, node CPU %s", benchName(first), benchName(first+k-1), wall.Round(time.Millisecond), node.Round(time.Millisecond))
	tot.add(wall, node, self, k)
	cfg, err := c.helmConfig(benchBareNS)
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < k; j++ {
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, helmWait
		if _, err := un.Run(benchName(first + j)); err != nil {
			t.Fatalf("helm uninstall %s: %v", benchName(first+j), err)
		}
	}
}

func (b *benchTotals) add(wall, node, self time.Duration, releases int) {
	b.wall += wall
	b.nodeCPU += node
	b.testCPU += self
	b.releases += releases
}

// benchResources are the bench pods' requests: the golden-path chart's
// default (50m CPU) would let only about 30 pods onto the node's 2 cores
// (the rest Pending, unschedulable), and the test app needs next to
// nothing. Both ways get the same.
var benchResources = map[string]any{
	"requests": map[string]any{"cpu": "5m", "memory": "16Mi"},
	"limits":   map[string]any{"cpu": "100m", "memory": "64Mi"},
}

// benchResourcesYAML is benchResources in values.yaml form.
const benchResourcesYAML = `resources:
  requests: {cpu: 5m, memory: 16Mi}
  limits: {cpu: 100m, memory: 64Mi}
`

// writeBenchService writes services/<name>: the golden-path chart with the
// test app (one replica, Ready at once, small requests) in the bench
// namespace, changes of any risk up to "high" auto-approved.
func writeBenchService(t *testing.T, dir, root, name string) {
	t.Helper()
	writeService(t, dir, root, name, benchSluiceNS, 1, "0s")
	// writeService's environment is "e2e" with approvals required: the
	// bench's is "bench" and passes the gate alone.
	f := filepath.Join(dir, "services", name, "service.yaml")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "  - name: e2e\n", "  - name: bench\n", 1)
	s = strings.Replace(s, "approval: {required: 1, autoApproveRisk: none}", "approval: {required: 1, autoApproveRisk: high}", 1)
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	v := filepath.Join(dir, "services", name, "values.yaml")
	b, err = os.ReadFile(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v, append(b, benchResourcesYAML...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// meter measures a stretch of the benchmark: wall time, the node's CPU
// (every pod's cgroup and the node's host processes) and this process's
// own CPU (the bare installs' Helm client).
type meter struct {
	c     *cluster
	start time.Time
	node  time.Duration
	self  time.Duration
}

func startMeter(t *testing.T, c *cluster) *meter {
	t.Helper()
	return &meter{c: c, start: time.Now(), node: c.nodeCPU(t), self: selfCPU()}
}

func (m *meter) stop(t *testing.T) (wall, node, self time.Duration) {
	t.Helper()
	return time.Since(m.start), m.c.nodeCPU(t) - m.node, selfCPU() - m.self
}

// selfCPU is this process's user and system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nodeCPU is the CPU the node has used so far: the kubepods cgroup (every
// pod, Sluice's included) plus the node's host processes up.sh recorded
// (API server, etcd, kubelet, containerd, controller-manager, scheduler,
// kube-proxy, kube-router).
func (c *cluster) nodeCPU(t *testing.T) time.Duration {
	t.Helper()
	var total time.Duration
	for _, f := range []string{"/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/kubepods/cpuacct.usage"} {
		if b, err := os.ReadFile(f); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err == nil {
				total += time.Duration(ns)
				break
			}
		}
	}
	pids, _ := filepath.Glob(filepath.Join(c.stateDir, "*.pid"))
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		total += procCPU(strings.TrimSpace(string(b)))
	}
	return total
}

// procCPU is utime+stime of process pid and its reaped children, from
// /proc/<pid>/stat (clock ticks of 1/100 s, the kernel's USER_HZ here).
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		if i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
