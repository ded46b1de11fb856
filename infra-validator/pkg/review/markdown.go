package review

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Marker opens every comment Markdown makes ("<!-- sluice:review
// part=N -->"); a provider client finds its comments by it. Nothing a
// change contains can start a comment with it: rendered text only
// follows the marker line, and "<" in it is escaped.
const Marker = "<!-- sluice:review"

// Size limits of one comment body, in characters.
const (
	// LimitGitHub is GitHub's issue-comment body limit.
	LimitGitHub = 65536
	// LimitGitLab is GitLab's note limit.
	LimitGitLab = 1000000
	// LimitGitea: Gitea stores comments as LONGTEXT and sets no limit of
	// its own; reverse proxies commonly cap requests at 1 MiB, so stay
	// well below.
	LimitGitea = 500000
)

// headerReserve is kept free in every comment for the marker and the part
// header.
const headerReserve = 200

var partPattern = regexp.MustCompile(`^<!-- sluice:review part=([0-9]{1,4}) -->`)

// PartOf returns the part number of a comment Markdown made, from its
// first line; false for any other comment.
func PartOf(body string) (int, bool) {
	m := partPattern.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil && n > 0
}

// DefaultMaxParts is how many comments Markdown fills at most, unless
// told otherwise.
const DefaultMaxParts = 10

// Markdown renders the sections as comment bodies of at most limit
// characters each and at most maxParts bodies (DefaultMaxParts when 0).
// Sections are packed in order; a plan, manifest diff or findings table
// that does not fit continues in the next comment, and what does not fit
// in the last one is cut, with a line saying where to see the rest. The
// result has at least one body.
func Markdown(sections []*Section, limit, maxParts int) []string {
	if limit < 4000 {
		limit = 4000
	}
	if maxParts <= 0 {
		maxParts = DefaultMaxParts
	}
	pk := &packer{budget: limit - headerReserve, maxParts: maxParts}
	pk.newPart()
	if len(sections) == 0 {
		pk.text("No release changes in this pull request.\n", nil)
	}
	for i, s := range sections {
		if i > 0 {
			pk.text(sectionSep, s)
		}
		for _, it := range sectionItems(s) {
			if it.block != nil {
				pk.block(it.block, s)
			} else {
				pk.text(it.text, s)
			}
		}
	}
	out := make([]string, len(pk.parts))
	for i, p := range pk.parts {
		title := "## Sluice review"
		if len(pk.parts) > 1 {
			title += fmt.Sprintf(" (part %d of %d)", i+1, len(pk.parts))
		}
		head := fmt.Sprintf("%s part=%d -->\n%s\n\n", Marker, i+1, title)
		body := strings.TrimRight(p.String(), "\n")
		var b strings.Builder
		b.Grow(len(head) + len(body) + 1)
		b.WriteString(head)
		b.WriteString(body)
		b.WriteByte('\n')
		out[i] = b.String()
	}
	return out
}

const sectionSep = "\n---\n\n"

// noteReserve is kept free in a comment for the line that says where to
// see the rest.
const noteReserve = 300

// item is one piece of a section: text that stays whole, or a block that
// may continue in the next comment.
type item struct {
	text  string
	block *block
}

// block is a run of lines between an opening and a closing text; cont
// reopens it in the next comment.
type block struct {
	open, cont, close string
	lines             []string
}

type packer struct {
	budget, maxParts int
	parts            []*strings.Builder
	cur              *strings.Builder
	full             bool // the last part is full: everything further is cut
}

func (p *packer) newPart() bool {
	if len(p.parts) == p.maxParts {
		return false
	}
	p.cur = &strings.Builder{}
	if len(p.parts) > 0 {
		// A further part is needed: the comments are filling up, so
		// make room for a full one at once.
		p.cur.Grow(p.budget)
	}
	p.parts = append(p.parts, p.cur)
	return true
}

func (p *packer) fits(n int) bool { return p.cur.Len()+n+noteReserve <= p.budget }

// text adds t, in the next comment when it does not fit in this one; when
// no comment is left, the section is cut with a note.
func (p *packer) text(t string, s *Section) {
	if p.full {
		return
	}
	if !p.fits(len(t)) && p.cur.Len() > 0 && !p.newPart() {
		p.cut(s, "")
		return
	}
	if !p.fits(len(t)) {
		t = text.Truncate(t, p.budget-p.cur.Len()-noteReserve)
	}
	p.cur.WriteString(t)
}

// block adds b line by line, continuing in further comments.
func (p *packer) block(b *block, s *Section) {
	if p.full {
		return
	}
	first := 0
	if len(b.lines) > 0 {
		first = len(b.lines[0]) + 1
	}
	if !p.fits(len(b.open)+first+len(b.close)) && p.cur.Len() > 0 && !p.newPart() {
		p.cut(s, "")
		return
	}
	p.cur.WriteString(b.open)
	for i, l := range b.lines {
		if !p.fits(len(l) + 1 + len(b.close)) {
			p.cur.WriteString(b.close)
			if !p.newPart() {
				p.cut(s, fmt.Sprintf("%d more lines", len(b.lines)-i))
				return
			}
			p.cur.WriteString(b.cont)
		}
		if !p.fits(len(l) + 1 + len(b.close)) {
			l = text.Truncate(l, p.budget-p.cur.Len()-noteReserve-len(b.close)-1)
		}
		p.cur.WriteString(l)
		p.cur.WriteByte('\n')
	}
	p.cur.WriteString(b.close)
}

// cut ends the last comment with a line saying where to see the rest.
func (p *packer) cut(s *Section, what string) {
	p.full = true
	if what == "" {
		what = "the rest of this review"
	}
	if s == nil {
		fmt.Fprintf(p.cur, "\n*… %s is not shown: the comments are full.*\n", what)
		return
	}
	fmt.Fprintf(p.cur, "\n*… %s not shown (the comments are full): %s*\n", what, seeMore(s))
}

func planLines(s *Section) []string {
	if s.Plan == nil || s.Plan.Err != "" {
		return nil
	}
	return s.Plan.Lines()
}

func diffLines(s *Section) []string {
	var out []string
	for _, o := range s.Objects {
		out = append(out, o.Lines...)
	}
	return out
}

var verdictIcon = map[string]string{"pass": "✅", "warn": "⚠️", "fail": "❌"}

var severityIcon = map[string]string{"deny": "⛔", "unverifiable": "❓", "warn": "⚠️", "info": "ℹ️"}

// sectionItems lays out one section: title, risk, approval state,
// findings, plan, manifest diff.
func sectionItems(s *Section) []item {
	var b strings.Builder
	icon := verdictIcon[s.Verdict]
	if icon == "" {
		icon = "❔"
	}
	fmt.Fprintf(&b, "### %s %s: %s, risk %s\n", icon, code(s.Release), esc(s.Verdict), esc(s.Risk))
	fmt.Fprintf(&b, "Change %s in namespace %s · %s of revision %s", code(s.Change), code(s.Namespace), esc(s.Operation), code(sluicev1.ShortSHA(s.Revision)))
	if s.AppliedRevision != "" {
		fmt.Fprintf(&b, " · compared with the applied revision %s", code(sluicev1.ShortSHA(s.AppliedRevision)))
	} else {
		b.WriteString(" · nothing applied yet")
	}
	b.WriteString("\n\n")
	for _, c := range s.HelmCharts {
		fmt.Fprintf(&b, "**helmCharts: %s**\n\n", esc(c.Line()))
	}
	if s.Chart != nil {
		fmt.Fprintf(&b, "**%s**\n\n", esc(s.Chart.Line()))
	}
	if len(s.RiskReasons) > 0 {
		fmt.Fprintf(&b, "**Risk %s** because:\n", esc(s.Risk))
		for i, r := range s.RiskReasons {
			if i == 30 {
				fmt.Fprintf(&b, "- … and %d more\n", len(s.RiskReasons)-i)
				break
			}
			fmt.Fprintf(&b, "- %s\n", esc(text.Truncate(r, 300)))
		}
		b.WriteString("\n")
	}
	writeApproval(&b, s)
	writeVerification(&b, s)
	items := []item{{text: b.String()}}
	items = append(items, findingItems(s)...)
	items = append(items, planItems(s)...)
	items = append(items, manifestItems(s)...)
	return items
}

func findingItems(s *Section) []item {
	if len(s.Findings) == 0 {
		return []item{{text: "**Findings:** none\n\n"}}
	}
	counts := map[string]int{}
	for _, f := range s.Findings {
		counts[f.Severity]++
	}
	var parts []string
	for _, sev := range []string{"deny", "unverifiable", "warn", "info"} {
		if counts[sev] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[sev], sev))
		}
	}
	const header = "| | policy | object / address | where | message |\n|---|---|---|---|---|\n"
	rows := make([]string, 0, len(s.Findings))
	for _, f := range s.Findings {
		rows = append(rows, fmt.Sprintf("| %s %s | %s | %s | %s | %s |", severityIcon[f.Severity], esc(f.Severity), codeOrEmpty(f.Policy), codeOrEmpty(f.Resource),
			codeOrEmpty(f.Where()), esc(text.Truncate(f.Message, 600))))
	}
	closing := "\n"
	if s.Truncated > 0 {
		closing = fmt.Sprintf("\n*%d further findings were not recorded in the ChangeRequest.*\n\n", s.Truncated)
	}
	return []item{{block: &block{
		open:  fmt.Sprintf("**Findings** (%s)\n\n%s", strings.Join(parts, ", "), header),
		cont:  fmt.Sprintf("**Findings of %s (continued)**\n\n%s", code(s.Release), header),
		close: closing,
		lines: rows,
	}}}
}

