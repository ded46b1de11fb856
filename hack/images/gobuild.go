package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GoBuildError reports a failed go build with its output.
type GoBuildError struct {
	Pkg, Arch string
	Output    string
	Err       error
}

func (e *GoBuildError) Error() string {
	return fmt.Sprintf("go build %s for linux/%s: %v\n%s", e.Pkg, e.Arch, e.Err, e.Output)
}

func (e *GoBuildError) Unwrap() error { return e.Err }

// BinaryError reports a host binary unfit for an image: not an ELF file,
// another architecture, or dynamically linked (a FROM scratch image has
// no loader or libc).
type BinaryError struct {
	Path, Reason string
}

func (e *BinaryError) Error() string { return fmt.Sprintf("binary %s: %s", e.Path, e.Reason) }

// GoBuild compiles pkg (relative to root, e.g. ./operator/cmd/operator) into
// out as a static linux/arch binary that does not depend on where or when
// it was built: CGO off, -trimpath, no VCS stamping (the revision is in
// ldflags and the annotations), an empty build ID.
func GoBuild(root, pkg, arch, ldflags, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", strings.TrimSpace(ldflags + " -buildid="), "-o", out, pkg}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = goBuildEnv(os.Environ(), root, arch)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return &GoBuildError{Pkg: pkg, Arch: arch, Output: buf.String(), Err: err}
	}
	return CheckBinary(out, arch)
}

// goBuildEnv sets the target and keeps the caller's caches. GOWORK points
// at root's go.work when there is one: the tool itself is built with
// GOWORK=off, and that must not leak into the project's build.
func goBuildEnv(env []string, root, arch string) []string {
	var kept []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "GOOS", "GOARCH", "CGO_ENABLED", "GOWORK", "GOFLAGS", "GOARM64", "GOAMD64":
			continue
		}
		kept = append(kept, e)
	}
	kept = append(kept, "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	if _, err := os.Stat(filepath.Join(root, "go.work")); err == nil {
		kept = append(kept, "GOWORK="+filepath.Join(root, "go.work"))
	} else {
		kept = append(kept, "GOWORK=off")
	}
	return kept
}

// elfMachine maps GOARCH to the ELF machine it runs on.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// CheckBinary checks that path is a static linux ELF executable for arch.
func CheckBinary(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return &BinaryError{Path: path, Reason: "not an ELF executable: " + err.Error()}
	}
	defer f.Close()
	if want, ok := elfMachine[arch]; !ok || f.Machine != want {
		return &BinaryError{Path: path, Reason: fmt.Sprintf("built for %s, want linux/%s", f.Machine, arch)}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return &BinaryError{Path: path, Reason: "dynamically linked (has an ELF interpreter); a scratch image needs a static binary"}
		}
	}
	return nil
}
