package argocd

// What Argo CD's repo-server reads at a revision besides the plugin's
// output, read from git itself (not from the change's artifact, which
// holds only what the approved change packed). Argo CD v2.14
// (reposerver/repository/repository.go, mergeSourceParameters) merges
// "<path>/.argocd-source.yaml" and then "<path>/.argocd-source-<app>.yaml"
// into the Application's source as JSON merge patches before it picks the
// renderer, so such a file can rename the plugin (another config
// management plugin of the repo-server then renders), drop it, or add
// Helm, Kustomize or directory settings; and the checkout initialises git
// submodules, whose content no tree of this repository shows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Argo CD's override file names (repository.go: repoSourceFile,
// appSourceFile).
const (
	overrideFile       = ".argocd-source.yaml"
	overrideFilePrefix = ".argocd-source-"
)

// maxCachedReports bounds a GitReader's cache.
const maxCachedReports = 4096

// ErrOverride is wrapped by the error of a revision that holds a file or
// entry through which Argo CD would render something other than what the
// Sluice plugin prints.
var ErrOverride = errors.New("the revision can make Argo CD render other than the Sluice plugin")

// isOverrideName reports a name Argo CD merges into a source.
func isOverrideName(name string) bool {
	return name == overrideFile || (strings.HasPrefix(name, overrideFilePrefix) && strings.HasSuffix(name, ".yaml"))
}

// RevisionReport is what git says of a revision for one Application
// source path.
type RevisionReport struct {
	// Refused lists every entry of the revision through which Argo CD could
	// render other than the Sluice plugin: override files anywhere in the
	// repository (any entry so named, file, link or folder), submodules.
	Refused []string
	// Plugin is the plugin name Argo CD's repo-server renders the source
	// with at this revision: the source's plugin name after the override
	// files of the path were merged, as Argo CD merges them; "" when the
	// merged source names none.
	Plugin string
	// OtherRenderer is set when the merged source also names Helm,
	// Kustomize or directory settings.
	OtherRenderer bool
	// MergedFrom are the override files of the path that were merged.
	MergedFrom []string
}

// Err is nil when Argo CD renders the source at this revision with the
// Sluice plugin alone and nothing in the repository could change that.
func (r RevisionReport) Err(revision string) error {
	if err := r.UsedErr(revision); err != nil {
		return err
	}
	if len(r.Refused) > 0 {
		return fmt.Errorf("%w: at %s the repository holds %s (remove them: Argo CD merges override files into the source, and checks out submodules)",
			ErrOverride, sluicev1.ShortSHA(revision), strings.Join(r.Refused, ", "))
	}
	return nil
}

// GitReader reads revisions of Repositories with go-git, as the syncer
// does: the Repository's URL and the credentials of its secretRef. Reports
// are kept per repository URL, revision, path and application: a commit's
// content never changes.
type GitReader struct {
	// Secrets reads the Repository's credentials Secret.
	Secrets client.Reader
	// TempDir holds the short-lived clones; empty means os.TempDir().
	TempDir string

	mu    sync.Mutex
	cache map[string]RevisionReport
}

