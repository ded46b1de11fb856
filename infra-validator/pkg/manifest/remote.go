package manifest

// Kustomize remote bases. An overlay may name a base in another git
// repository only pinned to a commit (`<URL>//<folder>?ref=<40 hex>`); a
// branch or a tag moves, so what was approved would not be what is built.
// The syncer fetches an allowed remote base at its commit into the
// artifact under RemoteBasesDir, where every build (validator, appliers,
// the Argo CD plugin) reads it: its content is in the contentDigest, and
// no build ever reaches the network.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// RemoteBasesDir is the folder of an artifact holding the remote bases
// the syncer fetched: RemoteBasesDir/<RemoteBase.Key()>/ is the remote
// repository's tree at the pinned commit. A repository holding this folder
// itself is refused by the syncer.
const RemoteBasesDir = ".sluice/remote"

// RemoteBase is a Kustomize remote base pinned to a commit.
type RemoteBase struct {
	// Repo is the git repository URL (https://, ssh:// or file://).
	Repo string
	// Dir is the folder inside it ("" for its root).
	Dir string
	// Commit is the full commit id.
	Commit string
}

// Key names the fetched tree of the base's repository at its commit
// inside RemoteBasesDir.
func (r RemoteBase) Key() string {
	s := sha256.Sum256([]byte(r.Repo + "\n" + r.Commit))
	return hex.EncodeToString(s[:12])
}

// Root is the repo-relative folder of the fetched repository tree.
func (r RemoteBase) Root() string { return path.Join(RemoteBasesDir, r.Key()) }

// Target is the repo-relative folder the base names in the fetched tree.
func (r RemoteBase) Target() string { return path.Join(r.Root(), r.Dir) }

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ErrUnpinnedRemoteBase: a remote base names a branch, a tag or nothing
// instead of a full commit id.
var ErrUnpinnedRemoteBase = errors.New("a remote base must be pinned to a full commit id (?ref=<40 hex>); a branch or a tag can move after the approval")

// ParseRemoteBase parses a kustomization entry naming a remote base. Only
// the explicit form is accepted: an https://, ssh:// or file:// git URL
// (optionally after "git::"), the folder after "//", and exactly one query
// parameter, ref, a full commit id. Short forms (github.com/org/repo,
// git@host:org/repo), other parameters (timeout, submodules, version) and
// credentials in the URL are refused.
func ParseRemoteBase(s string) (RemoteBase, error) {
	raw := strings.TrimPrefix(s, "git::")
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "ssh" && u.Scheme != "file") {
		return RemoteBase{}, errors.New("a remote base must be an https://, ssh:// or file:// git URL with //<folder>?ref=<commit> (short forms such as github.com/org/repo are refused)")
	}
	if u.User != nil && u.Scheme != "ssh" {
		return RemoteBase{}, errors.New("a remote base URL must not carry credentials")
	}
	if u.User != nil {
		if _, hasPass := u.User.Password(); hasPass {
			return RemoteBase{}, errors.New("a remote base URL must not carry credentials")
		}
	}
	q := u.Query()
	for k := range q {
		if k != "ref" {
			return RemoteBase{}, fmt.Errorf("remote base parameter %q is refused: only ?ref=<commit>", k)
		}
	}
	ref := q.Get("ref")
	if len(q["ref"]) != 1 || !fullCommit.MatchString(ref) {
		return RemoteBase{}, ErrUnpinnedRemoteBase
	}
	u.RawQuery, u.Fragment = "", ""
	repo, dir := u.String(), ""
	// The folder follows the first "//" after the scheme's.
	scheme := u.Scheme + "://"
	if i := strings.Index(strings.TrimPrefix(repo, scheme), "//"); i >= 0 {
		rest := strings.TrimPrefix(repo, scheme)
		repo, dir = scheme+rest[:i], rest[i+2:]
	}
	if dir != "" {
		clean := path.Clean(dir)
		if clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(dir, "/") {
			return RemoteBase{}, fmt.Errorf("remote base folder %q leaves its repository", dir)
		}
		if clean == "." {
			clean = ""
		}
		dir = clean
	}
	return RemoteBase{Repo: repo, Dir: dir, Commit: ref}, nil
}

// RemoteBaseRef is a remote base an overlay names, and where.
type RemoteBaseRef struct {
	RemoteBase
	// At is the kustomization file and line naming it.
	At Problem
}

// RewriteRemoteBases returns the kustomization data of the repo-relative
// folder dir with each remote base entry (resources, bases, components)
// replaced by the relative path of its fetched folder (RemoteBase.Target),
// so a build reads it from the content and never from the network. Data
// without remote entries is returned as it is; an entry that does not
// parse is left for the build to fail on (the walk refused it first).
func RewriteRemoteBases(data []byte, dir string) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return data, nil
	}
	m, changed := root.Content[0], false
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "resources", "bases", "components":
		default:
			continue
		}
		val := m.Content[i+1]
		items := []*yaml.Node{val}
		if val.Kind == yaml.SequenceNode {
			items = val.Content
		}
		for _, e := range items {
			if e.Kind != yaml.ScalarNode || !looksRemote(e.Value) {
				continue
			}
			rb, err := ParseRemoteBase(e.Value)
			if err != nil {
				continue
			}
			rel, err := relPath(dir, rb.Target())
			if err != nil {
				return nil, err
			}
			e.Value, e.Style, changed = rel, 0, true
		}
	}
	if !changed {
		return data, nil
	}
	return yaml.Marshal(&root)
}

// relPath is the relative path from repo-relative folder from to target.
func relPath(from, target string) (string, error) {
	from, target = path.Clean(from), path.Clean(target)
	var up []string
	for from != "." && target != from && !strings.HasPrefix(target, from+"/") {
		up = append(up, "..")
		from = path.Dir(from)
	}
	rest := target
	if from != "." {
		rest = strings.TrimPrefix(strings.TrimPrefix(target, from), "/")
	}
	parts := append(up, rest)
	if rest == "" {
		parts = up
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return path.Join(parts...), nil
}
