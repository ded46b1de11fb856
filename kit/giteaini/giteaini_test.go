package giteaini_test

import (
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/kit/giteaini"
)

// TestConfig_aPodAndALocalGiteaDifferOnlyWhereTheyMust compares the two
// app.ini files line by line: what may differ is named.
func TestConfig_aPodAndALocalGiteaDifferOnlyWhereTheyMust(t *testing.T) {
	local := giteaini.Config{AppName: "t", RunUser: "root", WorkPath: "/tmp/g", HTTPAddr: "127.0.0.1", Port: 3001, RootURL: "http://127.0.0.1:3001",
		Domain: "127.0.0.1", StaticRoot: "/mod", AllowedHosts: "loopback", SecretKey: "k", InternalToken: "i", AsRoot: true, LogToFile: true}.String()
	pod := giteaini.Config{AppName: "t", RunUser: "nonroot", WorkPath: "/data", HTTPAddr: "0.0.0.0", Port: 3000, RootURL: "http://gitea.gitea.svc:3000/",
		Domain: "gitea.gitea.svc", StaticRoot: "/gitea-static", AllowedHosts: "*", SecretKey: "k", InternalToken: "i"}.String()
	for _, want := range []string{"ROOT_URL = http://127.0.0.1:3001/\n", "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true\n", "MODE = file\nROOT_PATH = /tmp/g/log\n", "PATH = /tmp/g/data/gitea.db\n"} {
		if !strings.Contains(local, want) {
			t.Errorf("the local app.ini lacks %q:\n%s", want, local)
		}
	}
	for _, want := range []string{"ROOT_URL = http://gitea.gitea.svc:3000/\n", "MODE = console\n", "ALLOWED_HOST_LIST = *\n", "JWT_SECRET = "} {
		if !strings.Contains(pod, want) {
			t.Errorf("the pod's app.ini lacks %q:\n%s", want, pod)
		}
	}
	if strings.Contains(pod, "I_AM_BEING_UNSAFE") {
		t.Error("the pod's Gitea may run as root")
	}
	differ := map[string]bool{"RUN_USER": true, "WORK_PATH": true, "HTTP_ADDR": true, "HTTP_PORT": true, "DOMAIN": true, "ROOT_URL": true,
		"APP_DATA_PATH": true, "STATIC_ROOT_PATH": true, "PATH": true, "ROOT": true, "ALLOWED_HOST_LIST": true, "MODE": true, "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT": true, "ROOT_PATH": true}
	keys := func(s string) map[string]string {
		m := map[string]string{}
		section := ""
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "[") {
				section = l
			}
			if k, v, ok := strings.Cut(l, " = "); ok {
				m[section+k] = v
			}
		}
		return m
	}
	lk, pk := keys(local), keys(pod)
	for k, v := range lk {
		name := k[strings.LastIndex(k, "]")+1:]
		if !differ[name] && pk[k] != v {
			t.Errorf("%s differs: local %q, pod %q", k, v, pk[k])
		}
	}
}
