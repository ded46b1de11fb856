package controller_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkIdlePollCycle measures polls of 200 unchanged Repositories:
// every one asked to reconcile at once (as their intervals would), and the
// syncer's CPU time (its own process, not the git server's CGI children)
// and git fetches until all 200 ls-remotes are done; the mean of 3 cycles.
// Run it with -benchtime 1x: the setup (200 first syncs) is the slow part.
func BenchmarkIdlePollCycle(b *testing.B) {
	repos := benchSize(200, 3)
	ctx := context.Background()
	ns := benchNamespace(b)
	root := b.TempDir()
	srv := gittest.StartHTTP(b, root, "", "")
	s := benchSyncer(b, ns)
	for i := range repos {
		name := fmt.Sprintf("repo-%03d", i)
		r := gittest.NewRepo(b, root, name)
		r.CopyDir(chartDir, "charts/service")
		helmServiceB(r, fmt.Sprintf("svc%03d", i))
		r.Commit("initial", "alice@example.com")
		repo := &sluicev1.Repository{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: sluicev1.RepositorySpec{URL: srv.RepoURL(name), Interval: &metav1.Duration{Duration: time.Hour},
				TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer"},
		}
		if err := k8s.Create(ctx, repo); err != nil {
			b.Fatal(err)
		}
	}
	// The first sync of every repository (fetch, validate, ChangeRequest).
	waitUntil(b, 15*time.Minute, fmt.Sprintf("the first sync of %d Repositories", repos), func() bool { return countSynced(b, ns) == repos })
	b.ResetTimer()
	cycles := benchSize(3, 1)
	var cpu, wall float64
	var fetches, packs int64
	for range cycles {
		stats, packs0 := s.Git.Stats(), srv.UploadPacks()
		c0, t0 := cpuSeconds(), time.Now()
		for i := range repos {
			s.Trigger().Request(ns, fmt.Sprintf("repo-%03d", i))
		}
		waitUntil(b, 10*time.Minute, fmt.Sprintf("%d ls-remotes of the poll cycle", repos), func() bool { return s.Git.Stats().LsRemotes-stats.LsRemotes >= int64(repos) })
		// Let the last reconciles finish their (empty) status work.
		time.Sleep(200 * time.Millisecond)
		cpu += cpuSeconds() - c0
		wall += time.Since(t0).Seconds()
		fetches += s.Git.Stats().Fetches - stats.Fetches
		packs += srv.UploadPacks() - packs0
	}
	n := float64(cycles)
	b.ReportMetric(float64(fetches)/n, "fetches/cycle")
	b.ReportMetric(float64(packs)/n, "upload-packs/cycle")
	b.ReportMetric(cpu/n, "cpu-s/cycle")
	b.ReportMetric(wall/n, "wall-s/cycle")
	b.ReportMetric(float64(repos), "repositories")
}

// BenchmarkCommitToChangeRequest measures, over 30 commits of a Helm-only
// change, the time from the commit being visible on the git server and a
// reconcile being requested to its ChangeRequest existing.
func BenchmarkCommitToChangeRequest(b *testing.B) {
	commits := benchSize(40, 2)
	ctx := context.Background()
	ns := benchNamespace(b)
	root := b.TempDir()
	srv := gittest.StartHTTP(b, root, "", "")
	s := benchSyncer(b, ns)
	r := gittest.NewRepo(b, root, "infra")
	r.CopyDir(chartDir, "charts/service")
	helmServiceB(r, "web")
	r.Commit("initial", "alice@example.com")
	repo := &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ns},
		Spec: sluicev1.RepositorySpec{URL: srv.RepoURL("infra"), Interval: &metav1.Duration{Duration: time.Hour},
			TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer"},
	}
	if err := k8s.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, 5*time.Minute, "the first sync of the Repository", func() bool { return countSynced(b, ns) == 1 })
	b.ResetTimer()
	var lat []time.Duration
	{
		for i := range commits {
			r.WriteFile("services/web/values.yaml", fmt.Sprintf("image:\n  repository: ghcr.io/example/web\n  tag: \"1.0.%d\"\nreplicaCount: 1\n", i+1))
			sha := r.Commit(fmt.Sprintf("web 1.0.%d", i+1), "bob@example.com")
			name := sluicev1.ChangeRequestName("web-staging", sha, 1)
			start := time.Now()
			s.Trigger().Request(ns, "infra")
			waitUntil(b, time.Minute, "ChangeRequest "+name+" of commit "+sha, func() bool {
				return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sluicev1.ChangeRequest{}) == nil
			})
			lat = append(lat, time.Since(start))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))].Seconds() * 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(float64(len(lat)), "commits")
}

func benchNamespace(b *testing.B) string {
	b.Helper()
	return newNamespace(b)
}

func benchSyncer(b *testing.B, ns string) *syncer.Syncer {
	b.Helper()
	return startSyncer(b, ns, b.TempDir(), func(s *syncer.Syncer) { s.Reconciler.MaxConcurrentReconciles = 4 }).Syncer
}

func helmServiceB(r *gittest.Repo, name string) {
	r.WriteFile("services/"+name+"/service.yaml", fmt.Sprintf("apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: %s\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: %s-staging\n", name, name))
	r.WriteFile("services/"+name+"/values.yaml", fmt.Sprintf("image:\n  repository: ghcr.io/example/%s\n  tag: \"1.0.0\"\nreplicaCount: 1\n", name))
}

