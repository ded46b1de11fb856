package policy

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// Part selects what EvalPart evaluates: the rules Eval runs per document,
// or those it runs once over all documents, and optionally one rule of
// them. A caller that evaluates documents one at a time and keeps their
// results (live compliance) uses it to evaluate only what changed, and to
// tell which rule fails when a whole set does.
type Part struct {
	// Combined selects the rules evaluated once over all documents (the
	// combined default packages, and the caller's with Options.Combine)
	// instead of those evaluated per document.
	Combined bool
	// Policy, when set, evaluates this rule only ("namespace/rule", as
	// Policies names it).
	Policy string
}

// Policies returns the rules Eval evaluates for kind, as
// "namespace/rule", sorted: perDoc against each document, combined once
// over all of them.
func (e *Engine) Policies(kind Kind) (perDoc, combined []string) {
	qs, cs, err := e.sets(kind)
	if err != nil {
		return nil, nil
	}
	return namesOf(qs), namesOf(cs...)
}

// EvalPart evaluates one part of what Eval evaluates for kind: the
// per-document rules against each of docs, or the combined rules once over
// all of docs; with part.Policy, that rule alone. Findings are redacted as
// Eval redacts them and sorted. An unknown policy is an error.
func (e *Engine) EvalPart(ctx context.Context, kind Kind, part Part, docs []Document) ([]report.Finding, error) {
	perDoc, combined, err := e.sets(kind)
	if err != nil {
		return nil, err
	}
	var sets []*querySet
	if part.Combined {
		sets = combined
	} else {
		sets = []*querySet{perDoc}
	}
	if part.Policy != "" {
		one, err := e.single(sets, part.Policy)
		if err != nil {
			return nil, err
		}
		sets = []*querySet{one}
	}
	var findings []report.Finding
	for _, qs := range sets {
		if part.Combined {
			if len(docs) == 0 {
				continue
			}
			fs, err := e.evalSet(ctx, qs, combine(docs), "", nil)
			if err != nil {
				return nil, fmt.Errorf("evaluate combined documents: %w", err)
			}
			findings = append(findings, fs...)
			continue
		}
		for _, d := range docs {
			fs, err := e.evalSet(ctx, qs, d.Value, d.Path, d.Value)
			if err != nil {
				return nil, fmt.Errorf("evaluate %s: %w", d.Path, err)
			}
			findings = append(findings, fs...)
		}
	}
	if len(findings) > 0 {
		inputs := make([]any, 0, len(docs))
		for _, d := range docs {
			inputs = append(inputs, d.Value)
		}
		findings = redactWith(findings, secretsOf(inputs...))
	}
	report.SortFindings(findings)
	return findings, nil
}

// sets returns the per-document query set of kind and its combined ones.
func (e *Engine) sets(kind Kind) (*querySet, []*querySet, error) {
	var combined []*querySet
	if e.userCombined != nil {
		combined = append(combined, e.userCombined)
	}
	switch kind {
	case KindTerraform:
		return e.terraform, combined, nil
	case KindKubernetes:
		return e.kubeDoc, append([]*querySet{e.kubeCombined}, combined...), nil
	}
	return nil, nil, fmt.Errorf("unknown input kind %q", kind)
}

// single returns the query set of one rule of sets, prepared once and kept.
func (e *Engine) single(sets []*querySet, policy string) (*querySet, error) {
	for _, qs := range sets {
		if qs == nil {
			continue
		}
		for _, r := range qs.rules {
			if r.namespace+"/"+r.name != policy {
				continue
			}
			key := fmt.Sprintf("%p/%s", qs, policy)
			one, _ := e.singles.LoadOrStore(key, &querySet{rules: []ruleRef{r}, compiler: qs.compiler, store: qs.store, funcs: qs.funcs})
			return one.(*querySet), nil
		}
	}
	return nil, fmt.Errorf("unknown policy %q", policy)
}

// namesOf lists the rules of query sets as "namespace/rule", sorted and
// without repeats.
func namesOf(sets ...*querySet) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, qs := range sets {
		if qs == nil {
			continue
		}
		for _, r := range qs.rules {
			if n := r.namespace + "/" + r.name; !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}
