// Command controlplane runs the envtest control plane (a real kube-apiserver
// and etcd with the Sluice and Argo CD CRDs) outside a test, for `make demo`,
// and applies YAML manifests to it, since the demo cannot assume kubectl.
//
//	controlplane start --kubeconfig FILE     # runs until SIGINT/SIGTERM
//	controlplane apply --kubeconfig FILE F…  # server-side apply of every document
//	controlplane create --kubeconfig FILE F… # create every document (as kubectl create)
//	controlplane admission --kubeconfig FILE --namespace NS --syncer SA --operator SA
//	    # installs Sluice's admission policies for those ServiceAccounts, waits
//	    # until they are enforced, and writes FILE-syncer and FILE-operator:
//	    # admin credentials acting as each ServiceAccount, so the policies
//	    # (which go by the user name) apply to the demo's syncer and operator
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: controlplane start|apply|create|admission --kubeconfig FILE [FILES…]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file to write (start) or use (apply)")
	users := fs.String("users", "", "start: comma-separated NAME[:GROUP] users; each gets a kubeconfig FILE-NAME (RBAC applies to them)")
	namespace := fs.String("namespace", "", "admission: the Sluice namespace (holds the parameter ConfigMap and the ServiceAccounts)")
	syncerSA := fs.String("syncer", "", "admission: the syncer's ServiceAccount name")
	operatorSA := fs.String("operator", "", "admission: the operator's ServiceAccount name")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	switch args[0] {
	case "start":
		return start(*kubeconfig, *users)
	case "apply":
		return apply(*kubeconfig, fs.Args(), false)
	case "create":
		return apply(*kubeconfig, fs.Args(), true)
	case "admission":
		return installAdmission(*kubeconfig, admission.Params{
			Namespace: *namespace,
			Syncer:    types.NamespacedName{Namespace: *namespace, Name: *syncerSA},
			Operator:  types.NamespacedName{Namespace: *namespace, Name: *operatorSA},
		})
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// start runs the control plane and writes an admin kubeconfig for it, plus
// one kubeconfig per extra user.
func start(kubeconfig, users string) error {
	// make demo-argocd runs Argo CD against this control plane.
	crds, err := argocdtest.CRDPaths()
	if err != nil {
		return err
	}
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: crds})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	user, err := env.Environment.ControlPlane.AddUser(envtest.User{Name: "sluice-demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	for _, spec := range strings.Split(users, ",") {
		if spec == "" {
			continue
		}
		name, group, _ := strings.Cut(spec, ":")
		var groups []string
		if group != "" {
			groups = []string{group}
		}
		u, err := env.Environment.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
		if err != nil {
			return err
		}
		b, err := u.KubeConfig()
		if err != nil {
			return err
		}
		if err := os.WriteFile(kubeconfig+"-"+name, b, 0o600); err != nil {
			return err
		}
	}
	fmt.Printf("control plane up at %s; kubeconfig in %s\n", env.Config.Host, kubeconfig)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}

// apply server-side applies (or, with create, creates) every YAML document
// of the files.
func apply(kubeconfig string, files []string, create bool) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if create {
				if err := c.Create(ctx, u, client.FieldOwner("sluice-demo")); err != nil {
					return fmt.Errorf("%s: create %s %s: %w", f, u.GetKind(), u.GetName(), err)
				}
				fmt.Printf("created %s/%s\n", u.GetKind(), u.GetName())
				continue
			}
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("sluice-demo"), client.ForceOwnership); err != nil {
				return fmt.Errorf("%s: apply %s %s: %w", f, u.GetKind(), u.GetName(), err)
			}
			fmt.Printf("applied %s/%s\n", u.GetKind(), u.GetName())
		}
	}
	return nil
}

// installAdmission installs the admission policies with p, waits until the
// API server enforces them, and writes a kubeconfig per component that
// acts as its ServiceAccount (impersonation; the system:masters group keeps
// RBAC out of the demo, while the policies, which go by the user name,
// apply).
func installAdmission(kubeconfig string, p admission.Params) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := testenv.Scheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := admission.Install(ctx, c, p); err != nil {
		return fmt.Errorf("install admission policies: %w", err)
	}
	if err := admission.WaitActive(ctx, cfg, scheme, p); err != nil {
		return fmt.Errorf("admission policies not enforced: %w", err)
	}
	for suffix, sa := range map[string]types.NamespacedName{"syncer": p.Syncer, "operator": p.Operator} {
		kc, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			return err
		}
		ai := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
		ai.Impersonate = admission.ServiceAccountUsername(sa)
		ai.ImpersonateGroups = append(admission.ServiceAccountGroups(sa), "system:masters")
		if err := clientcmd.WriteToFile(*kc, kubeconfig+"-"+suffix); err != nil {
			return err
		}
	}
	fmt.Printf("admission policies enforced for %s and %s\n", admission.ServiceAccountUsername(p.Syncer), admission.ServiceAccountUsername(p.Operator))
	return nil
}
