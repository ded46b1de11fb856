// Package giteaini writes the app.ini of the Gitea the tests run: a local
// process (the syncer's giteatest) or a pod (the e2e cluster). One
// configuration for both, so what the local tests show is what the pod
// runs: SQLite, repositories and logs under the work path, no SSH, mail,
// Actions, packages, cron or frontend assets, and every secret fixed, so
// Gitea never rewrites the file (a pod's is a read-only ConfigMap).
package giteaini

import (
	"fmt"
	"strings"
)

// Config is what differs between a local Gitea and a pod.
type Config struct {
	// AppName is Gitea's APP_NAME.
	AppName string
	// RunUser is the user Gitea runs as (it compares the name with the
	// current user's).
	RunUser string
	// WorkPath holds the database (data/), the repositories (repos/) and,
	// with LogToFile, the logs (log/).
	WorkPath string
	// HTTPAddr and Port are where Gitea listens.
	HTTPAddr string
	Port     int
	// RootURL is the URL Gitea names itself by (webhook payloads, clone
	// and pull request URLs), without a trailing slash; Domain its host.
	RootURL string
	Domain  string
	// StaticRoot holds Gitea's templates/ and options/.
	StaticRoot string
	// AllowedHosts are the webhook receivers Gitea may call
	// (ALLOWED_HOST_LIST: "loopback", "private", "*"…).
	AllowedHosts string
	// SecretKey and InternalToken are fixed, not secret, test values.
	SecretKey, InternalToken string
	// AsRoot lets Gitea run as root (tests and CI may).
	AsRoot bool
	// LogToFile writes Gitea's log under WorkPath/log; otherwise to the
	// console (a pod's log).
	LogToFile bool
}

// String is the app.ini.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "APP_NAME = %s\nRUN_MODE = prod\nRUN_USER = %s\nWORK_PATH = %s\n", c.AppName, c.RunUser, c.WorkPath)
	if c.AsRoot {
		b.WriteString("I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true\n")
	}
	fmt.Fprintf(&b, `
[server]
PROTOCOL = http
HTTP_ADDR = %[1]s
HTTP_PORT = %[2]d
DOMAIN = %[3]s
ROOT_URL = %[4]s/
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
; Gitea generates and saves missing JWT secrets (this one and oauth2's,
; even with OAuth2 off): fixed, not secret, values keep app.ini unwritten.
LFS_JWT_SECRET = ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8
OFFLINE_MODE = true
APP_DATA_PATH = %[5]s/data
STATIC_ROOT_PATH = %[6]s

[database]
DB_TYPE = sqlite3
PATH = %[5]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[5]s/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[7]s
INTERNAL_TOKEN = %[8]s
PASSWORD_COMPLEXITY = off
MIN_PASSWORD_LENGTH = 6
; which webhook receivers Gitea may call (the default "external" refuses
; loopback and cluster-internal addresses)
ALLOWED_HOST_LIST = %[9]s

[oauth2]
ENABLED = false
JWT_SECRET = AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8
[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false
[webhook]
DELIVER_TIMEOUT = 10
[mailer]
ENABLED = false
[session]
PROVIDER = memory
[cache]
ADAPTER = memory
[queue]
TYPE = channel
[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false
[cron]
ENABLED = false
[cron.update_checker]
ENABLED = false
[actions]
ENABLED = false
[packages]
ENABLED = false
[log]
LEVEL = info
`, c.HTTPAddr, c.Port, c.Domain, strings.TrimSuffix(c.RootURL, "/"), c.WorkPath, c.StaticRoot, c.SecretKey, c.InternalToken, c.AllowedHosts)
	if c.LogToFile {
		fmt.Fprintf(&b, "MODE = file\nROOT_PATH = %s/log\n", c.WorkPath)
	} else {
		b.WriteString("MODE = console\n")
	}
	return b.String()
}
