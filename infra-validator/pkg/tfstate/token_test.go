package tfstate

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func testServer(key string) *Server {
	s := &Server{key: []byte(key), now: func() time.Time { return testNow }}
	return s
}

func validClaims() claims {
	return claims{Namespace: "sluice-system", Workspace: "default", Release: "web-prod", Mode: ModePlan, Expires: testNow.Add(time.Hour).Unix(), Run: "0123abcd"}
}

func TestParseToken_acceptsWhatItSigned(t *testing.T) {
	s := testServer("k1")
	tok := s.sign(validClaims())
	c, err := parseToken(s.key, tok, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if c != validClaims() {
		t.Fatalf("claims %+v, want %+v", c, validClaims())
	}
}

func TestParseToken_refusesForgedModifiedAndExpiredTokens(t *testing.T) {
	s := testServer("k1")
	tok := s.sign(validClaims())
	parts := strings.Split(tok, ".")
	withClaims := func(edit func(*claims)) string {
		c := validClaims()
		edit(&c)
		body, _ := json.Marshal(c)
		return parts[0] + "." + b64.EncodeToString(body) + "." + parts[2]
	}
	for name, tc := range map[string]struct {
		tok string
		now time.Time
	}{
		"a token signed with another key":           {testServer("k2").sign(validClaims()), testNow},
		"a plan token whose mode was changed":       {withClaims(func(c *claims) { c.Mode = ModeApply }), testNow},
		"a token whose release was changed":         {withClaims(func(c *claims) { c.Release = "db-prod" }), testNow},
		"a token whose expiry was extended":         {withClaims(func(c *claims) { c.Expires += 3600 }), testNow},
		"a token without its signature":             {parts[0] + "." + parts[1] + ".", testNow},
		"a token with a truncated signature":        {tok[:len(tok)-2], testNow},
		"a token with another version prefix":       {"st2" + tok[3:], testNow},
		"a token at its expiry":                     {tok, testNow.Add(time.Hour)},
		"a token after its expiry":                  {tok, testNow.Add(2 * time.Hour)},
		"an empty token":                            {"", testNow},
		"a token longer than any real one":          {tok + strings.Repeat("A", maxTokenLen), testNow},
		"the claims alone":                          {parts[1], testNow},
		"a signature over other text":               {parts[0] + "." + parts[1] + "." + b64.EncodeToString(mac(s.key, "st1.e30")), testNow},
		"a signed token naming no state":            {s.sign(claims{Mode: ModePlan, Expires: testNow.Add(time.Hour).Unix(), Run: "r"}), testNow},
		"a signed token with an unknown mode":       {s.sign(claims{Namespace: "ns", Workspace: "default", Release: "r", Mode: "admin", Expires: testNow.Add(time.Hour).Unix(), Run: "r"}), testNow},
		"a signed token without a run":              {s.sign(claims{Namespace: "ns", Workspace: "default", Release: "r", Mode: ModePlan, Expires: testNow.Add(time.Hour).Unix()}), testNow},
		"a signed token whose release has a slash":  {s.sign(claims{Namespace: "ns", Workspace: "default", Release: "a/b", Mode: ModePlan, Expires: testNow.Add(time.Hour).Unix(), Run: "r"}), testNow},
		"a signed token whose namespace is invalid": {s.sign(claims{Namespace: "NS", Workspace: "default", Release: "r", Mode: ModePlan, Expires: testNow.Add(time.Hour).Unix(), Run: "r"}), testNow},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseToken(s.key, tc.tok, tc.now)
			if !errors.Is(err, errBadToken) {
				t.Fatalf("parseToken accepted it (err %v)", err)
			}
			if tc.tok != "" && len(tc.tok) > 8 && strings.Contains(err.Error(), tc.tok) {
				t.Fatalf("the error repeats the token: %v", err)
			}
		})
	}
}

func TestGrant_checksNamesModeAndTTL(t *testing.T) {
	s := testServer("k1")
	s.base = mustURL(t, "http://127.0.0.1:8092")
	for name, g := range map[string]Grant{
		"no namespace":            {Release: "r", Mode: ModePlan},
		"an upper-case namespace": {Namespace: "NS", Release: "r", Mode: ModePlan},
		"no release":              {Namespace: "ns", Mode: ModePlan},
		"a release with a slash":  {Namespace: "ns", Release: "a/../b", Mode: ModePlan},
		"an upper-case release":   {Namespace: "ns", Release: "Web", Mode: ModePlan},
		"no mode":                 {Namespace: "ns", Release: "r"},
		"an unknown mode":         {Namespace: "ns", Release: "r", Mode: "admin"},
		"a negative TTL":          {Namespace: "ns", Release: "r", Mode: ModePlan, TTL: -time.Second},
		"a TTL above the maximum": {Namespace: "ns", Release: "r", Mode: ModePlan, TTL: MaxTTL + time.Second},
		"a name too long":         {Namespace: "ns", Release: strings.Repeat("a", 250), Mode: ModePlan},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Grant(g); err == nil {
				t.Fatal("Grant accepted it")
			}
		})
	}
	cred, err := s.Grant(Grant{Namespace: "ns", Release: "web", Mode: ModeApply})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://127.0.0.1:8092/tfstate/ns/default/web"; cred.Address != want || cred.LockAddress != want || cred.UnlockAddress != want {
		t.Fatalf("addresses %+v, want %s", cred, want)
	}
	c, err := parseToken(s.key, cred.Password, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeApply || c.Expires != testNow.Add(DefaultTTL).Unix() || len(c.Run) != 24 {
		t.Fatalf("claims %+v", c)
	}
	env := cred.Env()
	if env["TF_HTTP_PASSWORD"] != cred.Password || env["TF_HTTP_USERNAME"] != Username || env["TF_HTTP_ADDRESS"] != cred.Address {
		t.Fatalf("env %v", env)
	}
	if got := cred.Secrets(); len(got) != 1 || got[0] != cred.Password {
		t.Fatalf("Secrets() = %v", got)
	}
	other, _ := s.Grant(Grant{Namespace: "ns", Release: "web", Mode: ModeApply})
	if other.Password == cred.Password {
		t.Fatal("two grants got the same token: runs are not told apart")
	}
}

// FuzzParseToken: no input panics the parser, and the only tokens it
// accepts are exactly those the key signed.
func FuzzParseToken(f *testing.F) {
	s := testServer("fuzz-key")
	f.Add(s.sign(validClaims()))
	f.Add(testServer("other").sign(validClaims()))
	f.Add("st1..")
	f.Add("st1.e30.AAAA")
	f.Add("st1.." + b64.EncodeToString(mac(s.key, "st1.")))
	f.Add(strings.Repeat(".", 40))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := parseToken(s.key, tok, testNow)
		if err != nil {
			if !errors.Is(err, errBadToken) {
				t.Fatalf("error %v is not errBadToken", err)
			}
			return
		}
		if again := s.sign(c); again != tok {
			t.Fatalf("accepted %q, which is not what the key signs for its claims (%q)", tok, again)
		}
	})
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
