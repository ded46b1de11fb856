package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation keys (image-spec annotations.md).
const (
	annSource   = "org.opencontainers.image.source"
	annRevision = "org.opencontainers.image.revision"
	annVersion  = "org.opencontainers.image.version"
	annCreated  = "org.opencontainers.image.created"
	annTitle    = "org.opencontainers.image.title"
	annRefName  = "org.opencontainers.image.ref.name"
)

// DefaultCABundle is where Debian-like hosts keep the CA bundle; the images
// put it at the same path, where Go's crypto/x509 looks first.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// ArchError reports an architecture the tool does not build for.
type ArchError struct{ Arch string }

func (e *ArchError) Error() string {
	return fmt.Sprintf("architecture %q: want amd64 or arm64", e.Arch)
}

// UserError reports a -user value that is not numeric uid[:gid].
type UserError struct{ User string }

func (e *UserError) Error() string {
	return fmt.Sprintf("user %q: want a numeric uid or uid:gid (a scratch image has no user names)", e.User)
}

// checkArch accepts the architectures the images are built for.
func checkArch(arch string) error {
	switch arch {
	case "amd64", "arm64":
		return nil
	}
	return &ArchError{Arch: arch}
}

// parseUser checks that user is "uid" or "uid:gid" with numbers only, since
// a FROM scratch image cannot resolve names (and kubelet's runAsNonRoot
// check needs a number).
func parseUser(user string) (uid, gid int, err error) {
	u, g, hasGID := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
		return 0, 0, &UserError{User: user}
	}
	gid = uid
	if hasGID {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, &UserError{User: user}
		}
	}
	return uid, gid, nil
}

// ImageSpec says what one single-platform image holds.
type ImageSpec struct {
	Arch        string
	Entrypoint  []string
	Cmd         []string
	User        string // numeric uid:gid
	Env         []string
	WorkingDir  string
	Files       []FileSpec
	Base        bool   // add the base layer (CA bundle, passwd, group, /tmp)
	CABundle    string // host CA bundle for the base layer
	Created     time.Time
	Annotations map[string]string // also written as config labels
}

// baseLayer holds what every Sluice image needs besides its binaries: the CA
// bundle, a passwd and group naming the non-root user (for tools that look
// up $HOME), and a world-writable sticky /tmp.
func baseLayer(spec ImageSpec) (v1.Layer, error) {
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	b := newLayerBuilder()
	ca, err := os.ReadFile(spec.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	b.addData(DefaultCABundle, ca, 0o644)
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n"
	group := "root:x:0:\n"
	if uid != 0 {
		passwd += fmt.Sprintf("nonroot:x:%d:%d:nonroot:/tmp:/sbin/nologin\n", uid, gid)
		group += fmt.Sprintf("nonroot:x:%d:\n", gid)
	}
	b.addData("/etc/passwd", []byte(passwd), 0o644)
	b.addData("/etc/group", []byte(group), 0o644)
	b.addDir("/tmp", 0o1777, 0, 0)
	return b.layer(spec.Created)
}

// filesLayer holds the files the caller names.
func filesLayer(spec ImageSpec) (v1.Layer, error) {
	b := newLayerBuilder()
	for _, f := range spec.Files {
		if err := b.addSpec(f); err != nil {
			return nil, err
		}
	}
	return b.layer(spec.Created)
}

// BuildImage builds one linux image for spec.Arch: OCI media types, the
// config's os/architecture set (containerd's import filters on them), the
// annotations on the manifest and as labels, and every time the given one.
func BuildImage(spec ImageSpec) (v1.Image, error) {
	if err := checkArch(spec.Arch); err != nil {
		return nil, err
	}
	if _, _, err := parseUser(spec.User); err != nil {
		return nil, err
	}
	var layers []v1.Layer
	if spec.Base {
		l, err := baseLayer(spec)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	l, err := filesLayer(spec)
	if err != nil {
		return nil, err
	}
	layers = append(layers, l)

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	history := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		history = append(history, mutate.Addendum{Layer: l, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: spec.Created}, CreatedBy: "sluice hack/images",
		}})
	}
	img, err = mutate.Append(img, history...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", spec.Arch
	if spec.Arch == "arm64" {
		cf.Variant = "v8" // what containerd and the registries normalise arm64 to
	}
	cf.Created = v1.Time{Time: spec.Created}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = spec.User
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.Env = withDefaultPath(spec.Env)
	cf.Config.Labels = spec.Annotations
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: spec.Created}); err != nil {
		return nil, err
	}
	if len(spec.Annotations) > 0 {
		img = mutate.Annotations(img, spec.Annotations).(v1.Image)
	}
	return img, nil
}

// withDefaultPath adds a PATH when env has none, so that a pod's command
// like ["infra-validator", ...] resolves.
func withDefaultPath(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
}

// BuildIndex puts the images into one OCI image index with their
// platforms, sorted by architecture, and the annotations on the index.
func BuildIndex(imgs map[string]v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	arches := make([]string, 0, len(imgs))
	for a := range imgs {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range arches {
		cf, err := imgs[arch].ConfigFile()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: imgs[arch],
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
			},
		})
	}
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}
