package git_test

import (
	"context"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
)

const (
	testUser     = "syncer"
	testPassword = "s3cr3t-pa55word"
)

func newClient(t *testing.T, allowFile bool) *git.GoGit {
	t.Helper()
	c, err := git.NewGoGit(t.TempDir(), git.URLPolicy{AllowFile: allowFile}, nil)
	require.NoError(t, err)
	return c
}

func seed(t *testing.T, root string) *gittest.Repo {
	t.Helper()
	r := gittest.NewRepo(t, root, "infra")
	r.WriteFile("services/checkout/service.yaml", "name: checkout\n")
	r.WriteFile("services/checkout/values.yaml", "replicas: 1\n")
	r.WriteFile("services/cart/values.yaml", "replicas: 1\n")
	r.WriteFile("charts/service/Chart.yaml", "name: service\n")
	r.Commit("first", "alice@example.com")
	return r
}

func TestGoGit_httpBasicAuthFetchesOnlyWhenTheHeadMoved(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	srv := gittest.StartHTTP(t, root, testUser, testPassword)
	c := newClient(t, false)
	remote := git.Remote{Key: "ns/infra", URL: srv.RepoURL("infra"), Auth: &git.Auth{Username: testUser, Password: testPassword}}
	ctx := context.Background()

	head, err := c.Head(ctx, remote, "refs/heads/main")
	require.NoError(t, err)
	assert.Equal(t, repo.Head("main"), head)

	cache, err := c.Fetch(ctx, remote, "refs/heads/main", head)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(head))
	assert.EqualValues(t, 1, srv.UploadPacks())

	// The same head again: no pack negotiation at all.
	_, err = c.Fetch(ctx, remote, "refs/heads/main", head)
	require.NoError(t, err)
	assert.EqualValues(t, 1, srv.UploadPacks(), "an unchanged head must not be fetched")
	assert.EqualValues(t, 1, c.Stats().Fetches)

	repo.WriteFile("services/checkout/values.yaml", "replicas: 2\n")
	second := repo.Commit("scale", "bob@example.com")
	head2, err := c.Head(ctx, remote, "refs/heads/main")
	require.NoError(t, err)
	require.Equal(t, second, head2)
	cache, err = c.Fetch(ctx, remote, "refs/heads/main", head2)
	require.NoError(t, err)
	assert.EqualValues(t, 2, srv.UploadPacks())

	ok, err := cache.IsAncestor(head, head2)
	require.NoError(t, err)
	assert.True(t, ok)
	authors, err := cache.Authors(head2, head, 100)
	require.NoError(t, err)
	assert.Equal(t, []string{"bob@example.com"}, authors)

	// Only the checkout inputs changed.
	h1, err := cache.InputsHash(head, []string{"services/checkout", "charts/service"})
	require.NoError(t, err)
	h2, err := cache.InputsHash(head2, []string{"charts/service", "services/checkout"})
	require.NoError(t, err)
	assert.NotEqual(t, h1, h2)
	c1, err := cache.InputsHash(head, []string{"services/cart", "charts/service"})
	require.NoError(t, err)
	c2, err := cache.InputsHash(head2, []string{"services/cart", "charts/service"})
	require.NoError(t, err)
	assert.Equal(t, c1, c2)

	fsys, err := cache.FS(head2)
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "services/checkout/values.yaml")
	require.NoError(t, err)
	assert.Equal(t, "replicas: 2\n", string(data))
	dirs, err := cache.SubDirs(head2, "services")
	require.NoError(t, err)
	assert.Equal(t, []string{"cart", "checkout"}, dirs)
}

func TestGoGit_wrongCredentialsGiveAClearCredentialFreeError(t *testing.T) {
	root := t.TempDir()
	seed(t, root)
	srv := gittest.StartHTTP(t, root, testUser, testPassword)
	c := newClient(t, false)
	wrong := "not-the-" + testPassword
	for _, remote := range []git.Remote{
		{Key: "a", URL: srv.RepoURL("infra"), Auth: &git.Auth{Username: testUser, Password: wrong}},
		{Key: "b", URL: strings.Replace(srv.RepoURL("infra"), "http://", "http://"+testUser+":"+wrong+"@", 1)},
	} {
		_, err := c.Head(context.Background(), remote, "refs/heads/main")
		require.Error(t, err)
		assert.Equal(t, git.ReasonAuth, git.ReasonOf(err), err.Error())
		assert.NotContains(t, err.Error(), wrong)
		assert.Contains(t, err.Error(), "authentication failed")
	}
}

