// Package artifacttest builds and serves artifacts the way the syncer does,
// for the appliers' tests: a deterministic tar (sorted names, fixed times
// and modes), gzipped, from an HTTP server.
package artifacttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// Server serves whatever was Put under /artifacts/.
type Server struct {
	*httptest.Server
	mu    sync.Mutex
	blobs map[string][]byte
}

// NewServer starts a server; Close stops it.
func NewServer() *Server {
	s := &Server{blobs: map[string][]byte{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.blobs[strings.TrimPrefix(r.URL.Path, "/artifacts/")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	return s
}

// BaseURL is the base URL to give an artifact.Fetcher.
func (s *Server) BaseURL() string { return s.URL + "/artifacts/" }

// Put serves b at name and returns its URL.
func (s *Server) Put(name string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[name] = b
	return s.BaseURL() + name
}

// Get returns what is served at url (nil when nothing is).
func (s *Server) Get(url string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blobs[strings.TrimPrefix(url, s.BaseURL())]
}

// Tarball is the deterministic tar of files (slash-separated names).
func Tarball(files map[string][]byte) []byte {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		// Writes to a bytes.Buffer cannot fail.
		_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write(files[n])
	}
	_ = tw.Close()
	return buf.Bytes()
}

// Gzip compresses b.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}
