package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/operator/api/crds"
	"github.com/sluice-gitops/sluice/operator/config"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
)

var update = flag.Bool("update", false, "rewrite the chart's copies of the CRDs, admission policies and user roles from their sources")

const (
	// chartDir is charts/sluice, seen from this package's folder.
	chartDir = "../../../charts/sluice"
	// releaseName and releaseNS are what the tests install the chart as;
	// the namespace is deliberately not the policy file's sluice-system.
	releaseName = "sluice"
	releaseNS   = "sluice-chart"
)

// The names the default values give the chart's ServiceAccounts.
var (
	syncerSA   = types.NamespacedName{Namespace: releaseNS, Name: "sluice-syncer"}
	operatorSA = types.NamespacedName{Namespace: releaseNS, Name: "sluice-operator"}
)

// validator is the infra-validator with Sluice's default policies, compiled
// once: the chart must pass the checks Sluice applies to every chart.
var validator = sync.OnceValues(func() (*validate.Validator, error) {
	return validate.New(context.Background(), validate.Options{})
})

// rendered is one render of the chart: the validator's verdict and every
// object strictly decoded into its Go type.
type rendered struct {
	check   *validate.ChartCheck
	objects []client.Object
}

// renderChart renders the chart with the given values (YAML, merged over
// values.yaml) as the validator does for any service.
func renderChart(t testing.TB, values string) *rendered {
	t.Helper()
	v, err := validator()
	require.NoError(t, err)
	var files []string
	if values != "" {
		// Not t.TempDir: TestMain renders with a failer, which has no T.
		dir, err := os.MkdirTemp("", "chart-values-")
		require.NoError(t, err)
		defer os.RemoveAll(dir)
		f := filepath.Join(dir, "values.yaml")
		require.NoError(t, os.WriteFile(f, []byte(values), 0o600))
		files = append(files, f)
	}
	check, err := v.CheckChart(context.Background(), validate.ChartRequest{
		Chart: chartDir, ValuesFiles: files, ReleaseName: releaseName, Namespace: releaseNS,
	})
	require.NoError(t, err)
	r := &rendered{check: check}
	if check.Render.ManifestDigest == "" {
		return r // did not render; the findings say why.
	}
	for _, o := range check.Render.Objects {
		r.objects = append(r.objects, strictDecode(t, o.ID(), o.Object))
	}
	return r
}

// denies returns the deny findings as readable lines.
func (r *rendered) denies() []string {
	var out []string
	for _, f := range r.check.Verdict.Findings {
		if f.Severity == report.SeverityDeny {
			out = append(out, fmt.Sprintf("%s %s %s: %s", f.Policy, f.File, f.Resource, f.Message))
		}
	}
	return out
}

// scheme knows every kind the chart may render.
var scheme = sync.OnceValue(testenv.Scheme)

// strictDecode decodes one rendered object into its Go type; unknown or
// duplicate fields fail the test.
func strictDecode(t testing.TB, id string, obj map[string]any) client.Object {
	t.Helper()
	raw, err := json.Marshal(obj)
	require.NoError(t, err, id)
	dec := serializer.NewCodecFactory(scheme(), serializer.EnableStrict).UniversalDeserializer()
	out, _, err := dec.Decode(raw, nil, nil)
	require.NoError(t, err, "%s does not decode strictly", id)
	co, ok := out.(client.Object)
	require.True(t, ok, "%s is not an object", id)
	return co
}

// find returns the rendered object of type T with that name.
func find[T client.Object](t testing.TB, r *rendered, name string) T {
	t.Helper()
	var zero T
	for _, o := range r.objects {
		if typed, ok := o.(T); ok && o.GetName() == name {
			return typed
		}
	}
	require.Failf(t, "object not rendered", "%T %s", zero, name)
	return zero
}

