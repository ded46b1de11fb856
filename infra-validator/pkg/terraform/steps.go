package terraform

import (
	"strings"
	"sync"
	"time"
)

// Step is one timed step of a terraform run: terraform's own commands
// ("init", "workspace", "plan", "show", "apply", "state pull") and, in a
// runner, its own work ("unpack", "sandbox", "version", "handoff": the
// child's start, the job's way in and the result's way out).
type Step struct {
	Name string        `json:"name"`
	Took time.Duration `json:"took"`
}

// Steps records the steps of a run in order; set ExecOptions.Steps to
// have a run (here or in a runner) fill it. The zero value is ready; a nil
// *Steps records nothing.
type Steps struct {
	mu   sync.Mutex
	list []Step
}

// Add records one step.
func (s *Steps) Add(name string, took time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.list = append(s.list, Step{Name: name, Took: took})
	s.mu.Unlock()
}

// Since records the step that started at t0 and ends now.
func (s *Steps) Since(name string, t0 time.Time) { s.Add(name, time.Since(t0)) }

// List returns the steps recorded so far.
func (s *Steps) List() []Step {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Step(nil), s.list...)
}

// StepsString writes steps as "init 294ms, plan 524ms, …" (for logs).
func StepsString(steps []Step) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.Name + " " + s.Took.Round(time.Millisecond).String())
	}
	return b.String()
}
