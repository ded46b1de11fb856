package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var (
	env       *testenv.Env
	k8s       client.Client
	validator validation.Validator
	root      string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	// As tracing.Setup installs it, with the spans kept in memory.
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	testenv.Main(m, testenv.Options{}, setup)
}

// spans records every span the syncer ends in this test binary.
var spans = tracetest.NewInMemoryExporter()

// setup finds this repository and starts the validator the tests share;
// Terraform keeps its state in envtest, reached through a kubeconfig in
// its child environment only.
func setup(e *testenv.Env) error {
	env, k8s = e, e.Client
	_, file, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	kubeconfig, err := e.AdminKubeconfig("terraform")
	if err != nil {
		return err
	}
	validator, err = validation.NewLibrary(context.Background(), validation.LibraryOptions{TerraformEnv: map[string]string{"KUBE_CONFIG_PATH": kubeconfig}})
	return err
}

// world is a running syncer with the webhook side installed, watching one
// control namespace with one Repository served from a real git repository.
type world struct {
	t       testing.TB
	ns      string
	git     *gittest.Repo
	repo    *sluicev1.Repository
	secret  []byte
	hookURL string
	base    string
	in      *install.Installed
	api     *githubAPI
	syncer  *syncer.Syncer
}

// githubAPI is an httptest server answering the GitHub REST calls the
// syncer makes: commit statuses, collaborator permissions (write for
// everyone in writers) and the reviews of a pull request, which
// reviewBody records as GitHub would list them.
type githubAPI struct {
	*httptest.Server
	mu      sync.Mutex
	writers map[string]bool
	reviews map[int64][]map[string]any
}

func newGitHubAPI(t testing.TB, writers ...string) *githubAPI {
	a := &githubAPI{writers: map[string]bool{}, reviews: map[int64][]map[string]any{}}
	for _, w := range writers {
		a.writers[w] = true
	}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		last := parts[len(parts)-1]
		switch {
		case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/statuses/"):
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "{}")
		case last == "permission":
			perm := "read"
			if a.writers[parts[len(parts)-2]] {
				perm = "write"
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"permission": perm, "role_name": perm, "user": map[string]any{"login": parts[len(parts)-2]}})
		case last == "reviews":
			n, _ := strconv.ParseInt(parts[len(parts)-2], 10, 64)
			list := a.reviews[n]
			if list == nil || r.URL.Query().Get("page") != "1" {
				list = []map[string]any{}
			}
			_ = json.NewEncoder(w).Encode(list)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

// record lists a review as GitHub would: a dismissal changes the state of
// the dismissed review.
func (a *githubAPI) record(n, id int64, state, commit, login string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if state == "dismissed" {
		for _, r := range a.reviews[n] {
			if r["id"] == id {
				r["state"] = "DISMISSED"
			}
		}
		return
	}
	a.reviews[n] = append(a.reviews[n], map[string]any{"id": id, "state": strings.ToUpper(state), "commit_id": commit, "user": map[string]any{"login": login}})
}

var deliveryID atomic.Int64

// newWorld starts everything with the sample services named (default:
// the Helm-only cart). The poll interval is an hour, so only webhooks (and
// the Repository's creation) make the syncer act.
func newWorld(t testing.TB, services ...string) *world {
	ctx := context.Background()
	ns := env.Namespace(t, "e2e-")

	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.CopyDir(filepath.Join(root, "charts", "service"), "charts/service")
	if len(services) == 0 {
		services = []string{"cart"}
	}
	for _, svc := range services {
		g.CopyDir(filepath.Join(root, "services", svc), "services/"+svc)
	}
	base := g.Commit("services", "platform@example.com")

	s, err := syncer.New(env.Config, syncer.Options{ArtifactAddr: "127.0.0.1:0", ArtifactToken: artifact.StaticToken("artifact-token-of-the-webhook-tests"), DataDir: t.TempDir(), AllowFileURLs: true,
		Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// Reviews count only when GitHub's API confirms them.
	api := newGitHubAPI(t, "alice", "bob")
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github-token"},
		Data: map[string][]byte{"token": []byte("github-api-token")}}))
	in, err := install.Install(s, install.Options{Listener: ln, SkipNameValidation: true, StatusProvider: provider.GitHub, StatusBaseURL: api.URL,
		StatusTokenSecret: types.NamespacedName{Namespace: ns, Name: "github-token"}})
	require.NoError(t, err)
	testenv.Go(t, s)

	secret := []byte("webhook-secret-" + ns)
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra-webhook"},
		Data: map[string][]byte{webhook.SecretKey: secret}}))
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra"}, Spec: sluicev1.RepositorySpec{
		URL: g.FileURL(), TargetNamespaces: []string{"cart-*", "checkout-*"}, ServiceAccountName: "deployer",
		Interval: &metav1.Duration{Duration: time.Hour}, WebhookSecretRef: &sluicev1.LocalObjectReference{Name: "infra-webhook"},
	}}
	require.NoError(t, k8s.Create(ctx, repo))
	w := &world{t: t, ns: ns, git: g, repo: repo, secret: secret, base: base, in: in, api: api, syncer: s}
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(repo), got); err != nil {
			return false
		}
		w.hookURL = "http://" + ln.Addr().String() + got.Status.WebhookPath
		return got.Status.WebhookPath != "" && got.Status.LastSyncedCommit == base
	}, 2*time.Minute, 20*time.Millisecond, "the Repository got no webhook path or first sync")
	return w
}

