package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/giteaini"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Gitea in the cluster: its namespace, Service and port, and what the
// syncer is given to talk to it (installSluice passes these to the chart).
const (
	giteaNS          = "gitea"
	giteaVersion     = "v1.27.3"
	giteaImage       = "sluice.local/gitea:" + giteaVersion
	giteaPort        = 3000
	giteaServiceURL  = "http://gitea.gitea.svc:3000"
	giteaTokenSecret = "gitea-bot-token"
	// The forge's repository and the service it holds.
	giteaOrg  = "acme"
	giteaRepo = "infra"
	shopNS    = "shop-e2e"
	shopRel   = "shop-e2e"
)

// giteaAppINI is Gitea's configuration in its pod (giteaini, as the
// syncer's local Gitea tests run it): SQLite and repositories in the
// pod's emptyDir, the log on the console; webhooks may reach in-cluster
// Services (ClusterIPs are private addresses, which the default
// "external" refuses). Every secret is fixed, so Gitea never rewrites the
// (read-only) file.
var giteaAppINI = giteaini.Config{AppName: "sluice-e2e", RunUser: "nonroot", WorkPath: "/data", HTTPAddr: "0.0.0.0", Port: giteaPort,
	RootURL: giteaServiceURL, Domain: "gitea.gitea.svc", StaticRoot: "/gitea-static", AllowedHosts: "*",
	SecretKey:     "sluice-e2e-not-secret-0123456789abcdef",
	InternalToken: "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJuYmYiOjE3MDAwMDAwMDB9.sluice-e2e-internal-token-not-secret"}.String()

// giteaUser is a Gitea user with a token of scope "all".
type giteaUser struct{ name, password, token string }

// forge is Gitea running in its pod, reached from the node at the pod's IP.
type forge struct {
	url                          string
	admin, bot, author, approver giteaUser
	work                         string
}

