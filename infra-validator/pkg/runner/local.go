package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/kit/text"
)

// Local runs each job in a sandboxed child process of this one (see the
// package documentation).
type Local struct {
	// Command starts the child; ChildMain's flags are appended. nil means
	// this binary again with ChildArg (its main must call MaybeRunChild).
	Command []string
	// TerraformPath is the terraform binary; "" looks it up in PATH.
	TerraformPath string
	// PluginCacheDir is the provider cache, readable by the run
	// (TF_PLUGIN_CACHE_DIR); "" means none.
	PluginCacheDir string
	// WorkDir holds the runs' working folders; "" means the system's
	// temporary folder.
	WorkDir string
	// ReadOnly are further paths a run may read (a CLI configuration file,
	// a provider mirror).
	ReadOnly []string
	// AllowPorts are TCP ports every run may connect to besides the state
	// server's (provider endpoints).
	AllowPorts []uint16
	// Log gets one line per run at V(1) and the sandbox in use at start.
	Log logr.Logger

	// Spare keeps one child started ahead of the next run, waiting for
	// its job: a run then skips starting a child (a re-exec of a large
	// binary) and terraform's version check, which the waiting child does
	// meanwhile. Each child still runs one job only, and confines itself
	// once it has read it. It costs one idle process; Close stops it.
	Spare bool

	// started is called with the child's process id once it runs (tests).
	started func(pid int)

	mu     sync.Mutex
	spare  *child
	closed bool
	// contain is how children are started now; "" until the first start
	// or Check, then only ever weaker (see fallBack).
	contain    Containment
	decideOnce sync.Once
}

var _ terraform.Runner = (*Local)(nil)

// SetStarted registers f to be called with each child's process id right
// after it starts. For tests that kill a runner mid-run.
func (l *Local) SetStarted(f func(pid int)) { l.started = f }

// Check resolves the terraform binary and probes the sandbox once, so a
// missing binary or Landlock shows at start: the returned Sandbox says
// what runs will be confined by (Sandbox.Gaps what they will not). It
// starts `terraform version` to learn whether children can have a PID
// namespace of their own. With Spare, it also starts the first spare
// child.
func (l *Local) Check() (Sandbox, error) {
	tf, err := l.terraform()
	if err != nil {
		return Sandbox{}, err
	}
	argv, err := l.argv()
	if err != nil {
		return Sandbox{}, err
	}
	sb := Probe()
	sb.Processes = l.decided(argv)
	if l.Spare {
		go l.refill(tf)
	}
	return sb, nil
}

// decideContainment starts the runner child in probe mode with each
// containment, the strongest first, and keeps the first that works: the
// kernel allows its namespaces and the child can mount their /proc.
func (l *Local) decideContainment(argv []string) Containment {
	for {
		m := l.containment()
		if m == ContainProcessGroup {
			return m
		}
		cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], "--probe")...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		var stderr limitedBuffer
		stderr.max = 4 << 10
		cmd.Stderr = &stderr
		setContainment(cmd, m)
		err := cmd.Run()
		if err == nil {
			return m
		}
		if stderr.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		l.fallBack(m, err)
	}
}

// decided returns the containment of the next child, probing once first.
func (l *Local) decided(argv []string) Containment {
	l.mu.Lock()
	undecided := l.contain == ""
	l.mu.Unlock()
	if undecided {
		l.decideOnce.Do(func() { l.decideContainment(argv) })
	}
	return l.containment()
}

// containment is how the next child starts.
func (l *Local) containment() Containment {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.contain == "" {
		l.contain = containments[0]
	}
	return l.contain
}

// fallBack moves from m, which the kernel refused with err, to the next
// weaker containment, and says so.
func (l *Local) fallBack(m Containment, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.contain != m {
		return // another start fell back already
	}
	i := slices.Index(containments, m)
	l.contain = containments[i+1]
	level := "Runs are contained by the next best"
	if l.contain == ContainProcessGroup {
		level = "WARNING: runs are contained by their process group only; a process that leaves it (setsid) can outlive its run"
	}
	l.Log.Info("The kernel refused a terraform run's namespace; "+level, "refused", string(m), "using", string(l.contain), "reason", err.Error())
}

