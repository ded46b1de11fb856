package tfstate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
)

// planAndApply plans dir with planCred (the syncer's server) into a plan
// file, then applies that plan file from a fresh copy of the stack with
// applyCred (the operator's server, another address), as Sluice does. It
// returns the plan file.
func planAndApply(t *testing.T, dir string, planCred, applyCred tfstate.Credential, v string) []byte {
	t.Helper()
	mustTF(t, dir, planCred.Env(), "init", "-input=false", "-no-color")
	mustTF(t, dir, planCred.Env(), "plan", "-input=false", "-no-color", "-out=plan.tfplan", "-var", "v="+v)
	planFile, err := os.ReadFile(filepath.Join(dir, "plan.tfplan"))
	if err != nil {
		t.Fatal(err)
	}
	applyDir := t.TempDir()
	main, err := os.ReadFile(filepath.Join(dir, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"main.tf": main, "plan.tfplan": planFile} {
		if err := os.WriteFile(filepath.Join(applyDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustTF(t, applyDir, applyCred.Env(), "init", "-input=false", "-no-color")
	mustTF(t, applyDir, applyCred.Env(), "apply", "-input=false", "-no-color", "plan.tfplan")
	return planFile
}

func TestServer_planAndApplyWithRunCredentialsOnTwoAddresses(t *testing.T) {
	ns := newNamespace(t)
	syncer, operator := newStateServer(t, tfstate.Options{}), newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "web-prod"}
	plan := func() tfstate.Credential { g.Mode = tfstate.ModePlan; return tfstatetest.Grant(t, syncer.Server, g) }
	apply := func() tfstate.Credential { g.Mode = tfstate.ModeApply; return tfstatetest.Grant(t, operator.Server, g) }

	dir := stack(t, httpBackend)
	planCred, applyCred := plan(), apply()
	planFile := planAndApply(t, dir, planCred, applyCred, "one")
	for _, secret := range append(planCred.Secrets(), planCred.Address, applyCred.Password) {
		if zipContains(t, planFile, secret) {
			t.Errorf("the plan file holds %q", secret)
		}
	}
	first, sec := secretState(t, ns, "tfstate-default-web-prod")
	if first.input() != "one" || first.Lineage == "" {
		t.Fatalf("state after the first apply: %+v", first)
	}
	wantLabels := map[string]string{"tfstate": "true", "tfstateSecretSuffix": "web-prod", "tfstateWorkspace": "default", "app.kubernetes.io/managed-by": "terraform"}
	for k, v := range wantLabels {
		if sec.Labels[k] != v {
			t.Errorf("Secret label %s = %q, want %q (the kubernetes backend's labels)", k, sec.Labels[k], v)
		}
	}
	if sec.Annotations["encoding"] != "gzip" {
		t.Errorf("Secret annotations %v, want encoding=gzip", sec.Annotations)
	}

	// A second change with new credentials: the serial moves on.
	planAndApply(t, stack(t, httpBackend), plan(), apply(), "two")
	second, _ := secretState(t, ns, "tfstate-default-web-prod")
	if second.input() != "two" || second.Lineage != first.Lineage || second.Serial <= first.Serial {
		t.Fatalf("state after the second apply: serial %d lineage %s input %q; before: serial %d lineage %s", second.Serial, second.Lineage, second.input(), first.Serial, first.Lineage)
	}
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), "lock-tfstate-default-web-prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil || lease.Annotations["app.terraform.io/lock-info"] != "" {
		t.Fatalf("the lock is still held after the apply: %+v", lease)
	}
	for _, s := range []*stateServer{syncer, operator} {
		for _, secret := range []string{planCred.Password, applyCred.Password} {
			if strings.Contains(s.logs.String(), secret) {
				t.Fatal("a token is in the server's log")
			}
		}
	}
}

func TestServer_planCredentialCannotWriteItsState(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModeApply}
	planAndApply(t, stack(t, httpBackend), tfstatetest.Grant(t, s.Server, g), tfstatetest.Grant(t, s.Server, g), "approved")
	before, _ := secretState(t, ns, "tfstate-default-web")

	g.Mode = tfstate.ModePlan
	planCred := tfstatetest.Grant(t, s.Server, g)
	dir := stack(t, httpBackend)
	mustTF(t, dir, planCred.Env(), "init", "-input=false", "-no-color")
	out, err := tf(t, dir, planCred.Env(), "apply", "-input=false", "-no-color", "-auto-approve", "-var", "v=pushed")
	if err == nil {
		t.Fatalf("terraform apply with a plan credential succeeded:\n%s", out)
	}
	if !strings.Contains(out, "403") {
		t.Errorf("terraform apply failed without the server's 403:\n%s", out)
	}

	// The same, by hand: lock with the plan credential, then POST.
	state := getState(t, planCred)
	state.Serial++
	body, _ := json.Marshal(map[string]any{"version": 4, "serial": state.Serial, "lineage": state.Lineage, "resources": []any{}})
	if code, b := do(t, "LOCK", planCred.LockAddress, &planCred, lockBody("hand-lock")); code != http.StatusOK {
		t.Fatalf("LOCK with a plan credential: %d %s", code, b)
	}
	if code, b := do(t, http.MethodPost, planCred.Address+"?ID=hand-lock", &planCred, body); code != http.StatusForbidden {
		t.Fatalf("POST with a plan credential: %d %s, want 403", code, b)
	}
	if code, b := do(t, "UNLOCK", planCred.UnlockAddress, &planCred, lockBody("hand-lock")); code != http.StatusOK {
		t.Fatalf("UNLOCK with a plan credential: %d %s", code, b)
	}
	after, _ := secretState(t, ns, "tfstate-default-web")
	if after.Serial != before.Serial || after.input() != "approved" {
		t.Fatalf("the state changed: serial %d -> %d, input %q", before.Serial, after.Serial, after.input())
	}
}

