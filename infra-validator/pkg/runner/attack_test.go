package runner_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
)

// marker is a word no other process on the machine has in its command line.
func marker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "sluice-attack-" + hex.EncodeToString(b)
}

// applyWithProvisioner plans and applies (local state) a terraform_data
// whose local-exec runs command with bash, and returns the apply's error.
func applyWithProvisioner(t *testing.T, local *runner.Local, command string) error {
	t.Helper()
	dir := stack(t, fmt.Sprintf(`terraform {
  backend "local" {}
}
resource "terraform_data" "queue" {
  input = "q"
  provisioner "local-exec" {
    interpreter = ["/bin/bash", "-c"]
    command     = %q
  }
}
`, command))
	ctx := context.Background()
	res, err := terraform.Plan(ctx, terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: local}, Dir: dir, Backend: terraform.BackendOwn})
	require.NoError(t, err)
	_, err = terraform.Apply(ctx, terraform.ApplyOptions{
		ExecOptions: terraform.ExecOptions{Runner: local},
		Dir:         dir, PlanFile: res.PlanFile, PlanFileSHA256: res.Report.PlanFileSHA256, Backend: terraform.BackendOwn,
	})
	return err
}

// TestLocal_aProvisionersBackgroundProcessDiesWithTheRun: a provisioner
// starts a process in a session of its own (setsid, out of the run's
// process group) and waits until it runs; once the apply returned, the
// process is gone, because the run had a PID namespace of its own.
func TestLocal_aProvisionersBackgroundProcessDiesWithTheRun(t *testing.T) {
	local := &runner.Local{}
	sb, err := local.Check()
	require.NoError(t, err)
	require.Equal(t, runner.ContainPIDNamespace, sb.Processes, "this machine allows PID namespaces; a weaker containment is a regression")
	word := marker(t)
	err = applyWithProvisioner(t, local, fmt.Sprintf(
		`setsid bash -c ': %s; touch started; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & while [ ! -f started ]; do sleep 0.05; done; echo background started`, word))
	require.NoError(t, err)
	require.Empty(t, tfstatetest.ProcessesWith(t, word), "a process the run started outlived it")
}

// TestLocal_UDPFromARunFails: a provisioner sends its environment (the
// state credential would be in it) over UDP to a listener on this
// machine; the send is refused and nothing arrives.
func TestLocal_UDPFromARunFails(t *testing.T) {
	sb := runner.Probe()
	t.Log(sb)
	if sb.UDP == runner.UDPOpen {
		t.Skip("this kernel can confine UDP neither by Landlock nor by seccomp")
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer conn.Close()
	port := conn.LocalAddr().(*net.UDPAddr).Port

	err = applyWithProvisioner(t, &runner.Local{}, fmt.Sprintf(`env > /dev/udp/127.0.0.1/%d && echo SENT-OVER-UDP-$((40+2)); exit 3`, port))
	var runErr *terraform.RunError
	require.ErrorAs(t, err, &runErr, "the provisioner fails on purpose, to show what it saw")
	t.Log(runErr.Stderr)
	require.NotContains(t, runErr.Stderr, "SENT-OVER-UDP-42")
	require.Contains(t, strings.Join(strings.Fields(runErr.Stderr), " "), "Permission denied")
	require.Zero(t, queued(t, conn), "a datagram of the run arrived")
}

// queued returns the size of the datagram waiting on conn, 0 when none:
// a loopback datagram is queued when its sendto returns, so after the run
// anything sent is there already.
func queued(t *testing.T, conn *net.UDPConn) int {
	t.Helper()
	raw, err := conn.SyscallConn()
	require.NoError(t, err)
	n := 0
	require.NoError(t, raw.Read(func(fd uintptr) bool {
		buf := make([]byte, 64<<10)
		got, _, rerr := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		if rerr == nil {
			n = got
		}
		return true // never wait
	}))
	return n
}

// TestLocal_aRunReadsNoSystemFileBeyondWhatTerraformNeeds: files in a
// folder of /usr terraform does not need and in /etc/ssl/private cannot be
// read by a provisioner.
func TestLocal_aRunReadsNoSystemFileBeyondWhatTerraformNeeds(t *testing.T) {
	if runner.Probe().LandlockABI == 0 {
		t.Skip("no Landlock")
	}
	word := marker(t)
	var files []string
	for _, parent := range []string{"/usr/share", "/etc/ssl/private"} {
		dir, err := os.MkdirTemp(parent, "sluice-runner-test-")
		if err != nil {
			t.Logf("cannot plant a file under %s: %v", parent, err)
			continue
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		f := filepath.Join(dir, "key.pem")
		require.NoError(t, os.WriteFile(f, []byte(word), 0o644))
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Skip("this user cannot write under /usr/share or /etc/ssl/private")
	}
	cmd := ""
	for _, f := range files {
		cmd += fmt.Sprintf("cat %s; ", f)
	}
	err := applyWithProvisioner(t, &runner.Local{}, cmd+"exit 3")
	var runErr *terraform.RunError
	require.ErrorAs(t, err, &runErr)
	t.Log(runErr.Stderr)
	require.NotContains(t, runErr.Stderr, word, "a planted file was read")
	// terraform wraps its diagnostics' lines.
	flat := strings.Join(strings.Fields(runErr.Stderr), " ")
	require.Equal(t, len(files), strings.Count(flat, "Permission denied"), "each read is refused")
}

// TestLocal_aRefusedNamespaceFallsBackAndSaysSo: a child that cannot set
// up its namespaces (here: a command that always fails) makes Local fall
// back to the process group, and Check reports it as a gap.
func TestLocal_aRefusedNamespaceFallsBackAndSaysSo(t *testing.T) {
	local := &runner.Local{Command: []string{"/bin/false"}}
	sb, err := local.Check()
	require.NoError(t, err)
	require.Equal(t, runner.ContainProcessGroup, sb.Processes)
	require.Contains(t, strings.Join(sb.Gaps(), "\n"), "setsid")
}
