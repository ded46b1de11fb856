package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
)

// runHelm renders and checks a chart. Here --namespace is the release
// namespace, as in helm; --policy-namespace selects policy namespaces.
func runHelm(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("helm", flag.ContinueOnError)
	var c common
	c.registerExcept(fs, "namespace")
	var values stringList
	fs.Var(&values, "f", "values file (repeatable, later files win)")
	fs.Var(&values, "values", "values file (repeatable)")
	release := fs.String("release", "", "release name (default: the chart's name)")
	namespace := fs.String("namespace", "default", "release namespace")
	fs.StringVar(namespace, "n", "default", "shorthand for --namespace")
	kube := fs.String("kube-version", "", "Kubernetes version to render for")
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := checkCommon(&c); err != nil {
		return 0, err
	}
	if len(pos) != 1 {
		return 0, usagef("helm: give exactly one chart folder or packaged chart")
	}
	chart := pos[0]
	if _, err := os.Stat(chart); err != nil {
		return 0, fmt.Errorf("chart %s: %w", chart, err)
	}
	name := *release
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(filepath.Clean(chart)), ".tgz")
	}
	v, err := validate.New(ctx, c.options(c.policyNamespaces, policy.KindKubernetes))
	if err != nil {
		return 0, err
	}
	check, err := v.CheckChart(ctx, validate.ChartRequest{
		Chart: chart, ValuesFiles: values, ReleaseName: name, Namespace: *namespace, KubeVersion: *kube,
	})
	if err != nil {
		return 0, err
	}
	rep := &report.Report{Sections: []report.Section{chartSection("helm "+chart, chart, check)}}
	return finish(e, &c, rep)
}

// chartSection is the report section of a chart check.
func chartSection(name, file string, check *validate.ChartCheck) report.Section {
	s := report.Section{Name: name, File: file, Verdict: check.Verdict}
	if r := check.Render; r != nil {
		s.Details = append(s.Details, report.Detail{Key: "objects", Value: fmt.Sprint(len(r.Objects))})
		if len(r.RiskReasons) > 0 {
			s.Details = append(s.Details, report.ListDetail("risk", r.RiskReasons))
		}
		if r.ManifestDigest != "" {
			s.Details = append(s.Details, report.Detail{Key: "manifestDigest", Value: r.ManifestDigest})
		}
	}
	return s
}

// runCheck checks every environment (or one, with --env) of a service.
func runCheck(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var c common
	c.register(fs)
	repo := fs.String("repo", "", "checkout root (default: the git work tree holding SERVICE_DIR, else the current folder)")
	only := fs.String("env", "", "check only this environment")
	noTF := fs.Bool("no-terraform", false, "skip planning the Terraform stack")
	kube := fs.String("kube-version", "", "Kubernetes version to render for")
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := checkCommon(&c); err != nil {
		return 0, err
	}
	if len(pos) != 1 {
		return 0, usagef("check: give exactly one service folder")
	}
	root, rel, err := serviceLocation(*repo, pos[0])
	if err != nil {
		return 0, err
	}
	opts := c.options(c.namespaces)
	opts.Helm.KubeVersion = *kube
	v, err := validate.New(ctx, opts)
	if err != nil {
		return 0, err
	}
	svc, err := manifestEnvironments(root, rel)
	if err != nil {
		return 0, err
	}
	var envs []string
	for _, name := range svc {
		if *only == "" || *only == name {
			envs = append(envs, name)
		}
	}
	if len(envs) == 0 {
		return 0, fmt.Errorf("service %s has no environment %q", rel, *only)
	}
	rep := &report.Report{}
	for _, envName := range envs {
		res, err := v.CheckService(ctx, validate.ServiceRequest{RepoRoot: root, ServiceDir: rel, Environment: envName, SkipTerraform: *noTF})
		if err != nil {
			return 0, err
		}
		s := report.Section{Name: res.Service.Name + "/" + envName, File: filepath.ToSlash(filepath.Join(rel, "service.yaml")), Verdict: res.Verdict}
		s.Details = append(s.Details, report.Detail{Key: "namespace", Value: res.Environment.Namespace})
		if res.ManifestDigest != "" {
			s.Details = append(s.Details, report.Detail{Key: "manifestDigest", Value: res.ManifestDigest})
		}
		if res.PlanSummary != nil {
			s.Details = append(s.Details,
				report.Detail{Key: "plan", Value: res.PlanSummary.String()},
				report.Detail{Key: "planDigest", Value: res.PlanDigest},
				report.Detail{Key: "planFileSHA256", Value: res.PlanFileSHA256})
		}
		rep.Sections = append(rep.Sections, s)
	}
	return finish(e, &c, rep)
}

// serviceLocation resolves the checkout root and the service folder relative
// to it.
func serviceLocation(repo, dir string) (root, rel string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("service folder: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("service folder %s does not exist", dir)
	}
	if repo == "" {
		repo = gitRoot(abs)
	}
	root, err = filepath.Abs(repo)
	if err != nil {
		return "", "", fmt.Errorf("repo: %w", err)
	}
	rel, err = filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", "", errors.New("the service folder is not inside --repo")
	}
	return root, filepath.ToSlash(rel), nil
}

// gitRoot returns the nearest folder above dir holding .git, else the
// current folder.
func gitRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			wd, _ := os.Getwd()
			return wd
		}
	}
}

// manifestEnvironments lists a service's environment names in manifest order.
func manifestEnvironments(root, rel string) ([]string, error) {
	svc, err := manifest.Load(root, rel)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(svc.Environments))
	for _, e := range svc.Environments {
		names = append(names, e.Name)
	}
	return names, nil
}
