// Package tfstate serves Terraform state to runs that hold no Kubernetes
// credential: Terraform's `http` backend, answered by the syncer (plans)
// and the operator (applies), each with tokens that reach exactly one
// release's state, in one mode, until they expire.
//
// # Why the http backend
//
// Terraform code executes during plan (file(), data sources, providers) and
// apply (provisioners), and whoever pushes to the infra repo writes it. With
// the kubernetes backend a run needs a Kubernetes identity that can read and
// write Secrets in the control namespace, so the run's code could read every
// other release's state and any Secret that identity reaches. With the http
// backend the run holds only a token (TF_HTTP_PASSWORD), and the server, not
// Kubernetes RBAC, decides what that token may do. The address and the
// credentials come from the environment (Credential.Env): a saved plan file
// records the backend's attribute names but no values, so the syncer's plan
// applies against the operator's address with the operator's token.
//
// The http backend has no workspaces: the workspace is part of the address
// (PathPrefix/<namespace>/<workspace>/<release>), so inside a stack
// `terraform.workspace` is always "default".
//
// # Why the kubernetes backend's Secret and Lease
//
// The state stays where Terraform's kubernetes backend keeps it (Secret
// tfstate-<workspace>-<release>, data key "tfstate", gzip, labels
// tfstate=true, tfstateSecretSuffix, tfstateWorkspace,
// app.kubernetes.io/managed-by=terraform, annotation encoding=gzip), and the
// lock is its Lease lock-tfstate-<workspace>-<release> (holderIdentity = the
// lock ID, the lock info JSON in the annotation app.terraform.io/lock-info).
// So the states written before continue with their serial and lineage, no
// migration step runs, and a kubernetes-backend run and an http-backend run
// exclude each other. The server refuses an object whose labels name
// another workspace and release (names like "a"+"b-c" and "a-b"+"c" join to
// the same object name) or that is not a state at all.
//
// Writes are conditional on the resourceVersion read; a write needs the
// lock held by the same run (Terraform sends the lock ID as the ID query,
// and the Lease records the run id in the annotation tfstate.sluice.dev/run,
// since any token of the state sees the ID in a 423), keeps the lineage and
// never lowers the serial. A state is at most Options.MaxStateBytes
// (32 MiB) uncompressed, and must still fit in a Secret once compressed.
//
// # Tokens
//
// A token is st1.<base64url(claims)>.<base64url(HMAC-SHA256)> over the
// namespace, workspace, release, mode, expiry and a random run id, signed
// with a random key made by NewServer: a restart invalidates every token
// (runs are retried with new ones), and the syncer's tokens are worthless at
// the operator. The MAC is checked in constant time before the claims are
// decoded. It travels as the basic-auth password (user Username); it is
// never logged: refusals are logged with the run id. Credential.Secrets
// lists it for redaction of every output of the run.
//
// A plan token (ModePlan) may GET its own state and LOCK/UNLOCK it. It
// cannot write it (POST is 403), and no token reaches another state (403),
// another method (405) or anything but PathPrefix (404). An apply token
// (ModeApply) may also POST its own state while its run holds the lock. A
// missing, malformed, forged, modified or expired token is 401.
//
// A lock taken through this server expires with the token that took it (the
// Lease's acquireTime and leaseDurationSeconds say when): after that the
// holder can no longer write, so another run may take the lock over. A run
// killed while holding the lock therefore blocks its state until its token's
// TTL passes: give a credential a TTL a little longer than the run's
// timeout, and no longer. Locks of the kubernetes backend never expire,
// as there.
//
// # RBAC
//
// The process running a Server needs, in each control namespace it serves
// state from: coordination.k8s.io leases get, create, update (every mode
// locks), and secrets get, plus create and update where it grants apply
// credentials (the operator; the syncer grants plan credentials only and
// never writes a state Secret). It needs no list, watch or delete. The
// runners need no RBAC at all.
package tfstate
