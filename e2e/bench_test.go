package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
	// steps holds, for the Sluice way, each change's time per step
	// (benchSteps), by step.
	steps map[string][]time.Duration
	// parts is the node's CPU by part (cpuParts) over the way's batches.
	parts map[string]time.Duration
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
	hook := c.benchWebhook(t)
	var sl, bare benchTotals
	for i, round := 0, 0; i < cfg.n; i, round = i+cfg.batch, round+1 {
		k := min(cfg.batch, cfg.n-i)
		ways := []func(){
			func() { c.benchSluiceBatch(t, repo, hook, i, k, &sl) },
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
	lines := []string{
		fmt.Sprintf("bench: N=%d, batches of %d, alternating; pushes announced by %s", cfg.n, cfg.batch, map[bool]string{true: "a signed push webhook (the poll as fallback)", false: "the Repository's 3 s poll alone (SLUICE_BENCH_POLL=1)"}[hook != nil]),
		"bench: " + report("through Sluice (push → Applied, pods Ready)", sl),
		"bench: " + report("bare helm install --wait (Helm SDK)", bare),
		fmt.Sprintf("bench: ratio Sluice/bare %.2f× (goal ≤ 1.3×)", ratio),
	}
	lines = append(lines, sl.stepLines()...)
	for _, l := range bare.stepLines() {
		lines = append(lines, strings.Replace(l, "bench: step", "bench: bare step", 1))
	}
	lines = append(lines, partLines(sl, bare)...)
	lines = append(lines, c.throttleLines(t)...)
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		lines = append(lines, "bench: load average at the end "+strings.Join(strings.Fields(string(l))[:3], " "))
	}
	for _, l := range lines {
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
// one commit, announces it with hook (benchWebhook) and waits until each
// change is Applied.
func (c *cluster) benchSluiceBatch(t *testing.T, repo *gitServer, hook *benchHook, first, k int, tot *benchTotals) {
	t.Helper()
	for i := first; i < first+k; i++ {
		writeBenchService(t, repo.work, c.root, benchName(i))
	}
	if f := os.Getenv("SLUICE_BENCH_APISERVER_PROFILE"); f != "" && first == k {
		// The API server's CPU profile over the second Sluice batch.
		go c.apiserverProfile(t, f, 25)
	}
	m := startMeter(t, c)
	head := repo.commit(t, fmt.Sprintf("bench: services %s to %s", benchName(first), benchName(first+k-1)))
	hook.push(t, head)
	var crs []string
	for i := first; i < first+k; i++ {
		crs = append(crs, benchName(i)+"-bench-"+head[:10])
		c.waitChange(t, crs[len(crs)-1], sluicev1.PhaseApplied)
	}
	wall, node, self := m.stop(t)
	c.benchSteps(t, m.start, crs, tot)
	tot.addParts(m.partsUsed)
	t.Logf("Sluice batch %s..%s: node CPU by part %s", benchName(first), benchName(first+k-1), partsString(m.partsUsed))
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
	done := make([]time.Time, k)
	for j := 0; j < k; j++ {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			_, errs[j] = c.helmInstall(context.Background(), benchBareNS, benchName(first+j), chart, vals)
			done[j] = time.Now()
		}(j)
	}
	wg.Wait()
	wall, node, self := m.stop(t)
	for j, err := range errs {
		if err != nil {
			t.Fatalf("helm install %s: %v", benchName(first+j), err)
		}
	}
	// The bare way's own tail, to set beside Sluice's pod Ready → Applied.
	if tot.steps == nil {
		tot.steps = map[string][]time.Duration{}
	}
	for j := 0; j < k; j++ {
		for _, pod := range c.pods(t, benchBareNS, "app.kubernetes.io/instance="+benchName(first+j)) {
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					tot.steps["pod Ready (1 s) → helm returned"] = append(tot.steps["pod Ready (1 s) → helm returned"], done[j].Sub(cond.LastTransitionTime.Time))
					tot.steps["start → pod Ready (1 s)"] = append(tot.steps["start → pod Ready (1 s)"], cond.LastTransitionTime.Sub(m.start))
				}
			}
		}
	}
	t.Logf("bare batch %s..%s: %s wall, node CPU %s", benchName(first), benchName(first+k-1), wall.Round(time.Millisecond), node.Round(time.Millisecond))
	tot.add(wall, node, self, k)
	tot.addParts(m.partsUsed)
	t.Logf("bare batch %s..%s: node CPU by part %s", benchName(first), benchName(first+k-1), partsString(m.partsUsed))
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
	self  time.Duration
	parts map[string]time.Duration
	// partsUsed is, after stop, the CPU of each part of the node over the
	// stretch (cpuParts).
	partsUsed map[string]time.Duration
}

