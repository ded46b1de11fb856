// Package giteatest runs a real Gitea for tests: one `gitea web` process
// on a free loopback port, with its SQLite database, repositories and logs
// in a private temporary folder, and the users, tokens, organisation,
// repository and collaborators a provider test needs. Gitea is built by
// `make gitea` (bin/gitea/<Version>/, see hack/gitea/build.sh); without
// it the tests skip, naming the target, except under CI, where they fail.
//
// What this Gitea lacks: no frontend assets (the API, git smart HTTP and
// webhooks do not need them), no SSH, no mail, no Actions.
package giteatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	gogit "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/sluice-gitops/sluice/kit/giteaini"
)

// Version is the Gitea the tests run (`make gitea` builds it).
const Version = "v1.27.3"

// ErrNotBuilt says the Gitea binary is missing.
var ErrNotBuilt = errors.New("gitea " + Version + " is not built: run `make gitea` at the repository root")

// Names of what Start creates.
const (
	// Org and Repo name the repository Start creates (empty, public, with
	// main as its default branch).
	Org  = "acme"
	Repo = "infra"
)

// User is a Gitea user with an API token of scope "all".
type User struct {
	Name, Password, Token string
}

// Forge is a running Gitea with its users and repository.
type Forge struct {
	// URL is the server's root ("http://127.0.0.1:<port>"), without a
	// trailing slash: the provider's and the status client's base URL.
	URL string
	// Admin is the site administrator.
	Admin User
	// Bot is the syncer's user: an admin collaborator of the repository
	// (it posts statuses and comments and asks for permissions, which
	// Gitea answers for any user only to repository admins).
	Bot User
	// Author writes and opens pull requests: a write collaborator.
	Author User
	// Approver reviews: a write collaborator.
	Approver User
	// Outsider is a user who is no collaborator (read access only, as to
	// any public repository).
	Outsider User

	dir string
	// path, when set, is the only PATH of Gitea and its git (StartWith).
	path string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Binary finds bin/gitea/<Version>/gitea above this package and returns it
// with the module folder holding Gitea's templates and locales.
func Binary() (bin, static string, err error) {
	_, file, _, _ := runtime.Caller(0)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, "bin", "gitea", Version)
		if fi, err := os.Stat(filepath.Join(candidate, "gitea")); err == nil && fi.Mode()&0o111 != 0 {
			data, err := os.ReadFile(filepath.Join(candidate, "static-root"))
			if err != nil {
				return "", "", fmt.Errorf("%w (no static-root next to the binary: %v)", ErrNotBuilt, err)
			}
			static = strings.TrimSpace(string(data))
			if _, err := os.Stat(filepath.Join(static, "options", "locale")); err != nil {
				return "", "", fmt.Errorf("%w (Gitea's module folder %s is gone from the module cache: %v)", ErrNotBuilt, static, err)
			}
			return filepath.Join(candidate, "gitea"), static, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil || filepath.Dir(dir) == dir {
			return "", "", ErrNotBuilt
		}
	}
}

// Options change how StartWith runs Gitea.
type Options struct {
	// Programs, when set, are the only programs Gitea and the git it runs
	// find by name: a private PATH of links to them, and an empty git
	// exec path, as in a FROM-scratch image holding just these
	// (PodPrograms). Programs run by absolute path (git's /bin/sh) are
	// still the machine's.
	Programs []string
}

// Start runs Gitea for the test and stops it, removing its folder, when
// the test ends. When Gitea is not built the test is skipped, or fails
// under CI (the CI environment variable set), where `make test` builds it.
func Start(t testing.TB) *Forge {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Forge {
	t.Helper()
	bin, static, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("Gitea needs git on PATH: %v", err)
	}
	dir, err := os.MkdirTemp("", "gitea-")
	if err != nil {
		t.Fatal(err)
	}
	f := &Forge{dir: dir, done: make(chan struct{}), log: filepath.Join(dir, "stdout.log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Gitea's log:\n%s", f.Logs())
		}
		f.stop()
	})
	if len(opts.Programs) > 0 {
		if err := f.onlyPrograms(opts.Programs); err != nil {
			t.Fatal(err)
		}
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	f.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := f.writeConfig(static, port); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := f.start(bin); err != nil {
		t.Fatalf("%v\n%s", err, f.Logs())
	}
	t.Logf("Gitea %s answers on %s after %s", Version, f.URL, time.Since(t0).Round(time.Millisecond))
	// The server created the database; the CLI writes to it beside the
	// server (SQLite in WAL mode). The first admin has no other way in.
	f.Admin = User{Name: "siteadmin", Password: "siteadmin-pw"}
	out, err := f.cli(bin, "admin", "user", "create", "--admin", "--username", f.Admin.Name, "--password", f.Admin.Password,
		"--email", "siteadmin@example.com", "--must-change-password=false")
	if err != nil {
		t.Fatalf("create Gitea's admin: %v\n%s", err, out)
	}
	if err := f.populate(); err != nil {
		t.Fatalf("set Gitea up: %v\n%s", err, f.Logs())
	}
	return f
}

