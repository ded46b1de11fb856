package controller

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// cpuSeconds is the CPU time used so far by this process and by its child
// processes named kube-apiserver and etcd (envtest's control plane).
type cpuSeconds struct{ self, apiserver, etcd float64 }

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the project runs on).
const clockTicks = 100

func readCPU(t *testing.T) cpuSeconds {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	out := cpuSeconds{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || closing < open {
			continue
		}
		comm := string(b[open+1 : closing])
		fields := strings.Fields(string(b[closing+1:]))
		if len(fields) < 13 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		switch comm {
		case "kube-apiserver":
			out.apiserver += (utime + stime) / clockTicks
		case "etcd":
			out.etcd += (utime + stime) / clockTicks
		}
	}
	return out
}

// apiRequests sums the API server's apiserver_request_total by verb (all
// clients: the operator and the benchmark's own creates).
func apiRequests(t *testing.T) map[string]float64 {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	require.NoError(t, err)
	resp, err := hc.Get(strings.TrimRight(env.Config.Host, "/") + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := strings.Cut(line[len("apiserver_request_total{"):], "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(labels, ",") {
			if k, val, _ := strings.Cut(l, "="); k == "verb" {
				out[strings.Trim(val, `"`)] += v
			}
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// requestsSince formats the API requests made since before, by verb.
func requestsSince(before, after map[string]float64) string {
	var verbs []string
	total := 0.0
	for v := range after {
		if d := after[v] - before[v]; d > 0 {
			verbs = append(verbs, fmt.Sprintf("%s=%.0f", v, d))
			total += d
		}
	}
	slices.Sort(verbs)
	return fmt.Sprintf("%.0f (%s)", total, strings.Join(verbs, " "))
}

// phaseClock records when the operator's cache first saw each
// ChangeRequest in each phase, to show where a change's time goes.
type phaseClock struct {
	mu    sync.Mutex
	seen  map[string]map[sluicev1.ChangeRequestPhase]time.Time
	added map[string]time.Time
	rel   map[string]string
	// stop removes the clock's event handler and forgets what it saw, so
	// the memory figure taken later is the operator's, not the clock's.
	stop func()
}

func newPhaseClock(t *testing.T, op *operator) *phaseClock {
	t.Helper()
	pc := &phaseClock{seen: map[string]map[sluicev1.ChangeRequestPhase]time.Time{}, added: map[string]time.Time{}, rel: map[string]string{}}
	inf, err := op.mgr.GetCache().GetInformer(context.Background(), &sluicev1.ChangeRequest{})
	require.NoError(t, err)
	record := func(o any) {
		cr, ok := o.(*sluicev1.ChangeRequest)
		if !ok {
			return
		}
		now := time.Now()
		pc.mu.Lock()
		defer pc.mu.Unlock()
		if _, ok := pc.added[cr.Name]; !ok {
			pc.added[cr.Name] = now
			pc.rel[cr.Name] = cr.Spec.Release
			pc.seen[cr.Name] = map[sluicev1.ChangeRequestPhase]time.Time{}
		}
		if _, ok := pc.seen[cr.Name][cr.Status.Phase]; !ok {
			pc.seen[cr.Name][cr.Status.Phase] = now
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, n any) { record(n) },
	})
	require.NoError(t, err)
	pc.stop = func() {
		require.NoError(t, inf.RemoveEventHandler(reg))
		pc.mu.Lock()
		defer pc.mu.Unlock()
		pc.seen, pc.added, pc.rel = nil, nil, nil
	}
	return pc
}

// report prints, over the changes the clock saw: created → first decision,
// the hand-over gap (a release's previous change terminal → this change
// Applying: how long the lock sits between two changes) and Applying →
// Applied.
func (pc *phaseClock) report() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var decide, gap, apply []time.Duration
	type mark struct {
		name           string
		applying, done time.Time
	}
	byRelease := map[string][]mark{}
	for name, phases := range pc.seen {
		var first time.Time
		for p, at := range phases {
			if p != "" && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if !first.IsZero() {
			decide = append(decide, first.Sub(pc.added[name]))
		}
		m := mark{name: name, applying: phases[sluicev1.PhaseApplying]}
		for p, at := range phases {
			if p.IsTerminal() {
				m.done = at
			}
		}
		if !m.applying.IsZero() && !phases[sluicev1.PhaseApplied].IsZero() {
			apply = append(apply, phases[sluicev1.PhaseApplied].Sub(m.applying))
		}
		byRelease[pc.rel[name]] = append(byRelease[pc.rel[name]], m)
	}
	for _, marks := range byRelease {
		for _, m := range marks {
			if m.applying.IsZero() {
				continue
			}
			// The latest other change of the release that ended before
			// this one started applying, and whose apply came first.
			var prev time.Time
			for _, o := range marks {
				if o.name != m.name && !o.applying.IsZero() && o.applying.Before(m.applying) && !o.done.IsZero() && o.done.After(prev) && !o.done.After(m.applying) {
					prev = o.done
				}
			}
			if !prev.IsZero() {
				gap = append(gap, m.applying.Sub(prev))
			}
		}
	}
	benchLine("where a change's time goes (p50 / p90 / max): created → first phase %s; previous change of the release terminal → Applying (lock hand-over) %s; Applying → Applied %s",
		quantiles(decide), quantiles(gap), quantiles(apply))
}

func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "n/a"
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))].Round(time.Millisecond) }
	return fmt.Sprintf("%v / %v / %v (n=%d)", q(0.5), q(0.9), d[len(d)-1].Round(time.Millisecond), len(d))
}

// profileAPIServer writes a CPU profile of envtest's kube-apiserver over
// the next seconds to path (its /debug/pprof endpoint), in the background;
// wait blocks until it is written. The knob SLUICE_BENCH_APISERVER_PROFILE
// names the file; without it nothing is profiled.
func profileAPIServer(t *testing.T, seconds int) (wait func()) {
	t.Helper()
	path := os.Getenv("SLUICE_BENCH_APISERVER_PROFILE")
	if path == "" {
		return func() {}
	}
	hc, err := rest.HTTPClientFor(env.Config)
	require.NoError(t, err)
	hc.Timeout = time.Duration(seconds+60) * time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(env.Config.Host, "/"), seconds))
		if err != nil {
			t.Logf("profile the API server: %v", err)
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != 200 {
			t.Logf("profile the API server: status %d, %v", resp.StatusCode, err)
			return
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			t.Logf("profile the API server: %v", err)
		}
	}()
	return func() { <-done }
}

// queueFigures reports, per controller, how long requests waited in the
// work queue and how long reconciles took (means over the whole run, from
// controller-runtime's workqueue histograms), and the longest wait.
func queueFigures(t *testing.T) string {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var parts []string
	for _, mf := range families {
		var what string
		switch mf.GetName() {
		case "workqueue_queue_duration_seconds":
			what = "queue wait"
		case "workqueue_work_duration_seconds":
			what = "reconcile"
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			var name string
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" {
					name = l.GetValue()
				}
			}
			// The smallest bucket bound that holds 90% of the samples.
			p90 := "+Inf"
			for _, b := range h.GetBucket() {
				if float64(b.GetCumulativeCount()) >= 0.9*float64(h.GetSampleCount()) {
					p90 = (time.Duration(b.GetUpperBound() * float64(time.Second))).String()
					break
				}
			}
			parts = append(parts, fmt.Sprintf("%s %s: mean %v, p90 ≤ %s (n=%d)", name, what,
				(time.Duration(h.GetSampleSum()/float64(h.GetSampleCount())*float64(time.Second))).Round(time.Millisecond), p90, h.GetSampleCount()))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