// all returns every rendered object of type T.
func all[T client.Object](r *rendered) []T {
	var out []T
	for _, o := range r.objects {
		if typed, ok := o.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// args turns a container's "--name=value" arguments into a map.
func args(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out[name] = value
	}
	return out
}

func TestChart_copiesMatchTheirSources(t *testing.T) {
	type copyOf struct {
		chartPath string
		source    []byte
		from      string
	}
	copies := []copyOf{
		{"files/admission-policies.yaml", config.AdmissionPolicies, "operator/config/admission/policies.yaml"},
		{"files/user-roles.yaml", config.UserRoles, "operator/config/rbac/users.yaml"},
	}
	crdFiles, err := fs.Glob(crds.FS, "*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, crdFiles)
	for _, name := range crdFiles {
		b, err := fs.ReadFile(crds.FS, name)
		require.NoError(t, err)
		copies = append(copies, copyOf{"crds/" + name, b, "operator/api/crds/" + name})
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for _, c := range copies {
			require.NoError(t, os.WriteFile(filepath.Join(chartDir, c.chartPath), c.source, 0o644))
		}
	}
	for _, c := range copies {
		got, err := os.ReadFile(filepath.Join(chartDir, c.chartPath))
		require.NoError(t, err, "charts/sluice/%s is missing: run `go test ./internal/chart -run TestChart_copies -update` in operator/", c.chartPath)
		assert.True(t, bytes.Equal(got, c.source),
			"charts/sluice/%s differs from %s: run `go test ./internal/chart -run TestChart_copies -update` in operator/ and commit", c.chartPath, c.from)
	}
	// No CRD in the chart that the API no longer has.
	inChart, err := filepath.Glob(filepath.Join(chartDir, "crds", "*"))
	require.NoError(t, err)
	var names []string
	for _, f := range inChart {
		names = append(names, filepath.Base(f))
	}
	sort.Strings(names)
	assert.Equal(t, crdFiles, names, "charts/sluice/crds must hold exactly the files of operator/api/crds")
}

func TestChart_defaultValuesPassTheDefaultPolicies(t *testing.T) {
	r := renderChart(t, "")
	require.Empty(t, r.denies())
	require.NotEmpty(t, r.check.Render.ManifestDigest)
	for _, f := range r.check.Verdict.Findings {
		t.Logf("%s %s %s: %s", f.Severity, f.Policy, f.Resource, f.Message)
	}
	kinds := map[string]int{}
	for _, o := range r.check.Render.Objects {
		kinds[o.Kind]++
	}
	assert.Equal(t, map[string]int{
		"CustomResourceDefinition":         7, // with Person, and openreports.io Report
		"ServiceAccount":                   3, // operator, syncer, runner
		"ClusterRole":                      6, // operator(-namespace), syncer(-namespace), sluice-viewer, sluice-approver
		"ClusterRoleBinding":               2,
		"Role":                             2,
		"RoleBinding":                      2, // leader election; no watchNamespaces, no per-namespace binding
		"Deployment":                       3,
		"Service":                          4,
		"Secret":                           1, // the tokens
		"NetworkPolicy":                    3,
		"ConfigMap":                        1,
		"ValidatingAdmissionPolicy":        9,
		"ValidatingAdmissionPolicyBinding": 9,
	}, kinds)
}

func TestChart_valueVariantsRenderAndPass(t *testing.T) {
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, r *rendered)
	}{
		{
			name:   "admission off leaves out the policies, bindings and their parameters",
			values: "admission: {enabled: false}\n",
			check: func(t *testing.T, r *rendered) {
				assert.Empty(t, all[*admissionregistrationv1.ValidatingAdmissionPolicy](r))
				assert.Empty(t, all[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](r))
				assert.Empty(t, all[*corev1.ConfigMap](r))
			},
		},
		{
			name:   "user roles off leaves out sluice-viewer and sluice-approver",
			values: "userRoles: {create: false}\n",
			check: func(t *testing.T, r *rendered) {
				for _, cr := range all[*rbacv1.ClusterRole](r) {
					assert.NotContains(t, []string{"sluice-viewer", "sluice-approver"}, cr.Name)
				}
			},
		},
		{
			name:   "webhooks off: no webhook Service or port, and the receiver is turned off",
			values: "syncer: {webhook: {enabled: false}}\n",
			check: func(t *testing.T, r *rendered) {
				for _, s := range all[*corev1.Service](r) {
					assert.NotEqual(t, "sluice-syncer-webhook", s.Name)
				}
				c := find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.Containers[0]
				assert.Equal(t, "0", args(c)["webhook-bind-address"])
				for _, p := range c.Ports {
					assert.NotEqual(t, "webhook", p.Name)
				}
			},
		},
		{
			name:   "a terraform kubeconfig is mounted, and the syncer then takes no state locks itself",
			values: "syncer: {terraform: {kubeconfigSecret: tf-state-access}}\n",
			check: func(t *testing.T, r *rendered) {
				d := find[*appsv1.Deployment](t, r, "sluice-syncer")
				assert.Equal(t, "/etc/sluice/terraform/kubeconfig", args(d.Spec.Template.Spec.Containers[0])["terraform-kubeconfig"])
				assert.Contains(t, volumeNames(d), "terraform-kubeconfig")
				for _, rule := range find[*rbacv1.ClusterRole](t, r, "sluice-syncer").Rules {
					assert.NotContains(t, rule.Resources, "leases")
					assert.NotContains(t, rule.Resources, "secrets")
				}
				for _, rule := range find[*rbacv1.ClusterRole](t, r, "sluice-syncer-namespace").Rules {
					assert.NotContains(t, rule.Resources, "leases", "the state server locks with the kubeconfig's identity")
				}
			},
		},
		{
			name:   "commit statuses read their token from a Secret in the release namespace",
			values: "syncer: {statusProvider: {name: gitea, baseURL: 'https://gitea.example.com', tokenSecret: gitea-token}}\n",
			check: func(t *testing.T, r *rendered) {
				a := args(find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.Containers[0])
				assert.Equal(t, "gitea", a["status-provider"])
				assert.Equal(t, "https://gitea.example.com", a["status-base-url"])
				assert.Equal(t, releaseNS+"/gitea-token", a["status-token-secret"])
			},
		},
		{
			name:   "registry webhooks read their token from one Secret of the release namespace",
			values: "syncer: {webhook: {registryTokenSecret: registry-token}}\n",
			check: func(t *testing.T, r *rendered) {
				a := args(find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.Containers[0])
				assert.Equal(t, releaseNS+"/registry-token", a["registry-webhook-secret"])
				role := find[*rbacv1.Role](t, r, "sluice-syncer-registry-token")
				require.Len(t, role.Rules, 1)
				assert.Equal(t, []string{"registry-token"}, role.Rules[0].ResourceNames)
				assert.Equal(t, []string{"get"}, role.Rules[0].Verbs)
			},
		},
		{
			name:   "renamed ServiceAccounts are the ones the admission parameters name",
			values: "operator: {serviceAccount: {name: op}}\nsyncer: {serviceAccount: {name: sync}}\n",
			check: func(t *testing.T, r *rendered) {
				cm := find[*corev1.ConfigMap](t, r, admission.ParamName)
				assert.Equal(t, admission.ParamConfigMap(admission.Params{
					Namespace: releaseNS,
					Syncer:    types.NamespacedName{Namespace: releaseNS, Name: "sync"},
					Operator:  types.NamespacedName{Namespace: releaseNS, Name: "op"},
				}).Data, cm.Data)
				assert.Equal(t, "op", find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.ServiceAccountName)
				assert.Equal(t, "sync", find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.ServiceAccountName)
				assert.Equal(t, "op", find[*rbacv1.ClusterRoleBinding](t, r, "sluice-operator").Subjects[0].Name)
				assert.Equal(t, "sync", find[*rbacv1.ClusterRoleBinding](t, r, "sluice-syncer").Subjects[0].Name)
			},
		},
		{
			name:   "two replicas each, restricted to two control namespaces",
			values: "operator: {replicas: 2, watchNamespaces: [team-a, team-b]}\nsyncer: {replicas: 2, watchNamespaces: [team-a, team-b]}\n",
			check: func(t *testing.T, r *rendered) {
				for _, name := range []string{"sluice-operator", "sluice-syncer"} {
					d := find[*appsv1.Deployment](t, r, name)
					assert.Equal(t, int32(2), *d.Spec.Replicas)
					a := args(d.Spec.Template.Spec.Containers[0])
					assert.Equal(t, "team-a,team-b", a["namespaces"])
					assert.Equal(t, "true", a["leader-elect"])
				}
			},
		},
		{
			name:   "two shards: a syncer and operator pair each, with its own flag, Services and artifact URL, beside the unsharded pair",
			values: "shards: [{name: eu}, {name: us}]\n",
			check: func(t *testing.T, r *rendered) {
				// The unsharded pair is as without shards.
				for _, name := range []string{"sluice-operator", "sluice-syncer"} {
					d := find[*appsv1.Deployment](t, r, name)
					assert.NotContains(t, args(d.Spec.Template.Spec.Containers[0]), "shard")
					assert.NotContains(t, d.Spec.Selector.MatchLabels, "sluice.dev/shard")
				}
				for _, shard := range []string{"eu", "us"} {
					op := find[*appsv1.Deployment](t, r, "sluice-operator-"+shard)
					sy := find[*appsv1.Deployment](t, r, "sluice-syncer-"+shard)
					for _, d := range []*appsv1.Deployment{op, sy} {
						a := args(d.Spec.Template.Spec.Containers[0])
						assert.Equal(t, shard, a["shard"], d.Name)
						assert.Equal(t, "true", a["leader-elect"], d.Name)
						assert.Equal(t, shard, d.Spec.Selector.MatchLabels["sluice.dev/shard"], d.Name)
						assert.Equal(t, d.Spec.Selector.MatchLabels["sluice.dev/shard"], d.Spec.Template.Labels["sluice.dev/shard"], d.Name)
					}
					url := "http://sluice-syncer-" + shard + "." + releaseNS + ".svc:9090"
					assert.Equal(t, url, args(op.Spec.Template.Spec.Containers[0])["artifact-base-url"], "the shard's operator fetches from its own syncer")
					assert.Equal(t, url, args(sy.Spec.Template.Spec.Containers[0])["artifact-base-url"])
					svc := find[*corev1.Service](t, r, "sluice-syncer-"+shard)
					assert.Equal(t, sy.Spec.Selector.MatchLabels, svc.Spec.Selector, "the shard's Service selects its syncer only")
					find[*corev1.Service](t, r, "sluice-syncer-"+shard+"-webhook")
					find[*corev1.Service](t, r, "sluice-operator-"+shard)
				}
				// No Service of the unsharded pair selects a shard's pods.
				for _, svc := range []string{"sluice-syncer", "sluice-operator", "sluice-syncer-webhook"} {
					sel := find[*corev1.Service](t, r, svc).Spec.Selector
					for _, shard := range []string{"eu", "us"} {
						for _, d := range []string{"sluice-operator-" + shard, "sluice-syncer-" + shard} {
							tmpl := find[*appsv1.Deployment](t, r, d).Spec.Template.Labels
							matches := true
							for k, v := range sel {
								matches = matches && tmpl[k] == v
							}
							assert.False(t, matches, "Service %s selects the pods of %s", svc, d)
						}
					}
				}
			},
		},
		{
			name:   "an explicit artifact URL reaches both components",
			values: "syncer: {artifactBaseURL: 'https://artifacts.example.com/sluice'}\n",
			check: func(t *testing.T, r *rendered) {
				for _, name := range []string{"sluice-operator", "sluice-syncer"} {
					assert.Equal(t, "https://artifacts.example.com/sluice", args(find[*appsv1.Deployment](t, r, name).Spec.Template.Spec.Containers[0])["artifact-base-url"])
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, tc.values)
			require.Empty(t, r.denies())
			tc.check(t, r)
		})
	}
}

