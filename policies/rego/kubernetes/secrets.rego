# Plaintext secrets in ConfigMaps and container env: private keys, cloud
# access keys, tokens, and secret-named keys with a literal value. Messages
# name the key and what it looks like, never the value.
package sluice.kubernetes.secrets

import data.sluice.lib.kubernetes as k8s

# value_patterns: what a value looks like -> regular expression.
value_patterns := {
	"a private key": `-----BEGIN [A-Z ]*PRIVATE KEY`,
	"an AWS access key id": `(^|[^A-Z0-9])(AKIA|ASIA|A3T[A-Z0-9])[A-Z0-9]{16}([^A-Z0-9]|$)`,
	"a GitHub token": `(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})`,
	"a GitLab token": `glpat-[A-Za-z0-9_-]{20,}`,
	"a Slack token": `xox[abposr]-[A-Za-z0-9-]{10,}`,
	"a Google API key": `AIza[0-9A-Za-z_-]{35}`,
	"a Google service account key": `"private_key_id"\s*:`,
	"a JSON web token": `eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.`,
	"a credential in a URL": `[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`,
}

# secret_key_name matches keys that name a secret (PASSWORD, db_token, api-key...).
secret_key_name := `(?i)(^|[_.-])(password|passwd|pwd|secret|secret[_-]?key|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?)$`

# what_it_is says why a key/value pair looks like a secret (never the value).
what_it_is(_, value) := kind if {
	some kind, pattern in value_patterns
	regex.match(pattern, value)
} else := "a secret-named key with a literal value" if {
	literal_value(value)
}

# literal_value excludes empty values, placeholders and file paths, which
# secret-named keys often hold.
literal_value(value) if {
	count(value) >= 8
	not contains(value, "${")
	not contains(value, "{{")
	not startswith(value, "/")
}

named_secret(key, value) := what if {
	regex.match(secret_key_name, key)
	what := what_it_is(key, value)
}

named_secret(key, value) := what if {
	not regex.match(secret_key_name, key)
	some what, pattern in value_patterns
	regex.match(pattern, value)
}

deny contains k8s.result(input, msg) if {
	input.kind == "ConfigMap"
	some key, value in object.get(input, "data", {})
	is_string(value)
	what := named_secret(key, value)
	msg := sprintf("%s: key %q holds %s in plaintext; move it to a Secret", [k8s.id(input), key, what])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	some env in object.get(c, "env", [])
	is_string(env.value)
	what := named_secret(env.name, env.value)
	msg := sprintf("%s: container %q env %q holds %s in plaintext; use valueFrom.secretKeyRef", [k8s.id(input), c.name, env.name, what])
}
