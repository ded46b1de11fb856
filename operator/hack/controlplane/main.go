// Command controlplane runs the envtest control plane (a real kube-apiserver
// and etcd with the Sluice and Argo CD CRDs) outside a test, for `make demo`,
// and applies YAML manifests to it, since the demo cannot assume kubectl.
//
//	controlplane start --kubeconfig FILE     # runs until SIGINT/SIGTERM
//	controlplane apply --kubeconfig FILE F…  # server-side apply of every document
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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-gitops/sluice/operator/api/testenv"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: controlplane start|apply --kubeconfig FILE [FILES…]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file to write (start) or use (apply)")
	users := fs.String("users", "", "start: comma-separated NAME[:GROUP] users; each gets a kubeconfig FILE-NAME (RBAC applies to them)")
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
		return apply(*kubeconfig, fs.Args())
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// start runs the control plane and writes an admin kubeconfig for it, plus
// one kubeconfig per extra user.
func start(kubeconfig, users string) error {
	env, err := testenv.Start(testenv.Options{})
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

// apply server-side applies every YAML document of the files.
func apply(kubeconfig string, files []string) error {
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
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("sluice-demo"), client.ForceOwnership); err != nil {
				return fmt.Errorf("%s: apply %s %s: %w", f, u.GetKind(), u.GetName(), err)
			}
			fmt.Printf("applied %s/%s\n", u.GetKind(), u.GetName())
		}
	}
	return nil
}
