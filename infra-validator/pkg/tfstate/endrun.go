package tfstate

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// MethodEndRun is the HTTP method by which a run's credential ends itself
// (request to its state address, authenticated by that credential):
// from then on the server refuses it, and the lock the run held is
// freed. Terraform's http backend never sends it.
const MethodEndRun = "ENDRUN"

// EndRun revokes the state credential in env (a run's environment, as
// Credential.Env made it) through the state server, for a run that is
// over. An env without a credential needs nothing. A credential the
// server refuses already (expired, revoked, another server's) opens
// nothing: that is no error. client nil means http.DefaultClient.
func EndRun(ctx context.Context, client *http.Client, env map[string]string) error {
	addr, user, pass := env["TF_HTTP_ADDRESS"], env["TF_HTTP_USERNAME"], env["TF_HTTP_PASSWORD"]
	if addr == "" || pass == "" {
		return nil
	}
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, MethodEndRun, addr, nil)
	if err != nil {
		return fmt.Errorf("end the run's state credential: %w", err)
	}
	req.SetBasicAuth(user, pass)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("end the run's state credential: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	switch {
	case resp.StatusCode < 300, resp.StatusCode == http.StatusUnauthorized:
		return nil
	default:
		return fmt.Errorf("end the run's state credential: the state server answered %s", resp.Status)
	}
}