func (l *Local) terraform() (string, error) {
	p := l.TerraformPath
	if p == "" {
		p = "terraform"
	}
	abs, err := exec.LookPath(p)
	if err != nil {
		return "", fmt.Errorf("terraform runner: terraform binary: %w", err)
	}
	if abs, err = filepath.Abs(abs); err != nil {
		return "", err
	}
	// Landlock rules name the file itself, not a link to it.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return abs, nil
}

// RunPlan implements terraform.Runner.
func (l *Local) RunPlan(ctx context.Context, opts terraform.PlanOptions) ([]byte, []byte, error) {
	return runPlan(ctx, l, opts)
}

// RunApply implements terraform.Runner.
func (l *Local) RunApply(ctx context.Context, opts terraform.ApplyOptions) (terraform.ApplyResult, error) {
	return runApply(ctx, l, opts)
}

// Run runs one job in a new child and returns its Result; a failed run
// is returned as the error terraform.Plan or Apply would give. A child
// that dies without a Result is an error wrapping terraform.ErrRunnerLost.
func (l *Local) Run(ctx context.Context, job *Job) (*Result, error) {
	res, err := l.run(ctx, job)
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return res, asError(res.Error, job.secrets())
	}
	return res, nil
}

// run hands the job to a child (the spare, or a new one) and reads its
// Result (failed or not).
func (l *Local) run(ctx context.Context, job *Job) (*Result, error) {
	tf, err := l.terraform()
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("terraform runner: %w", err)
	}
	// The run's state credential ends with the run, whatever its outcome:
	// nothing it left (nothing should be left) can use it afterwards.
	defer l.endRun(job)
	c, err := l.take(tf)
	if err != nil {
		return nil, err
	}
	defer c.remove()
	if l.Spare {
		// The next spare starts once this run is over, not beside it:
		// on a busy machine its start would slow this run down.
		defer func() { go l.refill(tf) }()
	}
	if l.started != nil {
		l.started(c.cmd.Process.Pid)
	}
	start := time.Now()
	go func() {
		// A child that died before reading all of it runs nothing: its
		// decode fails. Its death is reported below.
		_, _ = c.stdin.Write(body)
		_ = c.stdin.Close()
	}()
	var waitErr error
	select {
	case <-c.exited:
		waitErr = c.waitErr
	case <-ctx.Done():
		// Stop gently (terraform releases its lock and saves its state),
		// then for good.
		terminate(c.cmd, false)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			terminate(c.cmd, true)
			<-c.exited
		}
		waitErr = c.waitErr
	}
	// In a PID namespace the child's end took every process of the run;
	// otherwise this kills what stayed in its process group.
	killGroup(c.cmd)
	var res Result
	if derr := json.Unmarshal(c.stdout.Bytes(), &res); derr != nil || c.stdout.Len() == 0 {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", terraform.ErrRunnerLost, ctx.Err())
		}
		msg := strings.TrimSpace(terraform.Redact(c.stderr.String(), job.secrets()))
		return nil, fmt.Errorf("%w: the runner child ended (%v) without a result%s", terraform.ErrRunnerLost, waitErr, suffix(msg))
	}
	res.Sandbox.Processes = c.contain
	l.Log.V(1).Info("Terraform run finished", "op", job.Op, "duration", time.Since(start).Round(time.Millisecond).String(), "sandbox", res.Sandbox.String(), "steps", terraform.StepsString(res.Steps))
	return &res, nil
}

// child is a started runner child waiting for its job on stdin.
type child struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *limitedBuffer
	work, tf       string
	contain        Containment
	exited         chan struct{} // closed once cmd.Wait returned
	waitErr        error
}

// alive reports whether the child still runs.
func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// remove stops what is left of the child and removes its folder.
func (c *child) remove() {
	killGroup(c.cmd)
	_ = c.stdin.Close()
	<-c.exited
	_ = os.RemoveAll(c.work)
}

// take returns the spare child when it still waits and runs the same
// terraform, otherwise a new child.
func (l *Local) take(tf string) (*child, error) {
	l.mu.Lock()
	c := l.spare
	l.spare = nil
	l.mu.Unlock()
	if c != nil && c.alive() && c.tf == tf {
		return c, nil
	}
	if c != nil {
		c.remove()
	}
	return l.start(tf)
}

