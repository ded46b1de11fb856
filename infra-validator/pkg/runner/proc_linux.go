//go:build linux

package runner

import (
	"fmt"
	"os/exec"
	"syscall"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// setProcessGroup puts the child in a process group of its own (so the
// whole run can be stopped) that dies with this process.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// terminate signals the child's process group: SIGTERM, or SIGKILL.
func terminate(cmd *exec.Cmd, hard bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

// killGroup kills what is left of the child's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func probe() Sandbox {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return Sandbox{Note: fmt.Sprintf("the kernel has no Landlock (%v): files and network are not confined", err)}
	}
	return Sandbox{LandlockABI: abi, Network: abi >= 4}
}
