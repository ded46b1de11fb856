package helm

// End-to-end tests through the operator's manager (gate, apply lock,
// reconcilers) with this applier registered for delivery helm, as
// cmd/operator registers it. The manager runs in a child process (this test
// binary re-run in "operator" mode), so a crash is a real SIGKILL and a
// restart a new process.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

// childEnv names the file with the child operator's settings; set, the test
// binary runs the operator instead of the tests.
const childEnv = "SLUICE_HELM_TEST_OPERATOR"

// childConfig is what the child operator needs: the API server, the
// artifact server and the control namespace to watch.
type childConfig struct {
	Host         string `json:"host"`
	CAData       []byte `json:"caData"`
	CertData     []byte `json:"certData"`
	KeyData      []byte `json:"keyData"`
	BearerToken  string `json:"bearerToken"`
	ArtifactBase string `json:"artifactBase"`
	Namespace    string `json:"namespace"`
	// Also are more control namespaces to watch.
	Also []string `json:"also,omitempty"`
	// Wait, Timeout, ReadyPoll: the Helm applier's flags.
	Wait      bool          `json:"wait,omitempty"`
	Timeout   time.Duration `json:"timeout,omitempty"`
	ReadyPoll time.Duration `json:"readyPoll,omitempty"`
	// Concurrency is the reconcilers' (the operator's default when 0).
	Concurrency int `json:"concurrency,omitempty"`
}

// runChildOperator is the child process: the operator's manager with the
// Helm applier, until SIGTERM or SIGKILL.
func runChildOperator(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var cc childConfig
	if err := json.Unmarshal(b, &cc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := &rest.Config{Host: cc.Host, BearerToken: cc.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData, CertData: cc.CertData, KeyData: cc.KeyData}}
	log := zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	// Registered exactly as cmd/operator registers it.
	reg := applier.Registry{}
	flags := &Flags{ArtifactBaseURL: cc.ArtifactBase, Wait: cc.Wait, Timeout: cc.Timeout, ReadyPoll: cc.ReadyPoll}
	if err := flags.Register(reg, cfg, log.WithName("helm")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	mgr, err := controller.NewManager(ctx, cfg, controller.ManagerOptions{
		Options: controller.Options{
			Appliers:          reg,
			LockRetryInterval: time.Second,
			Concurrency:       cc.Concurrency,
		},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: append([]string{cc.Namespace}, cc.Also...),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// childOperator is a running child process.
type childOperator struct {
	cmd  *exec.Cmd
	done chan struct{}
	// log is the file the child logs to (at V(1)).
	log string
}

// startOperator starts the operator in a child process watching f.ctl.
func startOperator(t *testing.T, f *fixture, name string) *childOperator {
	t.Helper()
	return startOperatorWith(t, f, name, nil)
}

// startOperatorWith starts the operator in a child process watching f.ctl,
// with the settings set changes.
func startOperatorWith(t *testing.T, f *fixture, name string, set func(*childConfig)) *childOperator {
	t.Helper()
	dir := t.TempDir()
	cc := childConfig{
		Host: env.Config.Host, CAData: env.Config.CAData, CertData: env.Config.CertData, KeyData: env.Config.KeyData,
		BearerToken: env.Config.BearerToken, ArtifactBase: server.BaseURL(), Namespace: f.ctl,
	}
	if set != nil {
		set(&cc)
	}
	b, err := json.Marshal(cc)
	require.NoError(t, err)
	file := filepath.Join(dir, "operator.json")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	exe, err := os.Executable()
	require.NoError(t, err)
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+file)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	op := &childOperator{cmd: cmd, done: make(chan struct{}), log: logFile.Name()}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(op.done)
	}()
	t.Cleanup(func() {
		op.kill()
		if t.Failed() || os.Getenv("SLUICE_TEST_LOGS") != "" {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("%s log:\n%s", name, tail(out, 6000))
			}
		}
	})
	return op
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// kill ends the child with SIGKILL, as a crash would, and waits for it.
func (o *childOperator) kill() {
	if o.cmd.Process != nil {
		_ = o.cmd.Process.Kill()
	}
	<-o.done
}

// install creates the Repository, the Release and the RBAC objects of the
// fixture in the API server, as the syncer and the platform team would.
func (f *fixture) createObjects(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	repo := f.repo.DeepCopy()
	require.NoError(t, env.Client.Create(ctx, repo))
	f.repo = repo
	rel := f.release.DeepCopy()
	rel.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(t, env.Client.Create(ctx, rel))
	f.release = rel
}

// submit creates an auto-approvable ChangeRequest in the API server.
func (f *fixture) submit(t *testing.T, cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	t.Helper()
	cr.Labels = map[string]string{sluicev1.LabelRelease: f.release.Name}
	cr.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(t, env.Client.Create(context.Background(), cr))
	return cr
}

// waitPhase waits for a terminal or given phase of a ChangeRequest.
func waitPhase(t *testing.T, cr *sluicev1.ChangeRequest, want sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	t.Helper()
	got, err := env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), want, 90*time.Second)
	require.NoError(t, err)
	return got
}