// TestGiteaInTheCluster is the pull-request story with every part in a
// pod: Gitea (its image built from `make gitea`'s binary) holds the infra
// repository; the syncer pod clones it through its Service and Gitea's
// signed push webhook reaches the syncer's webhook Service (the
// Repository's poll is an hour, so only the webhook can make the change);
// that change is approved with `kubectl sluice approve` and applied. A
// pull request then gets its preview ChangeRequest, its commit status and
// its review comment, posted by the syncer as the bot user; the
// approver's approving review in Gitea becomes the preview's Approval, and
// the merge commit's change carries the reviewed digest, so it is
// approved by that review and applied with no other approval.
func TestGiteaInTheCluster(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	c.serveGit(t) // the control namespace and the deployer's rights
	start := time.Now()
	f := c.startGitea(t)
	t.Logf("Gitea Ready in its pod at %s, users and repository made, in %s", f.url, time.Since(start).Round(time.Second))

	// The first commit, pushed before the Repository exists: its first
	// sync makes the change of the new release.
	writeService(t, f.work, c.root, "shop", shopNS, 1, "0s")
	base := f.push(t, "main", "shop: the service")
	secret := "forge-webhook-secret"
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "forge-webhook", Namespace: controlNS},
			Data: map[string][]byte{"token": []byte(secret)}},
		&sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: controlNS},
			Spec: sluicev1.RepositorySpec{
				URL: giteaServiceURL + "/" + giteaOrg + "/" + giteaRepo + ".git", Ref: &sluicev1.GitReference{Branch: "main"},
				Interval:           &metav1.Duration{Duration: time.Hour},
				TargetNamespaces:   []string{"shop-*"},
				ServiceAccountName: "infra-deployer",
				WebhookSecretRef:   &sluicev1.LocalObjectReference{Name: "forge-webhook"},
			}},
	}
	for _, o := range objs {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	repo := &sluicev1.Repository{}
	eventually(t, "the forge Repository's first sync and webhook path", func() (bool, error) {
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: "forge"}, repo); err != nil {
			return false, err
		}
		return repo.Status.WebhookPath != "" && repo.Status.LastSyncedCommit == base,
			fmt.Errorf("webhook path %q, last synced %q (want %s): %s", repo.Status.WebhookPath, repo.Status.LastSyncedCommit, base, conditions(repo.Status.Conditions))
	})
	first := c.waitChange(t, sluicev1.ChangeRequestName(shopRel, base, 1), sluicev1.PhaseAwaitingApproval)
	hook := fmt.Sprintf("http://%s-syncer-webhook.%s.svc:9292%s", releaseName, sluiceNS, repo.Status.WebhookPath)
	f.hook(t, hook, secret)

	// A push to main reaches the syncer pod by its webhook Service.
	// A change of the rendered manifest (not only of the inputs), so it
	// is a change even next to an applied one.
	values := filepath.Join(f.work, "services", "shop", "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, values, strings.Replace(string(b), "TESTAPP_READY_AFTER: 0s", "TESTAPP_READY_AFTER: 1s", 1))
	pushed := time.Now()
	c1 := f.push(t, "main", "shop: ready after a second")
	cr := c.waitChange(t, sluicev1.ChangeRequestName(shopRel, c1, 1), sluicev1.PhaseAwaitingApproval)
	t.Logf("%s AwaitingApproval %s after the push (the poll is an hour: the webhook brought it)", cr.Name, time.Since(pushed).Round(100*time.Millisecond))
	if !containsIdentity(cr.Spec.Pushers, "gitea:author") {
		t.Errorf("%s has pushers %v, want gitea:author (the pusher Gitea authenticated)", cr.Name, cr.Spec.Pushers)
	}
	c.approve(t, cr.Name)
	c.waitChange(t, cr.Name, sluicev1.PhaseApplied)
	c.waitReady(t, shopNS, shopRel, 1)
	c.waitChange(t, first.Name, sluicev1.PhaseSuperseded)

	// A pull request: its preview, commit status and review comment.
	setReplicas(t, filepath.Join(f.work, "services", "shop"), 2)
	head := f.push(t, "scale", "shop: two replicas")
	git(t, f.work, "checkout", "-q", "main")
	pr, resp, err := f.client(t, f.author).CreatePullRequest(giteaOrg, giteaRepo, gitea.CreatePullRequestOption{Head: "scale", Base: "main", Title: "shop: two replicas"})
	if err != nil {
		// Gitea hides a server error's message from a non-admin: the
		// status says what the SDK's (then empty) error does not.
		t.Fatalf("opening the pull request: HTTP %d: %q (Gitea's log below)", statusOf(resp), err)
	}
	preview := c.waitChange(t, sluicev1.PreviewChangeRequestName(shopRel, pr.Index, head), sluicev1.PhasePreview)
	if preview.Spec.PullRequest == nil || !preview.Spec.PullRequest.Preview {
		t.Fatalf("%s is no preview: %+v", preview.Name, preview.Spec.PullRequest)
	}
	st := f.status(t, head, "sluice/"+shopRel)
	if st.Creator == nil || st.Creator.UserName != f.bot.name {
		t.Errorf("commit status %s was posted by %v, want the bot %s", st.Context, st.Creator, f.bot.name)
	}
	comment := f.reviewComment(t, pr.Index, sluicev1.ShortSHA(head))
	t.Logf("pull request %d: preview %s, commit status %s %q, review comment %d by %s", pr.Index, preview.Name, st.State, st.Description, comment.ID, comment.Poster.UserName)

	// The approver's approving review becomes the preview's Approval.
	rv, _, err := f.client(t, f.approver).CreatePullReview(giteaOrg, giteaRepo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "lgtm", CommitID: head})
	if err != nil {
		t.Fatalf("the approving review: %v", err)
	}
	var approval sluicev1.Approval
	eventually(t, "the approving review as an Approval", func() (bool, error) {
		var list sluicev1.ApprovalList
		if err := c.c.List(ctx, &list, client.InNamespace(controlNS)); err != nil {
			return false, err
		}
		for _, a := range list.Items {
			if a.Spec.ApprovalDigest == preview.Spec.ApprovalDigest {
				approval = a
				return true, nil
			}
		}
		return false, fmt.Errorf("no Approval of %s among %d", preview.Spec.ApprovalDigest, len(list.Items))
	})
	if a := approval.Spec; a.Approver != "gitea:"+sluicev1.Identity(f.approver.name) || a.Source != sluicev1.SourcePullRequest ||
		a.Decision != sluicev1.DecisionApprove || a.PullRequest != pr.Index {
		t.Fatalf("Approval %s is %+v, want gitea:%s approving pull request %d (review %d)", approval.Name, a, f.approver.name, pr.Index, rv.ID)
	}

	// The merge applies: its change has the reviewed digest, approved by
	// the review alone.
	m := f.merge(t, pr.Index)
	merged := c.waitChange(t, sluicev1.ChangeRequestName(shopRel, m, 1), sluicev1.PhaseApplied)
	if merged.Spec.ApprovalDigest != preview.Spec.ApprovalDigest {
		t.Fatalf("the merge's change %s has digest %s, the reviewed preview %s", merged.Name, merged.Spec.ApprovalDigest, preview.Spec.ApprovalDigest)
	}
	c.waitReady(t, shopNS, shopRel, 2)
	t.Logf("merge %s applied as %s with 2 pods Ready; whole story %s", sluicev1.ShortSHA(m), merged.Name, time.Since(start).Round(time.Second))
}

