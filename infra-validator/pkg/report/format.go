package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Format is an output format of a Report.
type Format string

const (
	// FormatText is for people: a summary line, then findings by resource.
	FormatText Format = "text"
	// FormatJSON is the Report as JSON.
	FormatJSON Format = "json"
	// FormatSARIF is SARIF 2.1.0, for code-scanning uploads.
	FormatSARIF Format = "sarif"
)

// ParseFormat accepts text, json or sarif.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatText, FormatJSON, FormatSARIF:
		return f, nil
	}
	return "", fmt.Errorf("unknown output format %q (want text, json or sarif)", s)
}

// Report is what one CLI run prints: one section per checked subject (a plan,
// a chart, a service environment).
type Report struct {
	// Tool and Version name the producer (SARIF driver).
	Tool     string    `json:"tool"`
	Version  string    `json:"version,omitempty"`
	Sections []Section `json:"sections"`
}

// Section is one checked subject with its verdict.
type Section struct {
	// Name says what was checked, e.g. "terraform plan.json" or "checkout/prod".
	Name string `json:"name"`
	// File is the main input file; findings without a file are located here
	// in SARIF.
	File    string  `json:"file,omitempty"`
	Verdict Verdict `json:"verdict"`
	// Details are extra facts in a fixed order (plan summary, digests).
	Details []Detail `json:"details,omitempty"`
}

// Detail is one labelled fact of a section.
type Detail struct {
	Key string `json:"key"`
	// Value is what the text report prints: short enough to read at a
	// glance.
	Value string `json:"value"`
	// Items, when set, is the whole list Value summarises.
	Items []string `json:"items,omitempty"`
}

// shownItems is how many items of a list detail the summary names.
const shownItems = 5

// ListDetail is a detail for a list: the value names the first few items and
// counts the rest; the items are all kept (the JSON report carries them).
func ListDetail(key string, items []string) Detail {
	value := strings.Join(items[:min(len(items), shownItems)], "; ")
	if rest := len(items) - shownItems; rest > 0 {
		value += fmt.Sprintf("; and %d more", rest)
	}
	return Detail{Key: key, Value: value, Items: items}
}

// Findings returns every finding of the report.
func (r *Report) Findings() []Finding {
	var out []Finding
	for _, s := range r.Sections {
		out = append(out, s.Verdict.Findings...)
	}
	return out
}

// Write prints the report in format f; color adds ANSI colours to text (the
// caller sets it only when writing to a terminal).
func (r *Report) Write(w io.Writer, f Format, color bool) error {
	switch f {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case FormatSARIF:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r.SARIF())
	case FormatText, "":
		return r.writeText(w, color)
	}
	return fmt.Errorf("unknown output format %q", f)
}

const (
	ansiReset  = "\x1b[0m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
	ansiBlue   = "\x1b[36m"
	ansiGreen  = "\x1b[32m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
)

func paint(color bool, code, s string) string {
	if !color {
		return s
	}
	return code + s + ansiReset
}

func resultColor(r Result) string {
	switch r {
	case ResultFail:
		return ansiRed
	case ResultWarn:
		return ansiYellow
	}
	return ansiGreen
}

func severityColor(s Severity) string {
	switch s {
	case SeverityDeny:
		return ansiRed
	case SeverityWarn:
		return ansiYellow
	case SeverityUnverifiable:
		return ansiBlue
	}
	return ansiDim
}

// writeText prints, per section, one summary line, the details, then the
// findings grouped by resource (deny first within a resource).
func (r *Report) writeText(w io.Writer, color bool) error {
	var b strings.Builder
	for i, s := range r.Sections {
		if i > 0 {
			b.WriteByte('\n')
		}
		v := s.Verdict
		c := Count(v.Findings)
		fmt.Fprintf(&b, "%s %s: %d deny, %d unverifiable, %d warn; risk %s\n",
			paint(color, ansiBold+resultColor(v.Result), strings.ToUpper(string(v.Result))),
			s.Name, c.Deny, c.Unverifiable, c.Warn, v.Risk)
		for _, d := range s.Details {
			fmt.Fprintf(&b, "  %s: %s\n", d.Key, d.Value)
		}
		var resources []string
		byResource := map[string][]Finding{}
		for _, f := range v.Findings {
			key := f.Resource
			if _, ok := byResource[key]; !ok {
				resources = append(resources, key)
			}
			byResource[key] = append(byResource[key], f)
		}
		sort.Strings(resources)
		for _, res := range resources {
			name := res
			if name == "" {
				name = "(no resource)"
			}
			fmt.Fprintf(&b, "\n  %s\n", paint(color, ansiBold, name))
			for _, f := range byResource[res] {
				label := fmt.Sprintf("%-12s", strings.ToUpper(string(f.Severity)))
				fmt.Fprintf(&b, "    %s %s", paint(color, severityColor(f.Severity), label), oneLine(f.Message))
				var where []string
				if f.Policy != "" {
					where = append(where, f.Policy)
				}
				if f.File != "" {
					loc := f.File
					if f.Line > 0 {
						loc = fmt.Sprintf("%s:%d", f.File, f.Line)
					}
					where = append(where, loc)
				}
				if len(where) > 0 {
					fmt.Fprintf(&b, " %s", paint(color, ansiDim, "("+strings.Join(where, ", ")+")"))
				}
				b.WriteByte('\n')
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine keeps a multi-line message on one line of the text report.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
