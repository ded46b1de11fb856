package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Widget is the runtime tests' own kind (testdata/widgets.yaml): a spec,
// and a status with conditions and observedGeneration like every Sluice
// kind.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is a Widget's desired state.
type WidgetSpec struct {
	Size int `json:"size,omitempty"`
}

// WidgetStatus is a Widget's observed state.
type WidgetStatus struct {
	Note               string             `json:"note,omitempty"`
	Count              int                `json:"count,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// DeepCopyObject copies w.
func (w *Widget) DeepCopyObject() kruntime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = nil
	for _, c := range w.Status.Conditions {
		cc := c
		c.DeepCopyInto(&cc)
		out.Status.Conditions = append(out.Status.Conditions, cc)
	}
	return &out
}

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopyObject copies l.
func (l *WidgetList) DeepCopyObject() kruntime.Object {
	out := &WidgetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*Widget))
	}
	return out
}

var gv = schema.GroupVersion{Group: "test.sluice.dev", Version: "v1"}

// cfg is the connection to the suite's control plane.
var cfg *rest.Config

var scheme = func() *kruntime.Scheme {
	s := kruntime.NewScheme()
	s.AddKnownTypes(gv, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, gv)
	return s
}()

// TestMain starts one real kube-apiserver and etcd for the package.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, err := assetsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{"testdata"},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

// errNoAssets says the control-plane binaries are missing.
var errNoAssets = errors.New("envtest binaries (kube-apiserver, etcd) not found: run `make envtest` at the repository root, or set KUBEBUILDER_ASSETS")

// assetsDir is KUBEBUILDER_ASSETS, or bin/k8s/<version>-<os>-<arch> at the
// repository root (the folder holding go.work).
func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; filepath.Dir(dir) != dir; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err != nil {
			continue
		}
		found, _ := filepath.Glob(filepath.Join(dir, "bin", "k8s", "*-"+runtime.GOOS+"-"+runtime.GOARCH, "kube-apiserver"))
		if len(found) == 0 {
			break
		}
		return filepath.Dir(found[len(found)-1]), nil
	}
	return "", errNoAssets
}

// counting is a client of the suite's API server that counts status
// patches.
type counting struct {
	client.Client
	patches atomic.Int32
}

func newClient(t *testing.T) *counting {
	t.Helper()
	c := &counting{}
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c.Client = interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.patches.Add(1)
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	return c
}
