package policy

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// A large plan spends most of its validation time in policy evaluation, so
// a query set spanning several namespaces is evaluated as parallel parts,
// one per core (up to maxParts). A namespace stays in one part, because its
// rules usually share helper rules that OPA evaluates once per query.
//
// Namespaces differ widely in cost (one that walks every resource against
// one that reads a single type), so dealing them in turn can leave one core
// idle while the other works. The balancer learns instead: when the parts of
// an evaluation finish far apart, the next evaluation runs each namespace as
// its own query, timed, and the namespaces are then dealt longest first to
// the least loaded part. Learning changes only which query evaluates a rule,
// never what it returns.
const (
	// imbalance is the ratio of the slowest part to the fastest that
	// triggers a measurement...
	imbalance = 1.5
	// ...when the slowest part took at least minImbalanced; below that,
	// evaluation is too short for the split to matter.
	minImbalanced = 5 * time.Millisecond
	// remeasureAfter evaluations must pass between two measurements, which
	// bounds their cost (each repeats the shared helper rules per namespace).
	remeasureAfter = 32
)

// balancer holds the current parts of a split query set.
type balancer struct {
	n int // number of parts

	mu          sync.Mutex
	parts       []*querySet
	byNamespace map[string]*querySet // one query per namespace, for measuring
	measureNext bool
	sinceLast   int // evaluations since the last measurement

	// elapsed times the evaluation of rules begun at start; time.Since but
	// for tests, which must not depend on how loaded the machine is.
	elapsed func(rules []ruleRef, start time.Time) time.Duration
}

func sinceStart(_ []ruleRef, start time.Time) time.Duration { return time.Since(start) }

// newBalancer splits rules (sorted by namespace) into n parts dealt in turn;
// nil when there are fewer than two namespaces or n < 2.
func newBalancer(qs *querySet, n int) *balancer {
	parts := splitByNamespace(qs.rules, n)
	if parts == nil {
		return nil
	}
	b := &balancer{n: len(parts), sinceLast: remeasureAfter, elapsed: sinceStart}
	for _, p := range parts {
		b.parts = append(b.parts, &querySet{rules: p, compiler: qs.compiler, store: qs.store, funcs: qs.funcs})
	}
	return b
}

// splitByNamespace divides rules (sorted by namespace) into at most n parts
// of whole namespaces, dealt in turn; each part is one query, evaluated on
// its own core. A namespace stays in one part because its rules often share
// a helper rule that OPA evaluates once per query. Nil when there are fewer
// than two namespaces or n < 2.
func splitByNamespace(rules []ruleRef, n int) [][]ruleRef {
	var namespaces []string
	for i, r := range rules {
		if i == 0 || r.namespace != rules[i-1].namespace {
			namespaces = append(namespaces, r.namespace)
		}
	}
	if n < 2 || len(namespaces) < 2 {
		return nil
	}
	n = min(n, len(namespaces))
	part := make(map[string]int, len(namespaces))
	for i, ns := range namespaces {
		part[ns] = i % n
	}
	parts := make([][]ruleRef, n)
	for _, r := range rules {
		parts[part[r.namespace]] = append(parts[part[r.namespace]], r)
	}
	return parts
}

// eval evaluates every rule of the set against value, in parallel parts.
func (b *balancer) eval(ctx context.Context, e *Engine, value ast.Value, file string, obj any) ([]report.Finding, error) {
	b.mu.Lock()
	parts, measure := b.parts, b.measureNext
	b.measureNext = false
	b.sinceLast++
	if measure {
		b.sinceLast = 0
	}
	b.mu.Unlock()
	if measure {
		return b.measure(ctx, e, value, file, obj)
	}

	times := make([]time.Duration, len(parts))
	findings, err := runParallel(len(parts), len(parts), func(i int) ([]report.Finding, error) {
		start := time.Now()
		fs, err := e.evalQuery(ctx, parts[i], value, file, obj)
		times[i] = b.elapsed(parts[i].rules, start)
		return fs, err
	})
	if err != nil {
		return nil, err
	}
	if imbalanced(times) {
		b.mu.Lock()
		if b.sinceLast >= remeasureAfter {
			b.measureNext = true
		}
		b.mu.Unlock()
	}
	return findings, nil
}