func countSynced(b *testing.B, ns string) int {
	var list sluicev1.RepositoryList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, r := range list.Items {
		if r.Status.LastSyncedCommit != "" {
			n++
		}
	}
	return n
}

// benchSize is full, or smoke when BENCH_SMOKE is set (make bench-smoke:
// one short iteration that shows the benchmark still runs to its end).
func benchSize(full, smoke int) int {
	if os.Getenv("BENCH_SMOKE") != "" {
		return smoke
	}
	return full
}

// waitAdded waits for w to report its object added.
func waitAdded(b *testing.B, w watch.Interface, limit time.Duration, what string) {
	b.Helper()
	defer w.Stop()
	timeout := time.After(limit)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatalf("the watch ended before %s appeared", what)
			}
			if ev.Type == watch.Added {
				return
			}
		case <-timeout:
			b.Fatalf("waited %s for %s: it did not appear", limit, what)
		}
	}
}

// waitUntil polls cond until it holds, and fails the benchmark naming what
// it waited for when limit passes first.
func waitUntil(b *testing.B, limit time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("waited %s for %s: it did not come", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// planStack is a Terraform stack of n terraform_data resources whose inputs
// carry round, so every commit changes the plan.
func planStack(n, round int) string {
	var s strings.Builder
	for i := range n {
		fmt.Fprintf(&s, "resource \"terraform_data\" \"r%d\" {\n  input = \"round-%d-%d\"\n}\n", i, round, i)
	}
	return s.String()
}

// BenchmarkCommitWithPlanToChangeRequest times a push whose service has a
// Terraform stack (20 terraform_data resources): from the commit being
// visible and a reconcile requested to its ChangeRequest existing, the plan
// made in the sandboxed runner against the state server and stored. In the
// same run it times a bare terraform on the same stack (init, plan -out,
// show -json in a fresh folder, local state, as a user would run it), and
// reports both medians and their ratio (issue 11's target: at most 1.5x).
func BenchmarkCommitWithPlanToChangeRequest(b *testing.B) {
	const resources = 20
	commits := benchSize(12, 1)
	tfPath, err := exec.LookPath("terraform")
	if err != nil {
		b.Fatal("terraform is needed on PATH: ", err)
	}
	ctx := context.Background()
	ns := benchNamespace(b)
	root := b.TempDir()
	srv := gittest.StartHTTP(b, root, "", "")
	s := benchSyncer(b, ns)
	r := gittest.NewRepo(b, root, "infra")
	r.CopyDir(chartDir, "charts/service")
	helmServiceB(r, "db")
	r.WriteFile("services/db/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: db\nchart: {path: charts/service}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n  - name: staging\n    namespace: db-staging\n")
	r.WriteFile("services/db/terraform/main.tf", planStack(resources, 0))
	r.Commit("initial", "alice@example.com")
	repo := &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ns},
		Spec: sluicev1.RepositorySpec{URL: srv.RepoURL("infra"), Interval: &metav1.Duration{Duration: time.Hour},
			TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer"},
	}
	if err := k8s.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, 5*time.Minute, "the first sync of the Repository", func() bool { return countSynced(b, ns) == 1 })

	bare := func(round int) time.Duration {
		dir := b.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(planStack(resources, round)), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, args := range [][]string{{"init", "-input=false", "-no-color"}, {"plan", "-input=false", "-no-color", "-out=plan.tfplan"}, {"show", "-json", "plan.tfplan"}} {
			cmd := exec.Command(tfPath, args...)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "CHECKPOINT_DISABLE=1"}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("terraform %s: %v\n%s", args[0], err, out)
			}
		}
		return time.Since(start)
	}

	// The ChangeRequest is waited for with a watch: polling the API server
	// every few milliseconds would load the machine the syncer and
	// terraform run on (and did: a third of this process's CPU).
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var viaSluice, viaBare []time.Duration
	last := ""
	for i := range commits {
		r.WriteFile("services/db/terraform/main.tf", planStack(resources, i+1))
		sha := r.Commit(fmt.Sprintf("db round %d", i+1), "bob@example.com")
		name := sluicev1.ChangeRequestName("db-staging", sha, 1)
		last = sha
		w, err := watcher.Watch(ctx, &sluicev1.ChangeRequestList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		s.Trigger().Request(ns, "infra")
		waitAdded(b, w, 2*time.Minute, "ChangeRequest "+name+" with a plan")
		viaSluice = append(viaSluice, time.Since(start))
		// The syncer finishes its pass (plan Secrets, the Release status,
		// the next spare runner child) before the bare run starts, so
		// neither measurement carries the other's work.
		time.Sleep(time.Second)
		viaBare = append(viaBare, bare(i+1))
	}
	b.StopTimer()
	cr := &sluicev1.ChangeRequest{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sluicev1.ChangeRequestName("db-staging", last, 1)}, cr); err != nil {
		b.Fatal(err)
	}
	if cr.Spec.PlanFileSHA256 == "" {
		b.Fatal("the ChangeRequest carries no plan: the benchmark timed the wrong path")
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return d[len(d)/2].Seconds() * 1000
	}
	p, q := median(viaSluice), median(viaBare)
	b.ReportMetric(p, "push-p50-ms")
	b.ReportMetric(q, "bare-p50-ms")
	b.ReportMetric(p/q, "ratio")
	b.ReportMetric(float64(commits), "commits")
}
