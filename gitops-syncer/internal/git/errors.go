package git

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Reason classifies a git failure so callers can pick a condition reason.
type Reason string

const (
	// ReasonAuth: the remote refused the credentials.
	ReasonAuth Reason = "Authentication"
	// ReasonHostKey: the SSH host key is unknown or changed.
	ReasonHostKey Reason = "HostKey"
	// ReasonRefNotFound: the tracked ref does not exist on the remote.
	ReasonRefNotFound Reason = "RefNotFound"
	// ReasonURL: the URL is refused by policy or malformed.
	ReasonURL Reason = "URL"
	// ReasonSecret: the credentials Secret is incomplete or malformed.
	ReasonSecret Reason = "Secret"
	// ReasonTimeout: the operation ran past its timeout.
	ReasonTimeout Reason = "Timeout"
	// ReasonUnreachable: the remote could not be reached or answered badly.
	ReasonUnreachable Reason = "Unreachable"
	// ReasonNotFound: a commit or path is not in the local cache.
	ReasonNotFound Reason = "NotFound"
)

// Error is a git failure whose message is safe to show: it never carries
// credentials or URL user info.
type Error struct {
	Reason  Reason
	Message string
}

func (e *Error) Error() string { return e.Message }

// ReasonOf returns the Reason of err, or "" when err is not an *Error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// userinfoPattern matches the user info of URLs inside free text.
var userinfoPattern = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)

// Redact removes the user info of every URL in s and every listed secret.
func Redact(s string, secrets ...string) string {
	s = userinfoPattern.ReplaceAllString(s, "${1}***@")
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "***")
		}
	}
	return s
}

// RedactURL returns raw without its user info (scp-like user names are kept:
// "git@" is not a secret).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return Redact(raw)
	}
	u.User = url.User("***")
	return u.String()
}

// wrapError turns a go-git error into an *Error with a clear, credential-free
// message. op says what was being done ("list remote refs", "fetch").
func wrapError(ctx context.Context, op, rawURL string, err error, secrets []string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	where := RedactURL(rawURL)
	var keyErr *knownhosts.KeyError
	msg := Redact(err.Error(), secrets...)
	switch {
	case ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return &Error{Reason: ReasonTimeout, Message: op + " " + where + ": timed out"}
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(msg, "unable to authenticate"):
		return &Error{Reason: ReasonAuth, Message: op + " " + where + ": authentication failed (check the credentials in the Repository's Secret)"}
	case errors.As(err, &keyErr), strings.Contains(msg, "knownhosts:"):
		return &Error{Reason: ReasonHostKey, Message: op + " " + where + ": SSH host key is not in known_hosts (or does not match it)"}
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return &Error{Reason: ReasonUnreachable, Message: op + " " + where + ": repository not found"}
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		return &Error{Reason: ReasonRefNotFound, Message: op + " " + where + ": reference not found"}
	}
	return &Error{Reason: ReasonUnreachable, Message: op + " " + where + ": " + msg}
}