func TestServer_credentialReachesOnlyItsOwnState(t *testing.T) {
	ns, otherNS := newNamespace(t), newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	// Release b holds a state worth stealing.
	gb := tfstate.Grant{Namespace: ns, Release: "b", Mode: tfstate.ModeApply}
	planAndApply(t, stack(t, httpBackend), tfstatetest.Grant(t, s.Server, gb), tfstatetest.Grant(t, s.Server, gb), "secret-of-b")
	before, _ := secretState(t, ns, "tfstate-default-b")

	planA := tfstatetest.Grant(t, s.Server, tfstate.Grant{Namespace: ns, Release: "a", Mode: tfstate.ModePlan})
	applyA := tfstatetest.Grant(t, s.Server, tfstate.Grant{Namespace: ns, Release: "a", Mode: tfstate.ModeApply})
	bAddr := tfstatetest.Grant(t, s.Server, gb).Address
	body, _ := json.Marshal(map[string]any{"version": 4, "serial": before.Serial + 1, "lineage": before.Lineage})
	for _, tc := range []struct {
		name, method, url string
		cred              tfstate.Credential
		body              []byte
	}{
		{"a plan credential of a reads b", http.MethodGet, bAddr, planA, nil},
		{"a plan credential of a locks b", "LOCK", bAddr, planA, lockBody("x")},
		{"an apply credential of a reads b", http.MethodGet, bAddr, applyA, nil},
		{"an apply credential of a locks b", "LOCK", bAddr, applyA, lockBody("x")},
		{"an apply credential of a unlocks b", "UNLOCK", bAddr, applyA, lockBody("x")},
		{"an apply credential of a writes b", http.MethodPost, bAddr + "?ID=x", applyA, body},
		{"an apply credential of a reads b's workspace", http.MethodGet, strings.Replace(applyA.Address, "/default/a", "/staging/a", 1), applyA, nil},
		{"an apply credential of a reads a in another namespace", http.MethodGet, strings.Replace(applyA.Address, "/"+ns+"/", "/"+otherNS+"/", 1), applyA, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := do(t, tc.method, tc.url, &tc.cred, tc.body)
			if code != http.StatusForbidden {
				t.Fatalf("%d %s, want 403", code, got)
			}
			if strings.Contains(string(got), "secret-of-b") {
				t.Fatal("the response holds b's state")
			}
		})
	}

	// Terraform itself, pointed at b's address with a's credential.
	stolen := planA
	stolen.Address, stolen.LockAddress, stolen.UnlockAddress = bAddr, bAddr, bAddr
	dir := stack(t, httpBackend)
	if err := os.WriteFile(filepath.Join(dir, "steal.tf"), []byte(`output "b" { value = terraform_data.x.output }`), 0o600); err != nil {
		t.Fatal(err)
	}
	// init already reads the state.
	out, err := tf(t, dir, stolen.Env(), "init", "-input=false", "-no-color")
	if err == nil {
		out, err = tf(t, dir, stolen.Env(), "plan", "-input=false", "-no-color", "-var", "v=x")
	}
	if err == nil || strings.Contains(out, "secret-of-b") {
		t.Fatalf("a plan with a's credential on b's address: err %v\n%s", err, out)
	}
	if after, _ := secretState(t, ns, "tfstate-default-b"); after.Serial != before.Serial {
		t.Fatalf("b's serial moved %d -> %d", before.Serial, after.Serial)
	}
}

