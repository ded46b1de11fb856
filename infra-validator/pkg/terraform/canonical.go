package terraform

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// canonicalEncoder writes the canonical form of the planDigest: the bytes
// encoding/json's Encoder (HTML escaping off) writes for canonicalChange and
// canonicalOutput, produced without reflection. Values of the shapes plan
// JSON decodes to (maps, slices, strings, json.Number, bools, nil) are
// written directly; anything else, and any number encoding/json would
// refuse, goes through encoding/json itself, so the bytes and the errors
// are always encoding/json's. TestCanonicalEncoderMatchesEncodingJSON pins
// the equality.
type canonicalEncoder struct {
	buf  []byte
	keys []string
	out  bytes.Buffer
	enc  *json.Encoder
}

func newCanonicalEncoder() *canonicalEncoder {
	e := &canonicalEncoder{}
	e.enc = json.NewEncoder(&e.out)
	e.enc.SetEscapeHTML(false)
	return e
}

// change writes c as encoding/json would, with the Encoder's newline.
func (e *canonicalEncoder) change(c *canonicalChange) error {
	e.buf = append(e.buf[:0], `{"address":`...)
	e.str(c.Address)
	if c.PreviousAddress != "" {
		e.buf = append(e.buf, `,"previous_address":`...)
		e.str(c.PreviousAddress)
	}
	if c.ModuleAddress != "" {
		e.buf = append(e.buf, `,"module_address":`...)
		e.str(c.ModuleAddress)
	}
	e.buf = append(e.buf, `,"mode":`...)
	e.str(c.Mode)
	e.buf = append(e.buf, `,"type":`...)
	e.str(c.Type)
	e.buf = append(e.buf, `,"name":`...)
	e.str(c.Name)
	if c.Index != nil {
		e.buf = append(e.buf, `,"index":`...)
		if err := e.value(c.Index); err != nil {
			return err
		}
	}
	e.buf = append(e.buf, `,"provider_name":`...)
	e.str(c.ProviderName)
	if c.Deposed != "" {
		e.buf = append(e.buf, `,"deposed":`...)
		e.str(c.Deposed)
	}
	if err := e.changeValues(c.Actions, c.Before, c.After, c.AfterUnknown, c.BeforeSensitive, c.AfterSensitive); err != nil {
		return err
	}
	if c.Importing != nil {
		e.buf = append(e.buf, `,"importing":`...)
		if err := e.stdValue(c.Importing); err != nil {
			return err
		}
	}
	e.buf = append(e.buf, '}', '\n')
	return nil
}

// output writes o as encoding/json would, with the Encoder's newline.
func (e *canonicalEncoder) output(o *canonicalOutput) error {
	e.buf = append(e.buf[:0], `{"name":`...)
	e.str(o.Name)
	if err := e.changeValues(o.Actions, o.Before, o.After, o.AfterUnknown, o.BeforeSensitive, o.AfterSensitive); err != nil {
		return err
	}
	e.buf = append(e.buf, '}', '\n')
	return nil
}

func (e *canonicalEncoder) changeValues(actions []string, values ...any) error {
	e.buf = append(e.buf, `,"actions":`...)
	if actions == nil {
		e.buf = append(e.buf, "null"...)
	} else {
		e.buf = append(e.buf, '[')
		for i, a := range actions {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.str(a)
		}
		e.buf = append(e.buf, ']')
	}
	for i, name := range [...]string{`,"before":`, `,"after":`, `,"after_unknown":`, `,"before_sensitive":`, `,"after_sensitive":`} {
		e.buf = append(e.buf, name...)
		if err := e.value(values[i]); err != nil {
			return err
		}
	}
	return nil
}

// value writes one decoded JSON value.
func (e *canonicalEncoder) value(v any) error {
	switch t := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case string:
		e.str(t)
	case bool:
		e.buf = strconv.AppendBool(e.buf, t)
	case json.Number:
		s := string(t)
		if s == "" {
			s = "0"
		}
		if !isJSONNumber(s) {
			return e.stdValue(v)
		}
		e.buf = append(e.buf, s...)
	case []any:
		if t == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		e.buf = append(e.buf, '[')
		for i, x := range t {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.value(x); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
	case map[string]any:
		if t == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		start := len(e.keys)
		for k := range t {
			e.keys = append(e.keys, k)
		}
		keys := e.keys[start:]
		slices.Sort(keys)
		e.buf = append(e.buf, '{')
		for i, k := range keys {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.str(k)
			e.buf = append(e.buf, ':')
			if err := e.value(t[k]); err != nil {
				e.keys = e.keys[:start]
				return err
			}
		}
		e.buf = append(e.buf, '}')
		e.keys = e.keys[:start]
	default:
		return e.stdValue(v)
	}
	return nil
}

// stdValue appends encoding/json's encoding of v (without the newline).
func (e *canonicalEncoder) stdValue(v any) error {
	e.out.Reset()
	if err := e.enc.Encode(v); err != nil {
		return err
	}
	e.buf = append(e.buf, bytes.TrimSuffix(e.out.Bytes(), []byte("\n"))...)
	return nil
}

const hexDigits = "0123456789abcdef"

// str appends s quoted as encoding/json does with HTML escaping off.
func (e *canonicalEncoder) str(s string) {
	b := append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	e.buf = append(b, '"')
}

// isJSONNumber reports whether s is a valid JSON number (encoding/json's
// isValidNumber).
func isJSONNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = s[2:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	return s == ""
}
