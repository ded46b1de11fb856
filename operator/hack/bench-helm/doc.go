// Package benchhelm measures the Helm applier against a bare Helm SDK
// install of the same chart, in one run on the same control plane:
//
//	go test ./hack/bench-helm -run '^$' -bench . -benchtime 20x
//
// BenchmarkHelmApplier times applier.Apply (artifact download, archive,
// content and approval digest checks, confined extraction, service manifest,
// impersonation, Helm history, render with the manifestDigest post-renderer,
// install); BenchmarkBareHelmInstall times loading the same chart and values
// from disk and an action.Install with the operator's own rights, as a plain
// Helm SDK program does (capabilities discovered from the server);
// BenchmarkBareHelmInstallPinnedCapabilities the same with the capabilities
// pinned as the applier pins them, so that the applier's verification
// overhead is the difference to it. Each iteration installs into a fresh
// namespace, made outside the timer.
package benchhelm
