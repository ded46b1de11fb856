package compliance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// Outcome is what the policies said of one object, or of one namespace's
// objects together (the combined policies).
type Outcome struct {
	// Findings are the failures and warnings, messages redacted.
	Findings []report.Finding
	// Errors are the policies that could not be evaluated, by policy
	// ("namespace/rule"), each with its redacted error.
	Errors map[string]string
}

// Evaluator runs the policy bundle over live objects, keeping each
// object's outcome by UID and resourceVersion so a pass evaluates only the
// objects that changed. One Evaluator serves one namespace; it is not safe
// for concurrent use.
type Evaluator struct {
	Engine *policy.Engine
	// Timeout bounds the evaluation of one object (and of the combined
	// policies over the namespace); a policy that takes longer is an
	// error result, and the others still run.
	Timeout time.Duration

	cache map[types.UID]cached
	// combined is the combined policies' outcome over the objects as
	// cached, valid while no object changed, came or went.
	combined      Outcome
	combinedValid bool
	// Evaluated counts the objects evaluated (not taken from the cache)
	// over the Evaluator's life.
	Evaluated int
}

type cached struct {
	resourceVersion string
	outcome         Outcome
}

// pass is the state of one pass: the policies that timed out in it are
// not evaluated again in it (each would cost the timeout per object).
type pass struct {
	timedOut map[string]bool
}

// Evaluate returns the outcome of every object (by UID) and of the
// combined policies over all of them. With full, every object is
// evaluated again; otherwise only those whose resourceVersion changed.
// Objects gone since the last call are forgotten.
func (ev *Evaluator) Evaluate(ctx context.Context, objs []*unstructured.Unstructured, full bool) (map[types.UID]Outcome, Outcome) {
	if ev.cache == nil {
		ev.cache = map[types.UID]cached{}
	}
	p := &pass{timedOut: map[string]bool{}}
	out := make(map[types.UID]Outcome, len(objs))
	docs := make([]policy.Document, 0, len(objs))
	changed := full || !ev.combinedValid
	for _, o := range objs {
		uid, rv := o.GetUID(), o.GetResourceVersion()
		doc := policy.Document{Path: o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName(), Value: o.Object}
		docs = append(docs, doc)
		if c, ok := ev.cache[uid]; ok && !full && c.resourceVersion == rv {
			out[uid] = c.outcome
			continue
		}
		changed = true
		oc := ev.evalOne(ctx, p, policy.Part{}, []policy.Document{doc})
		ev.Evaluated++
		ev.cache[uid] = cached{resourceVersion: rv, outcome: oc}
		out[uid] = oc
	}
	for uid := range ev.cache {
		if _, ok := out[uid]; !ok {
			delete(ev.cache, uid)
			changed = true
		}
	}
	if !changed {
		// The same objects as last time: the combined policies would say
		// what they said then.
		return out, ev.combined
	}
	var combined Outcome
	if len(docs) > 0 {
		combined = ev.evalOne(ctx, p, policy.Part{Combined: true}, docs)
	}
	// An outcome with errors (a timeout, a cancelled pass) is not kept:
	// the next pass tries again.
	ev.combined, ev.combinedValid = combined, len(combined.Errors) == 0 && ctx.Err() == nil
	return out, combined
}

// evalOne evaluates a part over docs: all its policies in one query, or,
// when that fails (or a policy timed out earlier in the pass), policy by
// policy, so one failing policy is an error result and the others still
// give theirs.
func (ev *Evaluator) evalOne(ctx context.Context, p *pass, part policy.Part, docs []policy.Document) Outcome {
	if len(p.timedOut) == 0 {
		fs, err := ev.evalTimed(ctx, part, docs)
		if err == nil {
			return Outcome{Findings: fs}
		}
		if ctx.Err() != nil {
			return Outcome{Errors: map[string]string{"*": "compliance pass cancelled"}}
		}
	}
	perDoc, combined := ev.Engine.Policies(policy.KindKubernetes)
	names := perDoc
	if part.Combined {
		names = combined
	}
	var oc Outcome
	redactor := policy.NewRedactor(nil, values(docs)...)
	for _, name := range names {
		if p.timedOut[name] {
			oc.addError(name, "not evaluated: the policy timed out on another object in this pass")
			continue
		}
		one := part
		one.Policy = name
		fs, err := ev.evalTimed(ctx, one, docs)
		switch {
		case err == nil:
			oc.Findings = append(oc.Findings, fs...)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			p.timedOut[name] = true
			oc.addError(name, fmt.Sprintf("timed out after %s", ev.timeout()))
		default:
			oc.addError(name, redactor.String(err.Error()))
		}
	}
	report.SortFindings(oc.Findings)
	return oc
}

func (oc *Outcome) addError(policyName, msg string) {
	if oc.Errors == nil {
		oc.Errors = map[string]string{}
	}
	oc.Errors[policyName] = msg
}

// evalTimed is EvalPart under the per-evaluation timeout.
func (ev *Evaluator) evalTimed(ctx context.Context, part policy.Part, docs []policy.Document) ([]report.Finding, error) {
	tctx, cancel := context.WithTimeout(ctx, ev.timeout())
	defer cancel()
	fs, err := ev.Engine.EvalPart(tctx, policy.KindKubernetes, part, docs)
	if err != nil && tctx.Err() != nil {
		// OPA reports a cancelled evaluation in its own words; say why.
		return nil, fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return fs, err
}

func (ev *Evaluator) timeout() time.Duration {
	if ev.Timeout <= 0 {
		return DefaultEvalTimeout
	}
	return ev.Timeout
}

// DefaultEvalTimeout bounds one object's evaluation when Timeout is unset.
const DefaultEvalTimeout = 5 * time.Second

func values(docs []policy.Document) []any {
	out := make([]any, 0, len(docs))
	for _, d := range docs {
		out = append(out, d.Value)
	}
	return out
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
