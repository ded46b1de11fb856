package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// benchHook announces the benchmark's pushes as a git server's
// post-receive hook would, with Sluice's generic signed webhook
// (X-Sluice-Event: push, X-Sluice-Signature-256) sent to the syncer's
// webhook Service: how a platform runs Sluice, the Repository's poll (3 s
// here) being the fallback. SLUICE_BENCH_POLL=1 leaves the pushes to the
// poll (nil hook).
type benchHook struct {
	url    string
	secret []byte
}

// benchWebhook gives the infra Repository a webhook secret and returns
// the hook of its webhook path on the syncer's webhook Service (its
// ClusterIP: the test runs on the node); the secret is taken off at the
// end.
func (c *cluster) benchWebhook(t *testing.T) *benchHook {
	t.Helper()
	if os.Getenv("SLUICE_BENCH_POLL") == "1" {
		return nil
	}
	ctx := context.Background()
	const name = "bench-webhook"
	h := &benchHook{secret: []byte("bench-webhook-secret")}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controlNS}, Data: map[string][]byte{"token": h.secret}}
	if err := c.c.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the webhook Secret: %v", err)
	}
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: controlNS}}
	patch := func(body string) {
		t.Helper()
		if err := c.c.Patch(ctx, repo, client.RawPatch("application/merge-patch+json", []byte(body))); err != nil {
			t.Fatalf("patching the infra Repository: %v", err)
		}
	}
	patch(`{"spec":{"webhookSecretRef":{"name":"` + name + `"}}}`)
	t.Cleanup(func() { patch(`{"spec":{"webhookSecretRef":null}}`) })
	eventually(t, "the infra Repository's webhook path", func() (bool, error) {
		if err := c.c.Get(ctx, client.ObjectKeyFromObject(repo), repo); err != nil {
			return false, err
		}
		return repo.Status.WebhookPath != "", fmt.Errorf("no webhook path yet: %s", conditions(repo.Status.Conditions))
	})
	svc := &corev1.Service{}
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: sluiceNS, Name: releaseName + "-syncer-webhook"}, svc); err != nil {
		t.Fatalf("reading the syncer's webhook Service: %v", err)
	}
	if svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) == 0 {
		t.Fatalf("the syncer's webhook Service has no address: %+v", svc.Spec)
	}
	h.url = fmt.Sprintf("http://%s:%d%s", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port, repo.Status.WebhookPath)
	return h
}

// push announces that main is now at sha; the receiver must accept it.
func (h *benchHook) push(t *testing.T, sha string) {
	t.Helper()
	if h == nil {
		return
	}
	body := []byte(fmt.Sprintf(`{"ref":"refs/heads/main","after":%q}`, sha))
	mac := hmac.New(sha256.New, h.secret)
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sluice-Event", "push")
	req.Header.Set("X-Sluice-Delivery", "bench-"+sha)
	req.Header.Set("X-Sluice-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("sending the push webhook to %s: %v", h.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the push webhook to %s answered %d: %s", h.url, resp.StatusCode, msg)
	}
}
