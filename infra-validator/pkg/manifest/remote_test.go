package manifest

import (
	"strings"
	"testing"
)

// FuzzParseRemoteBase: a kustomization entry from a pusher never makes
// the parser panic, and what it accepts is pinned, has no credentials or
// parameters, and a folder that stays inside its repository.
func FuzzParseRemoteBase(f *testing.F) {
	for _, s := range []string{
		"https://git.example/platform/bases.git//web?ref=0123456789abcdef0123456789abcdef01234567",
		"git::ssh://git@git.example/x.git//a/b?ref=0123456789abcdef0123456789abcdef01234567",
		"file:///srv/git/x.git?ref=main",
		"https://u:p@h/x//../y?ref=0123456789abcdef0123456789abcdef01234567&timeout=1",
		"github.com/org/repo//x?ref=v1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rb, err := ParseRemoteBase(s)
		if err != nil {
			return
		}
		if !fullCommit.MatchString(rb.Commit) || strings.Contains(rb.Repo, "?") {
			t.Fatalf("accepted %q as %+v", s, rb)
		}
		if rb.Dir == ".." || strings.HasPrefix(rb.Dir, "../") || strings.HasPrefix(rb.Dir, "/") {
			t.Fatalf("accepted a folder leaving the repository: %q → %+v", s, rb)
		}
		if !strings.HasPrefix(rb.Target(), rb.Root()) {
			t.Fatalf("target %s outside root %s", rb.Target(), rb.Root())
		}
	})
}
