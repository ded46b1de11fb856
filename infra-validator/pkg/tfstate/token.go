package tfstate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// tokenPrefix versions the token format.
const tokenPrefix = "st1"

// maxTokenLen bounds what parseToken looks at; real tokens are ~250 bytes.
const maxTokenLen = 2048

// claims are what a token grants. The JSON names are short: the token
// travels in every request.
type claims struct {
	Namespace string `json:"ns"`
	Workspace string `json:"ws"`
	Release   string `json:"rel"`
	Mode      Mode   `json:"mode"`
	// Expires is a Unix time in seconds.
	Expires int64 `json:"exp"`
	// Run tells runs apart: the lock records the run that took it.
	Run string `json:"run"`
}

var b64 = base64.RawURLEncoding.Strict()

// errBadToken is every reason a token is refused before its claims are
// trusted; the reason is logged, the token never.
var errBadToken = errors.New("invalid token")

// sign returns the token for c: st1.<base64url(json)>.<base64url(hmac)>,
// the MAC taken over the text before the second dot.
func (s *Server) sign(c claims) string {
	body, err := json.Marshal(c)
	if err != nil {
		panic(err) // claims are strings and an int.
	}
	signed := tokenPrefix + "." + b64.EncodeToString(body)
	return signed + "." + b64.EncodeToString(mac(s.key, signed))
}

func mac(key []byte, signed string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(signed))
	return h.Sum(nil)
}

// parseToken verifies tok with key and returns its claims. It checks the
// MAC (in constant time) before it decodes anything it signed, then the
// shape of the claims and the expiry against now.
func parseToken(key []byte, tok string, now time.Time) (claims, error) {
	if len(tok) == 0 || len(tok) > maxTokenLen {
		return claims{}, fmt.Errorf("%w: length %d", errBadToken, len(tok))
	}
	first := strings.IndexByte(tok, '.')
	last := strings.LastIndexByte(tok, '.')
	if first < 0 || first == last || tok[:first] != tokenPrefix {
		return claims{}, fmt.Errorf("%w: not a %s token", errBadToken, tokenPrefix)
	}
	signed, sig := tok[:last], tok[last+1:]
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(key, signed)) {
		return claims{}, fmt.Errorf("%w: signature does not match", errBadToken)
	}
	body, err := b64.DecodeString(signed[first+1:])
	if err != nil {
		return claims{}, fmt.Errorf("%w: claims: %v", errBadToken, err)
	}
	var c claims
	if err := decodeOne(body, &c, true); err != nil {
		return claims{}, fmt.Errorf("%w: claims are not one JSON object", errBadToken)
	}
	if c.Mode != ModePlan && c.Mode != ModeApply {
		return claims{}, fmt.Errorf("%w: mode %q", errBadToken, c.Mode)
	}
	if _, err := newStateRef(c.Namespace, c.Workspace, c.Release); err != nil || c.Workspace == "" || c.Run == "" {
		return claims{}, fmt.Errorf("%w: claims name no state", errBadToken)
	}
	if now.Unix() >= c.Expires {
		return claims{}, fmt.Errorf("%w: expired at %s (run %s)", errBadToken, time.Unix(c.Expires, 0).UTC().Format(time.RFC3339), c.Run)
	}
	return c, nil
}
