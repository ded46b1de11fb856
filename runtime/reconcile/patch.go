package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNoStatus is returned for an object type without a Status field.
var ErrNoStatus = errors.New("object has no Status field")

// Helper writes the status of one object once per pass, and only when it
// changed (like Cluster API's patch.Helper and Flux's SerialPatcher). It
// snapshots the object when it is made; Patch sends a merge patch of the
// status against that snapshot, carrying the resourceVersion it was read
// at unless WithoutOptimisticLock is given, so a concurrent writer makes
// the write fail with a conflict instead of being overwritten. After a
// successful write the snapshot is the written object, so a second Patch
// in the same pass writes only what changed since.
type Helper[T client.Object] struct {
	client     client.Client
	owner      string
	optimistic bool
	before     T
}

// Option configures a Helper.
type Option func(*helperOptions)

type helperOptions struct{ optimistic bool }

// WithoutOptimisticLock makes Patch write without the resourceVersion:
// for a writer whose status fields no one else writes, a concurrent write
// of other fields then does not fail the patch.
func WithoutOptimisticLock() Option { return func(o *helperOptions) { o.optimistic = false } }

// NewHelper snapshots obj; Patch writes its status with c, as field owner
// owner.
func NewHelper[T client.Object](c client.Client, obj T, owner string, opts ...Option) *Helper[T] {
	o := helperOptions{optimistic: true}
	for _, opt := range opts {
		opt(&o)
	}
	return &Helper[T]{client: c, owner: owner, optimistic: o.optimistic, before: obj.DeepCopyObject().(T)}
}

// Original is the object as it was at the start of the pass (or at the
// last successful Patch). Callers must not change it.
func (h *Helper[T]) Original() T { return h.before }

// Changed reports whether obj's status differs from the snapshot
// (semantic equality: 1000m equals 1).
func (h *Helper[T]) Changed(obj T) (bool, error) {
	a, err := statusOf(h.before)
	if err != nil {
		return false, err
	}
	b, err := statusOf(obj)
	if err != nil {
		return false, err
	}
	return !equality.Semantic.DeepEqual(a, b), nil
}

// Patch writes obj's status when it changed, and nothing otherwise (it
// reports whether it wrote). A write that lost a race returns an error
// for which apierrors.IsConflict holds; obj is left as the pass made it.
// On success obj is what the API server returned, and becomes the new
// snapshot.
func (h *Helper[T]) Patch(ctx context.Context, obj T) (bool, error) {
	changed, err := h.Changed(obj)
	if err != nil || !changed {
		return false, err
	}
	var patch client.Patch = client.MergeFrom(h.before)
	if h.optimistic {
		patch = client.MergeFromWithOptions(h.before, client.MergeFromWithOptimisticLock{})
	}
	if err := h.client.Status().Patch(ctx, obj, patch, client.FieldOwner(h.owner)); err != nil {
		return false, fmt.Errorf("patch status of %s %s: %w", typeName(obj), client.ObjectKeyFromObject(obj), err)
	}
	h.before = obj.DeepCopyObject().(T)
	return true, nil
}

// statusOf is the value of obj's Status field (every kubebuilder type has
// one); comparing it alone keeps spec and metadata out of the decision.
func statusOf(obj client.Object) (any, error) {
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, fmt.Errorf("%s: %w", typeName(obj), ErrNoStatus)
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s: %w", typeName(obj), ErrNoStatus)
	}
	f := v.FieldByName("Status")
	if !f.IsValid() {
		return nil, fmt.Errorf("%s: %w", typeName(obj), ErrNoStatus)
	}
	return f.Interface(), nil
}

// typeName is the Go type name of obj (a typed object's kind is often
// empty), for error messages.
func typeName(obj client.Object) string {
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
