// Package testapplier is an Applier that installs nothing. It records each
// change it applies in a ConfigMap through the API server, and a second
// call for a change already recorded returns the recorded result instead of
// applying again, so it keeps the appliers' "idempotent per change"
// contract across operator restarts. Tests use it to prove the gate and
// the crash safety of the hand-off; the operator registers it only when
// started with --test-applier (demos).
package testapplier

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// DefaultConfigMap is the ConfigMap the applier records into, in the
// change's namespace.
const DefaultConfigMap = "sluice-test-applier"

// Name is the applier's name.
const Name = "test"

// Hook runs inside Apply; a non-nil error is returned from Apply.
type Hook func(ctx context.Context, req applier.Request) error

// Applier records changes in a ConfigMap.
type Applier struct {
	// Client talks to the API server (not a cache: the record must be
	// read fresh).
	Client client.Client
	// ConfigMap names the record; DefaultConfigMap when empty.
	ConfigMap string
	// Delay is waited (or the context's end) before the effect, to make a
	// slow applier.
	Delay time.Duration
	// BeforeEffect runs before the change is recorded (tests block here).
	BeforeEffect Hook
	// AfterEffect runs after the change is recorded, before Apply returns.
	AfterEffect Hook
	// FailReason, when set, fails every change permanently with it.
	FailReason string

	mu    sync.Mutex
	calls map[string]int
}

var (
	_ applier.Applier = (*Applier)(nil)
	_ applier.Cleaner = (*Applier)(nil)
)

// Name implements applier.Applier.
func (a *Applier) Name() string { return Name }

// Calls reports how many times Apply was called for a change (in this
// process).
func (a *Applier) Calls(change string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[change]
}

func (a *Applier) configMap() string {
	if a.ConfigMap != "" {
		return a.ConfigMap
	}
	return DefaultConfigMap
}

// Record is what the applier stored for a change.
type Record struct {
	// Message is the recorded result.
	Message string
	// Effects counts how often the change's effect happened (it must stay 1).
	Effects int
}

// Lookup reads the record of a change from the API server.
func Lookup(ctx context.Context, c client.Reader, namespace, configMap, change string) (Record, bool, error) {
	if configMap == "" {
		configMap = DefaultConfigMap
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: configMap}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Record{}, false, nil
		}
		return Record{}, false, fmt.Errorf("get ConfigMap %s/%s: %w", namespace, configMap, err)
	}
	msg, ok := cm.Data[change]
	if !ok {
		return Record{}, false, nil
	}
	n, _ := strconv.Atoi(cm.Data[change+".effects"])
	return Record{Message: msg, Effects: n}, true, nil
}

// Apply implements applier.Applier: it returns the recorded result of a
// change applied before, and otherwise waits Delay, runs the hooks and
// records the change (the "effect") with an optimistic-concurrency write.
func (a *Applier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	cr := req.Change
	a.mu.Lock()
	if a.calls == nil {
		a.calls = map[string]int{}
	}
	a.calls[cr.Name]++
	a.mu.Unlock()

	if rec, ok, err := Lookup(ctx, a.Client, cr.Namespace, a.configMap(), cr.Name); err != nil {
		return applier.Result{}, err
	} else if ok {
		return applier.Result{Message: rec.Message}, nil
	}
	if a.FailReason != "" {
		return applier.Result{}, applier.Permanent(a.FailReason, "the test applier fails every change")
	}
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-ctx.Done():
			return applier.Result{}, ctx.Err()
		}
	}
	if a.BeforeEffect != nil {
		if err := a.BeforeEffect(ctx, req); err != nil {
			return applier.Result{}, err
		}
	}
	msg := fmt.Sprintf("recorded revision %s (%s)", cr.Spec.Revision, cr.Spec.ApprovalDigest)
	if err := a.record(ctx, cr, msg); err != nil {
		return applier.Result{}, err
	}
	if a.AfterEffect != nil {
		if err := a.AfterEffect(ctx, req); err != nil {
			return applier.Result{}, err
		}
	}
	return applier.Result{Message: msg}, nil
}

// record writes the change into the ConfigMap, creating it if needed. The
// write carries the resourceVersion read, so two concurrent calls cannot
// both record; the loser sees the record on its retry.
func (a *Applier) record(ctx context.Context, cr *sluicev1.ChangeRequest, msg string) error {
	for {
		cm := &corev1.ConfigMap{}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: a.configMap()}, cm)
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: a.configMap()},
				Data:       map[string]string{cr.Name: msg, cr.Name + ".effects": "1"},
			}
			err = a.Client.Create(ctx, cm)
		case err != nil:
			return fmt.Errorf("get ConfigMap %s/%s: %w", cr.Namespace, a.configMap(), err)
		default:
			if _, done := cm.Data[cr.Name]; done {
				return nil
			}
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			n, _ := strconv.Atoi(cm.Data[cr.Name+".effects"])
			cm.Data[cr.Name] = msg
			cm.Data[cr.Name+".effects"] = strconv.Itoa(n + 1)
			err = a.Client.Update(ctx, cm)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("record change %s: %w", cr.Name, err)
		}
		return nil
	}
}

// Cleanup implements applier.Cleaner: it records that the release was
// cleaned up, and in which namespace.
func (a *Applier) Cleanup(ctx context.Context, r applier.Removal, _ *sluicev1.Repository) (applier.Result, error) {
	release := r.Release
	for {
		cm := &corev1.ConfigMap{}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: a.configMap()}, cm)
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: release.Namespace, Name: a.configMap()},
				Data:       map[string]string{"cleanup." + release.Name: "done in " + r.TargetNamespace},
			}
			err = a.Client.Create(ctx, cm)
		case err != nil:
			return applier.Result{}, fmt.Errorf("get ConfigMap %s/%s: %w", release.Namespace, a.configMap(), err)
		default:
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data["cleanup."+release.Name] = "done in " + r.TargetNamespace
			err = a.Client.Update(ctx, cm)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return applier.Result{}, fmt.Errorf("record cleanup of %s: %w", release.Name, err)
		}
		return applier.Result{Message: "test applier cleaned up " + release.Name + " in namespace " + r.TargetNamespace}, nil
	}
}
