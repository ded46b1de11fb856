package sources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// errReadOnly is returned for every write a build attempts.
var errReadOnly = errors.New("the repository is read-only for a Kustomize build")

// confinedFS is the file system a Kustomize build sees: the disk, read
// only, where every path (after resolving symlinks) must be inside root.
// It backs up the kustomization walk (manifest.KustomizeInputs), which
// refuses the same paths with file and line first.
type confinedFS struct {
	root string // real (symlink-free) absolute repository root
	disk filesys.FileSystem
	// virtual holds the files only the build sees, by absolute path: the
	// rendered helmCharts entries (inflate.go).
	virtual map[string][]byte
	// inflateErr keeps why a kustomization's helmCharts did not render
	// (Kustomize reports an unreadable kustomization as a missing one).
	inflateErr *error
}

var _ filesys.FileSystem = confinedFS{}

func newConfinedFS(repoRoot string) (confinedFS, error) {
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		return confinedFS{}, err
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return confinedFS{}, fmt.Errorf("repository root: %w", err)
	}
	return confinedFS{root: root, disk: filesys.MakeFsOnDisk(), virtual: map[string][]byte{}, inflateErr: new(error)}, nil
}

// check refuses p unless it is inside the root: an existing path after
// resolving symlinks, a missing one by its nearest existing parent.
func (c confinedFS) check(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s: %w (a relative path outside the build)", p, manifest.ErrOutsideRepo)
	}
	p = filepath.Clean(p)
	if !within(c.root, p) {
		return fmt.Errorf("%s: %w", c.rel(p), manifest.ErrOutsideRepo)
	}
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			if !within(c.root, real) {
				return fmt.Errorf("%s: %w (a symlink points outside)", c.rel(p), manifest.ErrOutsideRepo)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", c.rel(p), err)
		}
		parent := filepath.Dir(cur)
		if parent == cur || !within(c.root, parent) {
			return nil
		}
		cur = parent
	}
}

func (c confinedFS) rel(p string) string {
	if r, err := filepath.Rel(c.root, p); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
		return filepath.ToSlash(r)
	}
	return p
}

func within(root, p string) bool {
	r, err := filepath.Rel(root, p)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

func (c confinedFS) Create(p string) (filesys.File, error) { return nil, errReadOnly }
func (c confinedFS) Mkdir(p string) error                  { return errReadOnly }
func (c confinedFS) MkdirAll(p string) error               { return errReadOnly }
func (c confinedFS) RemoveAll(p string) error              { return errReadOnly }
func (c confinedFS) WriteFile(p string, _ []byte) error    { return errReadOnly }

func (c confinedFS) Open(p string) (filesys.File, error) {
	if err := c.check(p); err != nil {
		return nil, err
	}
	return c.disk.Open(p)
}

func (c confinedFS) IsDir(p string) bool {
	return c.check(p) == nil && c.disk.IsDir(p)
}

func (c confinedFS) ReadDir(p string) ([]string, error) {
	if err := c.check(p); err != nil {
		return nil, err
	}
	return c.disk.ReadDir(p)
}

func (c confinedFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	if err := c.check(p); err != nil {
		return "", "", err
	}
	d, f, err := c.disk.CleanedAbs(p)
	if err != nil {
		return "", "", err
	}
	if err := c.check(string(d)); err != nil {
		return "", "", err
	}
	return d, f, nil
}

func (c confinedFS) Exists(p string) bool {
	if _, ok := c.virtual[filepath.Clean(p)]; ok {
		return true
	}
	return c.check(p) == nil && c.disk.Exists(p)
}

func (c confinedFS) Glob(pattern string) ([]string, error) {
	if err := c.check(pattern); err != nil {
		return nil, err
	}
	all, err := c.disk.Glob(pattern)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, m := range all {
		if c.check(m) == nil {
			out = append(out, m)
		}
	}
	return out, nil
}

func (c confinedFS) ReadFile(p string) ([]byte, error) {
	if err := c.check(p); err != nil {
		return nil, err
	}
	if data, ok := c.virtual[filepath.Clean(p)]; ok {
		return data, nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.rel(p), unwrapPathError(err))
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", c.rel(p), maxFileSize)
	}
	data, err := c.disk.ReadFile(p)
	if err != nil || !slices.Contains(manifest.KustomizationFiles, filepath.Base(p)) {
		return data, err
	}
	// A remote base is read from its fetched folder, never the network,
	// and a helmCharts entry from the chart fetched into the content.
	if data, err = manifest.RewriteRemoteBases(data, c.rel(filepath.Dir(p))); err != nil {
		return nil, err
	}
	out, err := c.inflate(data, p)
	if err != nil && *c.inflateErr == nil {
		*c.inflateErr = fmt.Errorf("%s: %w", c.rel(p), err)
	}
	return out, err
}

func (c confinedFS) Walk(p string, walkFn filepath.WalkFunc) error {
	if err := c.check(p); err != nil {
		return err
	}
	return c.disk.Walk(p, func(q string, info fs.FileInfo, err error) error {
		if err == nil {
			if cerr := c.check(q); cerr != nil {
				return cerr
			}
		}
		return walkFn(q, info, err)
	})
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
