package tfstate

import (
	"bytes"
	"crypto/md5" //nolint:gosec // Terraform's http backend sends Content-MD5; it checks transport, not trust.
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Methods of Terraform's http backend (its lock_method and unlock_method
// defaults).
const (
	methodLock   = "LOCK"
	methodUnlock = "UNLOCK"
)

// maxLockBytes caps a LOCK or UNLOCK body; Terraform's lock info is a few
// hundred bytes.
const maxLockBytes = 64 << 10

// conflictRetries bounds the optimistic-concurrency retries of one request.
const conflictRetries = 5

// lockInfo is Terraform's statemgr.LockInfo as it marshals it (Go field
// names, no tags): the body of LOCK and UNLOCK, the body of a 423, and the
// kubernetes backend's lock-info annotation.
type lockInfo struct {
	ID        string
	Operation string
	Info      string
	Who       string
	Version   string
	Created   time.Time
	Path      string
}

// stateHeader are the fields of a state file the server checks.
type stateHeader struct {
	Version *int    `json:"version"`
	Serial  *uint64 `json:"serial"`
	Lineage string  `json:"lineage"`
}

// httpError is a refusal with the status and text the client gets.
type httpError struct {
	status int
	msg    string
	// body, when set, is sent as JSON instead of msg (a 423's lock info).
	body []byte
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

func refuse(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// request is one authenticated request for one state.
type request struct {
	st  stateRef
	c   claims
	now time.Time
}

// serveHTTP authenticates the request, checks that its credential names
// the state of the path and allows the method, and runs it. Refusals and
// failures are logged with the run id, never with the token.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	st, ok := parsePath(r.URL.Path)
	if !ok {
		s.fail(w, r, "", refuse(http.StatusNotFound, "no state at %s: the path is %s<namespace>/<workspace>/<release>", r.URL.Path, PathPrefix))
		return
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		s.fail(w, r, "", refuse(http.StatusUnauthorized, "a run credential is required"))
		return
	}
	c, err := parseToken(s.key, pass, s.now())
	if err != nil || user != Username {
		reason := "user name is not " + Username
		if err != nil {
			reason = err.Error()
		}
		s.fail(w, r, "", &httpError{status: http.StatusUnauthorized, msg: "the run credential is invalid or expired: " + reason})
		return
	}
	if s.isRevoked(c.Run, s.now()) {
		s.fail(w, r, c.Run, &httpError{status: http.StatusUnauthorized, msg: "the run credential was revoked: its run ended"})
		return
	}
	if c.Namespace != st.Namespace || c.Workspace != st.Workspace || c.Release != st.Release {
		s.fail(w, r, c.Run, refuse(http.StatusForbidden, "the run credential is for another state"))
		return
	}
	req := request{st: st, c: c, now: s.now()}
	switch r.Method {
	case http.MethodGet:
		err = s.get(w, r, req)
	case http.MethodPost:
		if c.Mode != ModeApply {
			err = refuse(http.StatusForbidden, "a %s credential cannot write the state", c.Mode)
			break
		}
		err = s.put(w, r, req)
	case methodLock:
		err = s.lock(w, r, req)
	case methodUnlock:
		err = s.unlock(w, r, req)
	case MethodEndRun:
		// Any credential may end itself, a plan's included.
		if err = s.revoke(r.Context(), c); err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		w.Header().Set("Allow", strings.Join([]string{http.MethodGet, http.MethodPost, methodLock, methodUnlock, MethodEndRun}, ", "))
		err = refuse(http.StatusMethodNotAllowed, "method %s is not served", r.Method)
	}
	if err != nil {
		s.fail(w, r, c.Run, err)
	}
}

// parsePath reads <namespace>/<workspace>/<release> below PathPrefix.
func parsePath(p string) (stateRef, bool) {
	rest, ok := strings.CutPrefix(p, PathPrefix)
	if !ok {
		return stateRef{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return stateRef{}, false
	}
	st, err := newStateRef(parts[0], parts[1], parts[2])
	if err != nil || parts[1] == "" {
		return stateRef{}, false
	}
	return st, true
}

// fail writes err to the client and logs it. An error that is not an
// httpError is an internal failure: the client gets a generic 500 and the
// log the cause.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, run string, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		s.log.Error(err, "State request failed", "method", r.Method, "path", r.URL.Path, "run", run)
		http.Error(w, "state server error; see its log", http.StatusInternalServerError)
		return
	}
	s.log.Info("Refused a state request", "method", r.Method, "path", r.URL.Path, "run", run, "status", he.status, "reason", he.msg)
	if he.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="sluice-tfstate"`)
	}
	if he.body != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(he.status)
		_, _ = w.Write(he.body)
		return
	}
	http.Error(w, he.msg, he.status)
}

// get serves the state: 200 with its JSON, or 404 when there is none yet.
func (s *Server) get(w http.ResponseWriter, r *http.Request, req request) error {
	state, _, err := s.readState(r.Context(), req.st)
	if err != nil {
		return err
	}
	if state == nil {
		return refuse(http.StatusNotFound, "no state yet")
	}
	sum := md5.Sum(state) //nolint:gosec // see the import.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	_, _ = w.Write(state)
	return nil
}

// put stores the state. It needs the lock, taken by this run, whose ID
// Terraform sends as the ID query; the new state keeps the lineage and
// never goes back in serial.
func (s *Server) put(w http.ResponseWriter, r *http.Request, req request) error {
	id := r.URL.Query().Get("ID")
	if id == "" {
		return refuse(http.StatusConflict, "writing the state needs its lock: take it with %s and send its ID", methodLock)
	}
	body, err := readBody(w, r, s.maxSize)
	if err != nil {
		return err
	}
	if want := r.Header.Get("Content-MD5"); want != "" {
		sum := md5.Sum(body) //nolint:gosec // see the import.
		if want != base64.StdEncoding.EncodeToString(sum[:]) {
			return refuse(http.StatusBadRequest, "the body does not match its Content-MD5")
		}
	}
	hdr, err := parseStateHeader(body)
	if err != nil {
		return refuse(http.StatusBadRequest, "the body is not a Terraform state: %v", err)
	}
	if err := s.checkHolder(r.Context(), req, id); err != nil {
		return err
	}
	if err := s.writeState(r.Context(), req.st, body, hdr); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// lock takes the lock for this run, or answers 423 with the holder's lock
// info.
func (s *Server) lock(w http.ResponseWriter, r *http.Request, req request) error {
	info, err := readLockInfo(w, r)
	if err != nil {
		return err
	}
	if err := s.takeLock(r.Context(), req, info); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// unlock releases the lock this run holds.
func (s *Server) unlock(w http.ResponseWriter, r *http.Request, req request) error {
	info, err := readLockInfo(w, r)
	if err != nil {
		return err
	}
	if err := s.releaseLock(r.Context(), req, info.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// readBody reads at most limit bytes of the body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, refuse(http.StatusRequestEntityTooLarge, "the body has %d bytes; the limit is %d", r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, refuse(http.StatusRequestEntityTooLarge, "the body is larger than the limit of %d bytes", limit)
	}
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "reading the body: %v", err)
	}
	return body, nil
}

// readLockInfo reads a LOCK or UNLOCK body: Terraform's lock info with an ID.
func readLockInfo(w http.ResponseWriter, r *http.Request) (lockInfo, error) {
	body, err := readBody(w, r, maxLockBytes)
	if err != nil {
		return lockInfo{}, err
	}
	var info lockInfo
	if err := decodeOne(body, &info, false); err != nil {
		return lockInfo{}, refuse(http.StatusBadRequest, "the body is not Terraform lock info JSON: %v", err)
	}
	if info.ID == "" || len(info.ID) > 256 {
		return lockInfo{}, refuse(http.StatusBadRequest, "the lock info needs an ID of 1 to 256 characters")
	}
	return info, nil
}

// parseStateHeader checks that body is one JSON object with Terraform's
// version, serial and lineage.
func parseStateHeader(body []byte) (stateHeader, error) {
	var h stateHeader
	if !json.Valid(body) {
		return h, errors.New("not valid JSON")
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, err
	}
	switch {
	case h.Version == nil || *h.Version < 3:
		return h, errors.New(`"version" is missing or older than 3`)
	case h.Serial == nil:
		return h, errors.New(`"serial" is missing`)
	case h.Lineage == "":
		return h, errors.New(`"lineage" is missing`)
	}
	return h, nil
}

// decodeOne decodes body, which must hold exactly one JSON value, into v.
// strict refuses fields v does not have.
func decodeOne(body []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}
