package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// dumpTimeout bounds the diagnosis of a failed test: it must not hang on
// the API server that may be why the test failed.
const dumpTimeout = 30 * time.Second

// logTailLines is how much of each Sluice container's log a dump shows.
const logTailLines = 60

// dumpOnFailure registers a cleanup that, when t failed, logs what helps
// tell why while the cluster is still in the failing state (later tests
// change it): the ChangeRequests and Releases with their phases and
// conditions, the pods, the recent Events and the tail of each Sluice
// pod's log.
func (c *cluster) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), dumpTimeout)
		defer cancel()
		var b strings.Builder
		c.dumpChanges(ctx, &b)
		c.dumpPods(ctx, &b)
		c.dumpEvents(ctx, &b)
		c.dumpSluiceLogs(ctx, &b)
		t.Logf("state of the cluster after the failure:\n%s", b.String())
	})
}

// dumpInstall is the diagnosis of a failed chart install: pods, Events and
// the Sluice pods' logs.
func (c *cluster) dumpInstall() string {
	ctx, cancel := context.WithTimeout(context.Background(), dumpTimeout)
	defer cancel()
	var b strings.Builder
	c.dumpPods(ctx, &b)
	c.dumpEvents(ctx, &b)
	c.dumpSluiceLogs(ctx, &b)
	return b.String()
}

// dumpChanges writes the control namespace's ChangeRequests and Releases.
func (c *cluster) dumpChanges(ctx context.Context, b *strings.Builder) {
	crs := &sluicev1.ChangeRequestList{}
	if err := c.c.List(ctx, crs, client.InNamespace(controlNS)); err != nil {
		fmt.Fprintf(b, "ChangeRequests: %v\n", err)
	} else {
		fmt.Fprintf(b, "ChangeRequests in %s:\n", controlNS)
		for _, cr := range crs.Items {
			// An Applied change's conditions say nothing new: only the others'.
			conds := ""
			if cr.Status.Phase != sluicev1.PhaseApplied {
				conds = conditions(cr.Status.Conditions)
			}
			fmt.Fprintf(b, "  %s created %s phase %q%s\n", cr.Name, cr.CreationTimestamp.Format(time.TimeOnly), cr.Status.Phase, conds)
		}
	}
	rels := &sluicev1.ReleaseList{}
	if err := c.c.List(ctx, rels, client.InNamespace(controlNS)); err != nil {
		fmt.Fprintf(b, "Releases: %v\n", err)
		return
	}
	fmt.Fprintf(b, "Releases in %s:\n", controlNS)
	for _, r := range rels.Items {
		fmt.Fprintf(b, "  %s latest %q current %q synced %.10s deleting %v%s\n", r.Name, r.Status.LatestChange, r.Status.CurrentChange,
			r.Status.LastSyncedCommit, r.DeletionTimestamp != nil, conditions(r.Status.Conditions))
	}
}

// conditions formats conditions compactly: type=status(reason: message).
func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(out) == 0 {
		return ""
	}
	return "\n      " + strings.Join(out, "\n      ")
}

// dumpPods writes every pod outside kube-system with its phase, readiness
// and restarts.
func (c *cluster) dumpPods(ctx context.Context, b *strings.Builder) {
	l, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "pods: %v\n", err)
		return
	}
	b.WriteString("pods:\n")
	for i := range l.Items {
		p := &l.Items[i]
		fmt.Fprintf(b, "  %s/%s %s ready=%v restarts=%d deleting=%v\n", p.Namespace, p.Name, p.Status.Phase, ready(p), restarts(p), p.DeletionTimestamp != nil)
	}
}

// restarts sums the pod's container restarts.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// dumpEvents writes the last Events of every namespace, oldest first.
func (c *cluster) dumpEvents(ctx context.Context, b *strings.Builder) {
	l, err := c.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "events: %v\n", err)
		return
	}
	evs := l.Items
	sort.Slice(evs, func(i, j int) bool { return eventTime(&evs[i]).Before(eventTime(&evs[j])) })
	if len(evs) > 40 {
		evs = evs[len(evs)-40:]
	}
	b.WriteString("last events:\n")
	for i := range evs {
		e := &evs[i]
		fmt.Fprintf(b, "  %s %s %s/%s %s: %s\n", eventTime(e).Format(time.TimeOnly), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, strings.TrimSpace(e.Message))
	}
}

// eventTime is when an Event last happened, whichever field its source set.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// dumpSluiceLogs writes the tail of every container log of Sluice's pods
// and of Argo CD's (the plugin sidecar is Sluice's), and of the previous
// container when it restarted.
func (c *cluster) dumpSluiceLogs(ctx context.Context, b *strings.Builder) {
	for _, ns := range []string{sluiceNS, argocdNS} {
		c.dumpLogs(ctx, b, ns)
	}
}

// dumpLogs writes the tail of every container log of the pods in ns.
func (c *cluster) dumpLogs(ctx context.Context, b *strings.Builder, ns string) {
	l, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "pods in %s: %v\n", ns, err)
		return
	}
	tail := int64(logTailLines)
	for _, p := range l.Items {
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			for _, previous := range []bool{false, true} {
				if previous && s.RestartCount == 0 {
					continue
				}
				out, err := c.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, TailLines: &tail, Previous: previous}).DoRaw(ctx)
				fmt.Fprintf(b, "--- log of %s/%s (previous %v, last %d lines)\n", p.Name, s.Name, previous, tail)
				if err != nil {
					fmt.Fprintf(b, "%v\n", err)
					continue
				}
				b.Write(out)
			}
		}
	}
}
