package testenv

import (
	"context"
	"errors"
	"fmt"
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

func TestStart_aMissingCRDPathFailsBeforeAnythingStarts(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-crds")
	_, err := Start(Options{CRDDirectoryPaths: []string{missing}})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Start err = %v, want one that names the missing path %s", err, missing)
	}
}

func TestSuite_missingBinariesSayToRunMakeEnvtestAndSetupNeverRuns(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	setups := 0
	s := &Suite{Lazy: true, Setup: func(*Env) error { setups++; return nil }}
	for range 2 {
		if _, err := s.start(); err == nil || !strings.Contains(err.Error(), "make envtest") {
			t.Fatalf("start err = %v, want one that says to run make envtest", err)
		}
	}
	if setups != 0 {
		t.Fatalf("Setup ran %d times without a control plane", setups)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stop without a control plane: %v", err)
	}
}

func TestEnv_cleanupsRunLastFirstAndOnce(t *testing.T) {
	e := &Env{}
	var order []int
	for i := range 3 {
		e.Cleanup(func() { order = append(order, i) })
	}
	e.runCleanups()
	e.runCleanups()
	if fmt.Sprint(order) != "[2 1 0]" {
		t.Fatalf("cleanups ran in order %v, want [2 1 0] once", order)
	}
}

func TestGo_stopCancelsAndWaitsForTheRunnable(t *testing.T) {
	returned := make(chan struct{})
	boom := errors.New("stopped with an error")
	run := Go(t, RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		close(returned)
		return boom
	}))
	if err := run.Stop(); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want the Runnable's error", err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Stop returned before the Runnable did")
	}
	if err := run.Stop(); !errors.Is(err, boom) {
		t.Fatalf("a second Stop = %v, want the same error", err)
	}
}
