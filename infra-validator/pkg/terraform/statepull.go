package terraform

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // Terraform's http backend sends and checks Content-MD5; not a security check.
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxPulledState bounds a state read by pullHTTPState; a larger one is
// left to `terraform state pull`.
const maxPulledState = 64 << 20

// pullHTTPState reads the state at TF_HTTP_ADDRESS of env with its basic
// credentials, as Terraform's http backend does for `terraform state pull`
// (GET; 200 with the state, Content-MD5 checked when sent). Settings this
// does not implement (TLS client certificates, skipped verification,
// retries) make it fail, and the caller asks terraform instead. Errors
// never carry the credentials.
func pullHTTPState(ctx context.Context, env map[string]string) ([]byte, error) {
	addr := env["TF_HTTP_ADDRESS"]
	u, err := url.Parse(addr)
	if addr == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return nil, errors.New("state pull: no usable TF_HTTP_ADDRESS")
	}
	for _, k := range []string{"TF_HTTP_SKIP_CERT_VERIFICATION", "TF_HTTP_CLIENT_CA_CERTIFICATE_PEM", "TF_HTTP_CLIENT_CERTIFICATE_PEM", "TF_HTTP_CLIENT_PRIVATE_KEY_PEM"} {
		if env[k] != "" {
			return nil, fmt.Errorf("state pull: %s is set", k)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr, nil)
	if err != nil {
		return nil, errors.New("state pull: bad TF_HTTP_ADDRESS")
	}
	if user, pass := env["TF_HTTP_USERNAME"], env["TF_HTTP_PASSWORD"]; user != "" || pass != "" {
		req.SetBasicAuth(user, pass)
	}
	// No proxy from this process's environment: the state server is
	// reached the way the run's terraform reached it.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("state pull: %w", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("state pull: the state server answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPulledState+1))
	if err != nil {
		return nil, fmt.Errorf("state pull: %w", err)
	}
	if len(body) > maxPulledState {
		return nil, errors.New("state pull: the state is larger than this reader takes")
	}
	if want := resp.Header.Get("Content-MD5"); want != "" {
		sum := md5.Sum(body) //nolint:gosec // see the import
		if got, err := base64.StdEncoding.DecodeString(want); err != nil || !bytes.Equal(got, sum[:]) {
			return nil, errors.New("state pull: the state does not match its Content-MD5")
		}
	}
	return body, nil
}
