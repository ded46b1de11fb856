package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Defaults of the release verb.
const (
	defaultSource     = "https://github.com/sluice-gitops/sluice"
	defaultVersionPkg = "github.com/sluice-gitops/sluice/kit/version"
)

// envOr returns the environment variable k, or def when it is unset.
func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v
	}
	return def
}

// runRelease builds Sluice's images (see SluiceImages).
func runRelease(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("release", stderr)
	root := fs.String("root", ".", "repository root (holds go.work)")
	out := fs.String("out", "bin/images", "output folder")
	chart := fs.String("chart", "charts/sluice", "chart whose appVersion is the tag")
	tag := fs.String("tag", "", "image tag (default: the chart's appVersion)")
	stamp := fs.String("stamp-version", "dev", "version stamped into the binaries (the Makefile's VERSION)")
	commit := fs.String("commit", "unknown", "git commit: stamped and the revision annotation")
	versionPkg := fs.String("version-pkg", defaultVersionPkg, "package with Version, Commit and Date variables")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "commit time in Unix seconds: build date and every timestamp")
	source := fs.String("source", defaultSource, "source annotation")
	arches := fs.String("arch", "amd64,arm64", "comma-separated architectures")
	ca := fs.String("ca", DefaultCABundle, "host CA bundle")
	key := fs.String("key", os.Getenv("SLUICE_SIGNING_KEY"), "signing key, PEM (default $SLUICE_SIGNING_KEY, else <out>/cosign.key, created when missing)")
	var tf listFlag
	fs.Var(&tf, "terraform", "ARCH=PATH of a static terraform for the runner image (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: "release: unexpected arguments " + strings.Join(fs.Args(), " ")}
	}
	created, err := parseEpoch(*epoch)
	if err != nil {
		return err
	}
	if *epoch == "" {
		return &UsageError{Msg: "release: -epoch (or SOURCE_DATE_EPOCH) is required: the commit time makes builds repeat"}
	}
	terraform, err := parseArchPaths(tf)
	if err != nil {
		return err
	}
	if *tag == "" {
		if *tag, err = ChartAppVersion(*chart); err != nil {
			return err
		}
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	o := ReleaseOptions{
		Root: absRoot, Out: *out, Tag: *tag, StampVersion: *stamp, Commit: *commit, VersionPkg: *versionPkg,
		Created: created, Source: *source, Arches: splitList(*arches), CABundle: *ca,
		KeyPath: *key, PubPath: filepath.Join(*out, "cosign.pub"), Images: SluiceImages(terraform), Log: stdout,
	}
	if o.KeyPath == "" {
		o.KeyPath, o.GenerateKey = filepath.Join(*out, "cosign.key"), true
	}
	_, err = Release(o)
	return err
}

// parseArchPaths reads ARCH=PATH flags.
func parseArchPaths(list []string) (map[string]string, error) {
	m := map[string]string{}
	for _, s := range list {
		a, p, ok := strings.Cut(s, "=")
		if !ok || p == "" {
			return nil, &UsageError{Msg: fmt.Sprintf("-terraform %q: want ARCH=PATH", s)}
		}
		if err := checkArch(a); err != nil {
			return nil, err
		}
		m[a] = p
	}
	return m, nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runVerify checks a layout's signatures and SBOMs and the chart's
// default references.
func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify", stderr)
	dir := fs.String("layout", "bin/images/oci", "OCI layout")
	pub := fs.String("pub", envOr("SLUICE_SIGNING_PUB", "bin/images/cosign.pub"), "public key, PEM (default $SLUICE_SIGNING_PUB)")
	chart := fs.String("chart", "charts/sluice", "chart whose default image references must be in the layout (empty: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	verifier, err := LoadVerifier(*pub)
	if err != nil {
		return err
	}
	var want []string
	if *chart != "" {
		if want, err = ChartDefaultRefs(*chart); err != nil {
			return err
		}
	}
	rep, err := VerifyLayout(*dir, verifier, want)
	if rep != nil {
		for _, r := range sortedArches(rep.Images) {
			fmt.Fprintf(stdout, "verified %s@%s %s\n", r, rep.Images[r], strings.Join(rep.Platforms[r], ","))
		}
		fmt.Fprintf(stdout, "%d signatures and %d SBOMs verified; chart references present: %s\n",
			rep.Signatures, rep.SBOMs, strings.Join(want, " "))
	}
	return err
}
