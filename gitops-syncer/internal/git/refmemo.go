package git

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A sync asks the remote for its ref list once: Head's ls-remote (the
// GET of info/refs over HTTP(S)) is kept, and the Fetch of the commit it
// found sends that same list to go-git instead of asking again, so go-git
// goes straight to the pack negotiation (the POST of git-upload-pack,
// stateless over HTTP). Other transports (ssh, file) hold one connection
// per operation and still list twice.

// refListMaxAge bounds how old a kept ref list may be when a Fetch uses
// it; a list older than that (a slow sync) is asked for again.
const refListMaxAge = 30 * time.Second

// refListMaxBytes bounds the ref list kept per repository; a larger one
// (tens of thousands of refs) is not kept and Fetch lists again.
const refListMaxBytes = 4 << 20

// refList is one answer of GET <repo>/info/refs?service=git-upload-pack.
type refList struct {
	url    string
	header http.Header
	body   []byte
	at     time.Time
	// ref and sha are what Head read from it for the Fetch to match.
	ref, sha string
}

// refListCtxKey carries a *refCapture through a request's context.
type refListCtxKey struct{}

// refCapture is what one Head or Fetch asks the transport to do with the
// ref list: record it (Head), or serve it once without the network (Fetch).
type refCapture struct {
	mu     sync.Mutex
	record bool
	got    *refList
	replay *refList
}

// withRefCapture returns ctx carrying c for the HTTP transport.
func withRefCapture(ctx context.Context, c *refCapture) context.Context {
	return context.WithValue(ctx, refListCtxKey{}, c)
}

// isRefList tells a ref-list request of git's smart HTTP protocol.
func isRefList(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/info/refs") &&
		req.URL.Query().Get("service") == "git-upload-pack"
}

// refListTransport records or replays ref lists for the operations that
// carry a refCapture in their context; every other request goes to base.
type refListTransport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t refListTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(refListCtxKey{}).(*refCapture)
	if c == nil || !isRefList(req) {
		return t.base.RoundTrip(req)
	}
	if resp := c.take(req); resp != nil {
		return resp, nil
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !c.recording() {
		return resp, err
	}
	// Read the list whole (bounded) so it can be kept, and hand go-git
	// the same bytes.
	orig := resp.Body
	body, err := io.ReadAll(io.LimitReader(orig, refListMaxBytes+1))
	if err != nil {
		_ = orig.Close()
		return nil, err
	}
	if len(body) > refListMaxBytes {
		// Too large to keep: go-git reads what was read, then the rest.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), orig), orig}
		return resp, nil
	}
	_ = orig.Close()
	c.keep(&refList{url: req.URL.String(), header: resp.Header.Clone(), body: body, at: time.Now()})
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// take returns the kept list as a response when it answers req, once.
func (c *refCapture) take(req *http.Request) *http.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.replay
	if l == nil || l.url != req.URL.String() {
		return nil
	}
	c.replay = nil
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: l.header.Clone(), Body: io.NopCloser(bytes.NewReader(l.body)), ContentLength: int64(len(l.body)), Request: req,
	}
}

func (c *refCapture) recording() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.record
}

func (c *refCapture) keep(l *refList) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = l
}

// kept returns the list a recording capture kept, if any.
func (c *refCapture) kept() *refList {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// rememberRefList keeps l as the last ref list of the cache id, for the
// Fetch that follows a Head.
func (g *GoGit) rememberRefList(id string, l *refList) {
	g.refMu.Lock()
	defer g.refMu.Unlock()
	if g.refLists == nil {
		g.refLists = map[string]*refList{}
	}
	g.refLists[id] = l
}

// takeRefList returns (and forgets) the kept ref list of the cache id when
// it is recent and shows ref at sha, the commit the Fetch wants.
func (g *GoGit) takeRefList(id, ref, sha string) *refList {
	g.refMu.Lock()
	defer g.refMu.Unlock()
	l := g.refLists[id]
	delete(g.refLists, id)
	if l == nil || l.ref != ref || l.sha != sha || time.Since(l.at) > refListMaxAge {
		return nil
	}
	return l
}
