package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Bounds of one fetched remote base tree.
const (
	maxRemoteBaseFiles = 10000
	maxRemoteBaseBytes = 32 << 20
)

// fetchedBase is a Kustomize remote base's repository tree at its pinned
// commit: files by their path inside the tree.
type fetchedBase struct {
	base  manifest.RemoteBase
	files map[string][]byte
}

// remoteBases fetches the remote bases a release's overlay names that the
// Repository allows (spec.kustomizeRemoteBases), each at its pinned
// commit with the credentials of the entry that allows it, reading the commit's whole tree (an overlay's base may reach
// elsewhere in its repository). A base the Repository does not allow is
// not fetched, so the validation refuses it with the kustomization's file
// and line. A commit that cannot be had (on no branch, refused access, a
// tree over the bounds or holding a link) is a chartError: the release
// proposes nothing and the others go on.
func (r *RepositoryReconciler) remoteBases(ctx context.Context, repo *sluicev1.Repository, bases []manifest.RemoteBase) ([]fetchedBase, error) {
	var out []fetchedBase
	seen := map[string]bool{}
	for _, b := range bases {
		entry := remoteBaseEntry(repo, b.Repo)
		if seen[b.Root()] || entry == nil {
			continue
		}
		seen[b.Root()] = true
		what := fmt.Sprintf("remote base %s at %s", git.RedactURL(b.Repo), sluicev1.ShortSHA(b.Commit))
		// The cache is the Repository's own, so what its credentials
		// fetched is never served to another Repository's bases.
		remote := git.Remote{Key: repo.Namespace + "/" + repo.Name + "/remote-base/" + b.Key(), URL: b.Repo, Timeout: repo.GetTimeout()}
		auth, err := r.remoteBaseAuth(ctx, repo, entry)
		if err != nil {
			return nil, err
		}
		remote.Auth = auth
		cache, err := r.Git.Fetch(ctx, remote, "refs/heads/*", b.Commit)
		if err != nil {
			switch git.ReasonOf(err) {
			case git.ReasonAuth, git.ReasonHostKey, git.ReasonRefNotFound, git.ReasonURL, git.ReasonNotFound, git.ReasonSecret:
				return nil, &chartError{msg: fmt.Sprintf("%s: %s", what, git.Redact(err.Error()))}
			}
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		fsys, err := cache.FS(b.Commit)
		if err != nil {
			return nil, &chartError{msg: fmt.Sprintf("%s: %v", what, err)}
		}
		files, err := readTree(fsys)
		if err != nil {
			return nil, &chartError{msg: fmt.Sprintf("%s: %v", what, err)}
		}
		out = append(out, fetchedBase{base: b, files: files})
	}
	return out, nil
}

// remoteBaseEntry is the spec.kustomizeRemoteBases entry that allows
// remote bases from the git repository u: the longest URL u is or lies
// below, or nil when none does.
func remoteBaseEntry(repo *sluicev1.Repository, u string) *sluicev1.KustomizeRemoteBase {
	var best *sluicev1.KustomizeRemoteBase
	for i := range repo.Spec.KustomizeRemoteBases {
		e := &repo.Spec.KustomizeRemoteBases[i]
		if urlHasPrefix(u, e.URL) && (best == nil || len(e.URL) > len(best.URL)) {
			best = e
		}
	}
	return best
}

// remoteBaseAuth reads the credentials entry names (nil without a
// secretRef), as the Repository's own are read (RemoteFor). A missing or
// unusable Secret is a chartError naming the Secret, never its content.
func (r *RepositoryReconciler) remoteBaseAuth(ctx context.Context, repo *sluicev1.Repository, entry *sluicev1.KustomizeRemoteBase) (*git.Auth, error) {
	if entry.SecretRef == nil || entry.SecretRef.Name == "" {
		return nil, nil
	}
	name := entry.SecretRef.Name
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &chartError{msg: fmt.Sprintf("remote bases from %s: secret %q not found", git.RedactURL(entry.URL), name)}
		}
		return nil, fmt.Errorf("read secret %q: %w", name, err)
	}
	auth, err := git.AuthFromSecret(secret.Data)
	if err != nil {
		return nil, &chartError{msg: fmt.Sprintf("remote bases from %s: secret %q: %s", git.RedactURL(entry.URL), name, err.Error())}
	}
	return auth, nil
}

// readTree reads every regular file of a commit's tree, within the
// bounds; a link or another special file is refused (it could point out
// of the tree once unpacked).
func readTree(fsys fs.FS) (map[string][]byte, error) {
	files := map[string][]byte{}
	var total int64
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		if len(files) >= maxRemoteBaseFiles {
			return fmt.Errorf("more than %d files", maxRemoteBaseFiles)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if total += int64(len(b)); total > maxRemoteBaseBytes {
			return fmt.Errorf("larger than %d bytes", maxRemoteBaseBytes)
		}
		files[p] = b
		return nil
	})
	if err != nil {
		return nil, errors.New("its tree: " + err.Error())
	}
	return files, nil
}

// remoteBaseFiles are the artifact files of the fetched bases, by their
// path in the artifact (under manifest.RemoteBasesDir), and the roots to
// add to the artifact's inputs.
func remoteBaseFiles(bases []fetchedBase) (map[string][]byte, []string) {
	files := map[string][]byte{}
	var roots []string
	for _, b := range bases {
		roots = append(roots, b.base.Root())
		for p, data := range b.files {
			files[path.Join(b.base.Root(), p)] = data
		}
	}
	return files, roots
}
