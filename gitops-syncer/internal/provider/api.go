package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v75/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// GitLab access levels (members API).
const (
	// GitLabDeveloper may push to unprotected branches.
	GitLabDeveloper = 30
	// GitLabMaintainer may push to protected branches.
	GitLabMaintainer = 40
)

// API asks a provider's REST API whether a review is what it claims: that
// the reviewer may write to the repository now, and that the review is the
// reviewer's current state on the pull request. A webhook payload says
// neither reliably: GitHub's author_association MEMBER is any organisation
// member (read-only included), and a GitLab approval event carries no id of
// its own, so a replay with a new delivery id looks like a new approval.
type API struct {
	Provider Name
	// BaseURL is the API root: "https://api.github.com" for GitHub, the
	// server's root URL for Gitea and GitLab (the API paths are added).
	BaseURL string
	// Token returns the API token for one call (read from a Secret each
	// time, so a rotated token is used at once). It is never logged.
	Token func(ctx context.Context) (string, error)
	// GitLabMinAccess is the lowest GitLab access level whose approvals
	// count; default GitLabDeveloper.
	GitLabMinAccess int
	HTTP            *http.Client
}

// ErrUnconfirmed says the provider's API does not confirm the review; it is
// ignored, never recorded.
var ErrUnconfirmed = errors.New("review not confirmed by the provider")

// Confirm checks the review of ev with the provider's API and returns the
// review to record: for Gitea and GitHub with the provider's own review id,
// so a redelivery maps to the same Approval. It returns an error wrapping
// ErrUnconfirmed when the reviewer may not write or the review is not the
// reviewer's current state, and another error when the API cannot be asked
// (then the delivery is retried).
func (a *API) Confirm(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	if rev == nil {
		return nil, errors.New("no review in the event")
	}
	switch a.Provider {
	case GitHub, Gitea:
		if ev.Provider != a.Provider {
			return nil, fmt.Errorf("%w: a %s review checked against the %s API", ErrUnconfirmed, ev.Provider, a.Provider)
		}
		return a.confirmGitHubLike(ctx, ev)
	case GitLab:
		if ev.Provider != GitLab {
			return nil, fmt.Errorf("%w: a %s review checked against the GitLab API", ErrUnconfirmed, ev.Provider)
		}
		return a.confirmGitLab(ctx, ev)
	}
	return nil, fmt.Errorf("no review API for provider %q", a.Provider)
}

// apiReview is one review as GitHub and Gitea list them.
type apiReview struct {
	ID       int64
	State    string
	CommitID string
	Login    string
	// Gitea marks a dismissed review with a flag rather than a state.
	Dismissed bool
}

// stateOf maps a listed review's state to a decision; "" for a comment or a
// pending review, which decides nothing.
func (r apiReview) stateOf() ReviewState {
	if r.Dismissed {
		return ReviewDismissed
	}
	switch strings.ToUpper(r.State) {
	case "APPROVED":
		return ReviewApproved
	case "CHANGES_REQUESTED", "REQUEST_CHANGES":
		return ReviewChangesRequested
	case "DISMISSED":
		return ReviewDismissed
	}
	return ""
}

// reviewAPI is what confirming a GitHub or Gitea review asks, through the
// provider's Go client.
type reviewAPI interface {
	// permission is the user's permission and role name on the repository.
	permission(ctx context.Context, owner, name, login string) (string, string, error)
	// reviews lists one page (from 1) of the pull request's reviews; more
	// says whether another page may follow.
	reviews(ctx context.Context, owner, name string, number int64, page int) (list []apiReview, more bool, err error)
}

type githubReviews struct{ c *github.Client }

func (g githubReviews) permission(ctx context.Context, owner, name, login string) (string, string, error) {
	p, _, err := g.c.Repositories.GetPermissionLevel(ctx, owner, name, login)
	if err != nil {
		return "", "", err
	}
	return p.GetPermission(), p.GetRoleName(), nil
}

func (g githubReviews) reviews(ctx context.Context, owner, name string, number int64, page int) ([]apiReview, bool, error) {
	list, resp, err := g.c.PullRequests.ListReviews(ctx, owner, name, int(number), &github.ListOptions{Page: page, PerPage: 100})
	if err != nil {
		return nil, false, err
	}
	out := make([]apiReview, 0, len(list))
	for _, r := range list {
		out = append(out, apiReview{ID: r.GetID(), State: r.GetState(), CommitID: r.GetCommitID(), Login: r.GetUser().GetLogin()})
	}
	return out, resp != nil && resp.NextPage != 0, nil
}

type giteaReviews struct{ c *gitea.Client }

func (g giteaReviews) permission(_ context.Context, owner, name, login string) (string, string, error) {
	p, resp, err := g.c.CollaboratorPermission(owner, name, login)
	if err != nil {
		return "", "", giteaError("get the collaborator's permission", resp, err)
	}
	return string(p.Permission), p.Role, nil
}

func (g giteaReviews) reviews(_ context.Context, owner, name string, number int64, page int) ([]apiReview, bool, error) {
	list, resp, err := g.c.ListPullReviews(owner, name, number, gitea.ListPullReviewsOptions{ListOptions: gitea.ListOptions{Page: page, PageSize: 50}})
	if err != nil {
		return nil, false, giteaError("list the reviews", resp, err)
	}
	out := make([]apiReview, 0, len(list))
	for _, r := range list {
		login := ""
		if r.Reviewer != nil {
			login = r.Reviewer.UserName
		}
		out = append(out, apiReview{ID: r.ID, State: string(r.State), CommitID: r.CommitID, Login: login, Dismissed: r.Dismissed})
	}
	return out, len(list) > 0, nil
}

