package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
)

// maxPlanJSON bounds a plan JSON file read into memory (a 10,000-resource
// plan is tens of MiB).
const maxPlanJSON = 512 << 20

// kvList is a repeatable name=value flag.
type kvList map[string]string

func (m kvList) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (m kvList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", v)
	}
	m[k] = val
	return nil
}

// runTerraform checks plan JSON, a binary plan file, or plans a folder.
func runTerraform(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("terraform", flag.ContinueOnError)
	var c common
	c.register(fs)
	planFile := fs.String("plan-file", "", "binary plan file (with --dir)")
	dir := fs.String("dir", "", "stack folder")
	workspace := fs.String("workspace", "", "workspace to plan in (with --dir)")
	vars := kvList{}
	fs.Var(vars, "var", "variable name=value (repeatable, with --dir)")
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := checkCommon(&c); err != nil {
		return 0, err
	}
	var mode string
	switch {
	case len(pos) == 1 && *planFile == "" && *dir == "":
		mode = "json"
	case len(pos) == 0 && *planFile != "" && *dir != "":
		mode = "planfile"
	case len(pos) == 0 && *planFile == "" && *dir != "":
		mode = "plan"
	default:
		return 0, usagef("terraform: give a plan JSON file, or --plan-file F --dir D, or --dir D")
	}
	if mode != "plan" && (len(vars) > 0 || *workspace != "") {
		return 0, usagef("terraform: --var and --workspace only apply when planning with --dir")
	}
	v, err := validate.New(ctx, c.options(c.namespaces, policy.KindTerraform))
	if err != nil {
		return 0, err
	}
	var check *validate.PlanCheck
	var name, file string
	switch mode {
	case "json":
		file = pos[0]
		data, err := readFile(file, maxPlanJSON)
		if err != nil {
			return 0, err
		}
		name = "terraform " + file
		if check, err = v.CheckPlanJSON(ctx, file, data); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
	case "planfile":
		file = *planFile
		name = "terraform " + file
		abs, err := filepath.Abs(*planFile)
		if err != nil {
			return 0, fmt.Errorf("plan file: %w", err)
		}
		if check, err = v.CheckPlanFile(ctx, *dir, abs); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
	case "plan":
		file = *dir
		name = "terraform plan of " + *dir
		if check, err = v.PlanAndCheck(ctx, validate.PlanRequest{Dir: *dir, Vars: vars, Workspace: *workspace}); err != nil {
			return 0, fmt.Errorf("%s: %w", *dir, err)
		}
	}
	rep := &report.Report{Sections: []report.Section{planSection(name, file, check)}}
	return finish(e, &c, rep)
}

// planSection is the report section of a plan check.
func planSection(name, file string, check *validate.PlanCheck) report.Section {
	s := report.Section{Name: name, File: file, Verdict: check.Verdict}
	s.Details = append(s.Details, report.Detail{Key: "plan", Value: check.Summary.String()})
	if r := check.Report; r != nil {
		if len(r.RiskReasons) > 0 {
			s.Details = append(s.Details, report.ListDetail("risk", r.RiskReasons))
		}
		s.Details = append(s.Details, report.Detail{Key: "planDigest", Value: r.PlanDigest})
		if r.PlanFileSHA256 != "" {
			s.Details = append(s.Details, report.Detail{Key: "planFileSHA256", Value: r.PlanFileSHA256})
		}
	}
	return s
}

// readFile reads a whole input file, refusing folders and files over max.
func readFile(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("read %s: is a folder, not a file", path)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("read %s: %d bytes is over the limit of %d", path, fi.Size(), max)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}
