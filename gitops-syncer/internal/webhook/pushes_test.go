package webhook_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// staleReader answers Gets of Repositories with an old copy, as a cache
// that has not seen the newest writes would; everything else comes from
// the API server.
type staleReader struct {
	client.Reader
	mu   sync.Mutex
	repo *sluicev1.Repository
}

func (s *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r, ok := obj.(*sluicev1.Repository); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.repo.DeepCopyInto(r)
		return nil
	}
	return s.Reader.Get(ctx, key, obj, opts...)
}

// TestReceiver_aPushRecordedFromAStaleCachedCopyDropsNoOtherPush: the
// receiver records a push starting from the Repository it read from its
// cache (no second read on the path to the sync); when that copy is
// stale, the write loses the race and is made again from a fresh read,
// so an earlier push's record is never overwritten, and a redelivery is
// still recorded once.
func TestReceiver_aPushRecordedFromAStaleCachedCopyDropsNoOtherPush(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra")
	// The cache never moves past the Repository before any push.
	stale := &staleReader{Reader: env.Client, repo: a.repo.DeepCopy()}
	rec := newRecorder()
	r := &webhook.Receiver{Reader: stale, SecretReader: env.Client, Writer: env.Client, Trigger: rec, Metrics: newMetrics(t), Log: logr.Discard(), Workers: 1}
	runReceiver(t, r)
	const sha2 = "89abcdef0123456789abcdef0123456789abcdef"
	push := func(after, login string) {
		body := providertest.Edit(t, providertest.Payload(t, "github/push.payload.json"), func(m map[string]any) {
			m["ref"], m["after"], m["deleted"] = "refs/heads/main", after, false
			m["sender"].(map[string]any)["login"] = login
		})
		w := serve(r, request(provider.GitHub, "push", a.repo.Status.WebhookPath, body, a.secret))
		require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
		require.Equal(t, "reconcile "+ns+"/infra", <-rec.done)
	}
	push(sha1, "alice") // the cached copy is current: one write
	push(sha2, "bob")   // now it is stale: a conflict, then a fresh read
	push(sha1, "alice") // a new delivery of a recorded push

	got := &sluicev1.Repository{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(a.repo), got))
	var recorded []string
	for _, p := range got.Status.Pushes {
		recorded = append(recorded, p.Commit+" "+string(p.Pusher))
	}
	assert.Equal(t, []string{sha1 + " github:alice", sha2 + " github:bob"}, recorded)
}
