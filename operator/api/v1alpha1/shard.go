package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// LabelShard is the shard key of a Repository. The syncer copies it onto
// every object it makes for the Repository (Releases, ChangeRequests,
// Approvals from pull-request reviews, review ConfigMaps) and `kubectl
// sluice approve` onto the Approvals it writes; admission refuses an
// object whose key differs from its Repository's (or Release's). A syncer
// or operator started with --shard=<key> caches and reconciles only the
// objects carrying that key; one started without --shard only those
// without the label.
const LabelShard = "sharding.sluice.dev/key"

// Shard conditions and reasons.
const (
	// ConditionShardAvailable is True on a Repository whose shard's syncer
	// and operator renew their leases, False (reason ShardDown) naming the
	// shard when one of them has not renewed within its lease duration: the
	// Repository's changes are not being synced or applied.
	ConditionShardAvailable = "ShardAvailable"
	// ReasonShardLive: the shard's syncer and operator leases are renewed.
	ReasonShardLive = "ShardLive"
	// ReasonShardDown: a lease of the shard is missing or expired.
	ReasonShardDown = "ShardDown"
	// ReasonShardMoving: the Repository's shard key changed and some of
	// its Releases wait for their apply lock to be free before they move.
	ReasonShardMoving = "ShardMoving"
)

// Leader election Lease names of the components (of the unsharded
// replicas; a shard's are ShardLeaseName of these).
const (
	// SyncerLeaseName is the gitops-syncer's leader election Lease.
	SyncerLeaseName = "gitops-syncer.sluice.dev"
	// OperatorLeaseName is the operator's leader election Lease.
	OperatorLeaseName = "sluice-operator.gitops.sluice.dev"
)

// ShardOf returns the shard key of obj ("" for the unsharded replicas).
func ShardOf(obj metav1.Object) string { return obj.GetLabels()[LabelShard] }

// SetShard sets obj's shard key to key, removing the label when key is
// empty. It reports whether it changed anything.
func SetShard(obj metav1.Object, key string) bool {
	l := obj.GetLabels()
	cur, had := l[LabelShard]
	switch {
	case key == "" && !had:
		return false
	case key == "":
		delete(l, LabelShard)
		obj.SetLabels(l)
		return true
	case had && cur == key:
		return false
	}
	if l == nil {
		l = map[string]string{}
	}
	l[LabelShard] = key
	obj.SetLabels(l)
	return true
}

// ShardSelector selects the objects of shard key: those labelled with it,
// or, for "" (the unsharded replicas), those without the label.
func ShardSelector(key string) labels.Selector {
	op, vals := selection.Equals, []string{key}
	if key == "" {
		op, vals = selection.DoesNotExist, nil
	}
	req, err := labels.NewRequirement(LabelShard, op, vals)
	if err != nil {
		// Only an invalid key fails, and ValidateShard refuses it first.
		panic(fmt.Sprintf("shard selector for %q: %v", key, err))
	}
	return labels.NewSelector().Add(*req)
}

// ValidateShard refuses a shard key that is not a valid label value (or
// is longer than a Lease name suffix allows).
func ValidateShard(key string) error {
	if key == "" {
		return nil
	}
	if errs := validation.IsValidLabelValue(key); len(errs) > 0 {
		return fmt.Errorf("shard %q is not a valid label value: %s", key, errs[0])
	}
	if errs := validation.IsDNS1123Label(key); len(errs) > 0 {
		return fmt.Errorf("shard %q must be a DNS label (it names Leases): %s", key, errs[0])
	}
	return nil
}

// ShardLeaseName is the name of a component's leader-election Lease for
// shard key: base for the unsharded replicas, else base prefixed with
// "<key>." (so each shard elects its own leader and a shard's liveness is
// its Lease's renew time).
func ShardLeaseName(base, key string) string {
	if key == "" {
		return base
	}
	return key + "." + base
}
