package argocdtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	// Linked so that the build information names the Argo CD version this
	// build depends on (CRDPaths reads it).
	_ "github.com/argoproj/argo-cd/v2/pkg/apis/application"
)

// Module is the Go module that ships the Argo CD CRD manifests.
const Module = "github.com/argoproj/argo-cd/v2"

// ErrNoCRDs says the Argo CD module, and so its CRD manifests, could not be
// found.
var ErrNoCRDs = errors.New("argo CD CRDs not found: run `go mod download " + Module + "` in the operator module")

// CRDPaths returns the Application and AppProject CRD manifests of the Argo
// CD module this build depends on (in the module cache), for
// testenv.Options.CRDDirectoryPaths of the suites and control planes that
// run Argo CD or keep its Applications. Only the operator depends on Argo
// CD, so only it knows where they are.
func CRDPaths() ([]string, error) {
	dir, err := crdDir()
	if err != nil {
		return nil, err
	}
	// kustomization.yaml sits beside the CRDs; only the CRD files are wanted.
	return []string{filepath.Join(dir, "application-crd.yaml"), filepath.Join(dir, "appproject-crd.yaml")}, nil
}

// crdDir returns the manifests/crds folder of the Argo CD module: at the
// version in the build information when the module cache holds it,
// otherwise where `go list -m` finds the module.
func crdDir() (string, error) {
	var dir string
	if version := moduleVersion(); version != "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			dir = filepath.Join(strings.TrimSpace(string(out)), Module+"@"+version)
		}
	}
	if dir == "" || !isDir(filepath.Join(dir, "manifests", "crds")) {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", Module).Output()
		if err != nil {
			return "", fmt.Errorf("%w (go list -m %s: %v)", ErrNoCRDs, Module, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	crds := filepath.Join(dir, "manifests", "crds")
	if !isDir(crds) {
		return "", fmt.Errorf("%w in %s", ErrNoCRDs, crds)
	}
	return crds, nil
}

// moduleVersion is the Argo CD version in the build information ("" when
// it names none).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == Module {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
