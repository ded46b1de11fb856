package controller

import (
	"context"
	"fmt"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// passReads are what a sync pass reads from the API server (fresh, not
// from the cache) before it looks at any release: they depend on nothing
// git says, so they are read side by side while git fetches, and each is
// read once per pass, not once per release or again in the pass's tail.
type passReads struct {
	// pushes are the verified pushes recorded in the Repository's status
	// (freshPushes).
	pushes []sluicev1.PushRecord
	// previews are the Repository's preview ChangeRequests, oldest first:
	// the people of the pull requests a change merges come from them
	// (mergedPullRequests), and the pass deletes those of merged pull
	// requests at its end (deleteMergedPreviews) — only previews whose
	// people it read, never one created after the read.
	previews []sluicev1.ChangeRequest
	// changes are the names and labels of the Repository's ChangeRequests:
	// where an interrupted pass stopped is found among them (resumePoint).
	changes []metav1.PartialObjectMetadata
	err     error
}

// pendingReads are a pass's passReads while they are read. They are
// started before the fetch and first needed only when a change is recorded
// (its people, where an earlier pass stopped) or at the pass's end: the
// fetch, the catalog, the artifacts and the validations run meanwhile.
// That matters beyond the reads' own time: a fresh list is served by the
// API server's watch cache once that cache has caught up with etcd, which
// after any write (the push the webhook just recorded) can take up to the
// cache's progress-request period, 100 ms, when another client read the
// same kind shortly before.
type pendingReads struct {
	done  chan struct{}
	reads passReads
}

// startReads starts reading the pass's passReads.
func (r *RepositoryReconciler) startReads(ctx context.Context, repo *sluicev1.Repository) *pendingReads {
	p := &pendingReads{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.reads = r.readForPass(ctx, repo)
	}()
	return p
}

// get waits for the reads and returns them, or why they failed.
func (p *pendingReads) get() (passReads, error) {
	<-p.done
	return p.reads, p.reads.err
}

// readForPass reads the pass's passReads side by side.
func (r *RepositoryReconciler) readForPass(ctx context.Context, repo *sluicev1.Repository) passReads {
	var (
		out  passReads
		wg   sync.WaitGroup
		errs [3]error
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		out.pushes, errs[0] = r.freshPushes(ctx, repo)
	}()
	go func() {
		defer wg.Done()
		out.previews, errs[1] = r.listPreviews(ctx, repo)
	}()
	go func() {
		defer wg.Done()
		out.changes, errs[2] = r.listChangeNames(ctx, repo.Namespace, client.MatchingLabels{sluicev1.LabelRepository: repo.Name})
	}()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			out.err = err
			break
		}
	}
	return out
}

// listPreviews lists the Repository's preview ChangeRequests, fresh,
// oldest first.
func (r *RepositoryReconciler) listPreviews(ctx context.Context, repo *sluicev1.Repository) ([]sluicev1.ChangeRequest, error) {
	var list sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(repo.Namespace),
		client.MatchingLabels{sluicev1.LabelRepository: repo.Name, sluicev1.LabelPreview: "true"}); err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	return list.Items, nil
}

// listChangeNames lists the names and labels of the ChangeRequests
// matching labels, fresh: a metadata list, whose cost does not grow with
// the size of the changes' specs.
func (r *RepositoryReconciler) listChangeNames(ctx context.Context, namespace string, labels client.MatchingLabels) ([]metav1.PartialObjectMetadata, error) {
	var names metav1.PartialObjectMetadataList
	names.SetGroupVersionKind(sluicev1.GroupVersion.WithKind("ChangeRequestList"))
	if err := r.APIReader.List(ctx, &names, client.InNamespace(namespace), labels); err != nil {
		return nil, fmt.Errorf("list change requests: %w", err)
	}
	return names.Items, nil
}

// changesOf returns the ChangeRequest names of release among those read.
func (p passReads) changesOf(release string) []metav1.PartialObjectMetadata {
	out := []metav1.PartialObjectMetadata{}
	for _, m := range p.changes {
		if m.Labels[sluicev1.LabelRelease] == release {
			out = append(out, m)
		}
	}
	return out
}
