// Package admission installs Sluice's ValidatingAdmissionPolicies (the one
// source file operator/config/admission/policies.yaml, embedded by the config
// package) together with their parameter object, and waits until the API
// server enforces them. Tests and the demo use it; the chart ships the same
// file.
package admission

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/config"
)

// ParamName is the name of the ConfigMap the bindings read their parameters
// from.
const ParamName = "sluice-admission"

// DefaultParamNamespace is the Sluice namespace the source file names in its
// bindings' paramRef.
const DefaultParamNamespace = "sluice-system"

// Keys of the parameter ConfigMap.
const (
	KeySyncerNamespace   = "syncerServiceAccountNamespace"
	KeySyncerName        = "syncerServiceAccountName"
	KeyOperatorNamespace = "operatorServiceAccountNamespace"
	KeyOperatorName      = "operatorServiceAccountName"
	// KeyBreakGlassGroups lists, comma-separated, the groups whose members
	// may delete a Release by hand (optional).
	KeyBreakGlassGroups = "breakGlassGroups"
)

// fieldOwner names this installer in managedFields.
const fieldOwner = "sluice-admission-installer"

// Params says where the parameter object lives and which ServiceAccounts are
// the syncer and the operator.
type Params struct {
	// Namespace holds the parameter ConfigMap (the Sluice namespace).
	Namespace string
	// Syncer is the gitops-syncer's ServiceAccount.
	Syncer types.NamespacedName
	// Operator is the operator's ServiceAccount.
	Operator types.NamespacedName
	// BreakGlassGroups may delete a Release by hand (none when empty).
	BreakGlassGroups []string
}

func (p Params) validate() error {
	var missing []string
	if p.Namespace == "" {
		missing = append(missing, "namespace")
	}
	if p.Syncer.Namespace == "" || p.Syncer.Name == "" {
		missing = append(missing, "syncer ServiceAccount")
	}
	if p.Operator.Namespace == "" || p.Operator.Name == "" {
		missing = append(missing, "operator ServiceAccount")
	}
	if len(missing) > 0 {
		return fmt.Errorf("admission params: missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// ServiceAccountUsername is the user name the API server gives a
// ServiceAccount's token.
func ServiceAccountUsername(sa types.NamespacedName) string {
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}

// ServiceAccountGroups are the groups the API server gives a ServiceAccount's
// token.
func ServiceAccountGroups(sa types.NamespacedName) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"}
}

// Policies holds the parsed contents of the policy file.
type Policies struct {
	Policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Parse decodes a policy file strictly (unknown fields are errors). Only
// ValidatingAdmissionPolicies and their bindings may appear in it.
func Parse(data []byte) (*Policies, error) {
	scheme := kruntime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	out := &Policies{}
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode document %d: %w", i, err)
		}
		switch o := obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			out.Policies = append(out.Policies, o)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			out.Bindings = append(out.Bindings, o)
		default:
			return nil, fmt.Errorf("document %d: unexpected kind %s", i, gvk)
		}
	}
	if len(out.Policies) == 0 {
		return nil, errors.New("policy file holds no ValidatingAdmissionPolicy")
	}
	names := map[string]bool{}
	for _, p := range out.Policies {
		names[p.Name] = true
	}
	for _, b := range out.Bindings {
		if !names[b.Spec.PolicyName] {
			return nil, fmt.Errorf("binding %s refers to unknown policy %q", b.Name, b.Spec.PolicyName)
		}
	}
	return out, nil
}

// Load parses the embedded policy file and points every binding's paramRef
// at the ConfigMap in paramNamespace.
func Load(paramNamespace string) (*Policies, error) {
	p, err := Parse(config.AdmissionPolicies)
	if err != nil {
		return nil, fmt.Errorf("embedded admission policies: %w", err)
	}
	for _, b := range p.Bindings {
		// A binding naming its parameter object reads the ConfigMap in
		// the Sluice namespace; one selecting its parameters reads them
		// in the request's own namespace (the shard-key policies).
		if b.Spec.ParamRef != nil && b.Spec.ParamRef.Name != "" {
			b.Spec.ParamRef.Namespace = paramNamespace
		}
	}
	return p, nil
}

// ParamConfigMap is the parameter object the bindings read.
func ParamConfigMap(p Params) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ParamName,
			Namespace: p.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "sluice"},
		},
		Data: map[string]string{
			KeySyncerNamespace:   p.Syncer.Namespace,
			KeySyncerName:        p.Syncer.Name,
			KeyOperatorNamespace: p.Operator.Namespace,
			KeyOperatorName:      p.Operator.Name,
			KeyBreakGlassGroups:  strings.Join(p.BreakGlassGroups, ","),
		},
	}
}

