//go:build linux

package runner

import (
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// systemDirs are read (and executed) by terraform, its providers and the
// tools a provisioner may call; nothing in them is a credential.
var systemDirs = []string{"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/etc/alternatives"}

// systemFiles are the few files of /etc name resolution and TLS need.
var systemFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/localtime", "/dev/urandom", "/dev/random"}

// confine restricts this process and every child it starts: read-only
// access to the system folders, the terraform binary, the plugin cache and
// readOnly; read-write access to work and /dev/null only; TCP connect to
// ports only (ABI 4+); no signals or abstract sockets to processes outside
// (ABI 6+). It reports what the kernel enforced.
func confine(work, terraformPath, pluginCache string, readOnly []string, ports []uint16) (Sandbox, error) {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return Sandbox{Note: fmt.Sprintf("the kernel has no Landlock (%v): files and network are not confined", err)}, nil
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
	// DNS over UDP (Landlock restricts UDP from ABI 10).
	rules = append(rules, landlock.ConnectSendUDP(53), landlock.BindUDP(0))
	if err := landlock.V11.BestEffort().Restrict(rules...); err != nil {
		return Sandbox{}, fmt.Errorf("landlock: %w", err)
	}
	return Sandbox{LandlockABI: abi, Network: abi >= 4}, nil
}