func (a *API) confirmGitHubLike(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	owner, name, err := splitRepo(ev.Repo)
	if err != nil {
		return nil, err
	}
	cl, err := a.commentClient(ctx)
	if err != nil {
		return nil, err
	}
	var api reviewAPI
	switch c := cl.(type) {
	case *githubComments:
		api = githubReviews{c.c}
	case *giteaComments:
		api = giteaReviews{c.c}
	default:
		return nil, fmt.Errorf("no review API for provider %q", a.Provider)
	}

	// May the reviewer write? GitHub: permission admin or write (maintain
	// reports write, with role_name maintain); Gitea: write, admin, owner.
	perm, role, err := api.permission(ctx, owner, name, rev.Login)
	if err != nil {
		return nil, fmt.Errorf("check the reviewer's permission: %w", err)
	}
	if !writePermission(perm) && !writePermission(role) {
		return nil, fmt.Errorf("%w: %s has %q access to %s", ErrUnconfirmed, rev.Reviewer, perm, ev.Repo)
	}

	// Is the review the reviewer's latest decision on the pull request?
	var latest *apiReview
	for page := 1; page <= 30; page++ {
		list, more, err := api.reviews(ctx, owner, name, rev.PullRequest.Number, page)
		if err != nil {
			return nil, fmt.Errorf("list the pull request's reviews: %w", err)
		}
		for i := range list {
			r := list[i]
			if !strings.EqualFold(r.Login, rev.Login) || r.stateOf() == "" {
				continue
			}
			if latest == nil || r.ID > latest.ID {
				latest = &r
			}
		}
		if !more {
			break
		}
	}
	if latest == nil {
		return nil, fmt.Errorf("%w: %s has no review deciding pull request %d", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	}
	if latest.stateOf() != rev.State {
		return nil, fmt.Errorf("%w: %s's latest review of pull request %d is %s, not %s", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number, latest.stateOf(), rev.State)
	}
	if a.Provider == GitHub && latest.ID != rev.ID {
		return nil, fmt.Errorf("%w: review %d is not %s's latest (%d)", ErrUnconfirmed, rev.ID, rev.Reviewer, latest.ID)
	}
	out := *rev
	out.ID = latest.ID
	if validSHA(latest.CommitID) {
		if latest.CommitID != rev.CommitSHA {
			return nil, fmt.Errorf("%w: %s's latest review is of %s, not %s", ErrUnconfirmed, rev.Reviewer, latest.CommitID, rev.CommitSHA)
		}
	}
	out.Access = AccessWrite
	return &out, nil
}

func writePermission(p string) bool {
	switch strings.ToLower(p) {
	case "admin", "maintain", "write", "owner":
		return true
	}
	return false
}

func (a *API) confirmGitLab(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	if ev.ProjectID <= 0 || rev.UserID <= 0 {
		return nil, fmt.Errorf("%w: no project or user id to ask GitLab about", ErrUnconfirmed)
	}
	cl, err := a.commentClient(ctx)
	if err != nil {
		return nil, err
	}
	gl := cl.(*gitlabComments).c
	min := a.GitLabMinAccess
	if min == 0 {
		min = GitLabDeveloper
	}
	member, resp, err := gl.ProjectMembers.GetInheritedProjectMember(ev.ProjectID, rev.UserID, gitlab.WithContext(ctx))
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s is not a member of project %d", ErrUnconfirmed, rev.Reviewer, ev.ProjectID)
	}
	if err != nil {
		return nil, fmt.Errorf("check the approver's access: %w", err)
	}
	if int(member.AccessLevel) < min || (member.State != "" && member.State != "active") {
		return nil, fmt.Errorf("%w: %s has access level %d to project %d; %d needed", ErrUnconfirmed, rev.Reviewer, member.AccessLevel, ev.ProjectID, min)
	}

	// The merge request must still be at the commit the event names, and
	// the approvals API must agree with the event: approved_by lists the
	// user after an approval and not after an unapproval. A replay of an
	// old approval then changes nothing.
	mr, _, err := gl.MergeRequests.GetMergeRequest(ev.ProjectID, rev.PullRequest.Number, nil, gitlab.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read the merge request: %w", err)
	}
	if mr.SHA != rev.CommitSHA {
		return nil, fmt.Errorf("%w: merge request %d is at %s, not %s", ErrUnconfirmed, rev.PullRequest.Number, mr.SHA, rev.CommitSHA)
	}
	approvals, _, err := gl.MergeRequestApprovals.GetConfiguration(ev.ProjectID, rev.PullRequest.Number, gitlab.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read the merge request's approvals: %w", err)
	}
	approved := false
	for _, ab := range approvals.ApprovedBy {
		if ab != nil && ab.User != nil && ab.User.ID == rev.UserID {
			approved = true
		}
	}
	switch {
	case rev.State == ReviewApproved && !approved:
		return nil, fmt.Errorf("%w: GitLab does not list %s among merge request %d's approvers", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	case rev.State == ReviewDismissed && approved:
		return nil, fmt.Errorf("%w: GitLab still lists %s among merge request %d's approvers", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	}
	out := *rev
	out.Access = AccessWrite
	return &out, nil
}
