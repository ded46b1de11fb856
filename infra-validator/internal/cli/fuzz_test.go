package cli

import (
	"os"
	"testing"
)

// FuzzDecodeManifests: any bytes give documents or an error, never a panic.
func FuzzDecodeManifests(f *testing.F) {
	seed, err := os.ReadFile(conftestDir + "/inputs/manifests.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`{"kind": "ConfigMap", "data": {"a": 1}}`))
	f.Add([]byte("a: [unclosed\n"))
	f.Add([]byte("- 1\n- 2\n---\nnull\n"))
	f.Add([]byte("? complex\n: key\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := decodeManifests("x.yaml", data)
		if err != nil {
			return
		}
		for _, d := range docs {
			if d.Value == nil || d.Path != "x.yaml" {
				t.Fatalf("bad document %+v", d)
			}
		}
	})
}