func TestServer_refusesMissingForgedModifiedAndExpiredTokens(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	other := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModePlan, TTL: time.Minute}
	good := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, http.MethodGet, good.Address, &good, nil); code != http.StatusNotFound {
		t.Fatalf("GET of a state not written yet with a good token: %d %s, want 404", code, b)
	}
	parts := strings.Split(good.Password, ".")
	modified := good
	modified.Password = parts[0] + "." + parts[1] + "A." + parts[2]
	wrongUser := good
	wrongUser.Username = "admin"
	fromOther := tfstatetest.Grant(t, other.Server, g)
	fromOther.Address = good.Address
	for _, tc := range []struct {
		name string
		cred *tfstate.Credential
	}{
		{"no credential", nil},
		{"another user name", &wrongUser},
		{"a token of another server (a restart, or the syncer's token at the operator)", &fromOther},
		{"a modified token", &modified},
		{"a token that is not one", &tfstate.Credential{Username: tfstate.Username, Password: "hunter2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []string{http.MethodGet, "LOCK", http.MethodPost} {
				code, b := do(t, m, good.Address, tc.cred, lockBody("x"))
				if code != http.StatusUnauthorized {
					t.Fatalf("%s: %d %s, want 401", m, code, b)
				}
			}
		})
	}
	s.clock.Advance(time.Minute)
	if code, b := do(t, http.MethodGet, good.Address, &good, nil); code != http.StatusUnauthorized {
		t.Fatalf("GET with an expired token: %d %s, want 401", code, b)
	}
	logs := s.logs.String()
	if !strings.Contains(logs, "expired") || !strings.Contains(logs, "signature does not match") {
		t.Errorf("the log does not say why tokens were refused:\n%s", logs)
	}
	for _, tok := range []string{good.Password, modified.Password, fromOther.Password, "hunter2"} {
		if strings.Contains(logs, tok) {
			t.Fatalf("the log holds a token:\n%s", logs)
		}
	}
}

