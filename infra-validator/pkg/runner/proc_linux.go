//go:build linux

package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Containment is how the processes of a run are kept together, so that
// none outlives it.
type Containment string

const (
	// ContainPIDNamespace: the child is the init of a PID namespace of its
	// own; when it ends, the kernel kills every process left in it
	// (a provisioner's `setsid` or double-forked ones included).
	ContainPIDNamespace Containment = "pid-namespace"
	// ContainUserPIDNamespace is ContainPIDNamespace inside a user
	// namespace of its own, for a runner without CAP_SYS_ADMIN.
	ContainUserPIDNamespace Containment = "user-pid-namespace"
	// ContainProcessGroup: the kernel allows neither; the child's process
	// group is killed at the end, which a process that left the group
	// (setsid, setpgid) survives.
	ContainProcessGroup Containment = "process-group"
)

// containments are tried in this order.
var containments = []Containment{ContainPIDNamespace, ContainUserPIDNamespace, ContainProcessGroup}

// setContainment makes cmd start as m says: in a process group of its own
// (so a stop reaches terraform too) that dies with this process, and, but
// for ContainProcessGroup, as the init of a new PID namespace.
func setContainment(cmd *exec.Cmd, m Containment) {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	switch m {
	case ContainPIDNamespace:
		// A mount namespace too, for a /proc of the PID namespace (see
		// enterNamespaces).
		attr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
	case ContainUserPIDNamespace:
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
		// Map this user to itself, so the run owns its folder as before.
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
}

// namespaceRefused reports whether starting a process failed because the
// kernel or this process's privileges refuse the namespace asked for.
func namespaceRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) || errors.Is(err, syscall.EACCES)
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

// killGroup kills what is left of the child's process group; in a PID
// namespace, the child's end has already taken every process of the run.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func probe() Sandbox {
	sb := Sandbox{UDP: probeUDP()}
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		sb.Note = fmt.Sprintf("the kernel has no Landlock (%v): files and network are not confined", err)
		return sb
	}
	sb.LandlockABI, sb.Network = abi, abi >= 4
	if abi >= landlockUDPABI {
		sb.UDP = UDPResolverOnly
	}
	return sb
}

// probeUDP says how UDP will be closed when Landlock cannot: by a seccomp
// filter where the kernel has seccomp and this architecture is known.
func probeUDP() UDPConfinement {
	if _, ok := auditArch(); !ok {
		return UDPOpen
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return UDPOpen
	}
	return UDPClosed
}

// enterNamespaces completes a child started as the init of a PID
// namespace: it mounts a /proc of that namespace in its own mount
// namespace (mounts kept private, so nothing reaches the host's). Without
// it /proc would still be the host's: the run could list the host's
// processes, and Landlock's all-threads call (libpsx), which lists
// /proc/<getpid()>/task, would look at the host's init and never finish.
// Outside a PID namespace it does nothing.
func enterNamespaces() error {
	if os.Getpid() != 1 {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc of the run's PID namespace: %w", err)
	}
	return nil
}
