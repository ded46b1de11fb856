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
	p := jsonParser{data: data}
	p.space()
	v, ok = p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(p.data) {
		return nil, false
	}
	return v, true
}

type jsonParser struct {
	data []byte
	i    int
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

func (p *jsonParser) value(depth int) (ast.Value, bool) {
	if p.i >= len(p.data) || depth > maxJSONDepth {
		return nil, false
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return ast.String(s), true
	case c == 't':
		return p.literal("true", ast.Boolean(true))
	case c == 'f':
		return p.literal("false", ast.Boolean(false))
	case c == 'n':
		return p.literal("null", ast.Null{})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, false
}

func (p *jsonParser) literal(word string, v ast.Value) (ast.Value, bool) {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return nil, false
	}
	p.i += len(word)
	return v, true
}

func (p *jsonParser) object(depth int) (ast.Value, bool) {
	p.i++ // {
	var pairs [][2]*ast.Term
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return ast.NewObject(), true
	}
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
		pairs = append(pairs, [2]*ast.Term{ast.StringTerm(k), ast.NewTerm(v)})
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			// Insert keeps the last value of a repeated key, as decoding
			// into a map does (NewObject assumes distinct keys).
			obj := ast.NewObjectWithCapacity(len(pairs))
			for _, kv := range pairs {
				obj.Insert(kv[0], kv[1])
			}
			return obj, true
		default:
			return nil, false
		}
	}
}

func (p *jsonParser) array(depth int) (ast.Value, bool) {
	p.i++ // [
	var terms []*ast.Term
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return ast.NewArray(), true
	}
	for {
		p.space()
		v, ok := p.value(depth)
		if !ok {
			return nil, false
		}
		terms = append(terms, ast.NewTerm(v))
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return ast.NewArray(terms...), true
		default:
			return nil, false
		}
	}
}

// str reads a string. Plain ASCII without escapes is taken as is; anything
// else (escapes, control characters, non-ASCII) is left to encoding/json,
// so unescaping and invalid UTF-8 are handled exactly as it does.
func (p *jsonParser) str() (string, bool) {
	start := p.i
	p.i++ // "
	plain := true
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			if plain {
				return string(p.data[start+1 : p.i-1]), true
			}
			var s string
			if err := json.Unmarshal(p.data[start:p.i], &s); err != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return "", false
		default:
			if c >= 0x80 {
				plain = false
			}
			p.i++
		}
	}
	return "", false
}

// number reads a JSON number and converts it as ast.InterfaceToValue
// converts a json.Number.
func (p *jsonParser) number() (ast.Value, bool) {
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
	v, err := ast.InterfaceToValue(json.Number(d[start:p.i]))
	if err != nil {
		return nil, false
	}
	return v, true
}