func TestGoGit_sshChecksTheKeyAndKnownHosts(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	srv := gittest.StartSSH(t, root)
	c := newClient(t, false)
	ctx := context.Background()

	good := git.Remote{Key: "ssh", URL: srv.RepoURL("infra"), Auth: &git.Auth{Identity: srv.ClientKeyPEM, KnownHosts: srv.KnownHosts()}}
	head, err := c.Head(ctx, good, "refs/heads/main")
	require.NoError(t, err)
	assert.Equal(t, repo.Head("main"), head)
	cache, err := c.Fetch(ctx, good, "refs/heads/main", head)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(head))

	other := gittest.StartSSH(t, root) // another host key
	unknown := good
	unknown.Key = "unknown"
	unknown.Auth = &git.Auth{Identity: srv.ClientKeyPEM, KnownHosts: other.KnownHosts()}
	_, err = c.Head(ctx, unknown, "refs/heads/main")
	require.Error(t, err)
	assert.Equal(t, git.ReasonHostKey, git.ReasonOf(err), err.Error())

	strangerPEM, _ := gittest.NewKeyPEM(t)
	badKey := good
	badKey.Key = "badkey"
	badKey.Auth = &git.Auth{Identity: strangerPEM, KnownHosts: srv.KnownHosts()}
	_, err = c.Head(ctx, badKey, "refs/heads/main")
	require.Error(t, err)
	assert.Equal(t, git.ReasonAuth, git.ReasonOf(err), err.Error())
	assert.NotContains(t, err.Error(), "PRIVATE KEY")

	noHosts := good
	noHosts.Auth = &git.Auth{Identity: srv.ClientKeyPEM}
	_, err = c.Head(ctx, noHosts, "refs/heads/main")
	assert.Equal(t, git.ReasonSecret, git.ReasonOf(err))

	// Only an explicit Secret key turns host key checking off.
	auth, err := git.AuthFromSecret(map[string][]byte{"identity": srv.ClientKeyPEM, "insecureIgnoreHostKey": []byte("true")})
	require.NoError(t, err)
	insecure := good
	insecure.Auth = auth
	_, err = c.Head(ctx, insecure, "refs/heads/main")
	require.NoError(t, err)
}

func TestGoGit_fileURLsNeedTheFlag(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	ctx := context.Background()
	remote := git.Remote{Key: "f", URL: repo.FileURL()}

	_, err := newClient(t, false).Head(ctx, remote, "refs/heads/main")
	assert.Equal(t, git.ReasonURL, git.ReasonOf(err))

	c := newClient(t, true)
	head, err := c.Head(ctx, remote, "refs/heads/main")
	require.NoError(t, err)
	_, err = c.Fetch(ctx, remote, "refs/heads/main", head)
	require.NoError(t, err)
}

func TestGoGit_deletedBranchAndUnreachableRemote(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	srv := gittest.StartHTTP(t, root, "", "")
	c := newClient(t, false)
	ctx := context.Background()

	repo.DeleteBranch("main")
	_, err := c.Head(ctx, git.Remote{Key: "d", URL: srv.RepoURL("infra")}, "refs/heads/main")
	assert.Equal(t, git.ReasonRefNotFound, git.ReasonOf(err), "%v", err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = c.Head(ctx, git.Remote{Key: "u", URL: "http://" + testUser + ":" + testPassword + "@" + addr + "/infra.git"}, "refs/heads/main")
	require.Error(t, err)
	assert.Equal(t, git.ReasonUnreachable, git.ReasonOf(err), "%v", err)
	assert.NotContains(t, err.Error(), testPassword)
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestURLPolicy_refusesLinkLocalAndMetadataAddresses(t *testing.T) {
	p := git.URLPolicy{Resolver: fakeResolver{
		"git.example.com": {netip.MustParseAddr("203.0.113.7")},
		"sneaky.example":  {netip.MustParseAddr("203.0.113.8"), netip.MustParseAddr("169.254.169.254")},
		"v6.example":      {netip.MustParseAddr("fe80::1")},
	}}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://git.example.com/org/infra.git", true},
		{"git@git.example.com:org/infra.git", true},
		{"ssh://git@git.example.com:2222/org/infra.git", true},
		{"https://169.254.169.254/latest/meta-data", false},
		{"http://[fe80::1]/x.git", false},
		{"http://[::ffff:169.254.1.1]/x.git", false},
		{"https://sneaky.example/x.git", false},
		{"https://v6.example/x.git", false},
		{"http://metadata.google.internal/x.git", false},
		{"http://100.100.100.200/x.git", false},
		{"file:///srv/git/x.git", false},
		{"ftp://git.example.com/x.git", false},
		{" https://git.example.com/x.git", false},
	} {
		_, err := p.Check(context.Background(), tc.url)
		if tc.ok {
			assert.NoError(t, err, tc.url)
		} else {
			assert.Error(t, err, tc.url)
		}
	}
}

func TestAuthFromSecret_neverEchoesValues(t *testing.T) {
	_, err := git.AuthFromSecret(map[string][]byte{"identity": []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nhunter2\n")})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
	_, err = git.AuthFromSecret(map[string][]byte{"insecureIgnoreHostKey": []byte("yes please")})
	require.Error(t, err)
	a, err := git.AuthFromSecret(map[string][]byte{"password": []byte("hunter2")})
	require.NoError(t, err)
	assert.NotContains(t, a.String(), "hunter2")
}

func FuzzURLPolicyCheck(f *testing.F) {
	for _, s := range []string{
		"https://user:pw@git.example.com/x.git", "git@host:org/x.git", "ssh://[fe80::1%25eth0]:22/x",
		"file:///tmp/x", "http://169.254.169.254/", "https://:@/", "://", "git@:", "http://[::1",
	} {
		f.Add(s)
	}
	p := git.URLPolicy{AllowFile: true, Resolver: fakeResolver{}}
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := p.Check(context.Background(), raw)
		if err != nil && strings.Contains(raw, "://u:topsecret@") {
			assert.NotContains(t, err.Error(), "topsecret")
		}
	})
}

func FuzzAuthFromSecret(f *testing.F) {
	f.Add("u", "p", "", "", "", "")
	f.Add("", "", "tok", "", "", "true")
	f.Add("", "", "", "-----BEGIN OPENSSH PRIVATE KEY-----\nsecretmaterial\n-----END OPENSSH PRIVATE KEY-----\n", "[h]:22 ssh-ed25519 AAAA", "maybe")
	f.Fuzz(func(t *testing.T, user, pass, token, identity, knownHosts, insecure string) {
		a, err := git.AuthFromSecret(map[string][]byte{
			"username": []byte(user), "password": []byte(pass), "bearerToken": []byte(token),
			"identity": []byte(identity), "known_hosts": []byte(knownHosts), "insecureIgnoreHostKey": []byte(insecure),
		})
		if err != nil {
			for _, secret := range []string{pass, token, identity} {
				if len(secret) > 8 && strings.Contains(err.Error(), secret) {
					t.Fatalf("error echoes a secret value: %v", err)
				}
			}
			return
		}
		if a != nil && a.InsecureIgnoreHostKey && strings.TrimSpace(insecure) != "true" {
			t.Fatalf("host key checking off without an explicit \"true\"")
		}
	})
}

func TestGoGit_tracksAnAnnotatedTagByItsCommit(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	commit := repo.Head("main")
	repo.Tag("v1.0.0", commit)
	srv := gittest.StartHTTP(t, root, "", "")
	c := newClient(t, false)
	remote := git.Remote{Key: "tag", URL: srv.RepoURL("infra")}
	head, err := c.Head(context.Background(), remote, "refs/tags/v1.0.0")
	require.NoError(t, err)
	assert.Equal(t, commit, head, "the peeled commit, not the tag object")
	cache, err := c.Fetch(context.Background(), remote, "refs/tags/v1.0.0", head)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(commit))
}

