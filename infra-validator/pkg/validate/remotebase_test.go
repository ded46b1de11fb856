package validate

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

const remoteCommit = "0123456789abcdef0123456789abcdef01234567"

// remoteBase is a base in another repository, pinned to remoteCommit.
var remoteBase = manifest.RemoteBase{Repo: "https://git.example/platform/bases.git", Dir: "web", Commit: remoteCommit}

// withFetchedBase adds to files the remote base's tree as the syncer
// fetches it into the artifact, and returns files.
func withFetchedBase(files map[string]string, extra map[string]string) map[string]string {
	root := remoteBase.Root()
	files[path.Join(root, "web/kustomization.yaml")] = "resources: [deployment.yaml, ../common]\n"
	files[path.Join(root, "web/deployment.yaml")] = deployment
	files[path.Join(root, "common/kustomization.yaml")] = "resources: [config.yaml]\n"
	files[path.Join(root, "common/config.yaml")] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-remote\ndata:\n  a: b\n"
	for k, v := range extra {
		files[path.Join(root, k)] = v
	}
	return files
}

const remoteURL = "https://git.example/platform/bases.git//web?ref=" + remoteCommit

func TestCheckService_aFetchedRemoteBaseIsBuiltFromTheContent(t *testing.T) {
	v := newValidator(t)
	root := sourcesRepo(t, withFetchedBase(map[string]string{
		"services/shop/overlays/staging/kustomization.yaml": "resources:\n  - " + remoteURL + "\nnamePrefix: staging-\n",
	}, nil))
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	ids := objectIDs(res)
	for _, want := range []string{"Deployment/shop-staging/staging-web", "ConfigMap/shop-staging/staging-from-remote"} {
		if !slices.Contains(ids, want) {
			t.Fatalf("want %s from the fetched remote base, got %v", want, ids)
		}
	}
	in, err := manifest.KustomizeInputs(root, "services/shop/overlays/staging")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(in, remoteBase.Root()+"/web") || !slices.Contains(in, remoteBase.Root()+"/common") {
		t.Fatalf("the fetched base is an input (so in the artifact and its digest): %v", in)
	}
}

func TestParseRemoteBase(t *testing.T) {
	good := map[string]manifest.RemoteBase{
		remoteURL: remoteBase,
		"git::https://git.example/platform/bases.git//web?ref=" + remoteCommit: remoteBase,
		"https://git.example/platform/bases.git?ref=" + remoteCommit:           {Repo: "https://git.example/platform/bases.git", Commit: remoteCommit},
		"ssh://git@git.example/platform/bases.git//a/b?ref=" + remoteCommit:    {Repo: "ssh://git@git.example/platform/bases.git", Dir: "a/b", Commit: remoteCommit},
		"file:///srv/git/bases.git//web?ref=" + remoteCommit:                   {Repo: "file:///srv/git/bases.git", Dir: "web", Commit: remoteCommit},
	}
	for s, want := range good {
		got, err := manifest.ParseRemoteBase(s)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"https://git.example/bases.git//web?ref=main":                                 "pinned to a full commit id",
		"https://git.example/bases.git//web?ref=v1.2.3":                               "pinned to a full commit id",
		"https://git.example/bases.git//web":                                          "pinned to a full commit id",
		"https://git.example/bases.git//web?ref=" + strings.ToUpper(remoteCommit):     "pinned to a full commit id",
		"https://git.example/bases.git//web?ref=" + remoteCommit + "&timeout=1s":      `parameter "timeout"`,
		"https://git.example/bases.git//web?ref=" + remoteCommit + "&submodules=true": `parameter "submodules"`,
		"https://u:p@git.example/bases.git//web?ref=" + remoteCommit:                  "credentials",
		"github.com/org/repo//web?ref=" + remoteCommit:                                "short forms",
		"git@github.com:org/repo.git//web?ref=" + remoteCommit:                        "short forms",
		"http://git.example/bases.git//web?ref=" + remoteCommit:                       "short forms",
		"https://git.example/bases.git//../x?ref=" + remoteCommit:                     "leaves its repository",
	}
	for s, want := range bad {
		if _, err := manifest.ParseRemoteBase(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want …%s…, got %v", s, want, err)
		}
	}
}

func TestCheckService_remoteBasesThatCannotBeBuiltAreRefusedWithFileAndLine(t *testing.T) {
	v := newValidator(t)
	const k = "services/shop/overlays/staging/kustomization.yaml"
	tests := []struct {
		name, file, kustomization, want string
		line                            int
		fetched                         map[string]string
	}{
		{name: "a branch", kustomization: "resources:\n  - https://git.example/platform/bases.git//web?ref=main\n", want: "pinned to a full commit id", line: 2},
		{name: "a tag", kustomization: "namePrefix: x-\nresources:\n  - https://git.example/platform/bases.git//web?ref=v1.0.0\n", want: "a branch or a tag can move", line: 3},
		{name: "a pinned base the Repository did not allow (not fetched)", kustomization: "resources:\n  - https://git.example/other/bases.git//web?ref=" + remoteCommit + "\n", want: "it is not fetched", line: 2},
		{name: "a remote URL as a patch", kustomization: "resources: [../../../../bases/web]\npatches:\n  - path: " + remoteURL + "\n", want: "only resources, bases and components", line: 3},
		{name: "a local path into the fetched bases", kustomization: "resources:\n  - ../../../../" + remoteBase.Target() + "\n", want: "where Sluice keeps fetched remote bases", line: 2},
		{name: "a fetched base leaving its tree", file: remoteBase.Root() + "/web/kustomization.yaml", kustomization: "resources:\n  - " + remoteURL + "\n",
			fetched: map[string]string{"web/kustomization.yaml": "resources:\n  - deployment.yaml\n  - ../../../../services/shop/secrets\n"}, want: "leaves its remote base", line: 3},
		{name: "a fetched base naming a remote base", file: remoteBase.Root() + "/web/kustomization.yaml", kustomization: "resources:\n  - " + remoteURL + "\n",
			fetched: map[string]string{"web/kustomization.yaml": "resources:\n  - https://git.example/x.git//y?ref=" + remoteCommit + "\n"}, want: "own remote bases are not fetched", line: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := sourcesRepo(t, withFetchedBase(map[string]string{k: tt.kustomization}, tt.fetched))
			_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Fatalf("want a *manifest.Error, got %v", err)
			}
			file := k
			if tt.file != "" {
				file = tt.file
			}
			for _, p := range me.Problems {
				if p.File == file && p.Line == tt.line && strings.Contains(p.Message, tt.want) {
					return
				}
			}
			t.Fatalf("want %s:%d: …%s…, got %v", file, tt.line, tt.want, err)
		})
	}
}
