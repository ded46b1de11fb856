package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBinaryAssetsDir_missingBinariesSayToRunMakeEnvtest(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := BinaryAssetsDir()
	if !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), "make envtest") {
		t.Fatalf("err = %v, want one that says to run make envtest", err)
	}
	if _, err := Start(Options{}); err == nil || !strings.Contains(err.Error(), "make envtest") {
		t.Fatalf("Start err = %v, want one that says to run make envtest", err)
	}
}

func TestBinaryAssetsDir_findsTheBuiltFolderFromInsideAModule(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin", "k8s", KubernetesVersion+"-"+goosArch())
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "go.work"), []byte("go 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(root, "operator", "internal", "controller")
	if err := os.MkdirAll(module, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Chdir(module)
	got, err := BinaryAssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	if got != bin {
		t.Fatalf("found %s, want %s", got, bin)
	}
}

func TestArgoCDCRDDir_isTheModulesManifests(t *testing.T) {
	dir, err := ArgoCDCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "application-crd.yaml")); err != nil {
		t.Fatal(err)
	}
}
