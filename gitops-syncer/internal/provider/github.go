package provider

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-gitops/sluice/kit/text"
)

// ghUser is a GitHub or Gitea user.
type ghUser struct {
	Login    string `json:"login"`
	Username string `json:"username"` // Gitea also sends this
}

type ghRepo struct {
	ID       int64  `json:"id"`
	FullName string `json:"full_name"`
	Fork     bool   `json:"fork"`
}

type ghBranch struct {
	Ref  string  `json:"ref"`
	SHA  string  `json:"sha"`
	Repo *ghRepo `json:"repo"`
}

type ghPullRequest struct {
	Number         int64    `json:"number"`
	State          string   `json:"state"`
	Merged         bool     `json:"merged"`
	MergeCommitSHA *string  `json:"merge_commit_sha"`
	MergeBase      string   `json:"merge_base"` // Gitea
	User           ghUser   `json:"user"`
	Head           ghBranch `json:"head"`
	Base           ghBranch `json:"base"`
}

type ghReview struct {
	ID                int64  `json:"id"`
	State             string `json:"state"`
	CommitID          string `json:"commit_id"`
	AuthorAssociation string `json:"author_association"`
	Body              string `json:"body"`
	User              ghUser `json:"user"`
}

type ghPayload struct {
	Action      string         `json:"action"`
	Number      int64          `json:"number"`
	Ref         string         `json:"ref"`
	Before      string         `json:"before"`
	After       string         `json:"after"`
	Deleted     bool           `json:"deleted"`
	Repository  *ghRepo        `json:"repository"`
	PullRequest *ghPullRequest `json:"pull_request"`
	Review      *ghReview      `json:"review"`
	Sender      ghUser         `json:"sender"`
}

// writeAssociations are GitHub's author_association values of users who
// may have write access to the repository. MEMBER is any member of the
// organisation, read-only ones included, so a match is only a claim: the
// review counts after API.Confirm asks GitHub for the permission.
var writeAssociations = map[string]bool{"OWNER": true, "MEMBER": true, "COLLABORATOR": true}

// ParseGitHub parses a GitHub delivery of the given X-GitHub-Event type.
func ParseGitHub(eventType, delivery string, body []byte) (*Event, error) {
	ev := &Event{Provider: GitHub, Type: text.Truncate(eventType, 64), DeliveryID: deliveryID(delivery), Kind: KindIgnored}
	switch eventType {
	case "ping":
		ev.Kind = KindPing
		return ev, nil
	case "push", "pull_request", "pull_request_review":
	default:
		return ev, nil
	}
	var p ghPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, payloadErr("%s: %v", eventType, err)
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, payloadErr("%s: no repository", eventType)
	}
	ev.Repo = p.Repository.FullName
	switch eventType {
	case "push":
		push, err := parsePush(p.Ref, p.Before, p.After, p.Deleted)
		if err != nil {
			return nil, err
		}
		push.Pusher = pusherIdentity(GitHub, p.Sender.Login)
		ev.Kind, ev.Push = KindPush, push
	case "pull_request":
		pr, err := githubPR(GitHub, &p, "refs/pull/")
		if err != nil {
			return nil, err
		}
		pr.Action = githubPRAction(p.Action, "synchronize")
		ev.Kind, ev.PullRequest = KindPullRequest, pr
	case "pull_request_review":
		pr, err := githubPR(GitHub, &p, "refs/pull/")
		if err != nil {
			return nil, err
		}
		pr.Action = PROther
		r := p.Review
		if r == nil {
			return nil, payloadErr("pull_request_review: no review")
		}
		if r.ID <= 0 {
			return nil, payloadErr("pull_request_review: review id %d", r.ID)
		}
		if !validSHA(r.CommitID) {
			return nil, payloadErr("pull_request_review: commit_id %q is not a commit", text.Truncate(r.CommitID, 80))
		}
		reviewer, err := identity(GitHub, r.User.Login)
		if err != nil {
			return nil, err
		}
		rev := &Review{PullRequest: *pr, ID: r.ID, CommitSHA: r.CommitID, Reviewer: reviewer, Login: r.User.Login,
			Access: AccessNone, Body: text.Truncate(strings.TrimSpace(r.Body), 1000)}
		if writeAssociations[strings.ToUpper(r.AuthorAssociation)] {
			rev.Access = AccessUnknown
		}
		switch {
		case p.Action == "dismissed":
			rev.State = ReviewDismissed
		case p.Action != "submitted":
			// An edited review keeps its decision; nothing to record.
			return ev, nil
		default:
			switch strings.ToLower(r.State) {
			case "approved":
				rev.State = ReviewApproved
			case "changes_requested":
				rev.State = ReviewChangesRequested
			case "commented":
				rev.State = ReviewCommented
			default:
				return nil, payloadErr("pull_request_review: state %q", text.Truncate(r.State, 40))
			}
		}
		ev.Kind, ev.Review = KindReview, rev
	}
	return ev, nil
}

