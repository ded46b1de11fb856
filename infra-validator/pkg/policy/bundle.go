package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluice-gitops/sluice/policies"
)

// BundleDigest is the sha256 ("sha256:<hex>") of the policy bundle an
// Engine built with opts evaluates: the embedded default policies it
// loads (not their _test.rego files) and the default data, named
// "embedded:<path>", then the caller's .rego files under PolicyDirs and
// .json/.yaml/.yml files under DataFiles, named by their path as given.
// Every file is hashed as its name, its length and its bytes, in the order
// of the names, so the digest changes when any file, name or the set of
// files changes, and never otherwise. A ChangeRequest records it as the
// bundle its verdict came from.
func BundleDigest(opts Options) (string, error) {
	files := map[string][]byte{}
	if !opts.NoDefaults {
		for _, dir := range defaultDirs(opts.Kinds) {
			err := fs.WalkDir(policies.FS(), dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rego") || strings.HasSuffix(p, "_test.rego") {
					return err
				}
				b, err := fs.ReadFile(policies.FS(), p)
				files["embedded:"+p] = b
				return err
			})
			if err != nil {
				return "", fmt.Errorf("policy bundle: %w", err)
			}
		}
	}
	b, err := fs.ReadFile(policies.FS(), policies.DefaultDataPath)
	if err != nil {
		return "", fmt.Errorf("policy bundle: %w", err)
	}
	files["embedded:"+policies.DefaultDataPath] = b
	if err := addFiles(files, opts.PolicyDirs, ".rego"); err != nil {
		return "", err
	}
	if err := addFiles(files, opts.DataFiles, ".json", ".yaml", ".yml"); err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%d:%s\n%d\n", len(n), n, len(files[n]))
		h.Write(files[n])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// addFiles adds the files with one of exts under each root (a file or a
// folder, walked recursively) to files, by their slash path.
func addFiles(files map[string][]byte, roots []string, exts ...string) error {
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			ok := false
			for _, e := range exts {
				ok = ok || path.Ext(d.Name()) == e
			}
			if !ok {
				return nil
			}
			b, err := os.ReadFile(p)
			files[filepath.ToSlash(p)] = b
			return err
		})
		if err != nil {
			return fmt.Errorf("policy bundle: %w", err)
		}
	}
	return nil
}
