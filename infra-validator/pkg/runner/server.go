package runner

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
)

// Server is the runner workload (`infra-validator runner serve`): it takes
// jobs on RunPath from callers holding its bearer token and runs each
// through Local, one sandboxed child per job.
type Server struct {
	// Token is the bearer token callers must present.
	Token string
	// Local runs the jobs.
	Local *Local
	// MaxRuns bounds the runs at once; more wait for a slot. 0 means 2.
	MaxRuns int
	// Log gets one line per refused request and per run.
	Log logr.Logger

	slots chan struct{}
}

// Handler serves RunPath, /healthz and /readyz.
func (s *Server) Handler() (http.Handler, error) {
	if s.Token == "" {
		return nil, errors.New("runner: no token: callers could not be told apart")
	}
	if s.Local == nil {
		return nil, errors.New("runner: no local runner")
	}
	n := s.MaxRuns
	if n <= 0 {
		n = 2
	}
	s.slots = make(chan struct{}, n)
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("POST "+RunPath, s.serveRun)
	return mux, nil
}

func (s *Server) serveRun(w http.ResponseWriter, r *http.Request) {
	tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || subtle.ConstantTimeCompare([]byte(tok), []byte(s.Token)) != 1 {
		s.Log.Info("Refused a run without the runner token", "remote", r.RemoteAddr)
		http.Error(w, "a runner token is required", http.StatusUnauthorized)
		return
	}
	var job Job
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxJobBytes)).Decode(&job); err != nil {
		http.Error(w, "the job is not readable: "+err.Error(), http.StatusBadRequest)
		return
	}
	if job.Op != OpPlan && job.Op != OpApply {
		http.Error(w, "unknown operation", http.StatusBadRequest)
		return
	}
	select {
	case s.slots <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-s.slots }()
	// The caller going away stops the run (gently: see Local.run).
	res, err := s.Local.run(r.Context(), &job)
	if err != nil {
		s.Log.Info("A run ended without a result", "op", job.Op, "error", err.Error())
		http.Error(w, "the run ended without a result", http.StatusInternalServerError)
		return
	}
	// One line per run, as the field's doc says: which operation, on which
	// stack, how it ended and how it was confined (what an operator reads
	// to know where a plan or an apply ran).
	code := ""
	if res.Error != nil {
		code = res.Error.Code
	}
	s.Log.Info("Ran a job", "op", job.Op, "stack", job.Stack, "failed", code, "landlockABI", res.Sandbox.LandlockABI)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}