func TestChart_schemaRejectsBadValues(t *testing.T) {
	cases := []struct{ name, values string }{
		{"an unknown top-level key", "replicaCount: 2\n"},
		{"an unknown component key", "operator: {replica: 2}\n"},
		{"a negative replica count", "syncer: {replicas: -1}\n"},
		{"the mutable tag latest", "operator: {image: {tag: latest}}\n"},
		{"a Kubernetes version that is not one", "kubeVersion: banana\n"},
		{"an extra argument that is not a flag", "syncer: {extraArgs: [oops]}\n"},
		{"an unknown commit status provider", "syncer: {statusProvider: {name: bitbucket}}\n"},
		{"an artifact URL with credentials", "syncer: {artifactBaseURL: 'http://user:pw@host/'}\n"},
		{"admission switched by a string", "admission: {enabled: 'no'}\n"},
		{"runner egress that is not a list of rules", "runner: {egress: {cidr: 0.0.0.0/0}}\n"},
		{"a state port out of range", "syncer: {ports: {state: 70000}}\n"},
		{"an unknown tokens key", "tokens: {runnerToken: hunter2}\n"},
		{"a shard name that cannot name a Lease", "shards: [{name: EU_1}]\n"},
		{"an API server CIDR that is not one", "networkPolicy: {apiServer: {cidrs: [kubernetes.default]}}\n"},
		{"a Helm timeout that is not a duration", "operator: {helm: {wait: true, timeout: soon}}\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, tc.values)
			var schema []string
			for _, f := range r.check.Verdict.Findings {
				if f.Severity == report.SeverityDeny && f.Policy == "helm.values_schema" {
					schema = append(schema, f.Message)
				}
			}
			assert.NotEmpty(t, schema, "values %q pass the schema; findings: %v", tc.values, r.denies())
		})
	}
}

