package gate

import (
	"slices"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// People says which identities belong to one person, from the Persons that
// platform admins wrote. Identities that share a Person (directly, or
// through an identity two Persons both list) are one person. The zero value
// knows nobody: every identity is a person of its own.
type People struct {
	// person maps a canonical identity to its person's key (the smallest
	// canonical identity of the person).
	person map[sluicev1.Identity]sluicev1.Identity
	// names maps a person's key to the sorted names of its Persons.
	names map[sluicev1.Identity][]string
}

// NewPeople joins the identities of the Persons into people.
func NewPeople(persons []sluicev1.Person) People {
	if len(persons) == 0 {
		return People{}
	}
	parent := map[sluicev1.Identity]sluicev1.Identity{}
	var find func(sluicev1.Identity) sluicev1.Identity
	find = func(x sluicev1.Identity) sluicev1.Identity {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		root := find(p)
		parent[x] = root
		return root
	}
	union := func(a, b sluicev1.Identity) {
		ra, rb := find(a), find(b)
		switch {
		case ra == rb:
		case ra < rb:
			parent[rb] = ra
		default:
			parent[ra] = rb
		}
	}
	first := map[string]sluicev1.Identity{}
	for _, p := range persons {
		for _, id := range p.Spec.Identities {
			c := id.Canonical()
			find(c)
			if f, ok := first[p.Name]; ok {
				union(f, c)
			} else {
				first[p.Name] = c
			}
		}
	}
	out := People{person: map[sluicev1.Identity]sluicev1.Identity{}, names: map[sluicev1.Identity][]string{}}
	for id := range parent {
		out.person[id] = find(id)
	}
	for name, id := range first {
		key := out.person[id]
		out.names[key] = append(out.names[key], name)
	}
	for key := range out.names {
		slices.Sort(out.names[key])
	}
	return out
}

// Key is the identity that stands for id's person: the same for every
// identity of one person, and id's canonical form for an identity no
// Person lists.
func (p People) Key(id sluicev1.Identity) sluicev1.Identity {
	c := id.Canonical()
	if k, ok := p.person[c]; ok {
		return k
	}
	return c
}

// Names returns the names of the Persons that id belongs to (none for an
// identity no Person lists).
func (p People) Names(id sluicev1.Identity) []string {
	return p.names[p.Key(id)]
}

// authorKeys appends to dst the person keys of everyone who wrote or
// pushed the change, so that any identity of theirs is recognised as an
// author.
func authorKeys(dst []sluicev1.Identity, cr *sluicev1.ChangeRequest, people People) []sluicev1.Identity {
	for _, a := range changeAuthors(cr) {
		if k := people.Key(a); !slices.Contains(dst, k) {
			dst = append(dst, k)
		}
	}
	return dst
}

// changeAuthors lists every identity the change records for the people who
// wrote or pushed it: commit authors and committers, the pull request's
// author and everyone who pushed to the pull request.
func changeAuthors(cr *sluicev1.ChangeRequest) []sluicev1.Identity {
	if cr.Spec.PullRequestAuthor == "" && len(cr.Spec.Pushers) == 0 {
		return cr.Spec.Authors
	}
	out := make([]sluicev1.Identity, 0, len(cr.Spec.Authors)+len(cr.Spec.Pushers)+1)
	out = append(out, cr.Spec.Authors...)
	if cr.Spec.PullRequestAuthor != "" {
		out = append(out, cr.Spec.PullRequestAuthor)
	}
	return append(out, cr.Spec.Pushers...)
}
