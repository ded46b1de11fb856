// Package provider turns webhook deliveries of git hosting services (GitHub,
// Gitea, GitLab, and a generic HMAC-signed form) into normalised events:
// pushes, pull-request changes and reviews. It checks signatures over the
// raw body with a secret the caller chose (by the receiving path, never by
// the body), always with constant-time compares, and parses payloads
// strictly enough that a bad body is a clear error, never a panic.
package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/sluice-gitops/sluice/kit/text"
)

// Name is a hosting provider.
type Name string

const (
	// GitHub signs with X-Hub-Signature-256.
	GitHub Name = "github"
	// Gitea signs with X-Gitea-Signature.
	Gitea Name = "gitea"
	// GitLab sends the shared secret in X-Gitlab-Token.
	GitLab Name = "gitlab"
	// Generic is Sluice's own form: X-Sluice-Signature-256 over the body.
	Generic Name = "generic"
)

// Identity prefix of each provider's users (DESIGN.md §4).
func (n Name) identityPrefix() string {
	switch n {
	case GitHub, Gitea, GitLab:
		return string(n) + ":"
	}
	return ""
}

// Headers of the generic form.
const (
	HeaderGenericSignature = "X-Sluice-Signature-256"
	HeaderGenericEvent     = "X-Sluice-Event"
	HeaderGenericDelivery  = "X-Sluice-Delivery"
)

// Kind is what an event is about.
type Kind string

const (
	// KindPush: a ref moved.
	KindPush Kind = "push"
	// KindPullRequest: a pull request was opened, updated, reopened or closed.
	KindPullRequest Kind = "pull_request"
	// KindReview: a review was submitted or dismissed.
	KindReview Kind = "review"
	// KindPing: the provider checks the hook; nothing to do.
	KindPing Kind = "ping"
	// KindIgnored: an event Sluice does not act on.
	KindIgnored Kind = "ignored"
)

// PRAction is a normalised pull-request action.
type PRAction string

const (
	PROpened   PRAction = "opened"
	PRUpdated  PRAction = "updated"
	PRReopened PRAction = "reopened"
	PRClosed   PRAction = "closed"
	// PROther is any action that needs no work (labels, edits…).
	PROther PRAction = "other"
)

// ReviewState is a normalised review decision.
type ReviewState string

const (
	ReviewApproved         ReviewState = "approved"
	ReviewChangesRequested ReviewState = "changes_requested"
	ReviewCommented        ReviewState = "commented"
	ReviewDismissed        ReviewState = "dismissed"
)

// Access is what a payload says about a reviewer's write access. It is a
// claim only: a review counts after the provider's API confirms it
// (API.Confirm), whatever the payload says.
type Access string

const (
	// AccessWrite: the provider's API confirmed write access (set by
	// API.Confirm, never by a parser).
	AccessWrite Access = "write"
	// AccessNone: the payload says the reviewer has no write access
	// (GitHub's author_association CONTRIBUTOR, NONE…); the review is
	// ignored without asking.
	AccessNone Access = "none"
	// AccessUnknown: the payload claims or does not say; the provider's
	// API must be asked before the review counts.
	AccessUnknown Access = "unknown"
)

// Event is one normalised delivery.
type Event struct {
	Provider Name
	Kind     Kind
	// Type is the provider's own event name, for metrics and logs.
	Type string
	// DeliveryID identifies the delivery for de-duplication; redeliveries of
	// the same event keep it.
	DeliveryID string
	// Repo is the repository's full name ("owner/name") or, for GitLab, its
	// path with namespace; ProjectID is GitLab's numeric id.
	Repo      string
	ProjectID int64

	Push        *Push
	PullRequest *PullRequest
	Review      *Review
}

