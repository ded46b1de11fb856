// Command benchtool is the helper of hack/bench.sh: it generates large plans,
// times commands, measures their peak memory and compares infra-validator's
// results with conftest's on the same inputs and policies.
//
//	benchtool genplan N OUT                 write an N-resource plan JSON
//	benchtool time N CMD ARGS...            run CMD N times, print the median wall time in ms
//	benchtool pair N CMD_A... -- CMD_B...   run A and B alternately N times each, print
//	                                        both median wall times in ms (alternating
//	                                        spreads a busy machine's noise over both)
//	benchtool genoverlay N DIR              write a Kustomize overlay of N objects under DIR
//	                                        (DIR/base, DIR/overlay)
//	benchtool kustomize DIR                 build the overlay DIR with the library
//	                                        (package sources), print the YAML
//	benchtool peak CMD ARGS...              run CMD once, print its peak RSS
//	benchtool compare IV CONFTEST SUBCMD FILE [conftest flags...]
//	                                        print both tools' failures and warnings
//	                                        side by side; exit 1 when they differ
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/internal/benchdata"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: benchtool genplan|time|peak|compare ...")
	}
	switch args[0] {
	case "genplan":
		if len(args) != 3 {
			return errors.New("usage: benchtool genplan N OUT")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		return os.WriteFile(args[2], benchdata.BigPlan(n), 0o644)
	case "time":
		if len(args) < 3 {
			return errors.New("usage: benchtool time N CMD ARGS...")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 {
			return fmt.Errorf("bad count %q", args[1])
		}
		var ts []float64
		for i := 0; i < n; i++ {
			start := time.Now()
			if err := runQuiet(args[2:]); err != nil {
				return err
			}
			ts = append(ts, float64(time.Since(start).Microseconds())/1000)
		}
		fmt.Printf("%.1f\n", median(ts))
		return nil
	case "pair":
		if len(args) < 5 {
			return errors.New("usage: benchtool pair N CMD_A... -- CMD_B...")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 {
			return fmt.Errorf("bad count %q", args[1])
		}
		rest := args[2:]
		sep := -1
		for i, a := range rest {
			if a == "--" {
				sep = i
				break
			}
		}
		if sep <= 0 || sep == len(rest)-1 {
			return errors.New("usage: benchtool pair N CMD_A... -- CMD_B...")
		}
		a, b := rest[:sep], rest[sep+1:]
		var ta, tb []float64
		for i := 0; i < n; i++ {
			for _, c := range []struct {
				argv []string
				out  *[]float64
			}{{a, &ta}, {b, &tb}} {
				start := time.Now()
				if err := runQuiet(c.argv); err != nil {
					return err
				}
				*c.out = append(*c.out, float64(time.Since(start).Microseconds())/1000)
			}
		}
		fmt.Printf("%.1f %.1f\n", median(ta), median(tb))
		return nil
	case "genoverlay":
		if len(args) != 3 {
			return errors.New("usage: benchtool genoverlay N DIR")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 {
			return fmt.Errorf("bad count %q", args[1])
		}
		return genOverlay(n, args[2])
	case "kustomize":
		if len(args) != 2 {
			return errors.New("usage: benchtool kustomize DIR")
		}
		dir, err := filepath.Abs(args[1])
		if err != nil {
			return err
		}
		f, err := sources.Kustomize(filepath.Dir(dir), filepath.Base(dir))
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(f.Data)
		return err
	case "peak":
		cmd := exec.Command(args[1], args[2:]...)
		cmd.Stdout, cmd.Stderr = nil, nil
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return err
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return errors.New("no resource usage on this platform")
		}
		fmt.Printf("%.1f MiB (exit %d)\n", float64(ru.Maxrss)/1024, cmd.ProcessState.ExitCode())
		return nil
	case "compare":
		if len(args) < 5 {
			return errors.New("usage: benchtool compare IV CONFTEST SUBCMD FILE [flags...]")
		}
		return compare(args[1], args[2], args[3], args[4], args[5:])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runQuiet runs a command; exit code 1 (policy failures) is a normal result.
func runQuiet(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	return nil
}

func output(argv []string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	return out, nil
}

// compare runs both tools and prints their failures and warnings.
func compare(iv, conftest, sub, file string, flags []string) error {
	ivOut, err := output(append(append([]string{iv, sub, "--no-default-policies", "-o", "json"}, flags...), file))
	if err != nil {
		return err
	}
	cfOut, err := output(append(append([]string{conftest, "test", "--no-color", "-o", "json"}, flags...), file))
	if err != nil {
		return err
	}
	got, err := normReport(ivOut)
	if err != nil {
		return err
	}
	want, err := normConftest(cfOut)
	if err != nil {
		return err
	}
	fmt.Printf("  %s %s (%s)\n", sub, filepath.Base(file), strings.Join(flags, " "))
	all := map[string][2]bool{}
	for _, l := range got {
		v := all[l]
		v[0] = true
		all[l] = v
	}
	for _, l := range want {
		v := all[l]
		v[1] = true
		all[l] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	same := len(got) == len(want)
	shown := 0
	for i, k := range keys {
		mark := "same    "
		switch v := all[k]; {
		case v[0] && !v[1]:
			mark, same = "ONLY-IV ", false
		case !v[0] && v[1]:
			mark, same = "ONLY-CFT", false
		}
		// Long lists show their first lines and every difference.
		if mark == "same    " && len(keys) > 12 && shown >= 8 {
			if i == len(keys)-1 {
				fmt.Printf("    ... and %d more identical results\n", len(keys)-shown)
			}
			continue
		}
		shown++
		fmt.Printf("    %s %s\n", mark, k)
	}
	if !same {
		fmt.Printf("    => DIFFERENT (infra-validator %d, conftest %d)\n", len(got), len(want))
		return errors.New("results differ")
	}
	fmt.Printf("    => identical: %d results\n", len(got))
	return nil
}

func normConftest(raw []byte) ([]string, error) {
	var out []struct {
		Warnings []struct {
			Msg      string         `json:"msg"`
			Metadata map[string]any `json:"metadata"`
		} `json:"warnings"`
		Failures []struct {
			Msg      string         `json:"msg"`
			Metadata map[string]any `json:"metadata"`
		} `json:"failures"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("conftest output: %w", err)
	}
	var lines []string
	add := func(kind string, meta map[string]any, msg string) {
		q, _ := meta["query"].(string)
		q = strings.TrimPrefix(q, "data.")
		if i := strings.LastIndex(q, "."); i >= 0 {
			q = q[:i] + "/" + q[i+1:]
		}
		lines = append(lines, fmt.Sprintf("%-4s %-28s %s", kind, q, msg))
	}
	for _, r := range out {
		for _, f := range r.Failures {
			add("fail", f.Metadata, f.Msg)
		}
		for _, w := range r.Warnings {
			add("warn", w.Metadata, w.Msg)
		}
	}
	sort.Strings(lines)
	return lines, nil
}

func normReport(raw []byte) ([]string, error) {
	var rep struct {
		Sections []struct {
			Verdict struct {
				Findings []struct {
					Severity, Source, Policy, Message string
				} `json:"findings"`
			} `json:"verdict"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("infra-validator output: %w", err)
	}
	var lines []string
	for _, s := range rep.Sections {
		for _, f := range s.Verdict.Findings {
			if f.Source != "policy" {
				continue
			}
			kind := map[string]string{"deny": "fail", "warn": "warn"}[f.Severity]
			if kind == "" {
				continue
			}
			lines = append(lines, fmt.Sprintf("%-4s %-28s %s", kind, f.Policy, f.Message))
		}
	}
	sort.Strings(lines)
	return lines, nil
}

// genOverlay writes a base of n objects (half Deployments, half ConfigMaps,
// one file each) and an overlay over it with a name prefix, labels, a
// namespace, a strategic-merge patch and a generated ConfigMap: the
// transformations teams' overlays use.
func genOverlay(n int, dir string) error {
	base, overlay := filepath.Join(dir, "base"), filepath.Join(dir, "overlay")
	for _, d := range []string{base, overlay} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var res strings.Builder
	res.WriteString("resources:\n")
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("obj-%04d.yaml", i)
		var doc string
		if i%2 == 0 {
			doc = fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-%d\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: app-%d}\n  template:\n    metadata:\n      labels: {app: app-%d}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:1.0.%d\n          env:\n            - {name: INDEX, value: \"%d\"}\n", i, i, i, i, i)
		} else {
			doc = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-%d\ndata:\n  index: \"%d\"\n  text: lorem ipsum dolor sit amet\n", i, i)
		}
		if err := os.WriteFile(filepath.Join(base, name), []byte(doc), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&res, "  - %s\n", name)
	}
	if err := os.WriteFile(filepath.Join(base, "kustomization.yaml"), []byte(res.String()), 0o644); err != nil {
		return err
	}
	k := "resources: [../base]\nnamespace: bench\nnamePrefix: staging-\nlabels:\n  - pairs: {env: staging}\n    includeSelectors: false\n" +
		"patches:\n  - path: replicas.yaml\n    target: {kind: Deployment}\n" +
		"configMapGenerator:\n  - name: settings\n    literals: [mode=staging]\n"
	patch := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\nspec:\n  replicas: 2\n"
	if err := os.WriteFile(filepath.Join(overlay, "replicas.yaml"), []byte(patch), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644)
}