func TestServer_continuesAKubernetesBackendStateWithItsSerial(t *testing.T) {
	ns := newNamespace(t)
	// Today's state: written by Terraform's kubernetes backend.
	kdir := stack(t, kubernetesBackend(ns, "legacy"))
	kenv := map[string]string{"KUBE_CONFIG_PATH": kubeconfig}
	mustTF(t, kdir, kenv, "init", "-input=false", "-no-color")
	mustTF(t, kdir, kenv, "apply", "-input=false", "-no-color", "-auto-approve", "-var", "v=before")
	legacy, legacySecret := secretState(t, ns, "tfstate-default-legacy")
	if legacy.input() != "before" {
		t.Fatalf("the kubernetes backend wrote %+v", legacy)
	}

	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "legacy", Mode: tfstate.ModePlan}
	read := getState(t, tfstatetest.Grant(t, s.Server, g))
	if read.Serial != legacy.Serial || read.Lineage != legacy.Lineage || read.input() != "before" {
		t.Fatalf("the http backend reads serial %d lineage %s input %q; the kubernetes backend wrote serial %d lineage %s", read.Serial, read.Lineage, read.input(), legacy.Serial, legacy.Lineage)
	}

	planCred := tfstatetest.Grant(t, s.Server, g)
	g.Mode = tfstate.ModeApply
	planAndApply(t, stack(t, httpBackend), planCred, tfstatetest.Grant(t, s.Server, g), "after")
	next, sec := secretState(t, ns, "tfstate-default-legacy")
	if next.Serial != legacy.Serial+1 || next.Lineage != legacy.Lineage || next.input() != "after" {
		t.Fatalf("after the http apply: serial %d lineage %s input %q; want serial %d lineage %s", next.Serial, next.Lineage, next.input(), legacy.Serial+1, legacy.Lineage)
	}
	if string(next.Outputs["v"]) == "" || !strings.Contains(string(next.Outputs["v"]), "after") {
		t.Fatalf("outputs after the http apply: %s", next.Outputs["v"])
	}
	if sec.UID != legacySecret.UID {
		t.Fatal("the Secret was replaced instead of updated")
	}
	for k, v := range legacySecret.Labels {
		if sec.Labels[k] != v {
			t.Fatalf("label %s changed from %q to %q", k, v, sec.Labels[k])
		}
	}

	// And back: the kubernetes backend still reads what the server wrote.
	out := mustTF(t, kdir, kenv, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-var", "v=after")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("the kubernetes backend does not see the http backend's state:\n%s", out)
	}
}

func TestServer_lockExcludesOtherRunsUntilReleasedOrExpired(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModePlan, TTL: 10 * time.Minute}
	holder := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", holder.LockAddress, &holder, lockBody("run-1-lock")); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, b)
	}
	if code, b := do(t, "LOCK", holder.LockAddress, &holder, lockBody("run-1-lock")); code != http.StatusOK {
		t.Fatalf("the holder's repeated LOCK: %d %s", code, b)
	}

	second := tfstatetest.Grant(t, s.Server, g)
	code, b := do(t, "LOCK", second.LockAddress, &second, lockBody("run-2-lock"))
	var info struct{ ID, Who string }
	if code != http.StatusLocked || json.Unmarshal(b, &info) != nil || info.ID != "run-1-lock" || info.Who != "test@host" {
		t.Fatalf("LOCK of a locked state: %d %s, want 423 with the holder's lock info", code, b)
	}
	dir := stack(t, httpBackend)
	mustTF(t, dir, second.Env(), "init", "-input=false", "-no-color")
	out, err := tf(t, dir, second.Env(), "plan", "-input=false", "-no-color", "-var", "v=x")
	if err == nil || !strings.Contains(out, "run-1-lock") {
		t.Fatalf("a plan while another run holds the lock: err %v\n%s", err, out)
	}

	// The lock ID is no key: another run that saw it in the 423 can
	// neither release the lock nor write with it.
	if code, b := do(t, "UNLOCK", second.UnlockAddress, &second, lockBody("run-1-lock")); code != http.StatusLocked {
		t.Fatalf("UNLOCK by another run with the holder's ID: %d %s, want 423", code, b)
	}
	g.Mode = tfstate.ModeApply
	otherApply := tfstatetest.Grant(t, s.Server, g)
	state, _ := json.Marshal(map[string]any{"version": 4, "serial": 1, "lineage": "l"})
	if code, b := do(t, http.MethodPost, otherApply.Address+"?ID=run-1-lock", &otherApply, state); code != http.StatusConflict {
		t.Fatalf("POST by another run with the holder's ID: %d %s, want 409", code, b)
	}

	// Released: plans work again.
	if code, b := do(t, "UNLOCK", holder.UnlockAddress, &holder, lockBody("run-1-lock")); code != http.StatusOK {
		t.Fatalf("UNLOCK by the holder: %d %s", code, b)
	}
	mustTF(t, dir, second.Env(), "plan", "-input=false", "-no-color", "-var", "v=x")

	// Expired: a run killed while holding the lock blocks the state until
	// its token expires, then another run takes the lock over.
	g.Mode, g.TTL = tfstate.ModePlan, time.Minute
	killed := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", killed.LockAddress, &killed, lockBody("killed-lock")); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, b)
	}
	g.TTL = time.Hour
	next := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", next.LockAddress, &next, lockBody("next-lock")); code != http.StatusLocked {
		t.Fatalf("LOCK before the holder's token expired: %d %s, want 423", code, b)
	}
	s.clock.Advance(time.Minute)
	if code, b := do(t, "LOCK", next.LockAddress, &next, lockBody("next-lock")); code != http.StatusOK {
		t.Fatalf("LOCK after the holder's token expired: %d %s, want 200", code, b)
	}
	if code, b := do(t, "UNLOCK", next.UnlockAddress, &next, lockBody("next-lock")); code != http.StatusOK {
		t.Fatalf("UNLOCK: %d %s", code, b)
	}
}

