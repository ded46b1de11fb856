package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// countingReader counts the lists it serves, by list type and labels.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	lists map[string]int
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	c.mu.Lock()
	c.lists[fmt.Sprintf("%T %v", list, o.LabelSelector)]++
	c.mu.Unlock()
	return c.Reader.List(ctx, list, opts...)
}

func (c *countingReader) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.lists
	c.lists = map[string]int{}
	return out
}

// TestSync_aPassListsPreviewsAndChangeNamesOnceWhateverItsReleases: what a
// pass reads of the API server beside the fetch (the previews, whose
// people a change records; the names of the Repository's ChangeRequests,
// where an interrupted pass resumes) is read once per pass: not once per
// changed release, and not again in the pass's tail (deleting the previews
// of merged pull requests), which the next push's pass waits for.
func TestSync_aPassListsPreviewsAndChangeNamesOnceWhateverItsReleases(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	counter := &countingReader{lists: map[string]int{}}
	startSyncer(t, ns, "", func(s *syncer.Syncer) {
		counter.Reader = s.Reconciler.APIReader
		s.Reconciler.APIReader = counter
	})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	counter.reset()

	// One push changing both releases.
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	fixture.WriteFile("services/beta/values.yaml", "image:\n  repository: ghcr.io/example/beta\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	head := fixture.Commit("bump both", "bob@example.com")
	got := waitHandled(t, repo, requestReconcile(t, repo))
	require.Equal(t, head, got.Status.LastSyncedCommit)
	crs := changeRequests(t, ns)
	for _, rel := range []string{"alpha-staging", "beta-staging"} {
		require.NotEmpty(t, crs[sluicev1.ChangeRequestName(rel, head, 1)].Name, rel)
	}
	lists := counter.reset()
	previews := fmt.Sprintf("%T %s=%s,%s=%s", &sluicev1.ChangeRequestList{}, sluicev1.LabelPreview, "true", sluicev1.LabelRepository, "infra")
	assert.Equal(t, 1, lists[previews], "one list of the previews in the pass: %v", lists)
	names := 0
	for k, n := range lists {
		if k != previews {
			names += n
		}
	}
	assert.Equal(t, 1, names, "one other list (the ChangeRequests' names) in the pass: %v", lists)
}