func startMeter(t *testing.T, c *cluster) *meter {
	t.Helper()
	return &meter{c: c, start: time.Now(), self: selfCPU(), parts: c.cpuParts(t)}
}

func (m *meter) stop(t *testing.T) (wall, node, self time.Duration) {
	t.Helper()
	wall, self = time.Since(m.start), selfCPU()-m.self
	m.partsUsed = map[string]time.Duration{}
	for k, v := range m.c.cpuParts(t) {
		m.partsUsed[k] = v - m.parts[k]
		node += m.partsUsed[k]
	}
	return wall, node, self
}

// cpuParts is the CPU used so far by each part of the node: Sluice's pods
// by component (their pod cgroups; pods that went meanwhile are lost to
// the split, not to nodeCPU), the other pods together, and each host
// process up.sh recorded.
func (c *cluster) cpuParts(t *testing.T) map[string]time.Duration {
	t.Helper()
	parts := map[string]time.Duration{}
	var sluicePods time.Duration
	for _, p := range c.pods(t, sluiceNS, "") {
		comp := "sluice " + p.Labels["app.kubernetes.io/component"]
		if sh := p.Labels["sluice.dev/shard"]; sh != "" {
			comp = "sluice shards"
		}
		d := podCPU(string(p.UID))
		parts[comp] += d
		sluicePods += d
	}
	parts["other pods"] = cgroupCPU(kubepodsCgroup()) - sluicePods
	pids, _ := filepath.Glob(filepath.Join(c.stateDir, "*.pid"))
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		parts[strings.TrimSuffix(filepath.Base(f), ".pid")] += procCPU(strings.TrimSpace(string(b)))
	}
	return parts
}

// podCPU is the CPU of the pod with uid so far (its cgroup v1 cpuacct,
// under whichever QoS class it is in).
func podCPU(uid string) time.Duration {
	for _, qos := range []string{"", "burstable/", "besteffort/"} {
		if dir := filepath.Join(kubepodsCgroup(), qos+"pod"+uid); exists(dir) {
			return cgroupCPU(dir)
		}
	}
	return 0
}

// kubepodsCgroup is the kubelet's cgroup v1 cpuacct folder of every pod.
func kubepodsCgroup() string {
	for _, d := range []string{"/sys/fs/cgroup/cpuacct/kubepods", "/sys/fs/cgroup/cpu,cpuacct/kubepods"} {
		if exists(d) {
			return d
		}
	}
	return "/sys/fs/cgroup/cpuacct/kubepods"
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// cgroupCPU reads a cgroup v1 cpuacct.usage (nanoseconds).
func cgroupCPU(dir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(ns)
}

// selfCPU is this process's user and system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// benchSteps splits each change of a Sluice batch pushed at push into its
// steps, from the operator's phase Events (action: the phase entered, an
// event time in microseconds) and the release's pod turning Ready (its
// condition's time, whole seconds): push → the first phase (the syncer's
// poll, fetch, render and create, and the gate's first pass), then each
// phase to the next, and within Applying the pod Ready → Applied tail
// (Helm's readiness poll and the status write).
func (c *cluster) benchSteps(t *testing.T, push time.Time, crs []string, tot *benchTotals) {
	t.Helper()
	ctx := context.Background()
	if tot.steps == nil {
		tot.steps = map[string][]time.Duration{}
	}
	evs, err := c.cs.CoreV1().Events(controlNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("bench steps: listing Events: %v", err)
		return
	}
	type phaseAt struct {
		phase string
		at    time.Time
	}
	byCR := map[string][]phaseAt{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "ChangeRequest" && !e.EventTime.IsZero() && e.Action != "" {
			byCR[e.InvolvedObject.Name] = append(byCR[e.InvolvedObject.Name], phaseAt{e.Action, e.EventTime.Time})
		}
	}
	for _, cr := range crs {
		ps := byCR[cr]
		sort.Slice(ps, func(i, j int) bool { return ps[i].at.Before(ps[j].at) })
		prev, prevName := push, "push"
		got := &sluicev1.ChangeRequest{}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: cr}, got); err == nil && len(ps) > 0 {
			// The syncer's part: until the change exists (whole seconds).
			created := got.CreationTimestamp.Time
			tot.steps["push → created (1 s)"] = append(tot.steps["push → created (1 s)"], created.Sub(push))
			tot.steps["created (1 s) → "+ps[0].phase] = append(tot.steps["created (1 s) → "+ps[0].phase], ps[0].at.Sub(created))
		}
		for _, p := range ps {
			step := prevName + " → " + p.phase
			tot.steps[step] = append(tot.steps[step], p.at.Sub(prev))
			prev, prevName = p.at, p.phase
		}
		rel, _, _ := strings.Cut(cr, "-bench-")
		for _, pod := range c.pods(t, benchSluiceNS, "app.kubernetes.io/instance="+rel+"-bench") {
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && prevName == string(sluicev1.PhaseApplied) {
					tot.steps["pod Ready (1 s) → Applied"] = append(tot.steps["pod Ready (1 s) → Applied"], prev.Sub(cond.LastTransitionTime.Time))
					tot.steps["push → pod Ready (1 s)"] = append(tot.steps["push → pod Ready (1 s)"], cond.LastTransitionTime.Sub(push))
				}
			}
		}
	}
}