// TestServer_revokingADeadRunsCredentialFreesItsLockAtOnce: a run killed
// while holding the lock no longer blocks the state until its token
// expires once its caller revokes the credential; the revoked token opens
// nothing, and a lock of another run stays where it is.
func TestServer_revokingADeadRunsCredentialFreesItsLockAtOnce(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModeApply, TTL: time.Hour}
	dead := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", dead.LockAddress, &dead, lockBody("dead-lock")); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, b)
	}
	next := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", next.LockAddress, &next, lockBody("next-lock")); code != http.StatusLocked {
		t.Fatalf("LOCK while the dead run holds it: %d %s, want 423", code, b)
	}

	// Revoking another run's credential frees nothing.
	if err := s.Revoke(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	third := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", third.LockAddress, &third, lockBody("third-lock")); code != http.StatusLocked {
		t.Fatalf("LOCK after revoking a run that holds nothing: %d %s, want 423", code, b)
	}

	if err := s.Revoke(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if code, b := do(t, "LOCK", third.LockAddress, &third, lockBody("third-lock")); code != http.StatusOK {
		t.Fatalf("LOCK after the dead run's credential was revoked: %d %s, want 200", code, b)
	}
	state, _ := json.Marshal(map[string]any{"version": 4, "serial": 1, "lineage": "l"})
	for _, m := range []string{http.MethodGet, "LOCK", "UNLOCK"} {
		if code, b := do(t, m, dead.Address, &dead, lockBody("dead-lock")); code != http.StatusUnauthorized {
			t.Fatalf("%s with the revoked credential: %d %s, want 401", m, code, b)
		}
	}
	if code, b := do(t, http.MethodPost, dead.Address+"?ID=dead-lock", &dead, state); code != http.StatusUnauthorized {
		t.Fatalf("POST with the revoked credential: %d %s, want 401", code, b)
	}
	if code, b := do(t, "UNLOCK", third.UnlockAddress, &third, lockBody("third-lock")); code != http.StatusOK {
		t.Fatalf("UNLOCK by the holder: %d %s", code, b)
	}
}

func TestServer_kubernetesBackendAndHTTPBackendLocksExcludeEachOther(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	kdir := stack(t, kubernetesBackend(ns, "web"))
	kenv := map[string]string{"KUBE_CONFIG_PATH": kubeconfig}
	mustTF(t, kdir, kenv, "init", "-input=false", "-no-color")
	mustTF(t, kdir, kenv, "apply", "-input=false", "-no-color", "-auto-approve", "-var", "v=one")

	// An http-backend lock stops a kubernetes-backend run.
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModePlan}
	holder := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", holder.LockAddress, &holder, lockBody("http-lock")); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, b)
	}
	out, err := tf(t, kdir, kenv, "plan", "-input=false", "-no-color", "-var", "v=two")
	if err == nil || !strings.Contains(out, "http-lock") {
		t.Fatalf("a kubernetes-backend plan while the http backend holds the lock: err %v\n%s", err, out)
	}
	if code, b := do(t, "UNLOCK", holder.UnlockAddress, &holder, lockBody("http-lock")); code != http.StatusOK {
		t.Fatalf("UNLOCK: %d %s", code, b)
	}

	// A kubernetes-backend run holding the lock (an apply waiting for its
	// "yes") stops an http-backend run.
	cmd := tfCmd(t, kdir, kenv, "apply", "-no-color", "-var", "v=two")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() && !strings.Contains(sc.Text(), "Only 'yes' will be accepted") {
		seen = append(seen, sc.Text())
	}
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), "lock-tfstate-default-web", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("the kubernetes backend holds no lock while it asks: %v %+v\n%s", err, lease, strings.Join(seen, "\n"))
	}
	kID := *lease.Spec.HolderIdentity
	other := tfstatetest.Grant(t, s.Server, g)
	code, b := do(t, "LOCK", other.LockAddress, &other, lockBody("http-lock-2"))
	if code != http.StatusLocked || !strings.Contains(string(b), kID) {
		t.Fatalf("LOCK while the kubernetes backend holds the lock %s: %d %s, want 423", kID, code, b)
	}
	// The server never takes over a kubernetes-backend lock, however old.
	s.clock.Advance(tfstate.MaxTTL)
	other = tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", other.LockAddress, &other, lockBody("http-lock-3")); code != http.StatusLocked {
		t.Fatalf("LOCK a day later: %d %s, want 423", code, b)
	}
	if _, err := stdin.Write([]byte("no\n")); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	for sc.Scan() {
	}
	_ = cmd.Wait()
	if code, b := do(t, "LOCK", other.LockAddress, &other, lockBody("http-lock-3")); code != http.StatusOK {
		t.Fatalf("LOCK after the kubernetes backend let go: %d %s", code, b)
	}
}

