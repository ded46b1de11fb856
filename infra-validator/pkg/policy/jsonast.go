package policy

import (
	"encoding/json"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxJSONDepth matches encoding/json's nesting limit.
const maxJSONDepth = 10000

// ParseJSON parses one JSON document straight into the ast.Value a policy
// evaluates, without the intermediate map[string]any: the value equals
// ast.InterfaceToValue of the document decoded with json.Decoder.UseNumber
// (numbers stay exact). It reports ok=false for anything it does not accept
// (bad syntax, trailing data, excessive nesting); the caller then decodes
// with encoding/json, which gives the error message, so behaviour never
// depends on this parser. A Document whose Value is an ast.Value is used
// as is by Eval and Redact.
func ParseJSON(data []byte) (v ast.Value, ok bool) {
	p := jsonParser{data: data, strs: map[string]*ast.Term{}, nums: map[string]*ast.Term{}}
	p.space()
	t, ok := p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(p.data) {
		return nil, false
	}
	return t.Value, true
}

// Interning limits: strings up to maxInternLen bytes are shared, up to
// maxInterned distinct ones per document. A plan repeats its keys and
// many values (actions, types, modes, tags) thousands of times; sharing
// their terms saves most of the allocations, and with them the garbage
// collector's work. Terms of an input are never modified by evaluation.
const (
	maxInternLen = 64
	maxInterned  = 1 << 14
	slabSize     = 512
)

type jsonParser struct {
	data []byte
	i    int

	// slab hands out terms from blocks of slabSize.
	slab []ast.Term
	// pairs and elems are stacks of the members of the objects and arrays
	// being parsed, shared by all levels so a member list is not allocated
	// per object.
	pairs [][2]*ast.Term
	elems []*ast.Term
	// strs and nums intern string and number terms by their JSON text.
	strs map[string]*ast.Term
	nums map[string]*ast.Term
}

func (p *jsonParser) term(v ast.Value) *ast.Term {
	if len(p.slab) == 0 {
		p.slab = make([]ast.Term, slabSize)
	}
	t := &p.slab[0]
	p.slab = p.slab[1:]
	t.Value = v
	return t
}

func (p *jsonParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

var (
	trueTerm  = ast.InternedTerm(true)
	falseTerm = ast.InternedTerm(false)
	nullTerm  = ast.NullTerm()
)

func (p *jsonParser) value(depth int) (*ast.Term, bool) {
	if p.i >= len(p.data) || depth > maxJSONDepth {
		return nil, false
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", trueTerm)
	case c == 'f':
		return p.literal("false", falseTerm)
	case c == 'n':
		return p.literal("null", nullTerm)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, false
}

func (p *jsonParser) literal(word string, t *ast.Term) (*ast.Term, bool) {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return nil, false
	}
	p.i += len(word)
	return t, true
}

func (p *jsonParser) object(depth int) (*ast.Term, bool) {
	p.i++ // {
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return p.term(ast.NewObject()), true
	}
	base := len(p.pairs)
	for {
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return nil, false
		}
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.space()
		v, ok := p.value(depth)
		if !ok {
			return nil, false
		}
		p.pairs = append(p.pairs, [2]*ast.Term{k, v})
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			pairs := p.pairs[base:]
			var obj ast.Object
			if distinctKeys(pairs) {
				// NewObject copies the pairs into one block.
				obj = ast.NewObject(pairs...)
			} else {
				// Insert keeps the last value of a repeated key, as
				// decoding into a map does.
				obj = ast.NewObjectWithCapacity(len(pairs))
				for _, kv := range pairs {
					obj.Insert(kv[0], kv[1])
				}
			}
			clear(pairs)
			p.pairs = p.pairs[:base]
			return p.term(obj), true
		default:
			return nil, false
		}
	}
}

// distinctKeys reports whether the string keys of pairs are distinct.
func distinctKeys(pairs [][2]*ast.Term) bool {
	if len(pairs) > 16 {
		seen := make(map[ast.String]struct{}, len(pairs))
		for _, kv := range pairs {
			k := kv[0].Value.(ast.String)
			if _, dup := seen[k]; dup {
				return false
			}
			seen[k] = struct{}{}
		}
		return true
	}
	for i := 1; i < len(pairs); i++ {
		for j := 0; j < i; j++ {
			if pairs[i][0] == pairs[j][0] || pairs[i][0].Value.(ast.String) == pairs[j][0].Value.(ast.String) {
				return false
			}
		}
	}
	return true
}

func (p *jsonParser) array(depth int) (*ast.Term, bool) {
	p.i++ // [
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return p.term(ast.NewArray()), true
	}
	base := len(p.elems)
	for {
		p.space()
		v, ok := p.value(depth)
		if !ok {
			return nil, false
		}
		p.elems = append(p.elems, v)
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			// NewArray keeps the slice it is given, so it gets its own.
			terms := append([]*ast.Term(nil), p.elems[base:]...)
			clear(p.elems[base:])
			p.elems = p.elems[:base]
			return p.term(ast.NewArray(terms...)), true
		default:
			return nil, false
		}
	}
}

// str reads a string. Plain ASCII without escapes is taken as is; anything
// else (escapes, control characters, non-ASCII) is left to encoding/json,
// so unescaping and invalid UTF-8 are handled exactly as it does.
func (p *jsonParser) str() (*ast.Term, bool) {
	start := p.i
	p.i++ // "
	plain := true
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			raw := p.data[start:p.i]
			if t, ok := p.strs[string(raw)]; ok {
				return t, true
			}
			var s string
			if plain {
				s = string(raw[1 : len(raw)-1])
			} else if err := json.Unmarshal(raw, &s); err != nil {
				return nil, false
			}
			t := p.term(ast.String(s))
			if len(raw) <= maxInternLen && len(p.strs) < maxInterned {
				p.strs[string(raw)] = t
			}
			return t, true
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return nil, false
		default:
			if c >= 0x80 {
				plain = false
			}
			p.i++
		}
	}
	return nil, false
}

// number reads a JSON number and converts it as ast.InterfaceToValue
// converts a json.Number.
func (p *jsonParser) number() (*ast.Term, bool) {
	start := p.i
	d := p.data
	if p.i < len(d) && d[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(d) && d[p.i] == '0':
		p.i++
	case p.i < len(d) && d[p.i] >= '1' && d[p.i] <= '9':
		for p.i < len(d) && d[p.i] >= '0' && d[p.i] <= '9' {
			p.i++
		}
	default:
		return nil, false
	}
	if p.i < len(d) && d[p.i] == '.' {
		p.i++
		if p.i >= len(d) || d[p.i] < '0' || d[p.i] > '9' {
			return nil, false
		}
		for p.i < len(d) && d[p.i] >= '0' && d[p.i] <= '9' {
			p.i++
		}
	}
	if p.i < len(d) && (d[p.i] == 'e' || d[p.i] == 'E') {
		p.i++
		if p.i < len(d) && (d[p.i] == '+' || d[p.i] == '-') {
			p.i++
		}
		if p.i >= len(d) || d[p.i] < '0' || d[p.i] > '9' {
			return nil, false
		}
		for p.i < len(d) && d[p.i] >= '0' && d[p.i] <= '9' {
			p.i++
		}
	}
	raw := d[start:p.i]
	if t, ok := p.nums[string(raw)]; ok {
		return t, true
	}
	v, err := ast.InterfaceToValue(json.Number(raw))
	if err != nil {
		return nil, false
	}
	t := p.term(v)
	if len(p.nums) < maxInterned {
		p.nums[string(raw)] = t
	}
	return t, true
}
