package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Argo CD in pods (issue 27): its CRDs, installed before charts/sluice
// (the operator registers its Argo CD applier only when the Application
// kind is served at its start), and its application controller,
// repo-server with the Sluice plugin sidecar and Redis, in namespace
// argocd, from the images hack/realnode/images.sh builds (no registry).
const (
	argocdNS      = "argocd"
	argocdVersion = "v2.14.21"
	argocdImage   = "sluice.local/argocd:" + argocdVersion
	redisImage    = "sluice.local/redis:e2e"
	argocdModule  = "github.com/argoproj/argo-cd/v2"
	// argoNS is where the Argo CD test's service deploys ("web-*" is
	// one of the Repository's target namespaces).
	argoNS  = "web-argocd"
	argoRel = "argo-e2e"
)

// argocdUser is Argo CD's uid in its images and pods (upstream's "argocd"
// user), the one the documented sidecar runs as too.
const argocdUser = 999

// installArgoCDCRDs creates Argo CD's namespace and its Application and
// AppProject CRDs from the manifests of the argo-cd module (the version
// `make argocd` builds, fetched into the Go module cache), and waits until
// they are established.
func (c *cluster) installArgoCDCRDs(ctx context.Context) error {
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: argocdNS}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", argocdNS, err)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", argocdModule+"@"+argocdVersion)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s (its manifests/crds hold the CRDs): %w", argocdModule, argocdVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download %s@%s gave no folder (%v): %s", argocdModule, argocdVersion, err, out)
	}
	for _, f := range []string{"application-crd.yaml", "appproject-crd.yaml"} {
		data, err := os.ReadFile(filepath.Join(mod.Dir, "manifests", "crds", f))
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := c.c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", u.GetName(), err)
		}
		name := u.GetName()
		if err := pollCtx(ctx, func() (bool, error) {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := c.c.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, fmt.Errorf("CRD %s not established", name)
		}); err != nil {
			return err
		}
	}
	return nil
}

// pollCtx polls cond until it holds, for at most waitLimit (TestMain has
// no *testing.T for eventually).
func pollCtx(ctx context.Context, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out: %v", last)
		case <-waitTick():
		}
	}
}

// waitTick is pollCtx's polling interval, not a wait for an outcome.
func waitTick() <-chan time.Time { return time.After(500 * time.Millisecond) }

