//go:build linux

package runner

import (
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// systemDirs are read (and executed) by terraform, its providers and the
// shell a provisioner runs in: programs, their libraries, time zones and
// the CA certificates. Nothing else of /usr, /etc or /etc/ssl (its
// private/ folder above all) is readable.
var systemDirs = []string{
	"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libexec",
	"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/alternatives",
	"/usr/share/zoneinfo",
	"/etc/ssl/certs", "/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted",
	"/usr/share/ca-certificates", "/usr/local/share/ca-certificates",
}

// systemFiles are the few files of /etc the loader, name resolution and
// TLS need.
var systemFiles = []string{
	"/etc/ld.so.cache", "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols", "/etc/localtime", "/etc/ssl/cert.pem", "/etc/pki/tls/cert.pem",
	"/dev/urandom", "/dev/random",
}

// confine restricts this process and every child it starts: read-only
// access to the system folders and files above, the terraform binary,
// the plugin cache and readOnly; read-write access to work and /dev/null
// only; TCP connect to ports only (ABI 4+); no signals or abstract
// sockets to processes outside (ABI 6+); UDP to the resolver's port only
// (ABI 10+), or, below that, no UDP at all (a seccomp filter). It reports
// what the kernel enforced.
func confine(work, terraformPath, pluginCache string, readOnly []string, ports []uint16) (Sandbox, error) {
	sb, err := landlockConfine(work, terraformPath, pluginCache, readOnly, ports)
	if err != nil {
		return Sandbox{}, err
	}
	if err := restrictSockets(sb.UDP == UDPResolverOnly); err != nil {
		if sb.UDP != UDPResolverOnly {
			sb.UDP = UDPOpen
		}
		sb.Note = joinNote(sb.Note, "seccomp: "+err.Error())
	}
	return sb, nil
}

// landlockConfine applies the Landlock rules of confine.
func landlockConfine(work, terraformPath, pluginCache string, readOnly []string, ports []uint16) (Sandbox, error) {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return Sandbox{UDP: UDPClosed, Note: fmt.Sprintf("the kernel has no Landlock (%v): files and network are not confined", err)}, nil
	}
	rules := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.ROFiles(systemFiles...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null"),
		landlock.RWDirs(work).WithRefer(),
	}
	if terraformPath != "" {
		rules = append(rules, landlock.ROFiles(terraformPath))
	}
	if pluginCache != "" {
		rules = append(rules, landlock.RODirs(pluginCache).IgnoreIfMissing())
	}
	for _, p := range readOnly {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			rules = append(rules, landlock.RODirs(p))
		default:
			rules = append(rules, landlock.ROFiles(p))
		}
	}
	for _, p := range ports {
		rules = append(rules, landlock.ConnectTCP(p))
	}
	// DNS over UDP (Landlock restricts UDP from ABI 10; below, the
	// seccomp filter closes UDP altogether).
	rules = append(rules, landlock.ConnectSendUDP(53), landlock.BindUDP(0))
	if err := landlock.V11.BestEffort().Restrict(rules...); err != nil {
		return Sandbox{}, fmt.Errorf("landlock: %w", err)
	}
	sb := Sandbox{LandlockABI: abi, Network: abi >= 4, UDP: UDPClosed}
	if abi >= landlockUDPABI {
		sb.UDP = UDPResolverOnly
	}
	return sb, nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