// refill starts the next spare child unless one waits already.
func (l *Local) refill(tf string) {
	c, err := l.start(tf)
	if err != nil {
		l.Log.V(1).Info("Starting a spare terraform runner failed; the next run starts its own", "error", err.Error())
		return
	}
	l.mu.Lock()
	keep := l.spare == nil && !l.closed
	if keep {
		l.spare = c
	}
	l.mu.Unlock()
	if !keep {
		c.remove()
	}
}

// Close stops the spare child, if any, and keeps new ones from being
// started; runs still work, each in a child of its own.
func (l *Local) Close() {
	l.mu.Lock()
	c := l.spare
	l.spare, l.closed = nil, true
	l.mu.Unlock()
	if c != nil {
		c.remove()
	}
}

// start starts a child in a working folder of its own; it waits for its
// job on stdin.
func (l *Local) start(tf string) (_ *child, err error) {
	parent := l.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	work, err := os.MkdirTemp(parent, "sluice-run-")
	if err != nil {
		return nil, fmt.Errorf("terraform runner: working folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(work)
		}
	}()
	for _, d := range []string{"home", "tmp"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o700); err != nil {
			return nil, fmt.Errorf("terraform runner: working folder: %w", err)
		}
	}

	argv, err := l.argv()
	if err != nil {
		return nil, err
	}
	l.decided(argv)
	args := append(argv[1:len(argv):len(argv)], "--work", work, "--terraform", tf)
	if l.PluginCacheDir != "" {
		args = append(args, "--plugin-cache", l.PluginCacheDir)
	}
	for _, p := range l.ReadOnly {
		args = append(args, "--ro", p)
	}
	if len(l.AllowPorts) > 0 {
		ps := make([]string, 0, len(l.AllowPorts))
		for _, p := range l.AllowPorts {
			ps = append(ps, strconv.Itoa(int(p)))
		}
		args = append(args, "--ports", strings.Join(ps, ","))
	}
	env := l.env(work)
	for {
		m := l.containment()
		c, err := startChild(argv[0], args, work, env, tf, m)
		if err == nil || m == ContainProcessGroup || !namespaceRefused(err) {
			return c, err
		}
		l.fallBack(m, err)
	}
}

// argv is the command that starts a child, before its flags.
func (l *Local) argv() ([]string, error) {
	if len(l.Command) > 0 {
		return l.Command, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("terraform runner: this binary: %w", err)
	}
	return []string{self, ChildArg}, nil
}

// startChild starts argv0 with args in work, contained as m says.
func startChild(argv0 string, args []string, work string, env []string, tf string, m Containment) (*child, error) {
	cmd := exec.Command(argv0, args...)
	cmd.Dir = work
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("terraform runner: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, stdout: &limitedBuffer{max: MaxJobBytes}, stderr: &limitedBuffer{max: 16 << 10},
		work: work, tf: tf, contain: m, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	setContainment(cmd, m)
	if err := cmd.Start(); err != nil {
		_ = stdin.Close()
		return nil, fmt.Errorf("terraform runner: start: %w", err)
	}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// endRun revokes the state credential job carries, if any (see
// tfstate.EndRun); a failure is logged: the credential then lasts until
// it expires.
func (l *Local) endRun(job *Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tfstate.EndRun(ctx, nil, job.Env); err != nil {
		l.Log.Info("Revoking the state credential of a finished terraform run failed; it opens the state until it expires", "error", err.Error())
	}
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + text.Truncate(msg, 300)
}

// env is the child's whole environment: built from nothing.
func (l *Local) env(work string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + filepath.Join(work, "home"),
		"TMPDIR=" + filepath.Join(work, "tmp"),
		"CHECKPOINT_DISABLE=1",
	}
	if l.PluginCacheDir != "" {
		env = append(env, "TF_PLUGIN_CACHE_DIR="+l.PluginCacheDir)
	}
	return env
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

var _ io.Writer = (*limitedBuffer)(nil)

// Probe reports what Landlock this kernel can enforce, without
// restricting anything.
func Probe() Sandbox { return probe() }

// errNoResult is returned by Remote when the runner's answer is unreadable.
var errNoResult = errors.New("no result")
