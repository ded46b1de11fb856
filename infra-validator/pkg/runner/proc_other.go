//go:build !linux

package runner

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

func terminate(cmd *exec.Cmd, hard bool) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func killGroup(*exec.Cmd) {}

func probe() Sandbox {
	return Sandbox{Note: "Landlock is Linux only: files and network are not confined"}
}