// writeConfig writes app.ini (giteaini, as the e2e pod's): loopback
// only, webhooks allowed to loopback receivers (the syncer's receiver in
// the tests), the log in the private folder.
func (f *Forge) writeConfig(static string, port int) error {
	runUser := "root"
	if u, err := user.Current(); err == nil {
		runUser = u.Username
	}
	ini := giteaini.Config{AppName: "sluice-tests", RunUser: runUser, WorkPath: f.dir, HTTPAddr: "127.0.0.1", Port: port,
		RootURL: f.URL, Domain: "127.0.0.1", StaticRoot: static, AllowedHosts: "loopback",
		SecretKey:     "sluice-tests-not-secret-0123456789abcdef",
		InternalToken: "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJuYmYiOjE3MDAwMDAwMDB9.sluice-tests-internal-token-not-secret",
		AsRoot:        true, LogToFile: true}
	return os.WriteFile(filepath.Join(f.dir, "app.ini"), []byte(ini.String()), 0o600)
}

// env is the environment of Gitea and its CLI: git without the user's
// configuration or prompts.
func (f *Forge) env() []string {
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_GLOBAL="+filepath.Join(f.dir, "gitconfig"),
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+f.dir, "GITEA_WORK_DIR="+f.dir)
	if f.path != "" {
		// The last value of a key wins (os/exec).
		env = append(env, "PATH="+f.path, "GIT_EXEC_PATH="+filepath.Join(f.dir, "git-core"))
	}
	return env
}

// onlyPrograms makes a PATH of links to programs only, and an empty git
// exec path (git finds the programs it runs by name in both).
func (f *Forge) onlyPrograms(programs []string) error {
	bin := filepath.Join(f.dir, "bin")
	for _, d := range []string{bin, filepath.Join(f.dir, "git-core")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range programs {
		if err := os.Symlink(p, filepath.Join(bin, filepath.Base(p))); err != nil {
			return fmt.Errorf("link %s: %w", p, err)
		}
	}
	f.path = bin
	return nil
}

// PodPrograms is the list of programs the Gitea pod image holds besides
// Gitea (hack/gitea/pod-programs, which hack/realnode/images.sh copies
// into the image).
func PodPrograms() ([]string, error) {
	_, file, _, _ := runtime.Caller(0)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		data, err := os.ReadFile(filepath.Join(dir, "hack", "gitea", "pod-programs"))
		if err == nil {
			var out []string
			for _, line := range strings.Split(string(data), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					out = append(out, line)
				}
			}
			return out, nil
		}
		if filepath.Dir(dir) == dir {
			return nil, errors.New("hack/gitea/pod-programs not found above " + file)
		}
	}
}

// cli runs a gitea subcommand against the config and returns its output.
func (f *Forge) cli(bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, append(args, "--config", filepath.Join(f.dir, "app.ini"), "--work-path", f.dir)...)
	cmd.Env, cmd.Dir = f.env(), f.dir
	return cmd.CombinedOutput()
}