// Install creates or updates the parameter ConfigMap, the policies and the
// bindings. The namespace p.Namespace must exist. The policies take a moment
// to take effect: call WaitActive before relying on them.
func Install(ctx context.Context, c client.Client, p Params) error {
	if err := p.validate(); err != nil {
		return err
	}
	pol, err := Load(p.Namespace)
	if err != nil {
		return err
	}
	objs := []client.Object{ParamConfigMap(p)}
	for _, o := range pol.Policies {
		objs = append(objs, o)
	}
	for _, o := range pol.Bindings {
		objs = append(objs, o)
	}
	for _, o := range objs {
		if err := createOrReplace(ctx, c, o); err != nil {
			return err
		}
	}
	return nil
}

// createOrReplace creates obj, or replaces the live object's content with it.
func createOrReplace(ctx context.Context, c client.Client, obj client.Object) error {
	desired := obj.DeepCopyObject().(client.Object)
	err := c.Create(ctx, obj, client.FieldOwner(fieldOwner))
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	live := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return fmt.Errorf("get %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	desired.SetResourceVersion(live.GetResourceVersion())
	if err := c.Update(ctx, desired, client.FieldOwner(fieldOwner)); err != nil {
		return fmt.Errorf("update %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// probe is one dry-run request that the named policy must deny once it is
// enforced with its parameters found.
type probe struct {
	policy string
	// want is a fragment of the policy's own message; a denial without it
	// (such as "no params found") means the policy is not ready yet.
	want string
	// asSyncer runs the probe as the syncer's ServiceAccount.
	asSyncer bool
	obj      func(ns string) client.Object
}

var probes = []probe{
	{
		policy: "sluice-approvals",
		want:   "must be in your own name",
		obj: func(ns string) client.Object {
			return &sluicev1.Approval{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-", Namespace: ns},
				Spec: sluicev1.ApprovalSpec{
					Release:        "admission-probe",
					ApprovalDigest: sluicev1.SHA256Digest([]byte("admission-probe")),
					Decision:       sluicev1.DecisionApprove,
					Approver:       "k8s:sluice-admission-probe-nobody",
					Source:         sluicev1.SourceKubernetes,
				},
			}
		},
	},
	{
		policy: "sluice-syncer-owned",
		want:   "may create a ChangeRequest",
		obj: func(ns string) client.Object {
			d := sluicev1.SHA256Digest([]byte("admission-probe"))
			return &sluicev1.ChangeRequest{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-", Namespace: ns},
				Spec: sluicev1.ChangeRequestSpec{
					Release:         "admission-probe",
					Revision:        strings.Repeat("0", 40),
					TargetNamespace: "admission-probe",
					Artifact:        sluicev1.ArtifactReference{URL: "http://admission-probe.invalid/a.tar.gz", SHA256: d},
					ContentDigest:   d,
					Verdict:         sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
					ApprovalDigest:  d,
				},
			}
		},
	},
	{
		policy: "sluice-plan-secrets",
		want:   "may create a plan Secret",
		obj: func(ns string) client.Object {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				GenerateName: "admission-probe-", Namespace: ns,
				Labels: map[string]string{sluicev1.LabelChangeRequest: "admission-probe"},
			}}
		},
	},
	{
		policy: "sluice-reviews",
		want:   "may create a review ConfigMap",
		obj: func(ns string) client.Object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				GenerateName: "admission-probe-", Namespace: ns,
				Labels: map[string]string{review.LabelReview: "true"},
			}}
		},
	},
	{
		policy:   "sluice-approvalpolicies",
		want:     "never writes ApprovalPolicies",
		asSyncer: true,
		obj: func(ns string) client.Object {
			return &sluicev1.ApprovalPolicy{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-", Namespace: ns},
			}
		},
	},
}

// WaitActive returns once the API server enforces every policy of the file
// with its parameters, or when ctx ends. It probes with dry-run creates in
// p.Namespace (nothing is stored): as cfg's user, and for the policy that
// only concerns the syncer, as the syncer's ServiceAccount impersonated with
// the system:masters group so that RBAC lets the request reach admission.
// cfg's user must be allowed to impersonate.
func WaitActive(ctx context.Context, cfg *rest.Config, scheme *kruntime.Scheme, p Params) error {
	if err := p.validate(); err != nil {
		return err
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("admission probe client: %w", err)
	}
	syncerCfg := rest.CopyConfig(cfg)
	syncerCfg.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUsername(p.Syncer),
		Groups:   append(ServiceAccountGroups(p.Syncer), "system:masters"),
	}
	syncer, err := client.New(syncerCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("admission probe client: %w", err)
	}
	pending := append([]probe(nil), probes...)
	var last string
	for {
		var still []probe
		for _, pr := range pending {
			c := admin
			if pr.asSyncer {
				c = syncer
			}
			err := c.Create(ctx, pr.obj(p.Namespace), client.DryRunAll)
			switch {
			case err != nil && strings.Contains(err.Error(), pr.want):
				// Enforced, with its parameters.
			case err == nil:
				last = fmt.Sprintf("policy %s does not deny its probe yet", pr.policy)
				still = append(still, pr)
			default:
				last = fmt.Sprintf("policy %s: probe: %v", pr.policy, err)
				still = append(still, pr)
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return fmt.Errorf("admission policies not enforced yet (%s): %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stripComments drops YAML comment lines, so a document holding only
// comments counts as empty.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