func planItems(s *Section) []item {
	if s.Plan == nil {
		return nil
	}
	head := fmt.Sprintf("**Terraform plan:** %s\n", esc(s.Plan.Summary()))
	lines := planLines(s)
	if len(lines) == 0 {
		return []item{{text: head + "\n"}}
	}
	open := ""
	if len(s.Plan.Resources) <= 20 {
		open = " open"
	}
	fence := fenceFor(lines)
	return []item{{block: &block{
		open:  fmt.Sprintf("%s<details%s><summary>Plan: %d resources</summary>\n\n%sdiff\n", head, open, len(s.Plan.Resources), fence),
		cont:  fmt.Sprintf("<details open><summary>Plan of %s (continued)</summary>\n\n%sdiff\n", esc(s.Release), fence),
		close: fence + "\n\n</details>\n\n",
		lines: cleanAll(lines),
	}}}
}

func manifestItems(s *Section) []item {
	if !s.HasManifest {
		return nil
	}
	if s.ManifestErr != "" {
		return []item{{text: fmt.Sprintf("**Manifest:** cannot be compared: %s\n\n", esc(s.ManifestErr))}}
	}
	against := "nothing applied yet, every object is new"
	if s.AppliedRevision != "" {
		against = "against the applied revision " + code(sluicev1.ShortSHA(s.AppliedRevision))
	}
	if len(s.Objects) == 0 {
		return []item{{text: fmt.Sprintf("**Manifest:** no object changes (%s); %d unchanged\n\n", against, s.Unchanged)}}
	}
	counts := map[string]int{}
	for _, o := range s.Objects {
		counts[o.Status]++
	}
	lines := diffLines(s)
	fence := fenceFor(lines)
	return []item{{block: &block{
		open: fmt.Sprintf("**Manifest:** %d added, %d changed, %d removed, %d unchanged (%s)\n<details><summary>Manifest diff per object</summary>\n\n%sdiff\n",
			counts[ObjectAdded], counts[ObjectChanged], counts[ObjectRemoved], s.Unchanged, against, fence),
		cont:  fmt.Sprintf("<details><summary>Manifest diff of %s (continued)</summary>\n\n%sdiff\n", esc(s.Release), fence),
		close: fence + "\n\n</details>\n\n",
		lines: cleanAll(lines),
	}}}
}