// Inspect reads revision of repo's repository and reports what Argo CD
// would render source path p of the Application namespace/name with.
// appNames are the names Argo CD may give the Application in override file
// names ("<name>" in its own namespace, "<namespace>_<name>" elsewhere).
func (g *GitReader) Inspect(ctx context.Context, repo *sluicev1.Repository, revision, p string, appNames []string) (RevisionReport, error) {
	key := strings.Join(append([]string{repo.Spec.URL, revision, p}, appNames...), "\x00")
	g.mu.Lock()
	if r, ok := g.cache[key]; ok {
		g.mu.Unlock()
		return r, nil
	}
	g.mu.Unlock()
	tree, cleanup, err := g.tree(ctx, repo, revision)
	if err != nil {
		return RevisionReport{}, err
	}
	defer cleanup()
	r, err := inspectTree(tree, p, appNames)
	if err != nil {
		return RevisionReport{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cache == nil || len(g.cache) >= maxCachedReports {
		// Dropping all is simple and rare: reports are re-read from git.
		g.cache = map[string]RevisionReport{}
	}
	g.cache[key] = r
	return r, nil
}

// tree clones repo's repository (bare, every ref, into a temporary
// folder) and returns the tree of revision.
func (g *GitReader) tree(ctx context.Context, repo *sluicev1.Repository, revision string) (*object.Tree, func(), error) {
	auth, err := g.auth(ctx, repo)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(g.TempDir, "sluice-argocd-git-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	r, err := gogit.PlainInit(dir, true)
	if err == nil {
		_, err = r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{repo.Spec.URL}})
	}
	if err == nil {
		// Every branch, tag and other ref: the approved commit may no
		// longer be a branch head.
		err = r.FetchContext(ctx, &gogit.FetchOptions{RemoteName: "origin", Auth: auth, Tags: gogit.NoTags,
			RefSpecs: []config.RefSpec{"+refs/*:refs/remotes/origin/all/*"}})
	}
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		cleanup()
		return nil, nil, fmt.Errorf("read git %s at %s: %w", repo.Spec.URL, sluicev1.ShortSHA(revision), err)
	}
	c, err := r.CommitObject(plumbing.NewHash(revision))
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("read git %s: commit %s: %w", repo.Spec.URL, sluicev1.ShortSHA(revision), err)
	}
	t, err := c.Tree()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("read git %s: tree of %s: %w", repo.Spec.URL, sluicev1.ShortSHA(revision), err)
	}
	return t, cleanup, nil
}

// inspectTree walks the whole tree for override files and submodules and
// merges the override files of path p as Argo CD does.
func inspectTree(t *object.Tree, p string, appNames []string) (RevisionReport, error) {
	var r RevisionReport
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return r, fmt.Errorf("walk the tree: %w", err)
		}
		switch {
		case isOverrideName(path.Base(name)):
			r.Refused = append(r.Refused, name)
		case e.Mode == filemode.Submodule:
			r.Refused = append(r.Refused, name+" (a submodule)")
		case name == ".gitmodules":
			r.Refused = append(r.Refused, name)
		}
	}
	// The Application's source as Sluice sets it, then each override
	// file of the path in Argo CD's order, as JSON merge patches.
	source := []byte(fmt.Sprintf(`{"plugin":{"name":%q}}`, PluginName))
	files := []string{path.Join(p, overrideFile)}
	for _, n := range appNames {
		files = append(files, path.Join(p, overrideFilePrefix+n+".yaml"))
	}
	for _, f := range files {
		data, ok, err := fileAt(t, f)
		if err != nil {
			return r, err
		}
		if !ok {
			continue
		}
		r.MergedFrom = append(r.MergedFrom, f)
		patch, err := yaml.YAMLToJSON(data)
		if err != nil {
			// Argo CD fails the render; nothing is rendered.
			r.Refused = append(r.Refused, f+" (not YAML)")
			continue
		}
		if source, err = jsonpatch.MergePatch(source, patch); err != nil {
			r.Refused = append(r.Refused, f+" (not a merge patch)")
		}
	}
	var merged struct {
		Plugin    *struct{ Name string } `json:"plugin"`
		Helm      json.RawMessage        `json:"helm"`
		Kustomize json.RawMessage        `json:"kustomize"`
		Directory json.RawMessage        `json:"directory"`
	}
	if err := json.Unmarshal(source, &merged); err != nil {
		r.OtherRenderer = true
		return r, nil
	}
	if merged.Plugin != nil {
		r.Plugin = merged.Plugin.Name
	}
	r.OtherRenderer = !isNull(merged.Helm) || !isNull(merged.Kustomize) || !isNull(merged.Directory)
	return r, nil
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// fileAt reads the file at p of t, following a symbolic link inside the
// tree as a checkout would (a few levels); false when there is none.
func fileAt(t *object.Tree, p string) ([]byte, bool, error) {
	for range 8 {
		f, err := t.File(p)
		if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", p, err)
		}
		s, err := f.Contents()
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", p, err)
		}
		if f.Mode != filemode.Symlink {
			return []byte(s), true, nil
		}
		p = path.Clean(path.Join(path.Dir(p), s))
	}
	return nil, false, fmt.Errorf("read %s: too many symbolic links", p)
}

