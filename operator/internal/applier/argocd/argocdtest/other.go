package argocdtest

// OtherPluginName is a second config management plugin of the repo-server
// beside Sluice's, as a cluster may run for other teams: the attack tests
// name it in a pushed override file.
const OtherPluginName = "other"

// OtherManifest is what the other plugin prints: the test chart's ConfigMap
// (web-prod-config) with another message, and an object of its own.
const OtherManifest = `apiVersion: v1
kind: ConfigMap
metadata: {name: web-prod-config}
data: {message: from the other plugin}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: planted-by-other}
data: {}
`

// OtherPlugin is the sidecar that prints OtherManifest whatever it is asked.
func OtherPlugin() Plugin {
	return Plugin{Name: OtherPluginName, Command: []string{"sh", "-c", `printf '%s' "$1"`, "sh", OtherManifest}}
}