// cleanAll cleans lines in place.
func cleanAll(lines []string) []string {
	for i, l := range lines {
		lines[i] = clean(l)
	}
	return lines
}

func writeApproval(b *strings.Builder, s *Section) {
	a := s.Approval
	rule := "the change's own rule; the operator has not evaluated it yet"
	if a.Effective {
		rule = "effective rule"
	}
	fmt.Fprintf(b, "**Approval** (%s): %d required", rule, a.Required)
	switch {
	case a.NoApprovers:
		b.WriteString(", nobody may approve (auto-approval only)")
	case len(a.Approvers) > 0:
		fmt.Fprintf(b, " from %s", codes(a.Approvers))
	default:
		b.WriteString(" from anyone with write access")
	}
	for _, l := range a.AllOf {
		fmt.Fprintf(b, ", who must also be one of %s", codes(l))
	}
	if !a.AllowAuthor {
		b.WriteString("; authors and pushers may not approve")
	}
	if a.AutoApproveRisk != "" && a.AutoApproveRisk != "none" {
		fmt.Fprintf(b, "; auto-approved up to risk %s", esc(a.AutoApproveRisk))
	}
	b.WriteString(".  \n")
	approved := "nobody yet"
	if len(a.ApprovedBy) > 0 {
		approved = codes(a.ApprovedBy)
	}
	fmt.Fprintf(b, "Approved by: %s", approved)
	if len(a.RejectedBy) > 0 {
		fmt.Fprintf(b, " · rejected by: %s", codes(a.RejectedBy))
	}
	if a.Needed > 0 {
		fmt.Fprintf(b, " · still needed: %d more", a.Needed)
	} else if a.Required > 0 {
		b.WriteString(" · no more approvals needed")
	}
	if a.Phase != "" {
		fmt.Fprintf(b, " · phase %s", esc(a.Phase))
	}
	fmt.Fprintf(b, "  \nA review of this commit approves %s.\n\n", code(a.Digest))
}

