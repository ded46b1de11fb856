package argocd

// The Sluice config management plugin: Argo CD's repo-server asks it for an
// Application's manifests, and it answers with the approved manifest of the
// change being delivered, or fails. Argo CD therefore never renders a
// Sluice release itself: what it applies is exactly what hashes to the
// approved manifestDigest.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/approved"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// PluginName is the name of the Sluice config management plugin, as the
// Applications name it (spec.source.plugin.name) and as its
// ConfigManagementPlugin declares it (the socket is "<name>.sock").
const PluginName = "sluice"

// CMPCommand is the operator's subcommand that runs the plugin:
// `operator argocd-cmp generate --artifact-base-url …`.
const CMPCommand = "argocd-cmp"

// CMP renders, for Argo CD, the approved manifest of the change an
// Application delivers.
type CMP struct {
	// Client reads Releases and ChangeRequests (get only).
	Client client.Reader
	// Fetcher downloads and verifies artifacts, as the Helm applier's.
	Fetcher *artifact.Fetcher
	// KubeVersion is the Kubernetes version charts are rendered for; the
	// validator's (empty: helmcheck's default).
	KubeVersion string
}

// Generate writes the approved manifest of the change the Application
// named in env is syncing to w. env is the plugin's environment as Argo CD
// sets it (ARGOCD_APP_NAME "<namespace>_<name>" of the Application,
// ARGOCD_APP_REVISION the checked-out commit).
//
// It trusts nothing the repository or the Application's plugin settings
// can change: the change is the Release's apply lock (or, once applied,
// its applied change), it must be approved and at the checked-out commit,
// its artifact is verified as the Helm applier verifies it, and the chart
// rendered from the verified content must hash to manifestDigest. Plugin
// parameters or env, which a repository's .argocd-source*.yaml or an edit
// of the Application could set, are refused.
func (p *CMP) Generate(ctx context.Context, env []string, w io.Writer) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	if err := refuseOverrides(vars); err != nil {
		return err
	}
	ns, name, ok := strings.Cut(vars["ARGOCD_APP_NAME"], "_")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("the Application %q is not a Sluice Application: Sluice's live in a Release's control namespace, named after the Release", vars["ARGOCD_APP_NAME"])
	}
	rev := vars["ARGOCD_APP_REVISION"]
	if !commitSHA.MatchString(rev) {
		return fmt.Errorf("Argo CD checked out %q, not a full commit id", rev)
	}
	cr, err := p.approvedChange(ctx, ns, name, rev)
	if err != nil {
		return err
	}
	content, err := p.Fetcher.FetchChange(ctx, cr)
	if err != nil {
		return fmt.Errorf("change %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	defer func() { _ = content.Close() }()
	rendered, err := renderApproved(ctx, content.Dir, cr, p.KubeVersion)
	if err != nil {
		return fmt.Errorf("change %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	_, err = io.WriteString(w, rendered)
	return err
}

// refuseOverrides refuses plugin env (ARGOCD_ENV_*) and parameters
// (ARGOCD_APP_PARAMETERS, PARAM_*): Sluice's Applications set none, so any
// come from a repository override file or an edit of the Application.
func refuseOverrides(vars map[string]string) error {
	var set []string
	for k := range vars {
		if strings.HasPrefix(k, "ARGOCD_ENV_") || strings.HasPrefix(k, "PARAM_") {
			set = append(set, k)
		}
	}
	if p := strings.TrimSpace(vars["ARGOCD_APP_PARAMETERS"]); p != "" && p != "null" && p != "[]" {
		set = append(set, "ARGOCD_APP_PARAMETERS")
	}
	if len(set) == 0 {
		return nil
	}
	slices.Sort(set)
	return fmt.Errorf("refused: the Sluice plugin takes no parameters or env, and %s is set (by a .argocd-source*.yaml in the repository or an edit of the Application); only the approved manifest is delivered", strings.Join(set, ", "))
}

// approvedChange is the change of Release ns/name that Argo CD may render
// at commit rev: the one holding the apply lock while it applies, or the
// applied one afterwards (Argo CD renders again when it refreshes). Only
// the Release's status is read (which change holds the lock, which was
// applied); what to render comes from that change.
func (p *CMP) approvedChange(ctx context.Context, ns, name, rev string) (*sluicev1.ChangeRequest, error) {
	rel := &sluicev1.Release{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rel); err != nil {
		return nil, fmt.Errorf("read the Release %s/%s: %w", ns, name, err)
	}
	try := func(change string, ok func(sluicev1.ChangeRequestPhase) bool) (*sluicev1.ChangeRequest, error) {
		if change == "" {
			return nil, nil
		}
		cr := &sluicev1.ChangeRequest{}
		if err := p.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: change}, cr); err != nil {
			return nil, fmt.Errorf("read the ChangeRequest %s/%s: %w", ns, change, err)
		}
		if cr.Spec.Release != name || cr.Spec.Revision != rev || !ok(cr.Status.Phase) {
			return nil, nil
		}
		if cr.Spec.Delivery != sluicev1.DeliveryArgoCD || cr.Spec.Operation == sluicev1.OperationDelete {
			return nil, fmt.Errorf("the ChangeRequest %s/%s is not delivered through Argo CD", ns, change)
		}
		return cr, nil
	}
	applying := func(p sluicev1.ChangeRequestPhase) bool { return p == sluicev1.PhaseApplying }
	cr, err := try(rel.Status.CurrentChange, applying)
	if err == nil && cr == nil {
		// Applied, or verifying or verified since.
		cr, err = try(rel.Status.AppliedChange, sluicev1.ChangeRequestPhase.WasApplied)
	}
	if err != nil {
		return nil, err
	}
	if cr == nil {
		return nil, fmt.Errorf("refused: no approved change of the Release %s/%s is being applied at commit %s (applying %q, applied %q)",
			ns, name, sluicev1.ShortSHA(rev), rel.Status.CurrentChange, rel.Status.AppliedChange)
	}
	return cr, nil
}

// renderApproved renders what the change approved from the verified
// content dir exactly as the validator did: the chart and values files
// package approved loads (a chart folder, a chart a chart repository
// served, fetched into the artifact and checked against the change's chart
// digest, or the chart generated from a Kustomize overlay or a manifests
// folder; the Helm applier loads the same), rendered by helmcheck.Render
// with the same release name, namespace and Kubernetes version. It returns
// the manifests and hooks only if they hash to the change's
// manifestDigest. Nothing is fetched from a chart repository.
func renderApproved(ctx context.Context, dir string, cr *sluicev1.ChangeRequest, kubeVersion string) (string, error) {
	if !sluicev1.ValidDigest(string(cr.Spec.ManifestDigest)) {
		return "", errors.New("the change records no manifestDigest, so nothing can be checked against it")
	}
	src := cr.Spec.Source
	if src == nil {
		return "", errors.New("the change records no source, so its service folder is unknown")
	}
	in, err := approved.Load(dir, cr, src, sluicev1.DeliveryArgoCD)
	if err != nil {
		return "", err
	}
	res, err := helmcheck.Render(ctx, helmcheck.Options{
		Loaded: in.Chart, Generated: in.Generated, ValuesFiles: in.ValuesFiles,
		ReleaseName: cr.Spec.Release, Namespace: cr.Spec.TargetNamespace, KubeVersion: kubeVersion,
	})
	if err != nil {
		return "", errors.New(approved.ScrubPath(err, dir))
	}
	if res.ManifestDigest == "" {
		return "", fmt.Errorf("the approved chart does not render: %v", res.Findings)
	}
	if res.ManifestDigest != string(cr.Spec.ManifestDigest) {
		return "", fmt.Errorf("%w: rendered %s, approved %s", helmcheck.ErrManifestMismatch, res.ManifestDigest, cr.Spec.ManifestDigest)
	}
	for _, o := range res.Objects {
		if o.CRDFolder {
			// The manifestDigest does not cover a chart's crds/ folder.
			return "", fmt.Errorf("refused: the chart has a crds/ folder (%s), which Argo CD delivery does not install", o.ID())
		}
	}
	return res.Rendered, nil
}

// RunCMP is `operator argocd-cmp generate [flags]`, the command of the
// Sluice ConfigManagementPlugin: it prints the approved manifest of the
// Application Argo CD is rendering to stdout and returns 0, or prints why
// not to stderr and returns 1 (Argo CD then fails the sync with it).
func RunCMP(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(CMPCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kubeconfig, baseURL, tokenFile, kubeVersion string
		timeout                                     time.Duration
	)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of an identity that may get Releases and ChangeRequests (default: KUBECONFIG, then in-cluster).")
	fs.StringVar(&baseURL, "artifact-base-url", "", "Base URL of the syncer's artifact server, as the operator's --artifact-base-url.")
	fs.StringVar(&tokenFile, "artifact-token-file", "", "File holding the artifact server's bearer token, as the operator's --artifact-token-file.")
	fs.StringVar(&kubeVersion, "helm-kube-version", "", "Kubernetes version charts are rendered for; the validator's (default: Helm's default).")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "How long one generate may take.")
	if len(args) == 0 || args[0] != "generate" {
		_, _ = fmt.Fprintf(stderr, "usage: %s generate [flags]\n", CMPCommand)
		fs.PrintDefaults()
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if err := runCMP(kubeconfig, baseURL, tokenFile, kubeVersion, timeout, stdout); err != nil {
		_, _ = fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 1
	}
	return 0
}

func runCMP(kubeconfig, baseURL, tokenFile, kubeVersion string, timeout time.Duration, stdout io.Writer) error {
	if baseURL == "" {
		return errors.New("--artifact-base-url is required")
	}
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme, err := sluicev1.SchemeBuilder.Build()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create API client: %w", err)
	}
	fetcher, err := artifact.NewFetcher(baseURL, artifact.WithTokenFile(tokenFile))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The manifest is written only once it is complete and verified.
	var out strings.Builder
	p := &CMP{Client: c, Fetcher: fetcher, KubeVersion: kubeVersion}
	if err := p.Generate(ctx, os.Environ(), &out); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, out.String())
	return err
}
