// Package registryhook reads the webhooks OCI registries send when a tag
// is pushed (the CNCF distribution registry's notification envelope and
// Harbor's PUSH_ARTIFACT payload) and says which Repositories a push
// concerns. Every payload is hostile: what is read is only a registry
// host and repository name, checked against the OCI name grammar, and is
// used to pick Repositories to wake, never as a version or digest.
package registryhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Push is one pushed tag a registry reports: the registry's host
// (host[:port], lower case) and the repository inside it.
type Push struct {
	Host       string
	Repository string
}

// Bounds of what a registry payload may name.
const (
	maxRegistryHost       = 255
	maxRegistryRepository = 255
)

// repositoryName is the OCI distribution spec's repository name grammar.
var repositoryName = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// registryHost is a host name or IPv4 address with an optional port, or
// a bracketed IPv6 address with an optional port.
var registryHost = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

func newPush(host, repository string) (Push, error) {
	if len(host) > maxRegistryHost || !registryHost.MatchString(host) {
		return Push{}, fmt.Errorf("registry host %q is not a host[:port]", clip(host))
	}
	if len(repository) > maxRegistryRepository || !repositoryName.MatchString(repository) {
		return Push{}, fmt.Errorf("repository %q is not an OCI repository name", clip(repository))
	}
	return Push{Host: strings.ToLower(host), Repository: repository}, nil
}

// clip shortens a hostile value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// distributionEnvelope is the part of distribution's notification
// envelope the syncer reads.
type distributionEnvelope struct {
	Events *[]struct {
		Action string `json:"action"`
		Target struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"target"`
		Request struct {
			Host string `json:"host"`
		} `json:"request"`
	} `json:"events"`
}

// ParseDistribution reads a distribution notification envelope: the
// pushes of a tag it reports, once each. Other actions (pull, delete,
// mount) and pushes without a tag (blobs, a manifest by digest, which
// make no version a range could resolve to) are skipped.
func ParseDistribution(body []byte) ([]Push, error) {
	var env distributionEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("not a registry notification envelope: %v", jsonProblem(err))
	}
	if env.Events == nil {
		return nil, errors.New("not a registry notification envelope: no events")
	}
	var out []Push
	for i, e := range *env.Events {
		if e.Action != "push" || e.Target.Tag == "" {
			continue
		}
		p, err := newPush(e.Request.Host, e.Target.Repository)
		if err != nil {
			return nil, fmt.Errorf("event %d: %v", i, err)
		}
		out = appendPush(out, p)
	}
	return out, nil
}

// harborPayload is the part of Harbor's default webhook payload the
// syncer reads.
type harborPayload struct {
	Type      string `json:"type"`
	EventData *struct {
		Resources []struct {
			Tag         string `json:"tag"`
			ResourceURL string `json:"resource_url"`
		} `json:"resources"`
		Repository struct {
			RepoFullName string `json:"repo_full_name"`
		} `json:"repository"`
	} `json:"event_data"`
}

// ParseHarbor reads a Harbor webhook payload: for PUSH_ARTIFACT, the
// repository once for each registry host its tagged resources name (the
// host part of resource_url, which must name the repository); other event
// types report nothing.
func ParseHarbor(body []byte) ([]Push, error) {
	var p harborPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("not a Harbor webhook payload: %v", jsonProblem(err))
	}
	if p.Type == "" || p.EventData == nil {
		return nil, errors.New("not a Harbor webhook payload: no type or event_data")
	}
	if p.Type != "PUSH_ARTIFACT" {
		return nil, nil
	}
	repo := p.EventData.Repository.RepoFullName
	var out []Push
	for i, r := range p.EventData.Resources {
		if r.Tag == "" {
			continue
		}
		host, rest, ok := strings.Cut(r.ResourceURL, "/")
		if !ok || !strings.HasPrefix(rest, repo) || (len(rest) > len(repo) && !strings.ContainsRune(":@", rune(rest[len(repo)]))) {
			return nil, fmt.Errorf("resource %d: resource_url %q does not name repository %q", i, clip(r.ResourceURL), clip(repo))
		}
		push, err := newPush(host, repo)
		if err != nil {
			return nil, fmt.Errorf("resource %d: %v", i, err)
		}
		out = appendPush(out, push)
	}
	return out, nil
}

func appendPush(list []Push, p Push) []Push {
	for _, q := range list {
		if q == p {
			return list
		}
	}
	return append(list, p)
}

// jsonProblem says what is wrong with a JSON document without quoting it.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s has the wrong type", typ.Field)
	}
	return "invalid JSON"
}

// ChartRegistryRepository is the registry host (lower case) and
// repository of a chart from an oci:// repository URL, or ok false for
// any other URL.
func ChartRegistryRepository(repoURL, name string) (host, repository string, ok bool) {
	rest, found := strings.CutPrefix(repoURL, "oci://")
	if !found {
		return "", "", false
	}
	host, dir, _ := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
	if host == "" || name == "" {
		return "", "", false
	}
	if dir == "" {
		return strings.ToLower(host), name, true
	}
	return strings.ToLower(host), dir + "/" + name, true
}

// Uses reports whether a push concerns repo: one of its Releases takes
// a chart from that registry repository, or one of its
// spec.chartRepositories oci:// entries covers it.
func (p Push) Uses(repo *sluicev1.Repository, releases []sluicev1.Release) bool {
	for i := range releases {
		c := releases[i].Spec.Chart
		if h, r, ok := ChartRegistryRepository(c.Repo, c.Name); ok && h == p.Host && r == p.Repository {
			return true
		}
	}
	pushed := "oci://" + p.Host + "/" + p.Repository
	for _, c := range repo.Spec.ChartRepositories {
		prefix, ok := strings.CutPrefix(c.URL, "oci://")
		if !ok {
			continue
		}
		host, dir, _ := strings.Cut(prefix, "/")
		entry := "oci://" + strings.ToLower(host)
		if dir != "" {
			entry += "/" + dir
		}
		entry = strings.TrimSuffix(entry, "/")
		if pushed == entry || strings.HasPrefix(pushed, entry+"/") {
			return true
		}
	}
	return false
}