// installArgoCD runs Argo CD's application controller (watching
// Applications in the control namespace too: "apps in any namespace"),
// its repo-server with the Sluice plugin sidecar exactly as
// charts/sluice/README.md documents it (the operator image running
// argocd-cmp-server, which the copyutil init container put into the
// var-files volume, as upstream's manifests do), and Redis, and waits
// until their pods are Ready. The chart (argocd.enabled) made the plugin's
// ConfigMap and token Secret in argocd and bound the plugin's rights.
func (c *cluster) installArgoCD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cmp := releaseName + "-argocd-cmp"
	for _, get := range []func() error{
		func() error {
			_, err := c.cs.CoreV1().ConfigMaps(argocdNS).Get(ctx, cmp, metav1.GetOptions{})
			return err
		},
		func() error { _, err := c.cs.CoreV1().Secrets(argocdNS).Get(ctx, cmp, metav1.GetOptions{}); return err },
	} {
		if err := get(); err != nil {
			t.Fatalf("charts/sluice (argocd.enabled) did not make the plugin's %s in %s: %v", cmp, argocdNS, err)
		}
	}
	ops := c.pods(t, sluiceNS, componentSelector("operator"))
	if len(ops) == 0 {
		t.Fatal("no operator pod: the plugin sidecar runs the operator's image")
	}
	operatorImage := ops[0].Spec.Containers[0].Image

	labels := func(name string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "argocd"}
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: argocdNS, Labels: labels(name)}
	}
	empty := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	secure := &corev1.SecurityContext{
		RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(argocdUser)), ReadOnlyRootFilesystem: ptr(true),
		AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	// One binary, the component chosen by name (cmd/main.go of Argo CD).
	argoEnv := func(component string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "ARGOCD_BINARY_NAME", Value: component}, {Name: "HOME", Value: "/home/argocd"},
			{Name: "ARGOCD_GPG_ENABLED", Value: "false"}}
	}
	mem := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}}
	}
	probe := func(port int, path string) *corev1.Probe {
		h := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(port)}}
		if path != "" {
			h = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}}
		}
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 2}
	}
	deployment := func(name string, spec corev1.PodSpec) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: meta(name), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels(name)},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels(name)}, Spec: spec},
		}}
	}
	service := func(name string, port int) *corev1.Service {
		return &corev1.Service{ObjectMeta: meta(name), Spec: corev1.ServiceSpec{Selector: labels(name),
			Ports: []corev1.ServicePort{{Name: "tcp", Port: int32(port), TargetPort: intstr.FromInt(port)}}}}
	}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: meta("argocd-cm")},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-rbac-cm")},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-cmd-params-cm")},
		// Without server.secretkey Argo CD's settings are "incomplete".
		&corev1.Secret{ObjectMeta: meta("argocd-secret"), StringData: map[string]string{"server.secretkey": "e2e-only"}},
		&corev1.ServiceAccount{ObjectMeta: meta("argocd-application-controller")},
		// The plugin's rights (get Releases and ChangeRequests in the
		// control namespace) are the chart's, bound to this name.
		&corev1.ServiceAccount{ObjectMeta: meta("argocd-repo-server")},
		// Upstream's controller may do anything (it syncs any kind); the
		// AppProject Sluice keeps per Repository bounds what it does.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-argocd-application-controller"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-argocd-application-controller"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-argocd-application-controller"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "argocd-application-controller", Namespace: argocdNS}}},
		deployment("argocd-redis", corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "redis", Image: redisImage, ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--save", "", "--appendonly", "no", "--protected-mode", "no", "--bind", "0.0.0.0", "--port", "6379", "--dir", "/tmp"},
				SecurityContext: secure, Resources: mem("16Mi"), ReadinessProbe: probe(6379, ""),
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{empty("tmp")},
		}),
		service("argocd-redis", 6379),
		c.repoServer(deployment, operatorImage, secure, argoEnv("argocd-repo-server"), probe(8084, "/healthz"), mem("128Mi")),
		service("argocd-repo-server", 8081),
	}
	ctrl := deployment("argocd-application-controller", corev1.PodSpec{
		ServiceAccountName: "argocd-application-controller",
		Containers: []corev1.Container{{
			Name: "argocd-application-controller", Image: argocdImage, ImagePullPolicy: corev1.PullNever,
			Env: argoEnv("argocd-application-controller"),
			Args: []string{"--application-namespaces", controlNS, "--repo-server", "argocd-repo-server:8081", "--repo-server-plaintext",
				"--redis", "argocd-redis:6379", "--loglevel", "info", "--app-resync", "30"},
			SecurityContext: secure, Resources: mem("128Mi"), ReadinessProbe: probe(8082, "/healthz"),
			VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "home", MountPath: "/home/argocd"}},
		}},
		Volumes: []corev1.Volume{empty("tmp"), empty("home")},
	})
	// A StatefulSet as upstream's: the controller reads its shard from the
	// pod name's ordinal.
	objs = append(objs, &appsv1.StatefulSet{ObjectMeta: ctrl.ObjectMeta, Spec: appsv1.StatefulSetSpec{
		ServiceName: "argocd-application-controller", Selector: ctrl.Spec.Selector, Template: ctrl.Spec.Template}})
	for _, o := range objs {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating Argo CD's %T %s: %v", o, o.GetName(), err)
		}
	}
	for _, name := range []string{"argocd-redis", "argocd-repo-server", "argocd-application-controller"} {
		eventually(t, "Argo CD's "+name+" pod Ready", func() (bool, error) {
			pods := c.pods(t, argocdNS, "app.kubernetes.io/name="+name)
			for i := range pods {
				if ready(&pods[i]) {
					return true, nil
				}
			}
			return false, fmt.Errorf("%d pods, none Ready%s", len(pods), podStates(pods))
		})
	}
}

// repoServer is Argo CD's repo-server Deployment with the Sluice plugin
// sidecar of charts/sluice/README.md ("Argo CD"), the sidecar verbatim.
func (c *cluster) repoServer(deployment func(string, corev1.PodSpec) *appsv1.Deployment, operatorImage string,
	secure *corev1.SecurityContext, env []corev1.EnvVar, readiness *corev1.Probe, mem corev1.ResourceRequirements) *appsv1.Deployment {
	cmp := releaseName + "-argocd-cmp"
	empty := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	return deployment("argocd-repo-server", corev1.PodSpec{
		ServiceAccountName: "argocd-repo-server",
		// Upstream's copyutil: the sidecar runs Argo CD's binary from
		// the shared var-files volume.
		InitContainers: []corev1.Container{{
			Name: "copyutil", Image: argocdImage, ImagePullPolicy: corev1.PullNever,
			Command:         []string{"/usr/bin/cp", "-n", "/usr/local/bin/argocd", "/var/run/argocd/argocd-cmp-server"},
			SecurityContext: secure,
			VolumeMounts:    []corev1.VolumeMount{{Name: "var-files", MountPath: "/var/run/argocd"}},
		}},
		Containers: []corev1.Container{
			{
				Name: "argocd-repo-server", Image: argocdImage, ImagePullPolicy: corev1.PullNever,
				Env:             env,
				Args:            []string{"--redis", "argocd-redis:6379", "--disable-tls", "--loglevel", "info"},
				SecurityContext: secure, Resources: mem, ReadinessProbe: readiness,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "var-files", MountPath: "/var/run/argocd"},
					{Name: "home", MountPath: "/home/argocd"},
					{Name: "plugins", MountPath: "/home/argocd/cmp-server/plugins"},
					{Name: "tmp", MountPath: "/tmp"},
				},
			},
			{
				Name:    "sluice",
				Image:   operatorImage,
				Command: []string{"/var/run/argocd/argocd-cmp-server"},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(argocdUser)), ReadOnlyRootFilesystem: ptr(true),
					AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				Env: []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "var-files", MountPath: "/var/run/argocd"},
					{Name: "plugins", MountPath: "/home/argocd/cmp-server/plugins"},
					{Name: "sluice-cmp", MountPath: "/home/argocd/cmp-server/config/plugin.yaml", SubPath: "plugin.yaml"},
					{Name: "sluice-token", MountPath: "/etc/sluice/tokens", ReadOnly: true},
					{Name: "sluice-tmp", MountPath: "/tmp"},
				},
			},
		},
		Volumes: []corev1.Volume{
			empty("var-files"), empty("plugins"), empty("home"), empty("tmp"),
			{Name: "sluice-cmp", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cmp}}}},
			{Name: "sluice-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cmp}}},
			empty("sluice-tmp"),
		},
	})
}

