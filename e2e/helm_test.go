package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helmWait bounds Helm's own wait for the chart's pods; past it the
// install fails with what Helm still waited for.
const helmWait = 8 * time.Minute

// helmConfig is a Helm SDK action configuration for namespace ns, through
// the e2e kubeconfig.
func (c *cluster) helmConfig(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &c.kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, nil
}

// helmInstall installs the chart folder dir as release name into ns with
// vals and waits until its workloads are Ready.
func (c *cluster) helmInstall(ctx context.Context, ns, name, dir string, vals map[string]any) (*release.Release, error) {
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = name, ns
	in.Wait, in.Timeout = true, helmWait
	return in.RunWithContext(ctx, ch, vals)
}

// installSluice creates Sluice's namespace with Pod Security Admission
// "restricted" enforced and installs charts/sluice into it with the Helm
// SDK, waiting for the operator, the syncer and the runner to be Ready.
func (c *cluster) installSluice(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sluiceNS, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	// The control namespace too: the chart binds the syncer's rights there.
	for _, n := range []*corev1.Namespace{ns, {ObjectMeta: metav1.ObjectMeta{Name: controlNS}}} {
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", n.Name, err)
		}
	}
	// Before the chart: the operator registers its Argo CD applier only
	// when the Application kind is served at its start.
	if err := c.installArgoCDCRDs(ctx); err != nil {
		return fmt.Errorf("installing Argo CD's CRDs: %w", err)
	}
	return c.deploySluice(ctx, sluiceValues())
}

// sluiceValues are the chart values of the e2e install.
func sluiceValues() map[string]any {
	return map[string]any{
		// Two operator replicas: the fault tests delete the leader.
		"operator": map[string]any{
			"replicas": 2,
			// Three syncer and operator pairs once the shard test adds
			// its two shards, on one node of 2 cores: small requests
			// leave room for the tests' pods (the limits stay the
			// chart's).
			"resources": smallRequests("25m"),
			// A change is Applied only once the chart's pods are Ready.
			"helm": map[string]any{"wait": true},
			// The operator's state server keeps the Terraform state of
			// approved applies in the control namespace: its rights there
			// are bound only in these.
			"watchNamespaces": []any{controlNS},
			// Verifications query the Prometheus the verification test
			// runs on the node.
			// Delivery argocd: the operator reads git itself at the
			// approved commit (the infra repository the test serves).
			"egress": []any{map[string]any{"ports": []any{map[string]any{"port": promPort, "protocol": "TCP"},
				map[string]any{"port": gitPort, "protocol": "TCP"}}}},
		},
		// Delivery argocd (the Argo CD test runs Argo CD in pods): the
		// plugin's ConfigMap, token Secret and rights, the operator's
		// AppProject rights in argocd, and the repo-server's way to the
		// artifact port.
		"argocd": map[string]any{"enabled": true, "namespace": argocdNS},
		"syncer": map[string]any{
			"resources": smallRequests("50m"),
			// The infra repository is served by the test from the node,
			// and by Gitea in its pod (its API too).
			"gitPorts": []any{443, 22, gitPort, giteaPort},
			// Pull request previews post their commit status and review
			// comment, and confirm reviews, through Gitea's API with the
			// bot's token (the Secret the Gitea test writes).
			"statusProvider": map[string]any{"name": "gitea", "baseURL": giteaServiceURL, "tokenSecret": giteaTokenSecret},
			// The syncer's rights inside a control namespace (plan
			// Secrets, the review ConfigMap kubectl sluice diff shows) are
			// bound only in these: without it the review is never stored.
			"watchNamespaces": []any{controlNS},
		},
	}
}

// deploySluice installs charts/sluice with vals, or upgrades the release
// to them when it is there, and waits until every workload is Ready.
func (c *cluster) deploySluice(ctx context.Context, vals map[string]any) error {
	dir := filepath.Join(c.root, "charts", "sluice")
	// A node kept up between runs (up.sh, then the test binary run by hand
	// more than once) already has the release: upgrade it to these values.
	cfg, err := c.helmConfig(sluiceNS)
	if err != nil {
		return err
	}
	var r *release.Release
	if _, gerr := action.NewGet(cfg).Run(releaseName); gerr == nil {
		ch, err := loader.Load(dir)
		if err != nil {
			return fmt.Errorf("loading chart %s: %w", dir, err)
		}
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Wait, up.Timeout = sluiceNS, true, helmWait
		r, err = up.RunWithContext(ctx, releaseName, ch, vals)
		if err != nil {
			return err
		}
	} else if r, err = c.helmInstall(ctx, sluiceNS, releaseName, dir, vals); err != nil {
		return err
	}
	if r.Info.Status != release.StatusDeployed {
		return fmt.Errorf("release %s is %s", r.Name, r.Info.Status)
	}
	return nil
}

// smallRequests is a component's resources value asking for cpu only
// (memory and the limits stay the chart's defaults).
func smallRequests(cpu string) map[string]any {
	return map[string]any{"requests": map[string]any{"cpu": cpu}}
}