// Push is a ref update.
type Push struct {
	// Ref is the full ref name ("refs/heads/main").
	Ref    string
	Before string
	After  string
	// Deleted is true when the ref was removed.
	Deleted bool
	// Pusher is the identity of whoever pushed ("github:bob"), as the
	// provider authenticated them: GitHub's and Gitea's sender (Gitea's
	// pusher when it has no sender), GitLab's user_username. "" when the
	// payload names none. Only trusted after the delivery's signature
	// check.
	Pusher string
}

// PullRequest is a pull (or merge) request at one head.
type PullRequest struct {
	Action PRAction
	Number int64
	// HeadSHA is the head commit; HeadRef is the fetchable ref of the head on
	// the base repository (refs/pull/N/head, refs/merge-requests/N/head).
	HeadSHA string
	HeadRef string
	// BaseRef is the full ref of the target branch; BaseSHA its commit when
	// the payload gives one.
	BaseRef string
	BaseSHA string
	// Fork is true when the head lives in another repository.
	Fork bool
	// Merged and MergeCommitSHA describe a closed pull request.
	Merged         bool
	MergeCommitSHA string
	// Author is the author's identity ("github:alice").
	Author string
	// Sender is the identity of whoever caused the event ("github:bob"):
	// for opened, reopened and updated pull requests, the pusher.
	Sender string
}

// Review is one reviewer's decision on a pull request.
type Review struct {
	PullRequest PullRequest
	// ID is the provider's review id (derived from the delivery where the
	// provider has no review ids).
	ID    int64
	State ReviewState
	// CommitSHA is the commit the review was given on.
	CommitSHA string
	// Reviewer is the identity ("github:bob").
	Reviewer string
	// Login is the reviewer's bare user name; UserID the provider's numeric
	// id of the user, where the payload gives it (GitLab).
	Login  string
	UserID int64
	Access Access
	// Body is the review text, trimmed.
	Body string
}

// Errors the receiver maps to HTTP statuses.
var (
	// ErrSignature: a missing or wrong signature or token (401).
	ErrSignature = errors.New("signature missing or invalid")
	// ErrUnknownProvider: no known event header (400).
	ErrUnknownProvider = errors.New("no known webhook event header")
	// ErrPayload: the body does not parse as the event it claims (400).
	ErrPayload = errors.New("invalid payload")
)

// Detect names the provider from the request headers. Gitea also sends
// GitHub's headers, so its own are checked first.
func Detect(h http.Header) (Name, error) {
	switch {
	case h.Get("X-Gitea-Event") != "":
		return Gitea, nil
	case h.Get("X-Gitlab-Event") != "":
		return GitLab, nil
	case h.Get("X-GitHub-Event") != "":
		return GitHub, nil
	case h.Get(HeaderGenericEvent) != "":
		return Generic, nil
	}
	return "", ErrUnknownProvider
}

// Verify checks the delivery against secret: an HMAC-SHA256 of the raw body
// for GitHub, Gitea and the generic form, the token itself for GitLab. All
// compares are constant-time. An empty secret never verifies.
func Verify(p Name, h http.Header, body, secret []byte) error {
	if len(secret) == 0 {
		return ErrSignature
	}
	switch p {
	case GitHub:
		return verifyHMAC(h.Get("X-Hub-Signature-256"), "sha256=", body, secret)
	case Gitea:
		return verifyHMAC(h.Get("X-Gitea-Signature"), "", body, secret)
	case Generic:
		return verifyHMAC(h.Get(HeaderGenericSignature), "sha256=", body, secret)
	case GitLab:
		got := h.Get("X-Gitlab-Token")
		// Compare fixed-size hashes so the time taken says nothing about
		// the secret's length either.
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256(secret)
		if got == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return ErrSignature
		}
		return nil
	}
	return ErrUnknownProvider
}

