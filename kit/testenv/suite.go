package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Suite is the control plane of one test binary: Main is its TestMain.
// By default the control plane starts before the tests run; with Lazy it
// starts at the first Env call, so a package whose other tests need none
// (token tests, fuzz tests, benchmarks) pays nothing for it.
type Suite struct {
	// Options tune Start.
	Options Options
	// Setup runs once, right after the control plane started: it assigns
	// the package's variables and starts what the tests share (servers,
	// users), registering their teardown with Env.Cleanup. An error stops
	// the suite.
	Setup func(*Env) error
	// Lazy starts the control plane at the first Env call instead of
	// before the tests.
	Lazy bool

	once sync.Once
	mu   sync.Mutex
	env  *Env
	err  error
}

// Main is TestMain for a package whose tests share one control plane
// (opts), set up by setup (nil for none). See Suite.Main.
func Main(m *testing.M, opts Options, setup func(*Env) error) {
	(&Suite{Options: opts, Setup: setup}).Main(m)
}

// Main starts the control plane (unless Lazy) and runs Setup, runs the
// tests, then runs the cleanups Setup registered (last first), stops the
// control plane and exits with the tests' code. When the start or Setup
// fails it prints why (for missing binaries: run `make envtest`) and exits
// 1 without running the tests.
func (s *Suite) Main(m *testing.M) {
	os.Exit(s.run(m))
}

func (s *Suite) run(m *testing.M) int {
	defer func() {
		if err := s.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}()
	if !s.Lazy {
		if _, err := s.start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// Env returns the running control plane, starting it (and running Setup)
// at the first call of a Lazy suite. A failed start fails tb, at every
// call.
func (s *Suite) Env(tb testing.TB) *Env {
	tb.Helper()
	e, err := s.start()
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func (s *Suite) start() (*Env, error) {
	s.once.Do(func() {
		e, err := Start(s.Options)
		if err == nil && s.Setup != nil {
			if err = s.Setup(e); err != nil {
				err = fmt.Errorf("set up the suite: %w", err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.env, s.err = e, err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env, s.err
}

func (s *Suite) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env.Stop()
}

// Cleanup registers f to run when the control plane stops, before it
// stops; the last registered runs first. Suite set-ups register the
// teardown of what they started here.
func (e *Env) Cleanup(f func()) {
	e.cleanupMu.Lock()
	defer e.cleanupMu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

// runCleanups runs the registered cleanups, last first.
func (e *Env) runCleanups() {
	e.cleanupMu.Lock()
	fs := e.cleanups
	e.cleanups = nil
	e.cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Runnable is what runs until its context ends: a controller-runtime
// manager, a syncer.
type Runnable interface {
	Start(ctx context.Context) error
}

// RunnableFunc makes a function a Runnable.
type RunnableFunc func(ctx context.Context) error

// Start calls f.
func (f RunnableFunc) Start(ctx context.Context) error { return f(ctx) }

// Running is a Runnable started in the background by Go.
type Running struct {
	// Context is the context the Runnable runs with; it ends at Stop.
	Context context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

// Go starts r in the background and stops it when tb ends (see Stop).
func Go(tb testing.TB, r Runnable) *Running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run := &Running{Context: ctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.err = r.Start(ctx)
	}()
	tb.Cleanup(func() { _ = run.Stop() })
	return run
}

// Stop cancels the run and waits until Start returned, so nothing of it
// is left running; it returns Start's error. It may be called more than
// once.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// FailOnError stops the run when tb ends and fails tb when Start returned
// an error; it returns r.
func (r *Running) FailOnError(tb testing.TB) *Running {
	tb.Cleanup(func() {
		if err := r.Stop(); err != nil {
			tb.Errorf("run stopped with an error: %v", err)
		}
	})
	return r
}

// Done is closed once Start returned.
func (r *Running) Done() <-chan struct{} { return r.done }
