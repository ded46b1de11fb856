//go:build linux

package runner

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data (little-endian: an argument's low 32
// bits come first, and socket(2) reads only those).
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16
	seccompArg1 = 24
	seccompArg2 = 32
)

// x32SyscallBit marks the x32 ABI's system calls on amd64, which the
// filter would otherwise not recognise.
const x32SyscallBit = 0x40000000

// socketTypeMask keeps the type of socket(2)'s second argument
// (SOCK_NONBLOCK and SOCK_CLOEXEC are flags above it).
const socketTypeMask = 0xf

// auditArch is this architecture's AUDIT_ARCH value, for the filter's
// first check (a 32-bit system call table would have other numbers).
func auditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	default:
		return 0, false
	}
}

// socketFilter is a seccomp program that lets a run make Unix sockets and
// TCP sockets (which Landlock limits by port) and, with udp, UDP sockets
// (which Landlock ABI 10+ limits to the resolver); every other socket
// (UDP without udp, ICMP, raw, packet, netlink, SCTP…) is refused with
// EACCES, as are io_uring (whose requests make sockets without socket(2))
// and system calls of another ABI (i386, x32).
func socketFilter(udp bool) ([]unix.SockFilter, error) {
	arch, ok := auditArch()
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	a := newAsm()
	a.op(bpf.LoadAbsolute{Off: seccompArch, Size: 4})
	a.jeq(arch, "", "deny")
	a.op(bpf.LoadAbsolute{Off: seccompNr, Size: 4})
	a.jge(x32SyscallBit, "deny", "")
	for _, nr := range []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER} {
		a.jeq(nr, "deny", "")
	}
	a.jeq(unix.SYS_SOCKET, "", "allow")

	a.op(bpf.LoadAbsolute{Off: seccompArg0, Size: 4})
	a.jeq(unix.AF_UNIX, "allow", "")
	a.jeq(unix.AF_INET, "inet", "")
	a.jeq(unix.AF_INET6, "inet", "deny")

	a.label("inet")
	a.op(bpf.LoadAbsolute{Off: seccompArg1, Size: 4})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: socketTypeMask})
	if udp {
		a.jeq(unix.SOCK_DGRAM, "udp", "")
	}
	a.jeq(unix.SOCK_STREAM, "", "deny")
	a.op(bpf.LoadAbsolute{Off: seccompArg2, Size: 4})
	a.jeq(0, "allow", "")
	a.jeq(unix.IPPROTO_TCP, "allow", "deny")
	if udp {
		a.label("udp")
		a.op(bpf.LoadAbsolute{Off: seccompArg2, Size: 4})
		a.jeq(0, "allow", "")
		a.jeq(unix.IPPROTO_UDP, "allow", "deny")
	}

	a.label("allow")
	a.op(bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	a.label("deny")
	a.op(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)})
	return a.assemble()
}

// restrictSockets installs socketFilter(udp) on every thread of this
// process (and so on everything it starts afterwards). It sets
// no_new_privs, which seccomp requires and Landlock set already.
func restrictSockets(udp bool) error {
	prog, err := socketFilter(udp)
	if err != nil {
		return err
	}
	// no_new_privs must be set on the thread that installs the filter;
	// TSYNC then carries both to every other thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("install the socket filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install the socket filter: thread %d could not take it", r)
	}
	return nil
}

// asm assembles a BPF program with named jump targets ("" is the next
// instruction).
type asm struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  map[int][2]string
}

func newAsm() *asm { return &asm{labels: map[string]int{}, jumps: map[int][2]string{}} }

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, i) }

func (a *asm) label(name string) { a.labels[name] = len(a.ins) }

// jeq jumps to yes when A == v, else to no.
func (a *asm) jeq(v uint32, yes, no string) { a.jump(bpf.JumpEqual, v, yes, no) }

// jge jumps to yes when A >= v, else to no.
func (a *asm) jge(v uint32, yes, no string) { a.jump(bpf.JumpGreaterOrEqual, v, yes, no) }

func (a *asm) jump(cond bpf.JumpTest, v uint32, yes, no string) {
	a.jumps[len(a.ins)] = [2]string{yes, no}
	a.op(bpf.JumpIf{Cond: cond, Val: v})
}

// assemble resolves the jumps (forward only, as BPF requires) and returns
// the program as the kernel takes it.
func (a *asm) assemble() ([]unix.SockFilter, error) {
	skip := func(at int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok || to <= at || to-at-1 > 255 {
			return 0, fmt.Errorf("bpf: bad jump from %d to %q", at, label)
		}
		return uint8(to - at - 1), nil
	}
	for at, j := range a.jumps {
		ji := a.ins[at].(bpf.JumpIf)
		var err, err2 error
		ji.SkipTrue, err = skip(at, j[0])
		ji.SkipFalse, err2 = skip(at, j[1])
		if err = errors.Join(err, err2); err != nil {
			return nil, err
		}
		a.ins[at] = ji
	}
	raw, err := bpf.Assemble(a.ins)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}
