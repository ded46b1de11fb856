package provider

import (
	"encoding/json"
	"strings"

	"github.com/sluice-gitops/sluice/kit/text"
)

type giteaReview struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

type giteaPayload struct {
	ghPayload
	Pusher   ghUser       `json:"pusher"`
	CommitID string       `json:"commit_id"`
	Review   *giteaReview `json:"review"`
}

// ParseGitea parses a Gitea delivery of the given X-Gitea-Event type.
// Gitea's review payloads carry no review id, no reviewed commit and no
// reviewer permission: the id is derived from the delivery, the commit is
// the pull request's head when the review was sent (or commit_id where
// Gitea gives one), and Access is unknown, so the caller must ask Gitea's
// API whether the reviewer may write.
func ParseGitea(eventType, delivery string, body []byte) (*Event, error) {
	ev := &Event{Provider: Gitea, Type: text.Truncate(eventType, 64), DeliveryID: deliveryID(delivery), Kind: KindIgnored}
	var state ReviewState
	switch eventType {
	case "push", "pull_request":
	case "pull_request_approved":
		state = ReviewApproved
	case "pull_request_rejected":
		state = ReviewChangesRequested
	case "pull_request_comment":
		state = ReviewCommented
	default:
		return ev, nil
	}
	var p giteaPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, payloadErr("%s: %v", eventType, err)
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, payloadErr("%s: no repository", eventType)
	}
	ev.Repo = p.Repository.FullName
	switch {
	case eventType == "push":
		push, err := parsePush(p.Ref, p.Before, p.After, false)
		if err != nil {
			return nil, err
		}
		push.Pusher = pusherIdentity(Gitea, p.Sender.Login, p.Sender.Username, p.Pusher.Login, p.Pusher.Username)
		ev.Kind, ev.Push = KindPush, push
	case eventType == "pull_request":
		pr, err := githubPR(Gitea, &p.ghPayload, "refs/pull/")
		if err != nil {
			return nil, err
		}
		pr.Action = githubPRAction(p.Action, "synchronized")
		ev.Kind, ev.PullRequest = KindPullRequest, pr
	default:
		if p.Action != "reviewed" {
			return ev, nil
		}
		pr, err := githubPR(Gitea, &p.ghPayload, "refs/pull/")
		if err != nil {
			return nil, err
		}
		pr.Action = PROther
		login := p.Sender.Login
		if login == "" {
			login = p.Sender.Username
		}
		reviewer, err := identity(Gitea, login)
		if err != nil {
			return nil, err
		}
		if ev.DeliveryID == "" {
			return nil, payloadErr("%s: no X-Gitea-Delivery to identify the review", eventType)
		}
		commit := pr.HeadSHA
		if validSHA(p.CommitID) {
			commit = p.CommitID
		}
		rev := &Review{PullRequest: *pr, ID: derivedID("gitea", ev.Repo, ev.DeliveryID), State: state, CommitSHA: commit,
			Reviewer: reviewer, Login: login, Access: AccessUnknown}
		if p.Review != nil {
			rev.Body = text.Truncate(strings.TrimSpace(p.Review.Content), 1000)
		}
		ev.Kind, ev.Review = KindReview, rev
	}
	return ev, nil
}
