package provider

import (
	"encoding/json"
	"strconv"

	"github.com/sluice-gitops/sluice/kit/text"
)

type glUser struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
}

type glProject struct {
	ID                int64  `json:"id"`
	PathWithNamespace string `json:"path_with_namespace"`
}

type glMergeRequest struct {
	ID              int64  `json:"id"`
	IID             int64  `json:"iid"`
	Action          string `json:"action"`
	State           string `json:"state"`
	SourceBranch    string `json:"source_branch"`
	TargetBranch    string `json:"target_branch"`
	SourceProjectID int64  `json:"source_project_id"`
	TargetProjectID int64  `json:"target_project_id"`
	MergeCommitSHA  string `json:"merge_commit_sha"`
	AuthorID        int64  `json:"author_id"`
	LastCommit      struct {
		ID string `json:"id"`
	} `json:"last_commit"`
}

type glPayload struct {
	ObjectKind       string          `json:"object_kind"`
	Ref              string          `json:"ref"`
	Before           string          `json:"before"`
	After            string          `json:"after"`
	User             *glUser         `json:"user"`
	UserUsername     string          `json:"user_username"`
	Project          *glProject      `json:"project"`
	ObjectAttributes *glMergeRequest `json:"object_attributes"`
}

// ParseGitLab parses a GitLab delivery of the given X-Gitlab-Event type.
// GitLab reports reviews as merge request actions: "approval" and
// "approved" approve, "unapproval" and "unapproved" revoke (as a dismissed
// review). GitLab has no review ids: the id is derived from the delivery,
// which the sender chooses, so the event is only a claim: API.Confirm asks
// GitLab's members and approvals APIs before it counts.
func ParseGitLab(eventType, delivery string, body []byte) (*Event, error) {
	ev := &Event{Provider: GitLab, Type: text.Truncate(eventType, 64), DeliveryID: deliveryID(delivery), Kind: KindIgnored}
	switch eventType {
	case "Push Hook", "Merge Request Hook":
	default:
		return ev, nil
	}
	var p glPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, payloadErr("%s: %v", eventType, err)
	}
	if p.Project == nil || p.Project.ID <= 0 || p.Project.PathWithNamespace == "" {
		return nil, payloadErr("%s: no project", eventType)
	}
	ev.Repo, ev.ProjectID = p.Project.PathWithNamespace, p.Project.ID
	if eventType == "Push Hook" {
		if p.ObjectKind != "push" {
			return nil, payloadErr("Push Hook: object_kind %q", text.Truncate(p.ObjectKind, 40))
		}
		push, err := parsePush(p.Ref, p.Before, p.After, false)
		if err != nil {
			return nil, err
		}
		push.Pusher = pusherIdentity(GitLab, p.UserUsername)
		ev.Kind, ev.Push = KindPush, push
		return ev, nil
	}
	mr := p.ObjectAttributes
	if p.ObjectKind != "merge_request" || mr == nil {
		return nil, payloadErr("Merge Request Hook: no merge request")
	}
	if mr.IID <= 0 {
		return nil, payloadErr("Merge Request Hook: iid %d", mr.IID)
	}
	if !validSHA(mr.LastCommit.ID) {
		return nil, payloadErr("Merge Request Hook: last commit %q is not a commit", text.Truncate(mr.LastCommit.ID, 80))
	}
	baseRef := fullRef(mr.TargetBranch)
	if !validRef(baseRef) {
		return nil, payloadErr("Merge Request Hook: target branch %q", text.Truncate(mr.TargetBranch, 80))
	}
	pr := PullRequest{
		Number:  mr.IID,
		HeadSHA: mr.LastCommit.ID,
		HeadRef: "refs/merge-requests/" + strconv.FormatInt(mr.IID, 10) + "/head",
		BaseRef: baseRef,
		Fork:    mr.SourceProjectID != mr.TargetProjectID,
		Merged:  mr.State == "merged",
	}
	if validSHA(mr.MergeCommitSHA) {
		pr.MergeCommitSHA = mr.MergeCommitSHA
	}
	var state ReviewState
	switch mr.Action {
	case "open":
		pr.Action = PROpened
	case "update":
		pr.Action = PRUpdated
	case "reopen":
		pr.Action = PRReopened
	case "close", "merge":
		pr.Action = PRClosed
	case "approval", "approved":
		state = ReviewApproved
	case "unapproval", "unapproved":
		state = ReviewDismissed
	default:
		pr.Action = PROther
	}
	if p.User != nil {
		if id, err := identity(GitLab, p.User.Username); err == nil {
			pr.Sender = id
			if pr.Action == PROpened && p.User.ID == mr.AuthorID {
				pr.Author = id // the opener is the author
			}
		}
	}
	if state == "" {
		ev.Kind, ev.PullRequest = KindPullRequest, &pr
		return ev, nil
	}
	pr.Action = PROther
	if p.User == nil {
		return nil, payloadErr("Merge Request Hook: no user")
	}
	reviewer, err := identity(GitLab, p.User.Username)
	if err != nil {
		return nil, err
	}
	if ev.DeliveryID == "" {
		return nil, payloadErr("Merge Request Hook: no delivery id to identify the approval")
	}
	ev.Kind = KindReview
	ev.Review = &Review{PullRequest: pr, ID: derivedID("gitlab", strconv.FormatInt(ev.ProjectID, 10), ev.DeliveryID), State: state,
		CommitSHA: pr.HeadSHA, Reviewer: reviewer, Login: p.User.Username, UserID: p.User.ID, Access: AccessUnknown}
	return ev, nil
}
