// Package shardwatch makes a shard that is down visible: the ShardAvailable
// condition on sharded Repositories and the sluice_shard_* metrics, from the
// shards' leader election Leases (docs/design.md "Sharding").
package shardwatch

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// FieldOwner is the field owner of the ShardAvailable condition.
const FieldOwner = "gitops-syncer-shardwatch"

// Watch makes a shard that is down visible. Every Interval it reads
// the leader election Leases of each shard key found on a Repository (the
// shard's syncer and operator each renew one, named
// sluicev1.ShardLeaseName(<component lease>, key)) and sets
// ShardAvailable on every Repository with a key: True while both Leases
// were renewed within their lease duration, False (reason ShardDown,
// naming the shard and the component) otherwise. It exports
// sluice_shard_up{shard,component} (1 or 0) and
// sluice_shard_repositories{shard}, for an alert on a shard that is down
// while it has Repositories. The unsharded syncer's leader runs it (the
// shards cannot report their own absence); it reads Repositories past its
// cache, which holds only the unsharded ones.
type Watch struct {
	// Client writes the condition; APIReader lists Repositories and reads
	// Leases.
	Client    client.Client
	APIReader client.Reader
	// LeaseNamespace holds the Leases.
	LeaseNamespace string
	// Leases are the base lease names of the components, by component
	// name ("syncer", "operator").
	Leases map[string]string
	// Namespaces limits the Repositories looked at (all when empty).
	Namespaces []string
	// Interval between two looks; 15 seconds when zero.
	Interval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	up    *prometheus.GaugeVec
	repos *prometheus.GaugeVec
}

// New returns a Watch with its metrics registered with reg.
func New(reg prometheus.Registerer, w Watch) (*Watch, error) {
	w.up = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_shard_up",
		Help: "1 while the shard's component (syncer, operator) renews its leader election Lease, else 0; by shard key of the Repositories.",
	}, []string{"shard", "component"})
	w.repos = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_shard_repositories",
		Help: "Repositories labelled with each shard key.",
	}, []string{"shard"})
	if err := kitmetrics.Register(reg, w.up, w.repos); err != nil {
		return nil, err
	}
	return &w, nil
}

// Start runs the watch until ctx ends (a manager Runnable).
func (w *Watch) Start(ctx context.Context) error {
	interval := w.Interval
	if interval <= 0 {
		interval = 15 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := w.Check(ctx); err != nil {
			log.FromContext(ctx).Error(err, "Checking the shards' Leases failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is true: only the leader writes the conditions.
func (w *Watch) NeedLeaderElection() bool { return true }

// Check looks once: the Leases of every shard key in use, the metrics, and
// the condition of each Repository with a key, written only when it
// changes.
func (w *Watch) Check(ctx context.Context) error {
	var repos []sluicev1.Repository
	nss := w.Namespaces
	if len(nss) == 0 {
		nss = []string{""}
	}
	for _, ns := range nss {
		var list sluicev1.RepositoryList
		if err := w.APIReader.List(ctx, &list, client.InNamespace(ns), client.HasLabels{sluicev1.LabelShard}); err != nil {
			return fmt.Errorf("list sharded Repositories: %w", err)
		}
		repos = append(repos, list.Items...)
	}
	counts := map[string]int{}
	for i := range repos {
		counts[sluicev1.ShardOf(&repos[i])]++
	}
	down := map[string][]string{}
	w.repos.Reset()
	w.up.Reset()
	for shard, n := range counts {
		w.repos.WithLabelValues(shard).Set(float64(n))
		for _, component := range sortedKeys(w.Leases) {
			live, err := w.live(ctx, sluicev1.ShardLeaseName(w.Leases[component], shard))
			if err != nil {
				return err
			}
			v := 0.0
			if live {
				v = 1
			} else {
				down[shard] = append(down[shard], component)
			}
			w.up.WithLabelValues(shard, component).Set(v)
		}
	}
	for i := range repos {
		if err := w.setCondition(ctx, &repos[i], down[sluicev1.ShardOf(&repos[i])]); err != nil {
			return err
		}
	}
	return nil
}

// live reports whether the Lease name was renewed within its duration.
func (w *Watch) live(ctx context.Context, name string) (bool, error) {
	l := &coordinationv1.Lease{}
	err := w.APIReader.Get(ctx, client.ObjectKey{Namespace: w.LeaseNamespace, Name: name}, l)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read Lease %s: %w", name, err)
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return false, nil
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return w.now().Before(expiry), nil
}

// setCondition sets ShardAvailable on repo, when it changes.
func (w *Watch) setCondition(ctx context.Context, repo *sluicev1.Repository, downComponents []string) error {
	shard := sluicev1.ShardOf(repo)
	cond := metav1.Condition{Type: sluicev1.ConditionShardAvailable, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonShardLive,
		Message: fmt.Sprintf("the syncer and operator of shard %q renew their Leases", shard), ObservedGeneration: repo.Generation}
	if len(downComponents) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, sluicev1.ReasonShardDown
		cond.Message = fmt.Sprintf("shard %q is down: no live leader election Lease of its %s; its changes are neither synced nor applied",
			shard, strings.Join(downComponents, " and "))
	}
	if cur := meta.FindStatusCondition(repo.Status.Conditions, cond.Type); cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return nil
	}
	orig := repo.DeepCopy()
	meta.SetStatusCondition(&repo.Status.Conditions, cond)
	if err := w.Client.Status().Patch(ctx, repo, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // looked at again at the next interval
		}
		return fmt.Errorf("set ShardAvailable on Repository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	return nil
}

func (w *Watch) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