// start runs `gitea web` with its output in a file (never a pipe the test
// waits on) and waits until the API answers.
func (f *Forge) start(bin string) error {
	out, err := os.Create(f.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "web", "--config", filepath.Join(f.dir, "app.ini"), "--work-path", f.dir)
	cmd.Env, cmd.Dir = f.env(), f.dir
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: stop ends Gitea and the git processes it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("start gitea: %w", err)
	}
	f.cmd = cmd
	go func() { _ = cmd.Wait(); _ = out.Close(); close(f.done) }()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for {
		resp, err := http.Get(f.URL + "/api/v1/version")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-f.done:
			return errors.New("gitea exited at start")
		case <-deadline.C:
			return errors.New("gitea did not answer within 2 minutes")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends Gitea (SIGTERM, then SIGKILL) and removes its folder.
func (f *Forge) stop() {
	if f.cmd != nil && f.cmd.Process != nil {
		_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
			<-f.done
		}
	}
	_ = os.RemoveAll(f.dir)
}

// Logs is the tail of Gitea's output and log file, for a failing test.
func (f *Forge) Logs() string {
	var b strings.Builder
	for _, p := range []string{f.log, filepath.Join(f.dir, "log", "gitea.log")} {
		data, _ := os.ReadFile(p)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(p), bytes.TrimSpace(data))
	}
	return b.String()
}

// populate creates the users with their tokens, the organisation, the
// repository and its collaborators.
func (f *Forge) populate() error {
	var err error
	if f.Admin.Token, err = f.token(f.Admin); err != nil {
		return err
	}
	admin, err := f.client(f.Admin.Token)
	if err != nil {
		return err
	}
	f.Bot = User{Name: "sluice-bot", Password: "sluice-bot-pw"}
	f.Author = User{Name: "author", Password: "author-pw"}
	f.Approver = User{Name: "approver", Password: "approver-pw"}
	f.Outsider = User{Name: "outsider", Password: "outsider-pw"}
	for _, u := range []*User{&f.Bot, &f.Author, &f.Approver, &f.Outsider} {
		if _, _, err := admin.AdminCreateUser(gitea.CreateUserOption{Username: u.Name, Password: u.Password,
			Email: u.Name + "@example.com", MustChangePassword: new(bool)}); err != nil {
			return fmt.Errorf("create user %s: %w", u.Name, err)
		}
		if u.Token, err = f.token(*u); err != nil {
			return err
		}
	}
	if _, _, err := admin.CreateOrg(gitea.CreateOrgOption{Name: Org, Visibility: gitea.VisibleTypePublic}); err != nil {
		return fmt.Errorf("create organisation %s: %w", Org, err)
	}
	if _, _, err := admin.CreateOrgRepo(Org, gitea.CreateRepoOption{Name: Repo, DefaultBranch: "main"}); err != nil {
		return fmt.Errorf("create repository %s: %w", f.FullName(), err)
	}
	for u, mode := range map[string]gitea.AccessMode{f.Bot.Name: gitea.AccessModeAdmin, f.Author.Name: gitea.AccessModeWrite, f.Approver.Name: gitea.AccessModeWrite} {
		if _, err := admin.AddCollaborator(Org, Repo, u, gitea.AddCollaboratorOption{Permission: &mode}); err != nil {
			return fmt.Errorf("add collaborator %s: %w", u, err)
		}
	}
	return nil
}

// token creates an API token of scope "all" for u, with u's password.
func (f *Forge) token(u User) (string, error) {
	c, err := gitea.NewClient(f.URL, gitea.SetBasicAuth(u.Name, u.Password))
	if err != nil {
		return "", err
	}
	tok, _, err := c.CreateAccessToken(gitea.CreateAccessTokenOption{Name: "tests", Scopes: []gitea.AccessTokenScope{gitea.AccessTokenScopeAll}})
	if err != nil {
		return "", fmt.Errorf("create a token for %s: %w", u.Name, err)
	}
	return tok.Token, nil
}

func (f *Forge) client(token string) (*gitea.Client, error) {
	return gitea.NewClient(f.URL, gitea.SetToken(token))
}

