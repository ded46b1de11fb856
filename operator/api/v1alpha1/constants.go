package v1alpha1

// Condition types.
const (
	// ConditionReady summarises an object: True when it is in its desired state.
	ConditionReady = "Ready"
	// ConditionStalled is True when only a human can fix the object.
	ConditionStalled = "Stalled"
	// ConditionReconciling is True while a reconcile is in progress.
	ConditionReconciling = "Reconciling"
	// ConditionProgressing is True while a Release has a change in flight.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when a Release's last change failed, or
	// when a pod of its applied workload is stuck (reasons
	// ImagePullFailed, CrashLooping, OOMKilled, Unschedulable,
	// CreateContainerConfigError, PodFailed), with the pod, container,
	// image and the kubelet's or scheduler's message.
	ConditionDegraded = "Degraded"
	// ConditionSynced is the syncer's view of a Release (the operator
	// preserves it): True when its inputs at the newest commit have a
	// ChangeRequest, False (reason SyncFailed) while making one fails and is
	// retried.
	ConditionSynced = "Synced"
	// ConditionOrphaned is the syncer's: True when the release left the
	// tracked branch while the Repository's prune is off, so nothing is
	// proposed and the Release and its workload stay as they are.
	ConditionOrphaned = "Orphaned"
	// ConditionDrifted is the operator's drift check of a Release: True when
	// the live state differs from the last applied change, False when it
	// matches, Unknown when the check failed.
	ConditionDrifted = "Drifted"
	// ConditionValidated is True when a change has no deny finding.
	ConditionValidated = "Validated"
	// ConditionApproved is True when a change passed the gate.
	ConditionApproved = "Approved"
	// ConditionApplied is True when a change was applied.
	ConditionApplied = "Applied"
)

