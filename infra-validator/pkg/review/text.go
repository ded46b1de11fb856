package review

import (
	"fmt"
	"io"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// ANSI colours of Text.
const (
	ansiReset  = "\x1b[0m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiBold   = "\x1b[1m"
)

// Text writes the plan and the manifest diff of s for a terminal, in full,
// coloured when color is set. Control characters of the change's text are
// dropped, so nothing in it can drive the terminal.
func Text(w io.Writer, s *Section, color bool) error {
	p := &printer{w: w, color: color}
	p.line(ansiBold, fmt.Sprintf("Change %s (%s of release %s at %s): verdict %s, risk %s", s.Change, s.Operation, s.Release, sluicev1.ShortSHA(s.Revision), s.Verdict, s.Risk))
	for _, c := range s.HelmCharts {
		p.line("", "helmCharts: "+c.Line())
	}
	if s.Chart != nil {
		p.line("", s.Chart.Line())
	}
	if s.Plan != nil {
		p.line("", "")
		p.line(ansiBold, "Terraform plan: "+s.Plan.Summary())
		for _, l := range planLines(s) {
			p.line(planColor(l), l)
		}
	}
	if s.HasManifest {
		p.line("", "")
		switch {
		case s.ManifestErr != "":
			p.line(ansiBold, "Manifest: cannot be compared: "+s.ManifestErr)
		case s.AppliedRevision == "":
			p.line(ansiBold, fmt.Sprintf("Manifest: %d objects, nothing applied yet", len(s.Objects)))
		default:
			p.line(ansiBold, fmt.Sprintf("Manifest: %d objects differ from the applied revision %s, %d unchanged", len(s.Objects), sluicev1.ShortSHA(s.AppliedRevision), s.Unchanged))
		}
		for _, l := range diffLines(s) {
			p.line(diffColor(l), l)
		}
	}
	if s.Trimmed {
		p.line("", "")
		p.line(ansiBold, "The stored review was too large to keep whole: attribute changes and diff lines are left out; the pull request's comment shows them.")
	}
	if s.Plan == nil && !s.HasManifest {
		p.line("", "No Terraform plan and no manifest recorded for this change.")
	}
	p.line("", "")
	p.line("", "A review approves "+s.Approval.Digest)
	return p.err
}

type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) line(color, s string) {
	if p.err != nil {
		return
	}
	s = clean(s)
	if p.color && color != "" {
		s = color + s + ansiReset
	}
	_, p.err = io.WriteString(p.w, s+"\n")
}

func planColor(l string) string {
	t := strings.TrimLeft(l, " ")
	switch {
	case strings.HasPrefix(t, "-/+"), strings.HasPrefix(t, "~"):
		return ansiYellow
	case strings.HasPrefix(t, "+"):
		return ansiGreen
	case strings.HasPrefix(t, "-"):
		return ansiRed
	}
	return ""
}

func diffColor(l string) string {
	switch {
	case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		return ansiBold
	case strings.HasPrefix(l, "@@"):
		return ansiCyan
	case strings.HasPrefix(l, "+"):
		return ansiGreen
	case strings.HasPrefix(l, "-"):
		return ansiRed
	}
	return ""
}
