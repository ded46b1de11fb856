package report

import "sort"

// SARIFSchema is the schema URI of SARIF 2.1.0.
const SARIFSchema = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

// SARIFLog is a SARIF 2.1.0 log with the subset of fields code scanning reads.
type SARIFLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []SARIFRun `json:"runs"`
}

// SARIFRun is one tool run.
type SARIFRun struct {
	Tool    SARIFTool     `json:"tool"`
	Results []SARIFResult `json:"results"`
}

// SARIFTool names the tool and its rules.
type SARIFTool struct {
	Driver SARIFDriver `json:"driver"`
}

// SARIFDriver is the tool component that produced the results.
type SARIFDriver struct {
	Name    string      `json:"name"`
	Version string      `json:"version,omitempty"`
	Rules   []SARIFRule `json:"rules"`
}

// SARIFRule describes one policy rule.
type SARIFRule struct {
	ID               string       `json:"id"`
	ShortDescription SARIFMessage `json:"shortDescription"`
}

// SARIFMessage is a plain-text message.
type SARIFMessage struct {
	Text string `json:"text"`
}

// SARIFResult is one finding.
type SARIFResult struct {
	RuleID     string          `json:"ruleId"`
	RuleIndex  int             `json:"ruleIndex"`
	Level      string          `json:"level"`
	Message    SARIFMessage    `json:"message"`
	Locations  []SARIFLocation `json:"locations,omitempty"`
	Properties map[string]any  `json:"properties,omitempty"`
}

// SARIFLocation places a result in a file and names the resource.
type SARIFLocation struct {
	PhysicalLocation *SARIFPhysicalLocation `json:"physicalLocation,omitempty"`
	LogicalLocations []SARIFLogicalLocation `json:"logicalLocations,omitempty"`
}

// SARIFPhysicalLocation is a file and region.
type SARIFPhysicalLocation struct {
	ArtifactLocation SARIFArtifactLocation `json:"artifactLocation"`
	Region           *SARIFRegion          `json:"region,omitempty"`
}

// SARIFArtifactLocation is a file URI, relative to the checkout.
type SARIFArtifactLocation struct {
	URI string `json:"uri"`
}

// SARIFRegion is a line range.
type SARIFRegion struct {
	StartLine int `json:"startLine"`
}

// SARIFLogicalLocation names a Terraform address or Kubernetes object.
type SARIFLogicalLocation struct {
	FullyQualifiedName string `json:"fullyQualifiedName"`
	Kind               string `json:"kind"`
}

// SARIFLevel maps a severity to a SARIF level.
func SARIFLevel(s Severity) string {
	switch s {
	case SeverityDeny:
		return "error"
	case SeverityWarn, SeverityUnverifiable:
		return "warning"
	}
	return "note"
}

// SARIF converts the report to a SARIF 2.1.0 log with one run. Rule ids are
// the findings' policies (or "<source>" when a finding has none); a finding
// without a file is located at its section's file.
func (r *Report) SARIF() SARIFLog {
	name := r.Tool
	if name == "" {
		name = "infra-validator"
	}
	run := SARIFRun{Tool: SARIFTool{Driver: SARIFDriver{Name: name, Version: r.Version, Rules: []SARIFRule{}}}, Results: []SARIFResult{}}
	ruleIndex := map[string]int{}
	var ids []string
	for _, s := range r.Sections {
		for _, f := range s.Verdict.Findings {
			id := ruleID(f)
			if _, ok := ruleIndex[id]; !ok {
				ruleIndex[id] = -1
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	for i, id := range ids {
		ruleIndex[id] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, SARIFRule{ID: id, ShortDescription: SARIFMessage{Text: id}})
	}
	for _, s := range r.Sections {
		for _, f := range s.Verdict.Findings {
			id := ruleID(f)
			res := SARIFResult{
				RuleID:     id,
				RuleIndex:  ruleIndex[id],
				Level:      SARIFLevel(f.Severity),
				Message:    SARIFMessage{Text: f.Message},
				Properties: map[string]any{"severity": string(f.Severity), "subject": s.Name},
			}
			file := f.File
			if file == "" {
				file = s.File
			}
			var loc SARIFLocation
			if file != "" {
				loc.PhysicalLocation = &SARIFPhysicalLocation{ArtifactLocation: SARIFArtifactLocation{URI: file}}
				if f.Line > 0 {
					loc.PhysicalLocation.Region = &SARIFRegion{StartLine: f.Line}
				}
			}
			if f.Resource != "" {
				loc.LogicalLocations = []SARIFLogicalLocation{{FullyQualifiedName: f.Resource, Kind: "resource"}}
			}
			if loc.PhysicalLocation != nil || loc.LogicalLocations != nil {
				res.Locations = []SARIFLocation{loc}
			}
			run.Results = append(run.Results, res)
		}
	}
	return SARIFLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []SARIFRun{run}}
}

func ruleID(f Finding) string {
	if f.Policy != "" {
		return f.Policy
	}
	if f.Source != "" {
		return f.Source
	}
	return "finding"
}
