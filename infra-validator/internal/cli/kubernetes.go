package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
)

// maxManifestFile bounds one manifest file read into memory.
const maxManifestFile = 64 << 20

// runKubernetes checks rendered manifests (e.g. the output of helm template
// or kustomize build), each YAML document as one object.
func runKubernetes(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("kubernetes", flag.ContinueOnError)
	var c common
	c.register(fs)
	files, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := checkCommon(&c); err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, usagef("kubernetes: give one or more manifest files")
	}
	v, err := validate.New(ctx, c.options(c.namespaces, policy.KindKubernetes))
	if err != nil {
		return 0, err
	}
	var docs []policy.Document
	for _, f := range files {
		data, err := readFile(f, maxManifestFile)
		if err != nil {
			return 0, err
		}
		ds, err := decodeManifests(f, data)
		if err != nil {
			return 0, err
		}
		docs = append(docs, ds...)
	}
	verdict, err := v.CheckObjects(ctx, docs)
	if err != nil {
		return 0, err
	}
	name := "kubernetes " + files[0]
	if len(files) > 1 {
		name = fmt.Sprintf("kubernetes %s and %d more", files[0], len(files)-1)
	}
	rep := &report.Report{Sections: []report.Section{{
		Name: name, File: files[0], Verdict: verdict,
		Details: []report.Detail{{Key: "objects", Value: fmt.Sprint(len(docs))}},
	}}}
	return finish(e, &c, rep)
}

// decodeManifests splits YAML (or JSON) into documents, one per object;
// empty documents are skipped.
func decodeManifests(file string, data []byte) ([]policy.Document, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReaderSize(bytes.NewReader(data), 64<<10))
	var docs []policy.Document
	for i := 1; ; i++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if v == nil {
			continue
		}
		docs = append(docs, policy.Document{Path: file, Value: v})
	}
	return docs, nil
}
