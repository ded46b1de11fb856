package reconcile

import (
	"context"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// MaxPasses bounds the passes of one Reconcile on fresher copies (see
// Loop).
const MaxPasses = 4

// ConflictRetry is how soon a reconcile that lost optimistic-concurrency
// races it could not settle by re-reading (MaxPasses of them) runs again.
const ConflictRetry = 100 * time.Millisecond

// Pass is one pass of a reconciler over obj: its steps, its summary and
// its one status write. It returns Restart(fresh) to be run again on a
// fresher copy.
type Pass[T client.Object] func(ctx context.Context, obj T) Result

// Loop runs pass on obj and, each time the pass ends with Restart, again
// at once on the copy the Restart carries, rather than after a requeue:
// a pass that found the cache behind the API server, or whose status write
// lost a race, decides again on what is current. After MaxPasses passes it
// gives up and looks again after ConflictRetry. It returns the Outcome of
// the last pass.
func Loop[T client.Object](ctx context.Context, obj T, pass Pass[T]) (ctrl.Result, error) {
	for range MaxPasses {
		res := pass(ctx, obj)
		if !res.Is(KindRestart) {
			return res.Outcome()
		}
		fresh, ok := res.fresh.(T)
		if !ok {
			return ctrl.Result{}, fmt.Errorf("restart on a %T, not a %s", res.fresh, typeName(obj))
		}
		obj = fresh
	}
	return Requeue(ConflictRetry).Outcome()
}

// Reread reads obj again from r (the API server, not the cache) and
// returns Restart with the fresh copy; Done when obj is gone, a Failure
// when the read fails.
func Reread[T client.Object](ctx context.Context, r client.Reader, obj T) Result {
	fresh := newLike(obj)
	if err := r.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
		return Failure(client.IgnoreNotFound(fmt.Errorf("re-read %s %s: %w", typeName(obj), client.ObjectKeyFromObject(obj), err)))
	}
	return Restart(fresh)
}

// Settle turns the outcome of a pass's status write into the pass's
// result: a write that succeeded (or had nothing to write) keeps res; one
// that lost a race restarts the pass on a copy read from r (see Reread);
// any other error fails the pass with it (joined with res's own error).
func Settle[T client.Object](ctx context.Context, r client.Reader, obj T, res Result, err error) Result {
	switch {
	case err == nil:
		return res
	case apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("Status write lost a race; deciding again on a fresh copy", "object", client.ObjectKeyFromObject(obj))
		return Reread(ctx, r, obj)
	}
	return Failure(kerrors.NewAggregate([]error{res.err, err}))
}

// newLike is a new, empty object of obj's type (Get into a used object
// could keep fields the fresh copy does not have).
func newLike[T client.Object](obj T) T {
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
}
