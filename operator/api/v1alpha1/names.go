package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

// ReleaseName is "<service>-<environment>".
func ReleaseName(service string, env EnvironmentName) string {
	return service + "-" + string(env)
}

// ShortSHA is the first 10 hex digits of a commit, as in object names,
// status messages and events.
func ShortSHA(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

// ChangeRequestName is "<release>-<first 10 hex of the commit>", with "-rN"
// for attempt N > 1 (a re-plan at the same commit).
func ChangeRequestName(release, commit string, attempt int32) string {
	name := release + "-" + ShortSHA(commit)
	if attempt > 1 {
		name += "-r" + strconv.Itoa(int(attempt))
	}
	return name
}

// PreviewChangeRequestName is "<release>-pr<N>-<first 10 hex of the PR head>".
func PreviewChangeRequestName(release string, pr int64, head string) string {
	return fmt.Sprintf("%s-pr%d-%s", release, pr, ShortSHA(head))
}

// PlanSecretName names the Secret holding chunk i (0-based) of a
// ChangeRequest's plan file: "<cr>-plan", then "<cr>-plan-1", "<cr>-plan-2"…
func PlanSecretName(changeRequest string, chunk int) string {
	if chunk == 0 {
		return changeRequest + PlanSecretSuffix
	}
	return fmt.Sprintf("%s%s-%d", changeRequest, PlanSecretSuffix, chunk)
}

// DeleteChangeRequestName is "<release>-del-<first 10 hex of the commit>",
// with "-rN" for attempt N > 1: the Delete change proposed when the release
// left the tracked branch at that commit.
func DeleteChangeRequestName(release, commit string, attempt int32) string {
	name := release + "-del-" + ShortSHA(commit)
	if attempt > 1 {
		name += "-r" + strconv.Itoa(int(attempt))
	}
	return name
}

// RollbackChangeRequestName is "<release>-rb-<the failed change's name
// without its release prefix>", with "-rN" for attempt N > 1: the rollback
// of the failed ChangeRequest of. One name per failed change, so a syncer
// that restarts creates nothing twice.
func RollbackChangeRequestName(release, of string, attempt int32) string {
	suffix, ok := strings.CutPrefix(of, release+"-")
	if !ok || suffix == "" {
		suffix = ShortSHA(strings.TrimPrefix(string(SHA256Digest([]byte(of))), "sha256:"))
	}
	name := release + "-rb-" + suffix
	if attempt > 1 {
		name += "-r" + strconv.Itoa(int(attempt))
	}
	return name
}
