package gittest

import (
	"crypto/subtle"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// HTTPServer is git's smart HTTP protocol (git http-backend) behind basic
// auth, serving every <name>.git under Root.
type HTTPServer struct {
	Root     string
	URL      string
	Username string
	Password string
	srv      *httptest.Server

	infoRefs   atomic.Int64
	uploadPack atomic.Int64
}

// StartHTTP serves root; an empty username turns authentication off.
func StartHTTP(t TB, root, username, password string) *HTTPServer {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	s := &HTTPServer{Root: root, Username: username, Password: password}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if username != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(username)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/info/refs"):
			s.infoRefs.Add(1)
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			s.uploadPack.Add(1)
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	return s
}

// RepoURL is the clone URL of <name>.git.
func (s *HTTPServer) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// InfoRefs counts ref advertisements (ls-remote and the first leg of a fetch).
func (s *HTTPServer) InfoRefs() int64 { return s.infoRefs.Load() }

// UploadPacks counts pack negotiations, that is real fetches.
func (s *HTTPServer) UploadPacks() int64 { return s.uploadPack.Load() }