func TestChart_templatesRefuseInconsistentValues(t *testing.T) {
	cases := []struct{ name, values, want string }{
		{"two operators without leader election", "operator: {replicas: 2, leaderElection: {enabled: false}}\n", "operator.replicas > 1 needs operator.leaderElection.enabled"},
		{"two syncers without leader election", "syncer: {replicas: 3, leaderElection: {enabled: false}}\n", "syncer.replicas > 1 needs syncer.leaderElection.enabled"},
		{"commit statuses without a token", "syncer: {statusProvider: {name: github}}\n", "syncer.statusProvider.tokenSecret is required"},
		{"a shard listed twice", "shards: [{name: eu}, {name: eu}]\n", `shards: "eu" is listed twice`},
		{"one artifact URL for every shard", "shards: [{name: eu}]\nsyncer: {artifactBaseURL: 'https://a.example.com'}\n", "syncer.artifactBaseURL cannot be used with shards"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, tc.values)
			assert.Empty(t, r.check.Render.ManifestDigest, "the chart rendered")
			assert.Contains(t, strings.Join(r.denies(), "\n"), tc.want)
		})
	}
}

func TestChart_componentsAgreeOnKubeVersionAndArtifactURL(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"", "v1.37.2"}, // the cluster's (the validator renders for v1.37.2)
		{"kubeVersion: '1.36.4'\n", "1.36.4"},
	} {
		r := renderChart(t, tc.values)
		require.Empty(t, r.denies())
		op := args(find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.Containers[0])
		sy := args(find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.Containers[0])
		assert.Equal(t, tc.want, op["helm-kube-version"])
		assert.Equal(t, "5m", op["helm-timeout"], "Helm's own default")
		assert.Equal(t, tc.want, sy["kube-version"])
		assert.Equal(t, "http://sluice-syncer."+releaseNS+".svc:9090", sy["artifact-base-url"])
		assert.Equal(t, sy["artifact-base-url"], op["artifact-base-url"])
		assert.Equal(t, ":9090", sy["artifact-bind-address"])
	}
}

