package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// runBuild is the generic verb: one image from host files, written as a
// docker-archive tarball for `ctr -n k8s.io images import`.
func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("build", stderr)
	out := fs.String("o", "", "output docker-archive tarball (required)")
	tag := fs.String("t", "", "image reference, e.g. sluice-gitops/app:1.0 (required)")
	entry := fs.String("entrypoint", "", `entrypoint, space separated or a JSON array`)
	cmd := fs.String("cmd", "", `command (arguments to the entrypoint), space separated or a JSON array`)
	user := fs.String("user", "65532:65532", "numeric uid:gid")
	arch := fs.String("arch", "amd64", "amd64 or arm64")
	workdir := fs.String("workdir", "", "working directory")
	base := fs.Bool("base", true, "add the base layer: CA bundle, /etc/passwd, /etc/group, /tmp (1777)")
	ca := fs.String("ca", DefaultCABundle, "host CA bundle for the base layer")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	var env, ann listFlag
	fs.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	fs.Var(&ann, "annotation", "KEY=VALUE annotation and label (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || *tag == "" {
		return &UsageError{Msg: "build: -o and -t are required"}
	}
	if fs.NArg() == 0 {
		return &UsageError{Msg: "build: no /dst=src file arguments"}
	}
	spec, err := buildSpec(*arch, *entry, *cmd, *user, *workdir, *ca, *epoch, *base, env, ann, fs.Args())
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(*tag)
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("build: -t %q: %v", *tag, err)}
	}
	img, err := BuildImage(spec)
	if err != nil {
		return err
	}
	if err := writeTarball(*out, ref, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s linux/%s %s\n", *out, ref.Name(), spec.Arch, d)
	return nil
}

// buildSpec turns the build verb's flags into an ImageSpec.
func buildSpec(arch, entry, cmd, user, workdir, ca, epoch string, base bool, env, ann, files []string) (ImageSpec, error) {
	created, err := parseEpoch(epoch)
	if err != nil {
		return ImageSpec{}, err
	}
	spec := ImageSpec{Arch: arch, User: user, WorkingDir: workdir, Base: base, CABundle: ca, Created: created, Env: env}
	if spec.Entrypoint, err = parseArgv("entrypoint", entry); err != nil {
		return ImageSpec{}, err
	}
	if spec.Cmd, err = parseArgv("cmd", cmd); err != nil {
		return ImageSpec{}, err
	}
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return ImageSpec{}, &UsageError{Msg: fmt.Sprintf("-env %q: want KEY=VALUE", e)}
		}
	}
	if len(ann) > 0 {
		spec.Annotations = map[string]string{}
		for _, a := range ann {
			k, v, ok := strings.Cut(a, "=")
			if !ok || k == "" {
				return ImageSpec{}, &UsageError{Msg: fmt.Sprintf("-annotation %q: want KEY=VALUE", a)}
			}
			spec.Annotations[k] = v
		}
	}
	for _, f := range files {
		fsp, err := ParseFileSpec(f)
		if err != nil {
			return ImageSpec{}, err
		}
		spec.Files = append(spec.Files, fsp)
	}
	return spec, nil
}

// parseEpoch reads Unix seconds; empty means the epoch itself.
func parseEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, &UsageError{Msg: fmt.Sprintf("epoch %q: want Unix seconds", s)}
	}
	return time.Unix(n, 0).UTC(), nil
}

// parseArgv reads "a b c" or a JSON array; empty gives nil.
func parseArgv(flagName, s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(s), &argv); err != nil {
			return nil, &UsageError{Msg: fmt.Sprintf("-%s %q: not a JSON array of strings: %v", flagName, s, err)}
		}
		return argv, nil
	}
	return strings.Fields(s), nil
}

// writeTarball writes img as a docker-archive tarball through a temporary
// file, so an interrupted build leaves no half tarball behind.
func writeTarball(path string, ref name.Reference, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