// writeVerification writes the verification after apply with its
// measurements (the newest 10), when there is one.
func writeVerification(b *strings.Builder, s *Section) {
	v := s.Verification
	if v == nil {
		return
	}
	fmt.Fprintf(b, "**Verification**: %s", esc(v.Phase))
	if v.Message != "" {
		fmt.Fprintf(b, " · %s", esc(text.Truncate(oneLine(v.Message), 300)))
	}
	if v.SettledBy != "" {
		fmt.Fprintf(b, " · settled by %s: %s", code(v.SettledBy), esc(text.Truncate(oneLine(v.SettledReason), 300)))
	}
	b.WriteString("\n\n")
	if len(v.Measurements) == 0 {
		return
	}
	ms := v.Measurements
	older := int(v.Dropped)
	if len(ms) > 10 {
		older += len(ms) - 10
		ms = ms[len(ms)-10:]
	}
	b.WriteString("| check | result | value | time | note |\n|---|---|---|---|---|\n")
	for _, m := range ms {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", esc(m.Check), esc(m.Phase), codeOrEmpty(m.Value), esc(m.Time),
			esc(text.Truncate(oneLine(m.Message), 200)))
	}
	if older > 0 {
		fmt.Fprintf(b, "\n%d older measurements not shown (kubectl sluice describe %s).\n", older, esc(s.Change))
	}
	b.WriteString("\n")
}

func seeMore(s *Section) string {
	return fmt.Sprintf("see `kubectl sluice describe %s -n %s` and `kubectl sluice diff %s -n %s`", s.Change, s.Namespace, s.Change, s.Namespace)
}

// clean drops control characters (terminal escapes, carriage returns)
// from text shown to a person.
func clean(s string) string {
	if !hasControl(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, s)
}

// hasControl reports whether s holds a character isControl drops, byte by
// byte: C1 controls are 0xC2 0x80-0x9F in UTF-8, and invalid UTF-8 is no
// control, as for strings.ContainsFunc.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t') || c == 0x7f || (c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xa0) {
			return true
		}
	}
	return false
}

func isControl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) }

var mdEscaper = strings.NewReplacer(
	"\\", "\\\\", "`", "\\`", "*", "\\*", "_", "\\_", "[", "\\[", "]", "\\]", "|", "\\|", "#", "\\#", "~", "\\~", "!", "\\!",
	"<", "&lt;", ">", "&gt;", "&", "&amp;", "@", "@\u200b", "\n", " ", "\r", " ",
)

// esc makes untrusted text inert in Markdown: no formatting, links, HTML,
// table breaks or @-mentions.
func esc(s string) string { return mdEscaper.Replace(clean(s)) }

// code shows untrusted text as an inline code span; "|" is escaped so a
// table row stays one row.
func code(s string) string {
	s = strings.ReplaceAll(clean(oneLine(s)), "|", "\\|")
	if s == "" {
		return "` `"
	}
	run, longest := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			if run > longest {
				longest = run
			}
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if longest > 0 {
		// Spaces keep a backtick at either end from joining the fence.
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

func codeOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return code(s)
}

func codes(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = code(id)
	}
	return strings.Join(out, ", ")
}

// fenceFor returns a code fence longer than any backtick run in lines, so
// no content can close the block early.
func fenceFor(lines []string) string {
	longest := 0
	for _, l := range lines {
		if strings.IndexByte(l, '`') < 0 {
			continue
		}
		run := 0
		for _, r := range l {
			if r == '`' {
				run++
				if run > longest {
					longest = run
				}
			} else {
				run = 0
			}
		}
	}
	if longest < 3 {
		longest = 2
	}
	return strings.Repeat("`", longest+1)
}
