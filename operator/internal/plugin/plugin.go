// Package plugin is `kubectl sluice`: list and describe ChangeRequests, decide
// on them (approve, reject, revoke) as the current Kubernetes user, and wait
// for them. The binary in cmd/kubectl-sluice only calls Execute; tests call
// Run with a rest.Config.
//
// The connection flags are kubectl's own (k8s.io/cli-runtime ConfigFlags):
// --kubeconfig, --context, -n/--namespace, --as and the rest behave as they
// do for kubectl.
package plugin

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/spf13/cobra"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/version"
	sluicescheme "github.com/sluice-gitops/sluice/operator/api/scheme"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Options configure the command.
type Options struct {
	// Out and ErrOut receive the output and the diagnostics.
	Out, ErrOut io.Writer
	// RESTConfig, when set, is used instead of the kubeconfig; the namespace
	// then comes from -n alone (default "default") and --as/--as-group still
	// apply. Tests set it.
	RESTConfig *rest.Config
	// Now is the clock for ages; time.Now when nil.
	Now func() time.Time
}

// Run executes the plugin with args (without the program name) and returns
// its error; it prints nothing on error, the caller does.
func Run(ctx context.Context, args []string, out, errOut io.Writer, cfg *rest.Config) error {
	cmd := NewCommand(Options{Out: out, ErrOut: errOut, RESTConfig: cfg})
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// Execute runs the plugin as a program: it returns the exit code after
// printing any error like kubectl does ("error: …").
func Execute(ctx context.Context, args []string) int {
	if err := Run(ctx, args, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// app holds what every subcommand shares.
type app struct {
	opts  Options
	flags *genericclioptions.ConfigFlags

	client     client.WithWatch
	restConfig *rest.Config
	namespace  string
}

// NewCommand builds the `kubectl sluice` command tree.
func NewCommand(opts Options) *cobra.Command {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.ErrOut == nil {
		opts.ErrOut = io.Discard
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a := &app{opts: opts, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-sluice",
		Short: "Inspect, approve and wait for Sluice ChangeRequests",
		Long: `kubectl sluice works with the changes Sluice holds at its approval gate.

A change is a ChangeRequest: one release at one revision, with the digests of
exactly what would be applied. Approvals bind to the change's approvalDigest,
and kubectl sluice approve records one in your own Kubernetes name.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sluice"},
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetOut(opts.Out)
	root.SetErr(opts.ErrOut)
	root.SetVersionTemplate(version.String("kubectl-sluice") + "\n")
	a.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newGetCommand(a),
		newDescribeCommand(a),
		newDiffCommand(a),
		newDecideCommand(a, sluicev1.DecisionApprove),
		newDecideCommand(a, sluicev1.DecisionReject),
		newDecideCommand(a, sluicev1.DecisionRevoke),
		newWaitCommand(a),
		newAuditCommand(a),
		newDiagnoseCommand(a),
		newReportCommand(a),
		newVerifyCommand(a),
	)
	return root
}

// scheme knows the core and Sluice kinds, and openreports.io's Report.
func scheme() (*kruntime.Scheme, error) { return sluicescheme.New(openreports.AddToScheme) }

// connect builds the client and resolves the namespace from the flags.
func (a *app) connect() error {
	if a.client != nil {
		return nil
	}
	var cfg *rest.Config
	if a.opts.RESTConfig != nil {
		cfg = rest.CopyConfig(a.opts.RESTConfig)
		if a.flags.Impersonate != nil && *a.flags.Impersonate != "" {
			cfg.Impersonate.UserName = *a.flags.Impersonate
			if a.flags.ImpersonateGroup != nil {
				cfg.Impersonate.Groups = *a.flags.ImpersonateGroup
			}
		}
		a.namespace = "default"
		if a.flags.Namespace != nil && *a.flags.Namespace != "" {
			a.namespace = *a.flags.Namespace
		}
	} else {
		var err error
		if cfg, err = a.flags.ToRESTConfig(); err != nil {
			return fmt.Errorf("load the kubeconfig: %w", err)
		}
		if a.namespace, _, err = a.flags.ToRawKubeConfigLoader().Namespace(); err != nil {
			return fmt.Errorf("resolve the namespace: %w", err)
		}
	}
	s, err := scheme()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	a.client = c
	a.restConfig = cfg
	return nil
}

// exactlyOneChange is a cobra.PositionalArgs for commands on one change.
func exactlyOneChange(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("kubectl sluice %s needs exactly one CHANGE (a ChangeRequest name), got %d; see --help", cmd.Name(), len(args))
	}
	return nil
}