// parsePush checks a push's ref and commits.
func parsePush(ref, before, after string, deleted bool) (*Push, error) {
	if !validRef(ref) {
		return nil, payloadErr("push: ref %q is not a full ref name", text.Truncate(ref, 80))
	}
	push := &Push{Ref: ref, Before: before, After: after, Deleted: deleted || zeroSHA(after)}
	if push.Deleted {
		push.After = ""
		return push, nil
	}
	if !validSHA(after) {
		return nil, payloadErr("push: after %q is not a commit", text.Truncate(after, 80))
	}
	if before != "" && !validSHA(before) {
		return nil, payloadErr("push: before %q is not a commit", text.Truncate(before, 80))
	}
	return push, nil
}

// pusherIdentity is the identity of the first login that is one, or "".
func pusherIdentity(p Name, logins ...string) string {
	for _, login := range logins {
		if login == "" {
			continue
		}
		if id, err := identity(p, login); err == nil {
			return id
		}
	}
	return ""
}

// githubPRAction normalises the action of a GitHub-shaped pull_request
// event; the providers differ only in the word for new commits
// (GitHub "synchronize", Gitea "synchronized").
func githubPRAction(action, synchronize string) PRAction {
	switch action {
	case "opened":
		return PROpened
	case synchronize:
		return PRUpdated
	case "reopened":
		return PRReopened
	case "closed":
		return PRClosed
	}
	return PROther
}

// githubPR reads the pull request of a GitHub-shaped payload (GitHub and
// Gitea share it).
func githubPR(p Name, pl *ghPayload, headRefPrefix string) (*PullRequest, error) {
	pr := pl.PullRequest
	if pr == nil {
		return nil, payloadErr("no pull_request")
	}
	number := pr.Number
	if number == 0 {
		number = pl.Number
	}
	if number <= 0 {
		return nil, payloadErr("pull request number %d", number)
	}
	if !validSHA(pr.Head.SHA) {
		return nil, payloadErr("pull request head %q is not a commit", text.Truncate(pr.Head.SHA, 80))
	}
	baseRef := fullRef(pr.Base.Ref)
	if !validRef(baseRef) {
		return nil, payloadErr("pull request base %q is not a branch", text.Truncate(pr.Base.Ref, 80))
	}
	out := &PullRequest{
		Number:  number,
		HeadSHA: pr.Head.SHA,
		HeadRef: headRefPrefix + strconv.FormatInt(number, 10) + "/head",
		BaseRef: baseRef,
		Merged:  pr.Merged,
	}
	if validSHA(pr.MergeBase) {
		out.BaseSHA = pr.MergeBase
	} else if validSHA(pr.Base.SHA) {
		out.BaseSHA = pr.Base.SHA
	}
	if pr.MergeCommitSHA != nil && validSHA(*pr.MergeCommitSHA) {
		out.MergeCommitSHA = *pr.MergeCommitSHA
	}
	// A head without a repository is a deleted fork: treat it as a fork.
	out.Fork = pr.Head.Repo == nil || pr.Base.Repo == nil ||
		(pr.Head.Repo.ID != 0 && pr.Head.Repo.ID != pr.Base.Repo.ID) || !strings.EqualFold(pr.Head.Repo.FullName, pr.Base.Repo.FullName)
	login := pr.User.Login
	if login == "" {
		login = pr.User.Username
	}
	if login != "" {
		if id, err := identity(p, login); err == nil {
			out.Author = id
		}
	}
	sender := pl.Sender.Login
	if sender == "" {
		sender = pl.Sender.Username
	}
	if sender != "" {
		if id, err := identity(p, sender); err == nil {
			out.Sender = id
		}
	}
	return out, nil
}