// Condition reasons.
const (
	// ReasonSucceeded: the step finished successfully.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: work is under way.
	ReasonProgressing = "Progressing"
	// ReasonInvalidSpec: the spec cannot be acted on as written.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonChartMismatch: the chart from a chart repository in the
	// approved content is not the approved one (other bytes, another
	// version or digest); nothing is installed.
	ReasonChartMismatch = "ChartMismatch"
	// ReasonChartUnavailable: a chart from a chart repository could not
	// be resolved or fetched (credentials refused, no version in the
	// range, over a limit, other bytes than its digest); nothing is
	// proposed until it can.
	ReasonChartUnavailable = "ChartUnavailable"
	// ReasonSecretNotFound: a referenced Secret is missing or incomplete.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonAuthenticationFailed: the git remote refused the credentials.
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonHostKeyMismatch: the SSH host key is not in known_hosts.
	ReasonHostKeyMismatch = "HostKeyMismatch"
	// ReasonGitOperationFailed: a fetch or ls-remote failed.
	ReasonGitOperationFailed = "GitOperationFailed"
	// ReasonSyncFailed: making a Release's ChangeRequest failed (the
	// validator, the state backend, the API server); it is retried.
	ReasonSyncFailed = "SyncFailed"
	// ReasonRefNotFound: the tracked branch or tag does not exist.
	ReasonRefNotFound = "RefNotFound"
	// ReasonURLNotAllowed: the repository URL is refused by policy.
	ReasonURLNotAllowed = "URLNotAllowed"
	// ReasonHistoryRewritten: the new head does not descend from the last one.
	ReasonHistoryRewritten = "HistoryRewritten"
	// ReasonServiceRemoved: a service left the repository but prune is off.
	ReasonServiceRemoved = "ServiceRemoved"
	// ReasonInRepository: the release is in the tracked branch (Orphaned
	// False).
	ReasonInRepository = "InRepository"
	// ReasonReleaseChanged: a Delete change no longer matches its release,
	// which was applied again after the deletion was proposed.
	ReasonReleaseChanged = "ReleaseChanged"
	// ReasonDeleted: an approved Delete change removed the release.
	ReasonDeleted = "Deleted"
	// ReasonManifestInvalid: a service.yaml could not be parsed.
	ReasonManifestInvalid = "ManifestInvalid"
	// ReasonOwnershipConflict: a Release is owned by another Repository.
	ReasonOwnershipConflict = "OwnershipConflict"
	// ReasonSuspended: the object is suspended.
	ReasonSuspended = "Suspended"

	// ReasonPolicyDenied: a deny finding blocks the change.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonPolicyPassed: no deny finding.
	ReasonPolicyPassed = "PolicyPassed"
	// ReasonVetoed: a standing reject blocks the change.
	ReasonVetoed = "Vetoed"
	// ReasonAwaitingApprovals: fewer approvals than the rule requires.
	ReasonAwaitingApprovals = "AwaitingApprovals"
	// ReasonApprovalsMet: enough allowed approvers approved.
	ReasonApprovalsMet = "ApprovalsMet"
	// ReasonAutoApproved: the risk is within the rule's autoApproveRisk.
	ReasonAutoApproved = "AutoApproved"
	// ReasonWaitingForLock: another change of the release is applying.
	ReasonWaitingForLock = "WaitingForLock"
	// ReasonApplying: the change was handed to an applier.
	ReasonApplying = "Applying"
	// ReasonApplyFailed: the applier failed.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonGateFailedAtHandOff: the gate no longer passed when re-checked
	// right before the hand-off.
	ReasonGateFailedAtHandOff = "GateFailedAtHandOff"
	// ReasonSuperseded: a newer change of the release went first.
	ReasonSuperseded = "Superseded"
	// ReasonPreview: a pull-request preview, never applied.
	ReasonPreview = "Preview"
	// ReasonNoApplier: no applier handles the change's delivery.
	ReasonNoApplier = "NoApplier"
	// ReasonWaitingForArgoCD: Argo CD has not finished syncing (or
	// pruning) yet; nothing failed.
	ReasonWaitingForArgoCD = "WaitingForArgoCD"
	// ReasonWaitingForReadiness: the Helm applier installed the change's
	// revision and waits for its objects to be ready (kstatus Current),
	// as Helm's wait would, without holding a worker; nothing failed.
	ReasonWaitingForReadiness = "WaitingForReadiness"
	// ReasonReadyTimeout: the objects a Helm change installed were not
	// ready within the Helm timeout; the revision was marked failed and
	// rolled back (or a first install uninstalled).
	ReasonReadyTimeout = "ReadyTimeout"
	// ReasonBinaryNotFound: a program the applier runs (terraform) is not
	// installed where the operator looks for it.
	ReasonBinaryNotFound = "BinaryNotFound"
	// ReasonDigestMismatch: downloaded content does not match the digests.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonManifestMismatch: what Helm would install differs from the
	// approved manifests.
	ReasonManifestMismatch = "ManifestMismatch"
	// ReasonStalePlan: the approved Terraform plan no longer applies.
	ReasonStalePlan = "StalePlan"
	// ReasonNamespaceNotAllowed: the target namespace is outside the
	// Repository's targetNamespaces.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonOutsideNamespace: the change would create an object outside
	// its target namespace (another namespace, or a cluster-scoped object)
	// that the Repository does not allow.
	ReasonOutsideNamespace = "OutsideNamespace"
	// ReasonNoDrift: the live state matches the last applied change.
	ReasonNoDrift = "NoDrift"
	// ReasonDriftDetected: the live state differs from the last applied
	// change.
	ReasonDriftDetected = "DriftDetected"
	// ReasonDriftReverting: drift was found and a re-apply of the last
	// applied revision was asked for.
	ReasonDriftReverting = "DriftReverting"
	// ReasonDriftCheckFailed: the drift check could not compare.
	ReasonDriftCheckFailed = "DriftCheckFailed"
	// ReasonReappliesApproved: the change re-applies the approvalDigest
	// its release has applied, so the approval of that change carries it.
	ReasonReappliesApproved = "ReappliesApproved"
	// ReasonReleaseNotFound: the change's Release does not exist.
	ReasonReleaseNotFound = "ReleaseNotFound"

	// ReasonImagePullFailed: a pod of the release cannot pull its image
	// (ErrImagePull, ImagePullBackOff, InvalidImageName).
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonCrashLooping: a container of the release restarts in a loop
	// (CrashLoopBackOff).
	ReasonCrashLooping = "CrashLooping"
	// ReasonOOMKilled: a container of the release was killed for lack of
	// memory and has not run again since.
	ReasonOOMKilled = "OOMKilled"
	// ReasonUnschedulable: the scheduler finds no node for a pod of the
	// release.
	ReasonUnschedulable = "Unschedulable"
	// ReasonCreateContainerConfigError: a container of the release cannot
	// be created from its spec (a missing ConfigMap, Secret or key).
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	// ReasonPodFailed: a pod of the release ended in phase Failed
	// (evicted, or its containers failed with restartPolicy Never).
	ReasonPodFailed = "PodFailed"
)

