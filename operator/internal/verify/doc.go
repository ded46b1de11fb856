// Package verify verifies a change after it was applied: the health of
// what it applied (kstatus, and pods in states they do not leave by
// themselves), then the metric checks of its verification spec against
// Prometheus, then a soak time.
//
// Everything is a pure step over the change's status: Advance takes the
// status as stored, measures what is due, and says what the change is
// now and when to look again. The ChangeRequest reconciler runs it as a
// step and requeues with RequeueAfter; nothing sleeps and nothing runs in
// the background, and a restart continues from the status (the start
// time, each check's counts and last measurement are stored there).
//
// Outcomes of a measurement (never a silent pass):
//
//   - one series (or a scalar) with a number: the check's conditions
//     decide Successful, Failed or Inconclusive;
//   - no series, or NaN/±Inf: the check's noData rule, fail (the
//     default: Failed) or inconclusive (Inconclusive);
//   - several series: Error ("a check needs one series");
//   - a query Prometheus refuses (a syntax error), a Prometheus that
//     answers 5xx, times out or cannot be reached: Error.
//
// An Error counts as a failed measurement: it uses up the failureLimit
// like a bad value does. An Inconclusive measurement stops the
// verification until a person decides.
package verify