// Sign returns the signature header value of body for p: what a provider
// would send (tests, benchmarks and the generic form's senders use it).
func Sign(p Name, body, secret []byte) (header, value string) {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	sum := hex.EncodeToString(mac.Sum(nil))
	switch p {
	case Gitea:
		return "X-Gitea-Signature", sum
	case GitLab:
		return "X-Gitlab-Token", string(secret)
	case Generic:
		return HeaderGenericSignature, "sha256=" + sum
	}
	return "X-Hub-Signature-256", "sha256=" + sum
}

func verifyHMAC(header, prefix string, body, secret []byte) error {
	if header == "" || !strings.HasPrefix(header, prefix) {
		return ErrSignature
	}
	got, err := hex.DecodeString(strings.TrimPrefix(header, prefix))
	if err != nil || len(got) != sha256.Size {
		return ErrSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrSignature
	}
	return nil
}

// Parse turns a verified delivery into an Event. Only call it after Verify.
func Parse(p Name, h http.Header, body []byte) (*Event, error) {
	switch p {
	case GitHub:
		return ParseGitHub(h.Get("X-GitHub-Event"), h.Get("X-GitHub-Delivery"), body)
	case Gitea:
		return ParseGitea(h.Get("X-Gitea-Event"), h.Get("X-Gitea-Delivery"), body)
	case GitLab:
		delivery := h.Get("Idempotency-Key")
		if delivery == "" {
			delivery = h.Get("X-Gitlab-Event-UUID")
		}
		return ParseGitLab(h.Get("X-Gitlab-Event"), delivery, body)
	case Generic:
		return ParseGeneric(h.Get(HeaderGenericEvent), h.Get(HeaderGenericDelivery), body)
	}
	return nil, ErrUnknownProvider
}

var (
	shaPattern   = regexp.MustCompile(`^[a-f0-9]{40}([a-f0-9]{24})?$`)
	loginPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)
)

// validSHA reports whether s is a full lower-case commit id.
func validSHA(s string) bool { return shaPattern.MatchString(s) }

// zeroSHA reports whether s is the all-zero id providers send for a deleted
// or created ref.
func zeroSHA(s string) bool { return s != "" && strings.Trim(s, "0") == "" }

// identity returns "<provider>:<login>" in lower case (GitHub, Gitea and
// GitLab user names are case-insensitive, and approver lists are written in
// lower case), or an error for a login the API's Identity pattern (or
// common sense) would refuse.
func identity(p Name, login string) (string, error) {
	if !loginPattern.MatchString(login) {
		return "", fmt.Errorf("%w: user name %q is not valid", ErrPayload, text.Truncate(login, 64))
	}
	return p.identityPrefix() + strings.ToLower(login), nil
}

// fullRef turns a branch name into a full ref; full refs stay as they are.
func fullRef(branch string) string {
	if strings.HasPrefix(branch, "refs/") {
		return branch
	}
	return "refs/heads/" + branch
}

// validRef rejects refs that could not be a git ref name.
func validRef(ref string) bool {
	if !strings.HasPrefix(ref, "refs/") || len(ref) > 1024 {
		return false
	}
	if strings.Contains(ref, "..") || strings.ContainsAny(ref, " ~^:?*[\\\x00\x7f") || strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".lock") {
		return false
	}
	for _, r := range ref {
		if r < 0x20 {
			return false
		}
	}
	return true
}

// payloadErr wraps a parse problem as ErrPayload.
func payloadErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, args...))
}

// deliveryID keeps a delivery id only when it is printable and short, so
// the de-duplication cache cannot be filled with huge keys.
func deliveryID(id string) string {
	id = strings.TrimSpace(id)
	if len(id) > 128 {
		return ""
	}
	for _, r := range id {
		if r < 0x21 || r > 0x7e {
			return ""
		}
	}
	return id
}

// derivedID turns a string into a stable positive int64, for providers that
// give a review no id of its own.
func derivedID(parts ...string) int64 {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	var v int64
	for _, b := range sum[:7] {
		v = v<<8 | int64(b)
	}
	if v == 0 {
		v = 1
	}
	return v
}
