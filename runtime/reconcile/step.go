package reconcile

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Step is one named step of a pass over a scope S (the state of one pass:
// the object, what earlier steps loaded). Run returns Next to go on, or a
// Result that ends the pass.
type Step[S any] struct {
	// Name says what the step does, for logs ("release", "apply").
	Name string
	// Run is the step.
	Run func(ctx context.Context, s S) Result
}

// RunSteps runs steps in order on s and returns the Result of the first
// that ends the pass, or Done when all of them went on. A reconciler that
// writes its steps as a table reads top to bottom as what it does.
func RunSteps[S any](ctx context.Context, s S, steps []Step[S]) Result {
	for _, step := range steps {
		res := step.Run(ctx, s)
		if res.Ends() {
			log.FromContext(ctx).V(2).Info("Step ended the pass", "step", step.Name, "result", res.String())
			return res
		}
	}
	return Done()
}
