//go:build !linux

package runner

// confine has nothing to enforce off Linux: the run has its own empty
// environment and folder only.
func confine(work, terraformPath, pluginCache string, readOnly []string, ports []uint16) (Sandbox, error) {
	return Sandbox{Note: "Landlock is Linux only: files and network are not confined", UDP: UDPOpen}, nil
}