// send posts a signed GitHub delivery and returns the status code.
func (w *world) send(event string, body []byte) int {
	return w.sendWith(event, body, nil)
}

// sendWith is send with extra headers.
func (w *world) sendWith(event string, body []byte, headers map[string]string) int {
	req, err := http.NewRequest(http.MethodPost, w.hookURL, bytes.NewReader(body))
	require.NoError(w.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	name, value := provider.Sign(provider.GitHub, body, w.secret)
	req.Header.Set(name, value)
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("delivery-%d", deliveryID.Add(1)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// setRef points a ref of the served repository at sha.
func (w *world) setRef(name, sha string) {
	st := filesystem.NewStorage(osfs.New(w.git.GitDir), cache.NewObjectLRUDefault())
	require.NoError(w.t, st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), plumbing.NewHash(sha))))
}

// pullRequest commits files on top of from as pull request n's head, and
// leaves main where it was.
func (w *world) pullRequest(n int64, from string, files map[string]string) string {
	main := w.git.Head("main")
	w.git.SetBranch("main", from)
	for p, c := range files {
		w.git.WriteFile(p, c)
	}
	head := w.git.Commit(fmt.Sprintf("pull request %d", n), "alice@example.com")
	w.setRef(fmt.Sprintf("refs/pull/%d/head", n), head)
	w.git.SetBranch("main", main)
	return head
}

// merge squash-merges: main gets one commit with files on top of it.
func (w *world) merge(files map[string]string) string {
	for p, c := range files {
		w.git.WriteFile(p, c)
	}
	return w.git.Commit("merge", "alice@example.com")
}

func (w *world) pushBody(after string) []byte {
	return providertest.Edit(w.t, providertest.Payload(w.t, "github/push.payload.json"), func(m map[string]any) {
		m["ref"], m["after"], m["deleted"], m["created"] = "refs/heads/main", after, false, false
	})
}

func (w *world) prBody(action string, n int64, head, base string) []byte {
	return providertest.Edit(w.t, providertest.Payload(w.t, "github/pull_request.opened.payload.json"), func(m map[string]any) {
		m["action"], m["number"] = action, n
		pr := m["pull_request"].(map[string]any)
		pr["number"] = n
		pr["head"].(map[string]any)["sha"] = head
		pr["base"].(map[string]any)["sha"] = base
		pr["base"].(map[string]any)["ref"] = "main"
	})
}

func (w *world) reviewBody(n, id int64, state, commit, head, login string) []byte {
	w.api.record(n, id, state, commit, login)
	fix, action := "github/pull_request_review.submitted.payload.json", "submitted"
	if state == "dismissed" {
		fix, action = "github/pull_request_review.dismissed.payload.json", "dismissed"
	}
	return providertest.Edit(w.t, providertest.Payload(w.t, fix), func(m map[string]any) {
		m["action"] = action
		r := m["review"].(map[string]any)
		r["id"], r["state"], r["commit_id"], r["author_association"] = id, state, commit, "MEMBER"
		r["user"].(map[string]any)["login"] = login
		pr := m["pull_request"].(map[string]any)
		pr["number"] = n
		pr["head"].(map[string]any)["sha"] = head
		pr["base"].(map[string]any)["ref"] = "main"
	})
}

// changeRequest waits for the named ChangeRequest.
func (w *world) changeRequest(name string) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{}
	require.Eventually(w.t, func() bool {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, cr) == nil
	}, 2*time.Minute, 10*time.Millisecond, "ChangeRequest %s never appeared", name)
	return cr
}

// approvalsFor waits until count Approvals exist for digest and returns
// them by approver and decision.
func (w *world) approvalsFor(digest sluicev1.Digest, count int) map[string]sluicev1.Decision {
	var got map[string]sluicev1.Decision
	require.Eventually(w.t, func() bool {
		got = w.approvals(digest)
		return len(got) >= count
	}, 2*time.Minute, 10*time.Millisecond, "Approvals for %s: %v", digest, got)
	return got
}

func (w *world) approvals(digest sluicev1.Digest) map[string]sluicev1.Decision {
	var list sluicev1.ApprovalList
	require.NoError(w.t, k8s.List(context.Background(), &list, client.InNamespace(w.ns)))
	got := map[string]sluicev1.Decision{}
	for _, a := range list.Items {
		if a.Spec.ApprovalDigest == digest {
			got[string(a.Spec.Approver)+" "+string(a.Spec.Decision)] = a.Spec.Decision
		}
	}
	return got
}