// TestGoGit_oneRefListPerSync shows a sync (Head, then the Fetch of the
// commit it found) asking the server for its ref list once, and a Fetch
// whose commit Head did not see (or with no Head before it) listing the
// refs itself, as before.
func TestGoGit_oneRefListPerSync(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	srv := gittest.StartHTTP(t, root, testUser, testPassword)
	c := newClient(t, false)
	remote := git.Remote{Key: "ns/infra", URL: srv.RepoURL("infra"), Auth: &git.Auth{Username: testUser, Password: testPassword}}
	ctx := context.Background()
	const main = "refs/heads/main"

	// First sync: one ref list, one pack negotiation.
	head, err := c.Head(ctx, remote, main)
	require.NoError(t, err)
	cache, err := c.Fetch(ctx, remote, main, head)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(head))
	assert.EqualValues(t, 1, srv.InfoRefs(), "ref lists of the first sync")
	assert.EqualValues(t, 1, srv.UploadPacks())

	// A new commit: again one ref list for its sync.
	repo.WriteFile("services/cart/values.yaml", "replicas: 2\n")
	second := repo.Commit("scale", "bob@example.com")
	head2, err := c.Head(ctx, remote, main)
	require.NoError(t, err)
	require.Equal(t, second, head2)
	cache, err = c.Fetch(ctx, remote, main, head2)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(second))
	assert.EqualValues(t, 2, srv.InfoRefs(), "ref lists after the second sync")
	assert.EqualValues(t, 2, srv.UploadPacks())

	// An idle poll lists once and fetches nothing.
	_, err = c.Head(ctx, remote, main)
	require.NoError(t, err)
	_, err = c.Fetch(ctx, remote, main, head2)
	require.NoError(t, err)
	assert.EqualValues(t, 3, srv.InfoRefs())
	assert.EqualValues(t, 2, srv.UploadPacks())

	// Head saw one commit, the Fetch asks for another (the branch moved
	// in between): the kept list is not used, the Fetch lists again.
	repo.WriteFile("services/cart/values.yaml", "replicas: 3\n")
	third := repo.Commit("scale again", "bob@example.com")
	_, err = c.Head(ctx, remote, main)
	require.NoError(t, err)
	repo.WriteFile("services/cart/values.yaml", "replicas: 4\n")
	fourth := repo.Commit("and again", "bob@example.com")
	cache, err = c.Fetch(ctx, remote, main, fourth)
	require.NoError(t, err)
	assert.True(t, cache.HasCommit(fourth))
	assert.True(t, cache.HasCommit(third))
	assert.EqualValues(t, 5, srv.InfoRefs(), "a Fetch of a commit Head did not see lists the refs itself")
}
