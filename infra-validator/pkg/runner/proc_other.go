//go:build !linux

package runner

import "os/exec"

// Containment is how the processes of a run are kept together.
type Containment string

// ContainProcessGroup is all there is off Linux: the child alone is killed.
const ContainProcessGroup Containment = "process-group"

var containments = []Containment{ContainProcessGroup}

func setContainment(*exec.Cmd, Containment) {}

func namespaceRefused(error) bool { return false }

func terminate(cmd *exec.Cmd, hard bool) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func killGroup(*exec.Cmd) {}

func probe() Sandbox {
	return Sandbox{Note: "Landlock is Linux only: files and network are not confined", UDP: UDPOpen}
}

func enterNamespaces() error { return nil }
