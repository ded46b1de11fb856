package install_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/distregtest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
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

	w := startChartWorld(t, chartWorldOptions{Host: reg.Host, Client: reg.Client, Listener: ln, Token: token,
		ChartRepositories: []sluicev1.ChartRepository{{URL: "oci://" + reg.Host + "/charts", SecretRef: &sluicev1.LocalObjectReference{Name: "registry-creds"}}},
		Secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "registry-creds"},
			Data: map[string][]byte{"username": []byte(reg.User), "password": []byte(reg.Password)}}},
	})
	ns, crFor := w.ns, w.crFor

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
