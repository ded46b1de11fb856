package provider

import (
	"encoding/json"

	"github.com/sluice-gitops/sluice/kit/text"
)

// genericPush is the body of the generic form's push event:
//
//	{"ref": "refs/heads/main", "after": "<40 hex>"}
type genericPush struct {
	Ref    string `json:"ref"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// ParseGeneric parses the generic HMAC form, for CI systems and git servers
// without a built-in provider: X-Sluice-Event "push" (anything else is
// ignored), X-Sluice-Delivery an id, X-Sluice-Signature-256 "sha256=" + the
// hex HMAC-SHA256 of the body.
func ParseGeneric(eventType, delivery string, body []byte) (*Event, error) {
	ev := &Event{Provider: Generic, Type: text.Truncate(eventType, 64), DeliveryID: deliveryID(delivery), Kind: KindIgnored}
	switch eventType {
	case "ping":
		ev.Kind = KindPing
		return ev, nil
	case "push":
	default:
		return ev, nil
	}
	var p genericPush
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, payloadErr("push: %v", err)
	}
	push, err := parsePush(p.Ref, p.Before, p.After, false)
	if err != nil {
		return nil, err
	}
	ev.Kind, ev.Push = KindPush, push
	return ev, nil
}
