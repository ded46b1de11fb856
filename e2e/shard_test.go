package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// shards are the shard keys the shard test adds to the e2e install
// (values `shards`): each gets its own syncer and operator Deployments
// beside the unsharded pair the other tests use.
var shards = []string{"a", "b"}

// addShards upgrades the e2e install to the same values plus shards and
// waits for every pod Ready. Only the shard test pays for them: the other
// tests, the benchmark above all, run on the unsharded install.
func (c *cluster) addShards(t *testing.T) {
	t.Helper()
	start := time.Now()
	vals := sluiceValues()
	vals["shards"] = shardValues()
	if err := c.deploySluice(context.Background(), vals); err != nil {
		t.Fatalf("adding shards %v to charts/sluice: %v", shards, err)
	}
	t.Logf("shards %v installed and Ready in %s", shards, time.Since(start).Round(time.Second))
}

// shardValues is the chart's `shards` value for shards.
func shardValues() []any {
	var l []any
	for _, s := range shards {
		l = append(l, map[string]any{"name": s})
	}
	return l
}

// shardSelector selects the pods of a shard's component ("syncer-shard" or
// "operator-shard").
func shardSelector(component, shard string) string {
	return componentSelector(component) + ",sluice.dev/shard=" + shard
}

// TestShardsEachApplyTheirOwnRepository (issue 24 on a real node): the
// chart, upgraded with two shards (values `shards: [{name: a}, {name:
// b}]`), runs their pods; two Repositories, each labelled
// sharding.sluice.dev/key with one of them and each watching its own git
// repository, get one service each.
// Each shard's syncer pod turns its push into a ChangeRequest carrying the
// key, `kubectl sluice approve` records the Approval on that shard, and
// the shard's operator pod applies it (the service's pods Ready). Neither
// shard touches the other's: the other shard's operators and the
// unsharded ones count no applied change of the release (their
// sluice_release_changes_applied_total has no series for it), and the
// shard's own carries shard="<key>". The unsharded syncer sees both shards
// live (ShardAvailable on each Repository).
func TestShardsEachApplyTheirOwnRepository(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	c.addShards(t)
	start := time.Now()
	for _, s := range shards {
		for _, comp := range []string{"syncer-shard", "operator-shard"} {
			c.readyPod(t, sluiceNS, shardSelector(comp, s))
		}
	}

	type shardRun struct {
		key, repo, svc, ns, rel, cr string
	}
	var runs []*shardRun
	for _, s := range shards {
		r := &shardRun{key: s, repo: "infra-" + s, svc: "s" + s, ns: "shard-" + s + "-e2e"}
		r.rel = r.svc + "-e2e"
		g := c.anotherRepo(t, r.repo)
		c.targetNamespace(t, r.ns)
		repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: r.repo, Namespace: controlNS,
			Labels: map[string]string{sluicev1.LabelShard: s}},
			Spec: sluicev1.RepositorySpec{
				URL: g.url, Ref: &sluicev1.GitReference{Branch: "main"},
				Interval:           &metav1.Duration{Duration: 3 * time.Second},
				TargetNamespaces:   []string{r.ns},
				ServiceAccountName: "infra-deployer",
			}}
		if err := c.c.Create(ctx, repo); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating Repository %s: %v", r.repo, err)
		}
		writeService(t, g.work, c.root, r.svc, r.ns, 1, "0s")
		r.cr = sluicev1.ChangeRequestName(r.rel, g.commit(t, r.svc+": shard "+s+"'s service"), 1)
		runs = append(runs, r)
	}

	for _, r := range runs {
		cr := c.waitChange(t, r.cr, sluicev1.PhaseAwaitingApproval)
		if k := sluicev1.ShardOf(cr); k != r.key {
			t.Fatalf("%s carries shard key %q, want its Repository's %q", cr.Name, k, r.key)
		}
		rel := &sluicev1.Release{}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: r.rel}, rel); err != nil {
			t.Fatal(err)
		}
		if k := sluicev1.ShardOf(rel); k != r.key {
			t.Fatalf("Release %s carries shard key %q, want %q", r.rel, k, r.key)
		}
		c.approve(t, r.cr)
	}
	for _, r := range runs {
		c.waitChange(t, r.cr, sluicev1.PhaseApplied)
		c.waitReady(t, r.ns, r.rel, 1)
		aps := &sluicev1.ApprovalList{}
		if err := c.c.List(ctx, aps, client.InNamespace(controlNS)); err != nil {
			t.Fatal(err)
		}
		for _, ap := range aps.Items {
			if ap.Spec.ChangeRequest == r.cr && sluicev1.ShardOf(&ap) != r.key {
				t.Fatalf("Approval %s of %s carries shard key %q, want %q", ap.Name, r.cr, sluicev1.ShardOf(&ap), r.key)
			}
		}
	}
	t.Logf("both shards applied their change in %s", time.Since(start).Round(time.Second))

	// Who applied what, from every operator pod's own metrics.
	for _, r := range runs {
		series := fmt.Sprintf(`sluice_release_changes_applied_total{namespace=%q,release=%q,repository=%q`, controlNS, r.rel, r.repo)
		for _, s := range append([]string{""}, shards...) {
			sel := componentSelector("operator")
			if s != "" {
				sel = shardSelector("operator-shard", s)
			}
			var got []string
			for _, p := range c.pods(t, sluiceNS, sel) {
				got = append(got, c.metricLines(t, &p, series)...)
			}
			switch {
			case s == r.key && len(got) != 1:
				t.Errorf("shard %s's operators report %d series of %s's applied changes, want 1: %q", s, len(got), r.rel, got)
			case s == r.key && !strings.Contains(got[0], `shard="`+s+`"`):
				t.Errorf("shard %s's operator counts %s without its shard label: %s", s, r.rel, got[0])
			case s != r.key && len(got) != 0:
				t.Errorf("operators of shard %q applied %s of shard %s: %q", s, r.rel, r.key, got)
			}
		}
	}

	// The unsharded syncer watches the shards' Leases.
	for _, r := range runs {
		eventually(t, "Repository "+r.repo+" ShardAvailable", func() (bool, error) {
			repo := &sluicev1.Repository{}
			if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: r.repo}, repo); err != nil {
				return false, err
			}
			cond := findCondition(repo.Status.Conditions, sluicev1.ConditionShardAvailable)
			if cond == nil {
				return false, fmt.Errorf("no ShardAvailable condition yet")
			}
			return cond.Status == metav1.ConditionTrue, fmt.Errorf("ShardAvailable %s %s: %s", cond.Status, cond.Reason, cond.Message)
		})
	}
	t.Logf("whole shard story %s", time.Since(start).Round(time.Second))
}

// metricLines returns the lines of pod p's /metrics (its "metrics" port)
// that start with prefix.
func (c *cluster) metricLines(t *testing.T, p *corev1.Pod, prefix string) []string {
	t.Helper()
	port := 0
	for _, ctr := range p.Spec.Containers {
		if n := namedPort(ctr, "metrics"); n != 0 {
			port = n
		}
	}
	if port == 0 {
		t.Fatalf("pod %s has no port named metrics", p.Name)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, port))
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("metrics of %s: %s: %s", p.Name, resp.Status, b)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("metrics of %s: %v", p.Name, err)
	}
	return out
}