// podStates says, per pod, what its containers wait on, for a wait's
// reason.
func podStates(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s/%s waiting: %s %s", p.Name, s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
				fmt.Fprintf(&b, "; %s/%s exited %d: %s", p.Name, s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Message)
			case s.RestartCount > 0:
				fmt.Fprintf(&b, "; %s/%s restarted %d times", p.Name, s.Name, s.RestartCount)
			}
		}
	}
	return b.String()
}

// TestArgoCDInPodsSyncsTheApprovedChangeThroughThePlugin: a service with
// delivery argocd, pushed and approved with `kubectl sluice approve`, is
// delivered by Argo CD's own pods: the operator pod creates the
// Application, the application controller pod syncs it through the
// repo-server pod, whose Sluice plugin sidecar renders the approved
// manifest, and the change is Applied only once Argo CD reports that
// revision Synced and Healthy and the release's pods are Ready.
func TestArgoCDInPodsSyncsTheApprovedChangeThroughThePlugin(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	c.installArgoCD(t)
	repo := c.serveGit(t)
	// The Repository's ServiceAccount drives the Application in the
	// control namespace (the applier impersonates it).
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer-argocd", Namespace: controlNS}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: []string{"*"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer-argocd", Namespace: controlNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "infra-deployer-argocd"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "infra-deployer", Namespace: controlNS}}},
	} {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	writeService(t, repo.work, c.root, "argo", argoNS, 2, "5s")
	svcFile := filepath.Join(repo.work, "services", "argo", "service.yaml")
	data, err := os.ReadFile(svcFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svcFile, []byte(strings.Replace(string(data), "delivery: helm", "delivery: argocd", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	head := repo.commit(t, "argo: a service delivered by Argo CD")

	cr := c.waitChange(t, argoRel+"-"+head[:10], sluicev1.PhaseAwaitingApproval)
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"})
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: argoRel}, app); !apierrors.IsNotFound(err) {
		t.Fatalf("the Application exists before the change was approved (err %v)", err)
	}
	c.approve(t, cr.Name)

	eventually(t, cr.Name+" Applied through Argo CD", func() (bool, error) {
		got := &sluicev1.ChangeRequest{}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: cr.Name}, got); err != nil {
			return false, err
		}
		switch got.Status.Phase {
		case sluicev1.PhaseApplied:
			return true, nil
		case sluicev1.PhaseFailed:
			t.Fatalf("%s failed:%s", cr.Name, conditions(got.Status.Conditions))
		}
		status := "no Application yet"
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: argoRel}, app); err == nil {
			sync, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
			health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
			phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase")
			msg, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "message")
			status = fmt.Sprintf("Application sync %q health %q operation %q %s", sync, health, phase, msg)
		}
		return false, fmt.Errorf("phase %q, %s%s", got.Status.Phase, status, podStates(c.pods(t, argoNS, "")))
	})

	// Applied means Argo CD synced exactly the approved commit through
	// the plugin, and the release's pods run.
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: argoRel}, app); err != nil {
		t.Fatalf("reading the Application: %v", err)
	}
	for path, want := range map[string]string{
		"status.sync.status":                        "Synced",
		"status.sync.revision":                      head,
		"status.health.status":                      "Healthy",
		"status.operationState.phase":               "Succeeded",
		"status.sourceType":                         "Plugin",
		"spec.source.plugin.name":                   "sluice",
		"status.operationState.syncResult.revision": head,
	} {
		got, _, _ := unstructured.NestedString(app.Object, strings.Split(path, ".")...)
		if got != want {
			t.Errorf("Application %s = %q, want %q", path, got, want)
		}
	}
	deps, err := c.cs.AppsV1().Deployments(argoNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("want the release's one Deployment in %s: %v (%d)", argoNS, err, len(deps.Items))
	}
	d := deps.Items[0]
	if d.Status.ReadyReplicas != *d.Spec.Replicas || *d.Spec.Replicas != 2 {
		t.Fatalf("Deployment %s has %d of %d pods Ready when the change is Applied", d.Name, d.Status.ReadyReplicas, *d.Spec.Replicas)
	}
	t.Logf("%s Applied: Argo CD synced %s through the Sluice plugin sidecar, Healthy, %d pods Ready", cr.Name, head[:10], d.Status.ReadyReplicas)
}
