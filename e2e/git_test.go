package e2e

// gitPort is where the test serves the infra repository on the node (git
// over HTTP); the syncer NetworkPolicy is opened to it.
const gitPort = 18418