// auth builds go-git credentials from the Repository's secretRef, with the
// keys the syncer reads (username, password, bearerToken, identity,
// identityPassphrase, known_hosts, insecureIgnoreHostKey).
func (g *GitReader) auth(ctx context.Context, repo *sluicev1.Repository) (transport.AuthMethod, error) {
	if repo.Spec.SecretRef == nil || repo.Spec.SecretRef.Name == "" {
		return nil, nil
	}
	if g.Secrets == nil {
		return nil, errors.New("no client to read the Repository's credentials")
	}
	s := &corev1.Secret{}
	if err := g.Secrets.Get(ctx, client.ObjectKey{Namespace: repo.Namespace, Name: repo.Spec.SecretRef.Name}, s); err != nil {
		return nil, fmt.Errorf("read the Repository's credentials Secret %s/%s: %w", repo.Namespace, repo.Spec.SecretRef.Name, err)
	}
	d := s.Data
	ep, err := transport.NewEndpoint(repo.Spec.URL)
	if err != nil {
		return nil, fmt.Errorf("the Repository's URL: %w", err)
	}
	switch ep.Protocol {
	case "http", "https":
		if t := string(d["bearerToken"]); t != "" {
			return &githttp.TokenAuth{Token: t}, nil
		}
		if u, p := string(d["username"]), string(d["password"]); u != "" || p != "" {
			if u == "" {
				u = "git"
			}
			return &githttp.BasicAuth{Username: u, Password: p}, nil
		}
		return nil, nil
	case "ssh":
		return sshAuth(ep, d, g.TempDir)
	}
	return nil, nil
}

// sshAuth is the SSH identity of the Secret, with its host key checked
// against its known_hosts unless insecureIgnoreHostKey is "true".
func sshAuth(ep *transport.Endpoint, d map[string][]byte, tmp string) (transport.AuthMethod, error) {
	user := ep.User
	if user == "" {
		user = string(d["username"])
	}
	if user == "" {
		user = "git"
	}
	keys, err := gitssh.NewPublicKeys(user, d["identity"], string(d["identityPassphrase"]))
	if err != nil {
		// The parse error can quote key material; say only what is wrong.
		return nil, errors.New("the Repository's Secret has no valid SSH \"identity\"")
	}
	if strings.TrimSpace(string(d["insecureIgnoreHostKey"])) == "true" {
		keys.HostKeyCallback = ssh.InsecureIgnoreHostKey() // #nosec: explicitly requested by the Secret, as the syncer honours it
		return keys, nil
	}
	f, err := os.CreateTemp(tmp, "known_hosts-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(d["known_hosts"]); err != nil {
		_ = f.Close()
		return nil, err
	}
	_ = f.Close()
	cb, err := gitssh.NewKnownHostsCallback(f.Name())
	if err != nil {
		return nil, errors.New("the Repository's Secret has no usable \"known_hosts\"")
	}
	keys.HostKeyCallback = cb
	return keys, nil
}

// UsedErr is nil when Argo CD rendered the source at this revision with the
// Sluice plugin alone: the plugin it used, not every entry refused before
// a sync.
func (r RevisionReport) UsedErr(revision string) error {
	if r.Plugin != PluginName || r.OtherRenderer {
		return fmt.Errorf("%w: at %s Argo CD renders with plugin %q, not %q (other renderer settings: %t), merged from %s",
			ErrOverride, sluicev1.ShortSHA(revision), r.Plugin, PluginName, r.OtherRenderer, strings.Join(r.MergedFrom, ", "))
	}
	return nil
}
