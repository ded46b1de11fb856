package install_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/distregtest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestDistributionRegistry_itsOwnPushNotificationIsAChangeWithoutWaitingForThePoll:
// a real CNCF distribution registry behind basic auth, with charts pushed
// by Helm's registry client, sends its own notification of a pushed 1.1.1
// to the syncer's receiver, and a Repository polling hourly whose service
// takes chart ~1.1 from it gets a ChangeRequest for 1.1.1 without waiting
// for the poll, resolved with the credentials of its chartRepositories
// Secret. The FIGURE is push -> ChangeRequest.
func TestDistributionRegistry_itsOwnPushNotificationIsAChangeWithoutWaitingForThePoll(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "distreg-")
	// The receiver's listener first: the registry's config names it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const token = "registry-token-of-the-distribution-test"
	reg := distregtest.Start(t, distregtest.Options{NotifyURL: "http://" + ln.Addr().String() + "/registry/distribution", NotifyToken: token})
	pusher := reg.Pusher(t)
	pushChart := func(v string) {
		t.Helper()
		_, err := pusher.Push(chartrepotest.MarkedChart(t, v, "v"+v), reg.Host+"/charts/web:"+v)
		require.NoError(t, err, reg.Logs())
	}
	pushChart("1.1.0")

	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.WriteFile("services/web/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: "oci://%s/charts", name: web, version: "~1.1"}
environments:
  - name: staging
    namespace: web-staging
    approval: {required: 1, autoApproveRisk: low}
`, reg.Host))
	head := g.Commit("web from the distribution registry", "alice@example.com")

	s, err := syncer.New(env.Config, syncer.Options{ArtifactAddr: "127.0.0.1:0", ArtifactToken: artifact.StaticToken("artifact-token-of-the-webhook-tests"), DataDir: t.TempDir(), AllowFileURLs: true,
		Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true})
	require.NoError(t, err)
	s.Reconciler.ChartOptions = chartrepo.Options{HTTPClient: reg.Client, Timeout: time.Minute}
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry-token"},
		Data: map[string][]byte{webhook.SecretKey: []byte(token)}}))
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry-creds"},
		Data: map[string][]byte{"username": []byte(reg.User), "password": []byte(reg.Password)}}))
	_, err = install.Install(s, install.Options{Listener: ln, SkipNameValidation: true, RegistrySecret: types.NamespacedName{Namespace: ns, Name: "registry-token"}})
	require.NoError(t, err)
	testenv.Go(t, s)

	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra"}, Spec: sluicev1.RepositorySpec{
		URL: g.FileURL(), TargetNamespaces: []string{"web-*"}, ServiceAccountName: "deployer",
		Interval:          &metav1.Duration{Duration: time.Hour},
		ChartRepositories: []sluicev1.ChartRepository{{URL: "oci://" + reg.Host + "/charts", SecretRef: &sluicev1.LocalObjectReference{Name: "registry-creds"}}},
	}}
	require.NoError(t, k8s.Create(ctx, repo))
	crFor := func(n int32, version string) func() bool {
		return func() bool {
			var list sluicev1.ChangeRequestList
			if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false
			}
			for _, cr := range list.Items {
				if cr.Name == sluicev1.ChangeRequestName("web-staging", head, n) && cr.Spec.Source.Chart.Version == version {
					return true
				}
			}
			return false
		}
	}
	require.Eventually(t, crFor(1, "1.1.0"), 2*time.Minute, 50*time.Millisecond, "the first sync at the Repository's creation")
	// Wait for the Release (the receiver finds the Repository through it)
	// and for the first pass to end, so nothing but the webhook runs one.
	require.Eventually(t, func() bool {
		rel := &sluicev1.Release{}
		got := &sluicev1.Repository{}
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-staging"}, rel) == nil && rel.Spec.Chart.Repo != "" &&
			k8s.Get(ctx, client.ObjectKeyFromObject(repo), got) == nil && got.Status.LastSyncedCommit == head
	}, 2*time.Minute, 50*time.Millisecond)

	// The push is all the test does: the registry notifies the receiver.
	// Known race (left to fix, see README): distribution sends the
	// notification once the manifest is stored, before the tag is linked;
	// a pass woken that early lists 1.1.1 but is told its manifest is
	// unknown, which the syncer takes for a chart only a human can fix
	// (ChartUnavailable) and leaves to the next poll, an hour away. The
	// test then skips saying so rather than fail at random.
	start := time.Now()
	pushChart("1.1.1")
	lostRace := ""
	require.Eventually(t, func() bool {
		if crFor(2, "1.1.1")() {
			return true
		}
		rel := &sluicev1.Release{}
		if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-staging"}, rel) == nil {
			if c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced); c != nil &&
				c.Reason == sluicev1.ReasonChartUnavailable && strings.Contains(c.Message, "1.1.1") {
				lostRace = c.Message
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "the registry's own notification woke the Repository")
	// The registry notifies once the manifest is stored, before the tag
	// points at it: a pass woken that early finds the tag listed but not
	// served and must look again soon (chartrepo.ErrTagNotReady), not
	// wait for the poll an hour away.
	require.Empty(t, lostRace, "the woken pass found the tag not yet served and gave up until the poll")
	t.Logf("FIGURE: distribution registry push -> ChangeRequest: %s on the registry's own notification (poll interval 1h; load average %s)",
		time.Since(start).Round(time.Millisecond), loadAverage())
}

// TestDistributionRegistry_wrongCredentialsAreAClearErrorWithoutThem:
// resolving and pulling a chart from the real registry with a wrong
// password fails saying the registry refused the credentials, and the
// error never carries the password (nor the right one).
func TestDistributionRegistry_wrongCredentialsAreAClearErrorWithoutThem(t *testing.T) {
	reg := distregtest.Start(t, distregtest.Options{})
	_, err := reg.Pusher(t).Push(chartrepotest.MarkedChart(t, "1.1.0", "v1.1.0"), reg.Host+"/charts/web:1.1.0")
	require.NoError(t, err, reg.Logs())
	const wrong = "wrong-password-of-the-test"
	opts := chartrepo.Options{HTTPClient: reg.Client, Timeout: time.Minute, Credentials: &chartrepo.Credentials{Username: reg.User, Password: wrong}}
	ref := chartrepo.Ref{Repo: "oci://" + reg.Host + "/charts", Name: "web", Version: "~1.1"}
	ctx := context.Background()

	_, err = chartrepo.Resolve(ctx, ref, opts)
	require.Error(t, err)
	t.Logf("resolve: %v", err)
	ref.Version = "1.1.0"
	_, err2 := chartrepo.Pull(ctx, ref, opts)
	require.Error(t, err2)
	t.Logf("pull: %v", err2)
	for _, e := range []error{err, err2} {
		require.Contains(t, e.Error(), reg.Host)
		require.Contains(t, e.Error(), "refused the credentials (HTTP 401)")
		require.NotContains(t, e.Error(), wrong)
		require.NotContains(t, e.Error(), reg.Password)
	}

	// The right credentials resolve it: the failure was theirs.
	opts.Credentials.Password = reg.Password
	got, err := chartrepo.Resolve(ctx, ref, opts)
	require.NoError(t, err)
	require.Equal(t, "1.1.0", got.Version)
}
