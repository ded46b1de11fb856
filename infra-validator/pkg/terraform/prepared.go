package terraform

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// Prepared is a terraform binary made ready before its run is known:
// terraform-exec asks `terraform version` before the first command of
// every handle, and a Prepared handle asks it while its process waits for
// work. It runs terraform in the process's current folder, so it serves
// exactly one run of a process that changes into the stack folder before
// the run (the runner child); set it as ExecOptions.Prepared.
type Prepared struct {
	tf   *tfexec.Terraform
	done chan struct{}

	mu   sync.Mutex
	used bool
}

// Prepare starts asking execPath's version in the background and returns
// the handle at once. The version's outcome is kept by terraform-exec; a
// failure is asked again (and reported) by the first command.
func Prepare(ctx context.Context, execPath string) (*Prepared, error) {
	tf, err := tfexec.NewTerraform(".", execPath)
	if err != nil {
		return nil, fmt.Errorf("terraform: %w", err)
	}
	p := &Prepared{tf: tf, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_, _, _ = tf.Version(ctx, false)
	}()
	return p, nil
}

// Wait returns once the version has been asked.
func (p *Prepared) Wait() { <-p.done }

// take returns the handle for a run in dir, once: only when dir is the
// process's current folder (where the handle runs terraform); nil
// otherwise, and the caller makes a handle of its own.
func (p *Prepared) take(dir string) *tfexec.Terraform {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used || !sameDir(dir, ".") {
		return nil
	}
	p.used = true
	return p.tf
}

// sameDir reports whether a and b name the same folder.
func sameDir(a, b string) bool {
	sa, err := os.Stat(filepath.Clean(a))
	if err != nil {
		return false
	}
	sb, err := os.Stat(filepath.Clean(b))
	if err != nil {
		return false
	}
	return os.SameFile(sa, sb)
}
