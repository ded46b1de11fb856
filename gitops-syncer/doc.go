// Package gitopssyncer is the Sluice syncer module: it watches infra
// repositories and turns new commits into Releases and ChangeRequests.
package gitopssyncer