// statusOf is the HTTP status of a Gitea SDK answer, 0 without one.
func statusOf(r *gitea.Response) int {
	if r == nil || r.Response == nil {
		return 0
	}
	return r.StatusCode
}

// containsIdentity reports whether ids holds id.
func containsIdentity(ids []sluicev1.Identity, id sluicev1.Identity) bool {
	for _, i := range ids {
		if i == id {
			return true
		}
	}
	return false
}

// writeFile writes body to path.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until Deployment name in ns has want pods, all Ready.
func (c *cluster) waitReady(t *testing.T, ns, name string, want int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("Deployment %s/%s with %d Ready pods", ns, name, want), func() (bool, error) {
		d, err := c.cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return *d.Spec.Replicas == want && d.Status.ReadyReplicas == want && d.Status.UpdatedReplicas == want,
			fmt.Errorf("spec %d, ready %d, updated %d", *d.Spec.Replicas, d.Status.ReadyReplicas, d.Status.UpdatedReplicas)
	})
}

// startGitea runs Gitea in its namespace (a Deployment of the image `make
// e2e-images` builds, its app.ini from a ConfigMap, the site admin made
// by an init container), waits until it answers, and makes the users,
// the organisation, the repository with its collaborators and the bot's
// token Secret the chart's syncer reads.
func (c *cluster) startGitea(t *testing.T) *forge {
	t.Helper()
	ctx := context.Background()
	f := &forge{admin: giteaUser{name: "siteadmin", password: "siteadmin-pw"}}
	cfgArgs := []string{"--config", "/etc/gitea/app.ini", "--work-path", "/data"}
	ctr := func(name string, args ...string) corev1.Container {
		return corev1.Container{
			Name: name, Image: giteaImage, ImagePullPolicy: corev1.PullNever,
			Args:         append(args, cfgArgs...),
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/gitea"}, {Name: "data", MountPath: "/data"}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}
	}
	web := ctr("gitea", "web")
	web.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: giteaPort}}
	web.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/api/v1/version", Port: intstr.FromString("http")}},
		PeriodSeconds: 1}
	labels := map[string]string{"app.kubernetes.io/name": "gitea"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: giteaNS}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gitea", Namespace: giteaNS}, Data: map[string]string{"app.ini": giteaAppINI}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gitea", Namespace: giteaNS}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), RunAsGroup: ptr(int64(65532)), FSGroup: ptr(int64(65532))},
				// The database's tables, then the site admin (the API has
				// no way in without one), then the server.
				InitContainers: []corev1.Container{
					ctr("migrate", "migrate"),
					ctr("admin", "admin", "user", "create", "--admin", "--username", f.admin.name, "--password", f.admin.password,
						"--email", "siteadmin@example.com", "--must-change-password=false"),
				},
				Containers: []corev1.Container{web},
				Volumes: []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gitea"}}}},
					{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			}},
		}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gitea", Namespace: giteaNS}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: giteaPort, TargetPort: intstr.FromString("http")}}}},
	}
	for _, o := range objs {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	pod := c.readyPod(t, giteaNS, "app.kubernetes.io/name=gitea")
	f.url = fmt.Sprintf("http://%s:%d", pod.Status.PodIP, giteaPort)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.cs.CoreV1().Pods(giteaNS).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "gitea", TailLines: ptr(int64(80))}).DoRaw(context.Background())
			t.Logf("Gitea's log (tail):\n%s", logs)
		}
	})
	f.populate(t)
	// The syncer posts statuses and comments and confirms reviews as the bot.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: giteaTokenSecret, Namespace: sluiceNS}, Data: map[string][]byte{"token": []byte(f.bot.token)}}
	if _, err := c.cs.CoreV1().Secrets(sluiceNS).Create(ctx, sec, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = c.cs.CoreV1().Secrets(sluiceNS).Update(ctx, sec, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	// The clone the author commits in.
	dir := t.TempDir()
	f.work = filepath.Join(dir, "infra")
	git(t, dir, "init", "-q", "-b", "main", f.work)
	git(t, f.work, "remote", "add", "origin", strings.Replace(f.url, "http://", "http://"+f.author.name+":"+f.author.password+"@", 1)+"/"+giteaOrg+"/"+giteaRepo+".git")
	return f
}

// populate makes the users (each with a token), the organisation, the
// repository and its collaborators: the bot an admin collaborator (Gitea
// answers permission questions for other users only to repository
// admins), the author and the approver writers.
func (f *forge) populate(t *testing.T) {
	t.Helper()
	// A fresh Gitea (a new pod, its emptyDir): none of these exist yet.
	f.admin.token = f.token(t, f.admin)
	admin := f.client(t, f.admin)
	f.bot = giteaUser{name: "sluice-bot", password: "sluice-bot-pw"}
	f.author = giteaUser{name: "author", password: "author-pw"}
	f.approver = giteaUser{name: "approver", password: "approver-pw"}
	for _, u := range []*giteaUser{&f.bot, &f.author, &f.approver} {
		if _, _, err := admin.AdminCreateUser(gitea.CreateUserOption{Username: u.name, Password: u.password,
			Email: u.name + "@example.com", MustChangePassword: ptr(false)}); err != nil {
			t.Fatalf("creating Gitea user %s: %v", u.name, err)
		}
		u.token = f.token(t, *u)
	}
	if _, _, err := admin.CreateOrg(gitea.CreateOrgOption{Name: giteaOrg, Visibility: gitea.VisibleTypePublic}); err != nil {
		t.Fatalf("creating organisation %s: %v", giteaOrg, err)
	}
	if _, _, err := admin.CreateOrgRepo(giteaOrg, gitea.CreateRepoOption{Name: giteaRepo, DefaultBranch: "main"}); err != nil {
		t.Fatalf("creating repository %s/%s: %v", giteaOrg, giteaRepo, err)
	}
	for u, mode := range map[string]gitea.AccessMode{f.bot.name: gitea.AccessModeAdmin, f.author.name: gitea.AccessModeWrite, f.approver.name: gitea.AccessModeWrite} {
		if _, err := admin.AddCollaborator(giteaOrg, giteaRepo, u, gitea.AddCollaboratorOption{Permission: &mode}); err != nil {
			t.Fatalf("adding collaborator %s: %v", u, err)
		}
	}
}

// token makes an API token of scope "all" for u with u's password.
func (f *forge) token(t *testing.T, u giteaUser) string {
	t.Helper()
	c, err := gitea.NewClient(f.url, gitea.SetBasicAuth(u.name, u.password), gitea.SetHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := c.CreateAccessToken(gitea.CreateAccessTokenOption{Name: "e2e", Scopes: []gitea.AccessTokenScope{gitea.AccessTokenScopeAll}})
	if err != nil {
		t.Fatalf("creating a Gitea token for %s: %v", u.name, err)
	}
	return tok.Token
}

// client is a Gitea API client acting as u.
func (f *forge) client(t *testing.T, u giteaUser) *gitea.Client {
	t.Helper()
	c, err := gitea.NewClient(f.url, gitea.SetToken(u.token), gitea.SetHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// push commits everything in the clone on branch (created from the
// current commit when new) and pushes it as the author over git's smart
// HTTP; it returns the commit once Gitea's API shows the branch there (it
// records pushed branches in the background).
func (f *forge) push(t *testing.T, branch, message string) string {
	t.Helper()
	git(t, f.work, "checkout", "-q", "-B", branch)
	git(t, f.work, "add", "-A")
	git(t, f.work, "-c", "user.name=Author", "-c", "user.email=author@example.com", "commit", "-qm", message)
	git(t, f.work, "push", "-q", "origin", "HEAD:refs/heads/"+branch)
	sha := git(t, f.work, "rev-parse", "HEAD")
	admin := f.client(t, f.admin)
	eventually(t, "Gitea showing "+branch+" at "+sha, func() (bool, error) {
		b, _, err := admin.GetRepoBranch(giteaOrg, giteaRepo, branch)
		if err != nil {
			return false, err
		}
		return b.Commit != nil && b.Commit.ID == sha, fmt.Errorf("branch at %v", b.Commit)
	})
	return sha
}

// hook installs the push and pull-request webhook to url through Gitea's
// API, as a repository admin would.
func (f *forge) hook(t *testing.T, url, secret string) {
	t.Helper()
	_, _, err := f.client(t, f.admin).CreateRepoHook(giteaOrg, giteaRepo, gitea.CreateHookOption{
		Type: gitea.HookTypeGitea, Active: true, BranchFilter: "*",
		Events: []string{"push", "pull_request", "pull_request_sync", "pull_request_review_approved",
			"pull_request_review_rejected", "pull_request_comment", "issue_comment", "status"},
		Config: map[string]string{"url": url, "content_type": "json", "secret": secret},
	})
	if err != nil {
		t.Fatalf("installing the webhook to %s: %v", url, err)
	}
}

// status waits for the commit status context on sha.
func (f *forge) status(t *testing.T, sha, context string) *gitea.Status {
	t.Helper()
	var found *gitea.Status
	eventually(t, "commit status "+context+" on "+sha, func() (bool, error) {
		list, _, err := f.client(t, f.author).ListStatuses(giteaOrg, giteaRepo, sha, gitea.ListStatusesOption{})
		if err != nil {
			return false, err
		}
		for _, s := range list {
			if s.Context == context {
				found = s
				return true, nil
			}
		}
		return false, fmt.Errorf("%d other statuses", len(list))
	})
	return found
}

// reviewComment waits for the syncer's review comment naming short on
// pull request n.
func (f *forge) reviewComment(t *testing.T, n int64, short string) *gitea.Comment {
	t.Helper()
	var found *gitea.Comment
	eventually(t, fmt.Sprintf("the review comment of %s on pull request %d", short, n), func() (bool, error) {
		list, _, err := f.client(t, f.author).ListIssueComments(giteaOrg, giteaRepo, n, gitea.ListIssueCommentOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range list {
			if strings.Contains(c.Body, short) && strings.HasPrefix(c.Body, "<!-- sluice:review") {
				if c.Poster == nil || c.Poster.UserName != f.bot.name {
					return false, fmt.Errorf("the comment is by %v, not the bot", c.Poster)
				}
				found = c
				return true, nil
			}
		}
		return false, fmt.Errorf("%d comments, none naming %s", len(list), short)
	})
	return found
}

// merge merges pull request n with a merge commit as the author once
// Gitea's background mergeability check has run, and returns the merge
// commit.
func (f *forge) merge(t *testing.T, n int64) string {
	t.Helper()
	c := f.client(t, f.author)
	eventually(t, fmt.Sprintf("pull request %d mergeable", n), func() (bool, error) {
		pr, _, err := c.GetPullRequest(giteaOrg, giteaRepo, n)
		if err != nil {
			return false, err
		}
		return pr.Mergeable, fmt.Errorf("not mergeable yet")
	})
	ok, _, err := c.MergePullRequest(giteaOrg, giteaRepo, n, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge, Title: fmt.Sprintf("merge pull request %d", n)})
	if err != nil || !ok {
		t.Fatalf("merging pull request %d: %v", n, err)
	}
	pr, _, err := c.GetPullRequest(giteaOrg, giteaRepo, n)
	if err != nil || !pr.HasMerged || pr.MergedCommitID == nil {
		t.Fatalf("pull request %d is not merged: %v", n, err)
	}
	return *pr.MergedCommitID
}
