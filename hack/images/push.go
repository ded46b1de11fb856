package main

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// PushTarget maps a layout reference to its place under prefix: the last
// path element of the repository and the tag are kept, so signatures and
// SBOMs (tags sha256-<hex>.sig/.sbom) land beside their images, where
// cosign looks for them.
func PushTarget(prefix, ref string, opts ...name.Option) (name.Tag, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(strings.TrimSuffix(prefix, "/")+"/"+path.Base(t.RepositoryStr())+":"+t.TagStr(), opts...)
}

// PushLayout pushes every reference of the layout, images first and their
// signatures and SBOMs after, and returns what went where.
func PushLayout(dir, prefix string, opts []name.Option, ropts ...remote.Option) ([]string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	refs, err := layoutRefs(root)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(refs))
	for r := range refs {
		names = append(names, r)
	}
	// Images before attachments: a registry may refuse a signature tag for
	// a digest it does not hold yet (none does today, but order is free).
	sort.Slice(names, func(i, j int) bool {
		if isAttachment(names[i]) != isAttachment(names[j]) {
			return !isAttachment(names[i])
		}
		return names[i] < names[j]
	})
	var pushed []string
	for _, r := range names {
		dst, err := PushTarget(prefix, r, opts...)
		if err != nil {
			return pushed, fmt.Errorf("push %s: %w", r, err)
		}
		if err := pushOne(root, refs[r], dst, ropts...); err != nil {
			return pushed, fmt.Errorf("push %s to %s: %w", r, dst, err)
		}
		pushed = append(pushed, fmt.Sprintf("%s -> %s@%s", r, dst, refs[r].Digest))
	}
	return pushed, nil
}

// pushOne writes one index or image.
func pushOne(root v1.ImageIndex, d v1.Descriptor, dst name.Tag, ropts ...remote.Option) error {
	if d.MediaType == types.OCIImageIndex || d.MediaType == types.DockerManifestList {
		idx, err := root.ImageIndex(d.Digest)
		if err != nil {
			return err
		}
		return remote.WriteIndex(dst, idx, ropts...)
	}
	img, err := root.Image(d.Digest)
	if err != nil {
		return err
	}
	return remote.Write(dst, img, ropts...)
}

// runPush pushes a layout to a registry with the credentials of
// ~/.docker/config.json (as crane does).
func runPush(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("push", stderr)
	dir := fs.String("layout", "bin/images/oci", "OCI layout")
	to := fs.String("to", "", "registry and namespace, e.g. <registry>/sluice-gitops (required)")
	insecure := fs.Bool("insecure", false, "plain HTTP (a local test registry)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *to == "" {
		return &UsageError{Msg: "push: -to is required"}
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	pushed, err := PushLayout(*dir, *to, opts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	for _, p := range pushed {
		fmt.Fprintln(stdout, p)
	}
	return err
}
