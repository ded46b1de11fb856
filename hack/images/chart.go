package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"sigs.k8s.io/yaml"
)

// ChartError reports a chart whose version or image values cannot be read.
type ChartError struct {
	Path string
	Err  error
}

func (e *ChartError) Error() string { return fmt.Sprintf("chart %s: %v", e.Path, e.Err) }

func (e *ChartError) Unwrap() error { return e.Err }

// ChartAppVersion reads appVersion from dir/Chart.yaml: the images' tag.
func ChartAppVersion(dir string) (string, error) {
	p := filepath.Join(dir, "Chart.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", &ChartError{Path: p, Err: err}
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", &ChartError{Path: p, Err: err}
	}
	if c.AppVersion == "" {
		return "", &ChartError{Path: p, Err: fmt.Errorf("no appVersion")}
	}
	return c.AppVersion, nil
}

// readmeImage finds the image lines of the chart README's snippets, with
// the <appVersion> placeholder.
var readmeImage = regexp.MustCompile(`(?m)^\s*image:\s*([^\s:]+):<appVersion>\s*$`)

// ChartDefaultRefs lists the image references the chart uses with no
// values set: every <component>.image in values.yaml (an empty tag means
// appVersion) and every image of the README's snippets (the Argo CD
// repo-server sidecar), sorted and without duplicates.
func ChartDefaultRefs(dir string) ([]string, error) {
	appVersion, err := ChartAppVersion(dir)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "values.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, &ChartError{Path: p, Err: err}
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		return nil, &ChartError{Path: p, Err: err}
	}
	set := map[string]bool{}
	for _, v := range values {
		comp, ok := v.(map[string]any)
		if !ok {
			continue
		}
		img, ok := comp["image"].(map[string]any)
		if !ok {
			continue
		}
		repo, _ := img["repository"].(string)
		tag, _ := img["tag"].(string)
		if repo == "" {
			return nil, &ChartError{Path: p, Err: fmt.Errorf("an image without repository")}
		}
		if tag == "" {
			tag = appVersion
		}
		set[repo+":"+tag] = true
	}
	readme := filepath.Join(dir, "README.md")
	if rb, err := os.ReadFile(readme); err == nil {
		for _, m := range readmeImage.FindAllSubmatch(rb, -1) {
			set[string(m[1])+":"+appVersion] = true
		}
	}
	if len(set) == 0 {
		return nil, &ChartError{Path: p, Err: fmt.Errorf("no image values")}
	}
	refs := make([]string, 0, len(set))
	for r := range set {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	return refs, nil
}
