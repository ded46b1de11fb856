package git

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// URLPolicy says which repository URLs are allowed.
type URLPolicy struct {
	// AllowFile allows file:// URLs (tests and the quickstart only).
	AllowFile bool
	// Resolver resolves host names; nil uses net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// metadataHosts are cloud metadata endpoints refused by name.
var metadataHosts = map[string]bool{
	"metadata":                   true,
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

// metadataAddrs are metadata addresses outside the link-local ranges.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IPv6
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud (legacy)
}

// ParseURL parses a repository URL (https, http, ssh, file or scp-like) into
// a go-git endpoint. Errors never include the user info.
func ParseURL(raw string) (*transport.Endpoint, error) {
	if strings.TrimSpace(raw) != raw || raw == "" {
		return nil, &Error{Reason: ReasonURL, Message: "repository URL is empty or has surrounding spaces"}
	}
	if strings.ContainsAny(raw, "\x00\n\r\t") {
		return nil, &Error{Reason: ReasonURL, Message: "repository URL contains control characters"}
	}
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		return nil, &Error{Reason: ReasonURL, Message: fmt.Sprintf("repository URL %s cannot be parsed", RedactURL(raw))}
	}
	switch ep.Protocol {
	case "http", "https", "ssh", "file":
	default:
		return nil, &Error{Reason: ReasonURL, Message: fmt.Sprintf("repository URL scheme %q is not supported (use https, http, ssh or file)", ep.Protocol)}
	}
	if ep.Protocol != "file" && ep.Host == "" {
		return nil, &Error{Reason: ReasonURL, Message: fmt.Sprintf("repository URL %s has no host", RedactURL(raw))}
	}
	return ep, nil
}

// Check parses raw and refuses file:// unless allowed, and any host that is,
// or resolves to, a link-local or cloud metadata address.
func (p URLPolicy) Check(ctx context.Context, raw string) (*transport.Endpoint, error) {
	ep, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if ep.Protocol == "file" {
		if !p.AllowFile {
			return nil, &Error{Reason: ReasonURL, Message: "file:// repository URLs are not allowed (the syncer runs without --allow-file-urls)"}
		}
		return ep, nil
	}
	host := strings.TrimSuffix(strings.ToLower(strings.Trim(ep.Host, "[]")), ".")
	if metadataHosts[host] {
		return nil, &Error{Reason: ReasonURL, Message: fmt.Sprintf("repository host %q is a cloud metadata endpoint", host)}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		var r interface {
			LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
		} = net.DefaultResolver
		if p.Resolver != nil {
			r = p.Resolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, &Error{Reason: ReasonUnreachable, Message: fmt.Sprintf("repository host %q cannot be resolved", host)}
		}
	}
	for _, a := range addrs {
		if forbiddenAddr(a) {
			return nil, &Error{Reason: ReasonURL, Message: fmt.Sprintf("repository host %q resolves to a link-local or metadata address", host)}
		}
	}
	return ep, nil
}

// forbiddenAddr reports link-local (169.254/16, fe80::/10, also inside
// IPv4-mapped IPv6) and known metadata addresses.
func forbiddenAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || metadataAddrs[a]
}