// imbalanced reports whether parts that took times finished far enough
// apart, and late enough, for a measurement to pay off.
func imbalanced(times []time.Duration) bool {
	slowest, fastest := slices.Max(times), slices.Min(times)
	return slowest >= minImbalanced && float64(slowest) > imbalance*float64(fastest)
}

// measure evaluates each namespace as its own query on b.n workers, timing
// each, and deals the namespaces anew by their cost.
func (b *balancer) measure(ctx context.Context, e *Engine, value ast.Value, file string, obj any) ([]report.Finding, error) {
	b.mu.Lock()
	if b.byNamespace == nil {
		b.byNamespace = map[string]*querySet{}
		for _, p := range b.parts {
			for _, r := range p.rules {
				qs := b.byNamespace[r.namespace]
				if qs == nil {
					qs = &querySet{compiler: p.compiler, store: p.store, funcs: p.funcs}
					b.byNamespace[r.namespace] = qs
				}
				qs.rules = append(qs.rules, r)
			}
		}
	}
	namespaces := make([]string, 0, len(b.byNamespace))
	for ns := range b.byNamespace {
		namespaces = append(namespaces, ns)
	}
	b.mu.Unlock()
	sort.Strings(namespaces)

	cost := make(map[string]time.Duration, len(namespaces))
	times := make([]time.Duration, len(namespaces))
	findings, err := runParallel(len(namespaces), b.n, func(i int) ([]report.Finding, error) {
		start := time.Now()
		qs := b.byNamespace[namespaces[i]]
		fs, err := e.evalQuery(ctx, qs, value, file, obj)
		times[i] = b.elapsed(qs.rules, start)
		return fs, err
	})
	if err != nil {
		return nil, err
	}
	for i, ns := range namespaces {
		cost[ns] = times[i]
	}
	parts := dealByCost(b.byNamespace, namespaces, cost, b.n)
	b.mu.Lock()
	b.parts = parts
	b.mu.Unlock()
	return findings, nil
}

// dealByCost assigns namespaces, most costly first, to the part with the
// least cost so far (longest processing time first), and returns one query
// set per part holding the rules of its namespaces in namespace order.
func dealByCost(sets map[string]*querySet, namespaces []string, cost map[string]time.Duration, n int) []*querySet {
	order := append([]string(nil), namespaces...)
	sort.SliceStable(order, func(i, j int) bool { return cost[order[i]] > cost[order[j]] })
	load := make([]time.Duration, n)
	members := make([][]string, n)
	for _, ns := range order {
		least := 0
		for i := range load {
			if load[i] < load[least] {
				least = i
			}
		}
		load[least] += cost[ns]
		members[least] = append(members[least], ns)
	}
	var parts []*querySet
	for _, m := range members {
		if len(m) == 0 {
			continue
		}
		sort.Strings(m)
		part := &querySet{}
		for _, ns := range m {
			qs := sets[ns]
			part.compiler, part.store, part.funcs = qs.compiler, qs.store, qs.funcs
			part.rules = append(part.rules, qs.rules...)
		}
		parts = append(parts, part)
	}
	return parts
}

// runParallel runs f for 0..n-1 on up to workers goroutines (the caller's
// among them) and joins the findings in index order; the first error wins.
func runParallel(n, workers int, f func(i int) ([]report.Finding, error)) ([]report.Finding, error) {
	type result struct {
		findings []report.Finding
		err      error
	}
	results := make([]result, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	work := func() {
		for i := range next {
			fs, err := f(i)
			results[i] = result{fs, err}
		}
	}
	var wg sync.WaitGroup
	for range min(workers, n) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	var findings []report.Finding
	for _, r := range results {
		if r.err != nil {
			return nil, r.err
		}
		findings = append(findings, r.findings...)
	}
	return findings, nil
}
