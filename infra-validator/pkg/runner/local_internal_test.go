package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

func planIn(t *testing.T, l *Local) (pid int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "stack")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte("resource \"terraform_data\" \"x\" {\n  input = \"a\"\n}\n"), 0o644))
	l.SetStarted(func(p int) { pid = p })
	res, err := terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: l}, Dir: dir})
	require.NoError(t, err)
	require.Equal(t, 1, res.Report.Counts.Create)
	return pid
}

// TestLocal_aSpareChildRunsOneJobAndIsGoneAfterIt: the waiting child takes
// the next run; it ends with it (its folder removed) and the run after
// gets another child.
func TestLocal_aSpareChildRunsOneJobAndIsGoneAfterIt(t *testing.T) {
	l := &Local{Spare: true}
	defer l.Close()
	tf, err := l.terraform()
	require.NoError(t, err)
	l.refill(tf)
	spare := l.waiting()
	require.NotNil(t, spare)

	require.Equal(t, spare.cmd.Process.Pid, planIn(t, l), "the run used the spare")
	require.False(t, spare.alive())
	_, err = os.Stat(spare.work)
	require.ErrorIs(t, err, os.ErrNotExist, "its working folder is gone")

	require.NotEqual(t, spare.cmd.Process.Pid, planIn(t, l), "a child runs one job only")
}

// TestLocal_aDeadSpareIsReplaced: a spare that died while waiting is
// dropped; the run starts a child of its own.
func TestLocal_aDeadSpareIsReplaced(t *testing.T) {
	l := &Local{Spare: true}
	defer l.Close()
	tf, err := l.terraform()
	require.NoError(t, err)
	l.refill(tf)
	spare := l.waiting()
	require.NotNil(t, spare)
	require.NoError(t, syscall.Kill(spare.cmd.Process.Pid, syscall.SIGKILL))
	<-spare.exited

	require.NotEqual(t, spare.cmd.Process.Pid, planIn(t, l))
	_, err = os.Stat(spare.work)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestLocal_closeStopsTheSpare: Close ends the waiting child and no new
// one is kept; runs still work.
func TestLocal_closeStopsTheSpare(t *testing.T) {
	l := &Local{Spare: true}
	tf, err := l.terraform()
	require.NoError(t, err)
	l.refill(tf)
	spare := l.waiting()
	require.NotNil(t, spare)
	l.Close()
	require.False(t, spare.alive())
	planIn(t, l)
	l.refill(tf) // as the run's deferred refill does
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Nil(t, l.spare)
}

// TestLocal_aSpareChildIsConfinedOnceItHasItsJob: the spare was started
// while the caller held a token (a file and an environment variable); the
// stack it then runs cannot read either.
func TestLocal_aSpareChildIsConfinedOnceItHasItsJob(t *testing.T) {
	const value = "caller-token-5f0c1d2e3a4b5c6d7e8f9a0b1c2d3e4f"
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte(value), 0o600))
	t.Setenv("SLUICE_TEST_CALLER_TOKEN", value)
	l := &Local{Spare: true}
	defer l.Close()
	tf, err := l.terraform()
	require.NoError(t, err)

	for name, expr := range map[string]string{"the token file": `file("` + token + `")`, "its environment": `file("/proc/self/environ")`} {
		t.Run(name, func(t *testing.T) {
			l.refill(tf)
			spare := l.waiting()
			require.NotNil(t, spare)
			dir := filepath.Join(t.TempDir(), "stack")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte("output \"t\" {\n  value = tonumber("+expr+")\n}\n"), 0o644))
			var pid int
			l.SetStarted(func(p int) { pid = p })
			_, err := terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: l}, Dir: dir})
			require.Equal(t, spare.cmd.Process.Pid, pid, "the spare ran it")
			require.Error(t, err)
			var runErr *terraform.RunError
			require.ErrorAs(t, err, &runErr)
			require.Contains(t, fmt.Sprint(runErr.Details), "denied", "the read itself is refused")
			require.NotContains(t, err.Error()+fmt.Sprint(runErr.Details), value[:20])
		})
	}
}

// waiting is the spare child now waiting, if any.
func (l *Local) waiting() *child {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spare
}
