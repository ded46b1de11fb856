package controller_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestSync_sshWithKeyAndKnownHostsCreatesChangeRequests(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	srv := gittest.StartSSH(t, root)
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ssh", Namespace: ns},
		Data:       map[string][]byte{"identity": srv.ClientKeyPEM, "known_hosts": srv.KnownHosts()},
	}))
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", srv.RepoURL("infra"), func(r *sluicev1.Repository) {
		r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: "ssh"}
	})
	got := waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, fixture.Head("main"), got.Status.LastSyncedCommit)
	assert.Len(t, changeRequests(t, ns), 2)
}

func TestSync_gitFailuresGiveReadyFalseWithAClearCredentialFreeMessage(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	seedHelmRepo(t, root, "infra")
	gone := seedHelmRepo(t, root, "gone")
	gone.DeleteBranch("main")
	httpSrv := gittest.StartHTTP(t, root, gitUser, gitPassword)
	sshSrv := gittest.StartSSH(t, root)
	other := gittest.StartSSH(t, t.TempDir())
	wrong := "wrong-" + gitPassword
	basicAuthSecret(t, ns, "wrong", gitUser, wrong)
	basicAuthSecret(t, ns, "right", gitUser, gitPassword)
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "unknown-host", Namespace: ns},
		Data:       map[string][]byte{"identity": sshSrv.ClientKeyPEM, "known_hosts": other.KnownHosts()},
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := ln.Addr().String()
	ln.Close()
	startSyncer(t, ns, "")

	for _, tc := range []struct {
		name, url, secret, reason, says string
	}{
		{"wrong-credentials", httpSrv.RepoURL("infra"), "wrong", sluicev1.ReasonAuthenticationFailed, "authentication failed"},
		{"credentials-in-url", "http://" + gitUser + ":" + wrong + "@" + httpSrv.URL[len("http://"):] + "/infra.git", "", sluicev1.ReasonAuthenticationFailed, "authentication failed"},
		{"unknown-host-key", sshSrv.RepoURL("infra"), "unknown-host", sluicev1.ReasonHostKeyMismatch, "known_hosts"},
		{"unreachable", "http://" + closedAddr + "/infra.git", "right", sluicev1.ReasonGitOperationFailed, "connection refused"},
		{"deleted-branch", httpSrv.RepoURL("gone"), "right", sluicev1.ReasonRefNotFound, "refs/heads/main not found"},
		{"missing-secret", httpSrv.RepoURL("infra"), "nope", sluicev1.ReasonSecretNotFound, `secret "nope" not found`},
		{"metadata-address", "http://169.254.169.254/infra.git", "", sluicev1.ReasonURLNotAllowed, "link-local or metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := newRepository(t, ns, tc.name, tc.url, func(r *sluicev1.Repository) {
				if tc.secret != "" {
					r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: tc.secret}
				}
			})
			cond := waitReady(t, repo, metav1.ConditionFalse, tc.reason)
			assert.Contains(t, cond.Message, tc.says)
			assert.NotContains(t, cond.Message, wrong)
			assert.NotContains(t, cond.Message, gitPassword)
			assert.NotContains(t, cond.Message, "PRIVATE KEY")
			got := &sluicev1.Repository{}
			require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got))
			kstatus := sluicev1.ConditionReconciling // retried at the poll interval
			if tc.reason == sluicev1.ReasonSecretNotFound || tc.reason == sluicev1.ReasonURLNotAllowed {
				kstatus = sluicev1.ConditionStalled // only a human can fix it
			}
			assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, kstatus), "%s: %+v", kstatus, got.Status.Conditions)
		})
	}
}

func TestSync_fileURLsAreRefusedWithoutTheFlag(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	startSyncerWith(t, syncer.Options{ArtifactAddr: "127.0.0.1:0", DataDir: t.TempDir(), Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonURLNotAllowed)
	assert.Contains(t, cond.Message, "--allow-file-urls")
	got := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got))
	stalled := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionStalled)
	require.NotNil(t, stalled, "only a human can fix the URL")
	assert.Equal(t, metav1.ConditionTrue, stalled.Status)
	assert.Empty(t, changeRequests(t, ns))
}