func volumeNames(d *appsv1.Deployment) []string {
	var out []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		out = append(out, v.Name)
	}
	return out
}

func TestChart_podsAreLockedDownAndProbed(t *testing.T) {
	r := renderChart(t, "")
	require.Empty(t, r.denies())
	services := all[*corev1.Service](r)
	for _, d := range all[*appsv1.Deployment](r) {
		t.Run(d.Name, func(t *testing.T) {
			pod := d.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			a := args(c)
			require.NotNil(t, pod.SecurityContext)
			assert.True(t, *pod.SecurityContext.RunAsNonRoot)
			require.NotNil(t, c.SecurityContext)
			assert.True(t, *c.SecurityContext.RunAsNonRoot)
			assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
			assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
			assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
			assert.False(t, c.Resources.Limits.Cpu().IsZero())
			assert.False(t, c.Resources.Limits.Memory().IsZero())
			assert.False(t, c.Resources.Requests.Cpu().IsZero())
			assert.False(t, c.Resources.Requests.Memory().IsZero())

			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			// Every bind address the arguments name is a declared port.
			for flagName, portName := range map[string]string{
				"metrics-bind-address": "metrics", "health-probe-bind-address": "health",
				"artifact-bind-address": "artifacts", "webhook-bind-address": "webhook",
				"state-bind-address": "state", "bind-address": "runner",
			} {
				if addr, ok := a[flagName]; ok {
					assert.Equal(t, fmt.Sprintf(":%d", ports[portName]), addr, flagName)
				}
			}
			require.NotNil(t, c.LivenessProbe)
			require.NotNil(t, c.ReadinessProbe)
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			assert.Contains(t, ports, c.LivenessProbe.HTTPGet.Port.String())
			assert.Contains(t, ports, c.ReadinessProbe.HTTPGet.Port.String())
			require.NotNil(t, pod.SecurityContext.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)

			// Every writable path is an emptyDir: /tmp, and the syncer's data folder.
			writable := map[string]bool{}
			for _, m := range c.VolumeMounts {
				for _, v := range pod.Volumes {
					if v.Name == m.Name && v.EmptyDir != nil {
						assert.NotNil(t, v.EmptyDir.SizeLimit, "emptyDir %s has no size limit", v.Name)
						writable[m.MountPath] = true
					}
				}
			}
			assert.True(t, writable["/tmp"], "/tmp is not writable")
			if dir, ok := a["data-dir"]; ok {
				assert.True(t, writable[dir], "--data-dir %s is not writable", dir)
			}

			// Every Service port of this component targets a declared port.
			for _, s := range services {
				if s.Spec.Selector["app.kubernetes.io/component"] != d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] {
					continue
				}
				assert.Equal(t, d.Spec.Selector.MatchLabels, s.Spec.Selector, "Service %s", s.Name)
				for _, sp := range s.Spec.Ports {
					assert.Contains(t, ports, sp.TargetPort.String(), "Service %s port %s", s.Name, sp.Name)
					assert.Equal(t, ports[sp.TargetPort.String()], sp.Port, "Service %s port %s", s.Name, sp.Name)
				}
			}
		})
	}
	// The operator's metrics, the syncer's metrics and artifacts, the webhook
	// receiver and the runner. The state servers have no Service: runs reach
	// the pod that granted their credential by its address.
	var servicePorts []string
	for _, s := range services {
		for _, p := range s.Spec.Ports {
			servicePorts = append(servicePorts, s.Name+"/"+p.Name)
		}
	}
	assert.ElementsMatch(t, []string{"sluice-operator/metrics", "sluice-syncer/metrics", "sluice-syncer/artifacts", "sluice-syncer-webhook/webhook", "sluice-runner/runner"}, servicePorts)
}