func TestOperator_appliesUpgradesRefusesAndUninstallsThroughTheManager(t *testing.T) {
	f := newFixture(t)
	f.createObjects(t)
	startOperator(t, f, "operator")

	first := waitPhase(t, f.submit(t, f.change("message: one\n", changeOpts{})), sluicev1.PhaseApplied)
	require.Equal(t, int32(1), first.Status.Apply.HelmRevision)
	require.Equal(t, Name, first.Status.Apply.Applier)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "one", cm.Data["message"])

	second := waitPhase(t, f.submit(t, f.change("message: two\n", changeOpts{})), sluicev1.PhaseApplied)
	require.Equal(t, int32(2), second.Status.Apply.HelmRevision)

	approved := "message: three\n"
	refused := waitPhase(t, f.submit(t, f.change("message: tampered\n", changeOpts{approvedValues: &approved})), sluicev1.PhaseFailed)
	require.Contains(t, refused.Status.Apply.Message, sluicev1.ReasonManifestMismatch)
	require.Len(t, f.helmHistory(), 2, "the refused change made no revision")
	cm, err = f.configMap()
	require.NoError(t, err)
	require.Equal(t, "two", cm.Data["message"])

	// Deleting the Release uninstalls its Helm release before it goes.
	require.NoError(t, env.Client.Delete(context.Background(), f.release))
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), &sluicev1.Release{})
		if apierrors.IsNotFound(err) {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the Release was never deleted")
		time.Sleep(100 * time.Millisecond)
	}
	f.requireNothingInstalled()
}

// holdingWebhook is a validating admission webhook that holds the first
// matching request until released, so a test can kill the operator while
// Helm is in the middle of an install.
type holdingWebhook struct {
	srv      *httptest.Server
	held     chan struct{}
	release  chan struct{}
	holdOnce sync.Once
	mu       sync.Mutex
	seen     int
}

// newHoldingWebhook holds the first CREATE of the ConfigMap named hold in
// namespace; other ConfigMaps pass at once (the test probes with them until
// the API server calls the webhook).
func newHoldingWebhook(t *testing.T, namespace, hold string) *holdingWebhook {
	h := &holdingWebhook{held: make(chan struct{}), release: make(chan struct{})}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.seen++
		h.mu.Unlock()
		first := false
		if review.Request.Name == hold {
			h.holdOnce.Do(func() { first = true })
		}
		if first {
			close(h.held)
			// Held until the test lets it go or the API server gives up
			// on the webhook (its timeout): no clock of the test's own,
			// which a busy machine could outrun.
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	h.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	t.Cleanup(h.srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
	url := h.srv.URL + "/hold"
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-" + namespace},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "hold.test.sluice.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(30)),
		}},
	}
	require.NoError(t, env.Client.Create(context.Background(), cfg))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	// The API server picks the configuration up asynchronously: probe with
	// dry-run creates until the webhook is called.
	for i := 0; ; i++ {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: namespace}}
		_ = env.Client.Create(context.Background(), probe, client.DryRunAll)
		h.mu.Lock()
		seen := h.seen
		h.mu.Unlock()
		if seen > 0 {
			return h
		}
		require.Less(t, i, 600, "the API server never called the webhook")
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOperator_killedDuringTheInstallEndsWithOneRevisionAndTheChangeApplied(t *testing.T) {
	f := newFixture(t)
	f.createObjects(t)
	hook := newHoldingWebhook(t, f.target, f.release.Name+"-config")
	cr := f.submit(t, f.change("message: survives a crash\n", changeOpts{}))

	first := startOperator(t, f, "operator-before-crash")
	select {
	case <-hook.held:
	case <-time.After(90 * time.Second):
		t.Fatal("the install never reached the ConfigMap")
	}
	// Helm is creating the chart's objects: its record says pending-install.
	h := f.helmHistory()
	require.Len(t, h, 1)
	require.Equal(t, release.StatusPendingInstall, h[0].Info.Status)
	first.kill()
	close(hook.release)

	waitPhase(t, cr, sluicev1.PhaseApplying) // still Applying: nobody finished it.
	startOperator(t, f, "operator-after-crash")
	done := waitPhase(t, cr, sluicev1.PhaseApplied)

	successful := 0
	for _, r := range f.helmHistory() {
		require.False(t, r.Info.Status.IsPending(), "revision %d left %s", r.Version, r.Info.Status)
		if r.Info.Status == release.StatusDeployed || r.Info.Status == release.StatusSuperseded {
			successful++
		}
	}
	require.Equal(t, 1, successful, "exactly one successful Helm revision")
	require.NotZero(t, done.Status.Apply.HelmRevision)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "survives a crash", cm.Data["message"])
}

func TestOperator_aChangeTheServiceAccountMayNotApplyFailsWithAReadableReason(t *testing.T) {
	f := newFixture(t, withoutRBAC())
	f.createObjects(t)
	startOperator(t, f, "operator")

	failed := waitPhase(t, f.submit(t, f.change("message: hi\n", changeOpts{})), sluicev1.PhaseFailed)
	applied := meta.FindStatusCondition(failed.Status.Conditions, sluicev1.ConditionApplied)
	require.NotNil(t, applied)
	require.Equal(t, sluicev1.ReasonApplyFailed, applied.Reason)
	require.Contains(t, applied.Message, "system:serviceaccount:"+f.ctl+":deployer may not do this in namespace "+f.target)
	f.requireNothingInstalled()

	// The platform team narrows the Repository: the next change may not go
	// to this namespace at all.
	repo := &sluicev1.Repository{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.repo), repo))
	repo.Spec.TargetNamespaces = []string{"payments-*"}
	require.NoError(t, env.Client.Update(context.Background(), repo))
	failed = waitPhase(t, f.submit(t, f.change("message: again\n", changeOpts{})), sluicev1.PhaseFailed)
	applied = meta.FindStatusCondition(failed.Status.Conditions, sluicev1.ConditionApplied)
	require.NotNil(t, applied)
	require.Equal(t, sluicev1.ReasonNamespaceNotAllowed, applied.Reason)
	f.requireNothingInstalled()
}