func TestServer_refusesBadInputAndLosesNothing(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{MaxStateBytes: 4096})
	g := tfstate.Grant{Namespace: ns, Release: "web", Mode: tfstate.ModeApply}
	planAndApply(t, stack(t, httpBackend), tfstatetest.Grant(t, s.Server, g), tfstatetest.Grant(t, s.Server, g), "kept")
	before, _ := secretState(t, ns, "tfstate-default-web")
	cred := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, "LOCK", cred.LockAddress, &cred, lockBody("L")); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, b)
	}
	state := func(serial uint64, lineage string, pad int) []byte {
		b, _ := json.Marshal(map[string]any{"version": 4, "serial": serial, "lineage": lineage, "pad": strings.Repeat("x", pad)})
		return b
	}
	base := strings.TrimSuffix(cred.Address, "/tfstate/"+ns+"/default/web")
	for _, tc := range []struct {
		name, method, url string
		body              []byte
		want              int
		says              string
	}{
		{"a state above the size cap", http.MethodPost, cred.Address + "?ID=L", state(before.Serial+1, before.Lineage, 8192), http.StatusRequestEntityTooLarge, "limit"},
		{"a body that is not JSON", http.MethodPost, cred.Address + "?ID=L", []byte("{not json"), http.StatusBadRequest, "not valid JSON"},
		{"JSON that is not a state", http.MethodPost, cred.Address + "?ID=L", []byte(`{"hello":"world"}`), http.StatusBadRequest, "version"},
		{"a state of another lineage", http.MethodPost, cred.Address + "?ID=L", state(before.Serial+1, "other-lineage", 0), http.StatusConflict, "lineage"},
		{"a state going back in serial", http.MethodPost, cred.Address + "?ID=L", state(before.Serial-1, before.Lineage, 0), http.StatusConflict, "older"},
		{"a write without the lock ID", http.MethodPost, cred.Address, state(before.Serial+1, before.Lineage, 0), http.StatusConflict, "lock"},
		{"a write with another lock ID", http.MethodPost, cred.Address + "?ID=M", state(before.Serial+1, before.Lineage, 0), http.StatusConflict, "not held"},
		{"malformed lock JSON", "LOCK", cred.LockAddress, []byte(`{"ID":`), http.StatusBadRequest, "lock info"},
		{"lock JSON without an ID", "LOCK", cred.LockAddress, []byte(`{"Who":"me"}`), http.StatusBadRequest, "ID"},
		{"two lock JSON values", "UNLOCK", cred.UnlockAddress, []byte(`{"ID":"L"}}`), http.StatusBadRequest, "more than one"},
		{"a lock body above its cap", "LOCK", cred.LockAddress, []byte(`{"ID":"L","Info":"` + strings.Repeat("x", 70<<10) + `"}`), http.StatusRequestEntityTooLarge, "limit"},
		{"DELETE", http.MethodDelete, cred.Address, nil, http.StatusMethodNotAllowed, "DELETE"},
		{"PUT", http.MethodPut, cred.Address, state(before.Serial+1, before.Lineage, 0), http.StatusMethodNotAllowed, "PUT"},
		{"a path without a release", http.MethodGet, base + "/tfstate/" + ns + "/default", nil, http.StatusNotFound, "no state"},
		{"a path below a state", http.MethodGet, cred.Address + "/extra", nil, http.StatusNotFound, "no state"},
		{"a path with dot segments", http.MethodGet, base + "/tfstate/" + ns + "/default/..", nil, http.StatusNotFound, "no state"},
		{"a path outside the prefix", http.MethodGet, base + "/api/v1/secrets", nil, http.StatusNotFound, "no state"},
		{"the prefix alone", http.MethodGet, base + "/tfstate/", nil, http.StatusNotFound, "no state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := do(t, tc.method, tc.url, &cred, tc.body)
			if code != tc.want || !strings.Contains(string(b), tc.says) {
				t.Fatalf("%d %s, want %d saying %q", code, b, tc.want, tc.says)
			}
		})
	}
	after, _ := secretState(t, ns, "tfstate-default-web")
	if after.Serial != before.Serial || after.Lineage != before.Lineage || after.input() != "kept" {
		t.Fatalf("the state changed: %+v -> %+v", before, after)
	}
	// The lock is still this run's: a good write goes through.
	if code, b := do(t, http.MethodPost, cred.Address+"?ID=L", &cred, state(before.Serial+1, before.Lineage, 0)); code != http.StatusOK {
		t.Fatalf("a good write: %d %s", code, b)
	}
}