// Finalizers.
const (
	// ReleaseFinalizer makes the operator clean up (uninstall the Helm
	// release, prune the Application) before a Release goes.
	ReleaseFinalizer = "gitops.sluice.dev/cleanup"
	// ApprovalFinalizer keeps an Approval while its ChangeRequest exists.
	ApprovalFinalizer = "gitops.sluice.dev/retain-while-referenced"
)

// Labels.
const (
	// LabelRepository names the Repository an object comes from.
	LabelRepository = "gitops.sluice.dev/repository"
	// LabelRelease names the Release an object belongs to.
	LabelRelease = "gitops.sluice.dev/release"
	// LabelService is the service name of a Release.
	LabelService = "gitops.sluice.dev/service"
	// LabelEnvironment is the environment name of a Release.
	LabelEnvironment = "gitops.sluice.dev/environment"
	// LabelChangeRequest names the ChangeRequest a plan Secret belongs to.
	LabelChangeRequest = "gitops.sluice.dev/change-request"
	// LabelPreview is "true" on preview ChangeRequests.
	LabelPreview = "gitops.sluice.dev/preview"
	// LabelPullRequest is the pull request number of a preview.
	LabelPullRequest = "gitops.sluice.dev/pull-request"
)

// Annotations.
const (
	// AnnotationReplan on a Release asks the syncer for a new plan at the
	// same commit (the next "-rN" ChangeRequest); any new value triggers it.
	AnnotationReplan = "gitops.sluice.dev/replan"
	// DriftRevertPrefix starts the AnnotationReplan value the drift
	// controller sets to have a release's applied revision applied again;
	// the rest is the applied ChangeRequest's name. The syncer copies the
	// value onto the re-plan's ChangeRequest.
	DriftRevertPrefix = "drift-revert-"
	// AnnotationRollbackPrefix + <failed ChangeRequest> on a Release asks
	// the syncer for a rollback of that change; the value is the verified
	// ChangeRequest to return to. The operator writes it once its status
	// recorded the decision; the syncer answers with a ChangeRequest whose
	// spec.rollback names both.
	AnnotationRollbackPrefix = "gitops.sluice.dev/rollback-"
	// AnnotationRevertPullRequest on a rollback ChangeRequest is the URL
	// of the pull request the syncer opened to revert the failed change's
	// commit in git (where a provider is configured), so git and the
	// cluster agree again once it merges.
	AnnotationRevertPullRequest = "gitops.sluice.dev/revert-pull-request"
	// AnnotationRevertDeclined on a rollback ChangeRequest says why no
	// revert pull request was opened (the revert does not apply cleanly
	// to the branch head, the change's commit is gone…); a person
	// reverts in git then.
	AnnotationRevertDeclined = "gitops.sluice.dev/revert-declined"
	// AnnotationReconcileRequestedAt on a Repository asks for a sync now.
	AnnotationReconcileRequestedAt = "gitops.sluice.dev/reconcile-requested-at"
	// AnnotationTraceParent carries the W3C trace context from the webhook
	// to the apply.
	AnnotationTraceParent = "gitops.sluice.dev/traceparent"
)

// PlanSecretSuffix is appended to a ChangeRequest's name to name its plan
// Secret; chunks past the first add "-1", "-2"…
const PlanSecretSuffix = "-plan"

// PlanSecretKey is the data key holding the plan file (or its chunk).
const PlanSecretKey = "tfplan"

// PlanChunkSize is the largest plan chunk stored in one Secret.
const PlanChunkSize = 900 * 1024
