package terraform

import (
	"context"
	"crypto/md5" //nolint:gosec // Content-MD5 as Terraform's http backend sends it
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPullHTTPState reads the state the way Terraform's http backend does,
// and every answer it cannot trust is an error (the caller then asks
// terraform), never a state: other bytes than the Content-MD5 says, a
// refusal, a state over the bound, settings it does not implement. The
// password is sent, never echoed in an error.
func TestPullHTTPState(t *testing.T) {
	const state = `{"version":4,"lineage":"l","serial":3,"resources":[]}`
	const password = "st1.secret-run-token"
	var body, md5Header string
	var status int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "sluice" || p != password || r.Method != http.MethodGet {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if md5Header != "" {
			w.Header().Set("Content-MD5", md5Header)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	env := map[string]string{"TF_HTTP_ADDRESS": srv.URL + "/state", "TF_HTTP_USERNAME": "sluice", "TF_HTTP_PASSWORD": password}
	sum := md5.Sum([]byte(state)) //nolint:gosec // see the import

	body, status, md5Header = state, http.StatusOK, base64.StdEncoding.EncodeToString(sum[:])
	got, err := pullHTTPState(context.Background(), env)
	if err != nil || string(got) != state {
		t.Fatalf("pull = %q, %v; want the state", got, err)
	}
	md5Header = ""
	if got, err := pullHTTPState(context.Background(), env); err != nil || string(got) != state {
		t.Fatalf("pull without Content-MD5 = %q, %v; want the state", got, err)
	}

	for name, c := range map[string]struct {
		body, md5 string
		status    int
		env       map[string]string
		want      string
	}{
		"other bytes than its Content-MD5": {body: strings.Replace(state, "3", "4", 1), md5: base64.StdEncoding.EncodeToString(sum[:]), status: 200, want: "Content-MD5"},
		"no state (204)":                   {status: http.StatusNoContent, want: "204"},
		"refused":                          {status: http.StatusForbidden, want: "403"},
		"wrong password":                   {status: 200, body: state, env: map[string]string{"TF_HTTP_PASSWORD": "wrong"}, want: "401"},
		"over the bound":                   {status: 200, body: strings.Repeat(" ", maxPulledState+1), want: "larger"},
		"client certificates":              {status: 200, body: state, env: map[string]string{"TF_HTTP_CLIENT_CERTIFICATE_PEM": "x"}, want: "TF_HTTP_CLIENT_CERTIFICATE_PEM"},
		"credentials in the address":       {status: 200, body: state, env: map[string]string{"TF_HTTP_ADDRESS": strings.Replace(srv.URL, "http://", "http://u:"+password+"@", 1)}, want: "no usable"},
		"no address":                       {status: 200, body: state, env: map[string]string{"TF_HTTP_ADDRESS": ""}, want: "no usable"},
		"not http":                         {status: 200, body: state, env: map[string]string{"TF_HTTP_ADDRESS": "file:///etc/passwd"}, want: "no usable"},
	} {
		t.Run(name, func(t *testing.T) {
			body, md5Header, status = c.body, c.md5, c.status
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range c.env {
				e[k] = v
			}
			got, err := pullHTTPState(context.Background(), e)
			if err == nil || got != nil {
				t.Fatalf("pull = %d bytes, %v; want an error", len(got), err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), password) {
				t.Fatalf("error %q: want it to say %q and never the password", err, c.want)
			}
		})
	}
}