// withoutLabels drops metadata.labels, which the chart adds to.
func withoutLabels[T client.Object](objs []T) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		c := o.DeepCopyObject().(T)
		c.SetLabels(nil)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func TestChart_admissionIsTheOneSourceFileWithTheChartsNamespaceAndServiceAccounts(t *testing.T) {
	r := renderChart(t, "")
	want, err := admission.Load(releaseNS)
	require.NoError(t, err)

	gotPolicies := withoutLabels(all[*admissionregistrationv1.ValidatingAdmissionPolicy](r))
	wantPolicies := withoutLabels(want.Policies)
	require.Len(t, gotPolicies, len(wantPolicies))
	for i := range wantPolicies {
		assert.True(t, equality.Semantic.DeepEqual(wantPolicies[i], gotPolicies[i]), "policy %s differs from the source file", wantPolicies[i].Name)
	}
	gotBindings := withoutLabels(all[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](r))
	wantBindings := withoutLabels(want.Bindings)
	require.Len(t, gotBindings, len(wantBindings))
	for i := range wantBindings {
		assert.True(t, equality.Semantic.DeepEqual(wantBindings[i], gotBindings[i]), "binding %s differs from the source file", wantBindings[i].Name)
		if strings.HasPrefix(gotBindings[i].Name, "sluice-shard-") {
			// Its parameters are the Repositories or Releases of the
			// request's own namespace.
			assert.Empty(t, gotBindings[i].Spec.ParamRef.Namespace)
			continue
		}
		assert.Equal(t, releaseNS, gotBindings[i].Spec.ParamRef.Namespace)
		assert.Equal(t, admission.ParamName, gotBindings[i].Spec.ParamRef.Name)
	}
	for _, o := range all[*admissionregistrationv1.ValidatingAdmissionPolicy](r) {
		assert.Equal(t, releaseName, o.Labels["app.kubernetes.io/instance"], "policy %s carries the chart's labels", o.Name)
	}

	cm := find[*corev1.ConfigMap](t, r, admission.ParamName)
	assert.Equal(t, releaseNS, cm.Namespace)
	assert.Equal(t, admission.ParamConfigMap(admission.Params{Namespace: releaseNS, Syncer: syncerSA, Operator: operatorSA}).Data, cm.Data)
	// The ServiceAccounts the parameters name are the ones the pods run as.
	assert.Equal(t, syncerSA.Name, find[*appsv1.Deployment](t, r, "sluice-syncer").Spec.Template.Spec.ServiceAccountName)
	assert.Equal(t, operatorSA.Name, find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.ServiceAccountName)
	find[*corev1.ServiceAccount](t, r, syncerSA.Name)
	find[*corev1.ServiceAccount](t, r, operatorSA.Name)
}

func TestChart_userRolesAreTheSourceFile(t *testing.T) {
	r := renderChart(t, "")
	var want []*rbacv1.ClusterRole
	for _, doc := range strings.Split(string(config.UserRoles), "\n---\n") {
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), cr))
		if cr.Name != "" {
			want = append(want, cr)
		}
	}
	require.Len(t, want, 2)
	for _, w := range want {
		got := find[*rbacv1.ClusterRole](t, r, w.Name)
		assert.Equal(t, w.Rules, got.Rules, w.Name)
		for k, v := range w.Labels {
			assert.Equal(t, v, got.Labels[k], "%s label %s", w.Name, k)
		}
	}
}
