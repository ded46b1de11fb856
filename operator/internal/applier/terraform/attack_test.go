package terraform

// Attacks on the apply: a pushed stack's provisioner tries the operator's
// credentials, and a runner dies mid-apply.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
)

// operatorCredential plants what an operator holds: a real token with
// the rights to create Approvals and read Secrets in the control
// namespace, in a token file, a kubeconfig file and the environment.
func (f *fixture) operatorCredential() (token, tokenFile, kubeconfig string) {
	t := f.t
	ctx := context.Background()
	sa := types.NamespacedName{Namespace: f.ctl, Name: "operator-like"}
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.Name, Namespace: sa.Namespace}}))
	require.NoError(t, env.GrantRole(ctx, f.ctl, "operator-like", sa, []rbacv1.PolicyRule{
		{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"approvals"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets"}))
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(f.ctl).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	token = tr.Status.Token
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	kubeconfig = filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: %s}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", env.Config.Host, token)), 0o600))
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("SLUICE_OPERATOR_TOKEN", token)
	return token, tokenFile, kubeconfig
}

// TestApply_aProvisionerCannotUseTheOperatorsCredentials: a medium-risk
// create whose local-exec tries the operator's token (environment, token
// file, kubeconfig) to create an Approval and to read a Secret. Both fail;
// the change fails with its reason recorded, and no credential and no
// Secret content is in what comes back.
func TestApply_aProvisionerCannotUseTheOperatorsCredentials(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	token, tokenFile, kubeconfig := f.operatorCredential()
	const jewel = "crown-jewel-value-0123456789"
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "jewels", Namespace: f.ctl}, StringData: map[string]string{"v": jewel}}))

	api := env.Config.Host
	approval := fmt.Sprintf(`{"apiVersion":"gitops.sluice.dev/v1alpha1","kind":"Approval","metadata":{"name":"forged"},"spec":{"release":"db-staging","approvalDigest":"sha256:%064d","decision":"approve","approver":"k8s:system:serviceaccount:%s:operator-like","groups":["system:serviceaccounts","system:serviceaccounts:%s","system:authenticated"],"source":"kubernetes"}}`, 0, f.ctl, f.ctl)
	// The script travels with the stack; it prints a marker for every
	// attempt that worked.
	script := fmt.Sprintf(`for T in "$SLUICE_OPERATOR_TOKEN" "$(cat %[1]s)" "$(sed -n 's/.*token: //p' %[2]s)" "$(sed -n 's/.*token: //p' "$KUBECONFIG")"; do
  echo "got:$(printf %%s "$T" | wc -c)"
  c=$(curl -sk -m 5 -o /dev/null -w '%%{http_code}' -X POST -H "Authorization: Bearer $T" -H "Content-Type: application/json" %[3]s/apis/gitops.sluice.dev/v1alpha1/namespaces/%[4]s/approvals -d '%[5]s')
  [ "$c" = 201 ] && echo APPROVAL-CREATED
  c=$(curl -sk -m 5 -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $T" %[3]s/api/v1/namespaces/%[4]s/secrets/jewels)
  [ "$c" = 200 ] && echo SECRET-READ
done
echo attempts-done
exit 1
`, tokenFile, kubeconfig, api, f.ctl, approval)
	mainTF := stackTF + "\nresource \"terraform_data\" \"steal\" {\n  provisioner \"local-exec\" {\n    command = \"sh attack.sh\"\n  }\n}\n"
	cr := f.changeWith(map[string][]byte{"services/db/terraform/main.tf": []byte(mainTF), "services/db/terraform/attack.sh": []byte(script)}, "small")

	_, err := f.applier.Apply(ctx, f.request(cr))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	t.Log(err)
	var approvals sluicev1.ApprovalList
	require.NoError(t, env.Client.List(ctx, &approvals, client.InNamespace(f.ctl)))
	require.Empty(t, approvals.Items, "no Approval was created with the operator's credential")
	// The provisioner's output is withheld from the error (it may quote
	// what the run read); terraform's full text is in its Details.
	var runErr *tf.RunError
	require.ErrorAs(t, err, &runErr)
	details := runErr.DetailsText()
	require.Contains(t, details, "attempts-done", "the provisioner ran")
	require.NotRegexp(t, `got: *[1-9]`, details, "the operator's credential reached the runner")
	for _, text := range []string{err.Error(), fail.Message, details} {
		require.NotContains(t, text, "APPROVAL-CREATED")
		require.NotContains(t, text, "SECRET-READ")
		require.NotContains(t, text, token)
		require.NotContains(t, text, jewel)
		require.NotContains(t, text, base64.StdEncoding.EncodeToString([]byte(jewel)), "the Secret was not read")
	}
}

// TestApply_aRunnerKilledMidApplyNeverAppliesTwice: the runner dies while
// the apply runs (its provisioner has started: the resource is being
// created). The operator retries; the plan may have been applied, so the
// retry only looks: the change ends StalePlan or in place, and the
// provisioner ran once.
func TestApply_aRunnerKilledMidApplyNeverAppliesTwice(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	var hits atomic.Int32
	started := make(chan struct{}, 10)
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		started <- struct{}{}
	}))
	defer counter.Close()
	u, _ := url.Parse(counter.URL)
	port, _ := strconv.Atoi(u.Port())

	mainTF := stackTF + fmt.Sprintf("\nresource \"terraform_data\" \"slow\" {\n  input = var.size\n  provisioner \"local-exec\" {\n    command = \"curl -s -m 5 %s/applied; sleep 30\"\n  }\n}\n", counter.URL)
	cr := f.changeOf(mainTF, "small")

	var pid atomic.Int32
	local := &runner.Local{AllowPorts: []uint16{uint16(port)}}
	local.SetStarted(func(p int) { pid.Store(int32(p)) })
	a := newApplier(t, local)
	done := make(chan error, 1)
	go func() { _, err := a.Apply(ctx, f.request(cr)); done <- err }()
	<-started // the apply is under way
	require.NoError(t, syscall.Kill(-int(pid.Load()), syscall.SIGKILL), "kill the runner and everything it started")
	err := <-done
	require.Error(t, err)
	_, permanent := applier.AsFailure(err)
	require.False(t, permanent, "a lost runner is retried: %v", err)
	// The dead run's lock is freed at once, not when its credential
	// expires: the next change of the release can take it.
	var lease coordinationv1.Lease
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ctl, Name: "lock-tfstate-default-" + f.release.Name}, &lease))
	require.Nil(t, lease.Spec.HolderIdentity, "the dead run's lock is freed")

	// The retry only looks; the state does not hold the approved
	// configuration (the run died before it saved), so: StalePlan.
	_, err = a.Apply(ctx, f.request(cr))
	appliertest.RequireFailure(t, err, sluicev1.ReasonStalePlan)
	require.EqualValues(t, 1, hits.Load(), "the plan was applied once")
}
