package artifact

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// MinTokenBytes is the shortest artifact token accepted: anything shorter
// is guessable or a placeholder.
const MinTokenBytes = 16

// TokenSource returns the bearer token callers of the artifact server must
// present. It is called for every request, so a token read from a file
// follows the file (a rotated Secret) without a restart.
type TokenSource func() ([]byte, error)

// StaticToken returns a TokenSource of a fixed token.
func StaticToken(token string) TokenSource {
	b := []byte(token)
	return func() ([]byte, error) { return checkToken(b, "the artifact token") }
}

// TokenFile returns a TokenSource that reads the token from path at every
// call; surrounding white space (a trailing newline) is ignored.
func TokenFile(path string) TokenSource {
	return func() ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the artifact token: %w", err)
		}
		return checkToken(bytes.TrimSpace(b), "the artifact token file "+path)
	}
}

func checkToken(b []byte, what string) ([]byte, error) {
	if len(b) < MinTokenBytes {
		return nil, fmt.Errorf("%s is shorter than %d bytes", what, MinTokenBytes)
	}
	return b, nil
}

// errNoCredential is what a request without a usable credential is told.
var errNoCredential = errors.New("the artifact server needs a bearer token")

// authorize checks the request's bearer token against want in constant
// time (over sha256 sums, so neither the length nor a prefix leaks).
func authorize(r *http.Request, want []byte) error {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || got == "" {
		return errNoCredential
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256(want)
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
		return errors.New("the artifact server refused the bearer token")
	}
	return nil
}