func (b *benchTotals) addParts(used map[string]time.Duration) {
	if b.parts == nil {
		b.parts = map[string]time.Duration{}
	}
	for k, v := range used {
		b.parts[k] += v
	}
}

// partLines reports the node's CPU per release by part, both ways side by
// side, the largest difference first.
func partLines(sl, bare benchTotals) []string {
	var names []string
	for n := range sl.parts {
		names = append(names, n)
	}
	for n := range bare.parts {
		if _, ok := sl.parts[n]; !ok {
			names = append(names, n)
		}
	}
	per := func(b benchTotals, n string) float64 { return b.parts[n].Seconds() / float64(max(b.releases, 1)) }
	sort.Slice(names, func(i, j int) bool {
		return per(sl, names[i])-per(bare, names[i]) > per(sl, names[j])-per(bare, names[j])
	})
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("bench: node CPU per release, %s: Sluice %.3f s, bare %.3f s", n, per(sl, n), per(bare, n)))
	}
	return out
}

// stepLines reports each step's median and mean over the changes.
func (b *benchTotals) stepLines() []string {
	var names []string
	for n := range b.steps {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		d := append([]time.Duration(nil), b.steps[n]...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		out = append(out, fmt.Sprintf("bench: step %s: median %.2f s, mean %.2f s, max %.2f s (%d changes)",
			n, d[len(d)/2].Seconds(), sum.Seconds()/float64(len(d)), d[len(d)-1].Seconds(), len(d)))
	}
	return out
}

// throttleLines counts, per Sluice pod, the log lines where client-go
// held a request back on its own rate limit (client-side throttling):
// time a change waits on the process's client, not on the API server.
func (c *cluster) throttleLines(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range c.pods(t, sluiceNS, "") {
		logs, err := c.cs.CoreV1().Pods(sluiceNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			continue
		}
		if n := strings.Count(string(logs), "client-side throttling"); n > 0 {
			out = append(out, fmt.Sprintf("bench: %s logged client-side throttling %d times", p.Name, n))
		}
	}
	return out
}

// apiserverProfile writes the API server's CPU profile over the next
// seconds to file (go tool pprof reads it).
func (c *cluster) apiserverProfile(t *testing.T, file string, seconds int) {
	b, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+60) * time.Second).DoRaw(context.Background())
	if err == nil {
		err = os.WriteFile(file, b, 0o644)
	}
	if err != nil {
		t.Logf("bench: the API server's CPU profile: %v", err)
		return
	}
	t.Logf("bench: the API server's CPU profile over %d s of the second Sluice batch is in %s", seconds, file)
}

// partsString lists CPU by part, the largest first.
func partsString(parts map[string]time.Duration) string {
	var names []string
	for n := range parts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return parts[names[i]] > parts[names[j]] })
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s %.1fs", n, parts[n].Seconds())
	}
	return b.String()
}