func TestServer_refusesObjectsThatAreNotThisState(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	ctx := context.Background()
	// Workspace "a-b" of release "c" is stored as tfstate-a-b-c, the name
	// workspace "a" of release "b-c" would use.
	victim := tfstate.Grant{Namespace: ns, Workspace: "a-b", Release: "c", Mode: tfstate.ModeApply}
	planAndApply(t, stack(t, httpBackend), tfstatetest.Grant(t, s.Server, victim), tfstatetest.Grant(t, s.Server, victim), "victim")
	before, _ := secretState(t, ns, "tfstate-a-b-c")
	// And a Secret of the control namespace that only looks like a state.
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-credentials", Namespace: ns},
		Data:       map[string][]byte{"tfstate": []byte("not for runs")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []tfstate.Grant{
		{Namespace: ns, Workspace: "a", Release: "b-c", Mode: tfstate.ModeApply},
		{Namespace: ns, Release: "credentials", Mode: tfstate.ModeApply},
	} {
		cred := tfstatetest.Grant(t, s.Server, g)
		if code, b := do(t, http.MethodGet, cred.Address, &cred, nil); code != http.StatusConflict || strings.Contains(string(b), "victim") || strings.Contains(string(b), "not for runs") {
			t.Fatalf("GET of %s/%s: %d %s, want 409", g.Workspace, g.Release, code, b)
		}
		if code, b := do(t, "LOCK", cred.LockAddress, &cred, lockBody("L")); code != http.StatusOK && code != http.StatusConflict {
			t.Fatalf("LOCK of %s/%s: %d %s", g.Workspace, g.Release, code, b)
		}
		body, _ := json.Marshal(map[string]any{"version": 4, "serial": before.Serial + 1, "lineage": before.Lineage})
		if code, b := do(t, http.MethodPost, cred.Address+"?ID=L", &cred, body); code != http.StatusConflict {
			t.Fatalf("POST of %s/%s: %d %s, want 409", g.Workspace, g.Release, code, b)
		}
	}
	if after, _ := secretState(t, ns, "tfstate-a-b-c"); after.Serial != before.Serial || after.input() != "victim" {
		t.Fatalf("the victim's state changed: %+v", after)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, "tfstate-default-credentials", metav1.GetOptions{})
	if err != nil || string(sec.Data["tfstate"]) != "not for runs" {
		t.Fatalf("the other Secret changed: %v %v", err, sec.Data)
	}
}