// Client is an API client acting as u.
func (f *Forge) Client(t testing.TB, u User) *gitea.Client {
	t.Helper()
	c, err := f.client(u.Token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FullName is the repository's "owner/name".
func (f *Forge) FullName() string { return Org + "/" + Repo }

// CloneURL is the repository's smart-HTTP URL (public: no credentials).
func (f *Forge) CloneURL() string { return f.URL + "/" + Org + "/" + Repo + ".git" }

// Push pushes refspecs ("+refs/heads/main:refs/heads/main") of the local
// repository at gitDir to Gitea as u, through git's smart HTTP.
func (f *Forge) Push(t testing.TB, gitDir string, u User, refspecs ...string) {
	t.Helper()
	r, err := gogit.PlainOpen(gitDir)
	if err != nil {
		t.Fatalf("open %s: %v", gitDir, err)
	}
	specs := make([]gitconfig.RefSpec, 0, len(refspecs))
	for _, s := range refspecs {
		specs = append(specs, gitconfig.RefSpec(s))
	}
	remote := gogit.NewRemote(r.Storer, &gitconfig.RemoteConfig{Name: "gitea", URLs: []string{f.CloneURL()}})
	err = remote.PushContext(context.Background(), &gogit.PushOptions{RemoteName: "gitea", RefSpecs: specs, Auth: &githttp.BasicAuth{Username: u.Name, Password: u.Password}})
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		t.Fatalf("push %v to Gitea as %s: %v", refspecs, u.Name, err)
	}
	// Gitea records pushed branches in the background: wait until its API
	// shows each at the pushed commit, so a pull request can be opened.
	for _, s := range specs {
		dst := s.Dst(plumbing.ReferenceName(s.Src()))
		if !dst.IsBranch() {
			continue
		}
		ref, err := r.Reference(plumbing.ReferenceName(s.Src()), true)
		if err != nil {
			t.Fatalf("resolve %s: %v", s.Src(), err)
		}
		f.waitBranch(t, dst.Short(), ref.Hash().String())
	}
}

// waitBranch waits until Gitea's API shows branch at sha.
func (f *Forge) waitBranch(t testing.TB, branch, sha string) {
	t.Helper()
	c := f.Client(t, f.Admin)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _, err := c.GetRepoBranch(Org, Repo, branch)
		if err == nil && b.Commit != nil && b.Commit.ID == sha {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Gitea never showed branch %s at %s (last error: %v)", branch, sha, err)
		}
		time.Sleep(20 * time.Millisecond) // polling Gitea's background branch sync
	}
}

// Hook installs a Gitea webhook on the repository through the API, with
// the events the syncer uses, and returns its id.
func (f *Forge) Hook(t testing.TB, url, secret string) int64 {
	t.Helper()
	h, _, err := f.Client(t, f.Admin).CreateRepoHook(Org, Repo, gitea.CreateHookOption{
		Type: gitea.HookTypeGitea, Active: true, BranchFilter: "*",
		Events: []string{"push", "pull_request", "pull_request_sync", "pull_request_review_approved",
			"pull_request_review_rejected", "pull_request_comment", "issue_comment", "status"},
		Config: map[string]string{"url": url, "content_type": "json", "secret": secret},
	})
	if err != nil {
		t.Fatalf("install the webhook: %v", err)
	}
	return h.ID
}

// OpenPullRequest opens a pull request from head to main as the author.
func (f *Forge) OpenPullRequest(t testing.TB, head, title string) *gitea.PullRequest {
	t.Helper()
	pr, _, err := f.Client(t, f.Author).CreatePullRequest(Org, Repo, gitea.CreatePullRequestOption{Head: head, Base: "main", Title: title})
	if err != nil {
		t.Fatalf("open a pull request from %s: %v", head, err)
	}
	return pr
}

// Merge merges pull request n with a merge commit as the author, once
// Gitea's background mergeability check has run, and returns the merge
// commit.
func (f *Forge) Merge(t testing.TB, n int64) string {
	t.Helper()
	c := f.Client(t, f.Author)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pr, _, err := c.GetPullRequest(Org, Repo, n)
		if err != nil {
			t.Fatalf("read pull request %d: %v", n, err)
		}
		if pr.Mergeable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull request %d never became mergeable", n)
		}
		time.Sleep(50 * time.Millisecond) // polling Gitea's background check
	}
	ok, _, err := c.MergePullRequest(Org, Repo, n, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge, Title: fmt.Sprintf("merge pull request %d", n)})
	if err != nil || !ok {
		t.Fatalf("merge pull request %d: %v", n, err)
	}
	pr, _, err := c.GetPullRequest(Org, Repo, n)
	if err != nil || !pr.HasMerged || pr.MergedCommitID == nil {
		t.Fatalf("pull request %d is not merged: %v", n, err)
	}
	return *pr.MergedCommitID
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
