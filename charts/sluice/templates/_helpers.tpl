{{/* sluice.fullname: the prefix of every object name. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* sluice.labels: common labels of every object. */}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* sluice.selector: labels selecting one component's pods; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "sluice.selector" -}}
app.kubernetes.io/name: {{ default .ctx.Chart.Name .ctx.Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .shard }}
sluice.dev/shard: {{ . }}
{{- end }}
{{- end -}}

{{/* sluice.componentLabels: common labels plus the component (and the shard, with "shard" in the dict). */}}
{{- define "sluice.componentLabels" -}}
{{ include "sluice.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- with .shard }}
sluice.dev/shard: {{ . }}
{{- end }}
{{- end -}}

{{/*
sluice.shardNames: a JSON list of the shards a syncer and operator pair
is deployed for: "" (the unsharded pair, serving objects without a shard
key) and the name of every entry of .Values.shards.
*/}}
{{- define "sluice.shardNames" -}}
{{- $names := list "" -}}
{{- range .Values.shards }}
{{- if has .name $names }}{{ fail (printf "shards: %q is listed twice" .name) }}{{ end }}
{{- $names = append $names .name }}
{{- end -}}
{{- if and .Values.shards .Values.syncer.artifactBaseURL }}
{{- fail "syncer.artifactBaseURL cannot be used with shards: each shard's operator fetches artifacts from its own shard's syncer Service" }}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* sluice.shardArtifactBaseURL: sluice.artifactBaseURL of one shard's syncer; call with (dict "ctx" $ "shard" "a"); "" is the unsharded one. */}}
{{- define "sluice.shardArtifactBaseURL" -}}
{{- if .shard -}}
{{- printf "http://%s-syncer-%s.%s.svc:%d" (include "sluice.fullname" .ctx) .shard .ctx.Release.Namespace (int .ctx.Values.syncer.ports.artifacts) -}}
{{- else -}}
{{- include "sluice.artifactBaseURL" .ctx -}}
{{- end -}}
{{- end -}}

{{- define "sluice.operator.serviceAccountName" -}}
{{- default (printf "%s-operator" (include "sluice.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{- define "sluice.syncer.serviceAccountName" -}}
{{- default (printf "%s-syncer" (include "sluice.fullname" .)) .Values.syncer.serviceAccount.name -}}
{{- end -}}

{{/* sluice.image: repository:tag of a component; call with (dict "ctx" $ "image" .Values.operator.image). */}}
{{- define "sluice.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/*
sluice.kubeVersion: the one Kubernetes version both components render and
install charts for (the syncer's --kube-version, the operator's
--helm-kube-version).
*/}}
{{- define "sluice.kubeVersion" -}}
{{- default .Capabilities.KubeVersion.Version .Values.kubeVersion -}}
{{- end -}}

{{/* sluice.artifactBaseURL: where the syncer serves artifacts and the operator fetches them. */}}
{{- define "sluice.artifactBaseURL" -}}
{{- if .Values.syncer.artifactBaseURL -}}
{{- .Values.syncer.artifactBaseURL -}}
{{- else -}}
{{- printf "http://%s-syncer.%s.svc:%d" (include "sluice.fullname" .) .Release.Namespace (int .Values.syncer.ports.artifacts) -}}
{{- end -}}
{{- end -}}

{{/* sluice.podSecurityContext: non-root, no privilege, RuntimeDefault seccomp. */}}
{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "sluice.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
sluice.manifestFile: renders a multi-document YAML file of the chart's files/
folder, one object per document, with the chart's labels added. Call with
(dict "ctx" $ "file" "files/x.yaml" "paramNamespace" "ns"); a non-empty
paramNamespace replaces spec.paramRef.namespace of every binding that names
its parameter object (one selecting its parameters reads them in the
request's namespace).
*/}}
{{- define "sluice.manifestFile" -}}
{{- $ctx := .ctx -}}
{{- $labels := include "sluice.labels" $ctx | fromYaml -}}
{{- $content := $ctx.Files.Get .file -}}
{{- if not $content -}}
{{- fail (printf "the chart's %s is missing" .file) -}}
{{- end -}}
{{- range $i, $doc := regexSplit "(?m)^---[ \t]*$" $content -1 }}
{{- $obj := fromYaml $doc -}}
{{- if hasKey $obj "Error" -}}
{{- fail (printf "%s document %d: %s" $.file $i (get $obj "Error")) -}}
{{- end -}}
{{- if $obj.kind }}
{{- if and $.paramNamespace (eq $obj.kind "ValidatingAdmissionPolicyBinding") $obj.spec.paramRef $obj.spec.paramRef.name }}
{{- $_ := set $obj.spec.paramRef "namespace" $.paramNamespace -}}
{{- end }}
{{- $_ := set $obj.metadata "labels" (merge (default (dict) $obj.metadata.labels) $labels) }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "sluice.runner.serviceAccountName" -}}
{{- default (printf "%s-runner" (include "sluice.fullname" .)) .Values.runner.serviceAccount.name -}}
{{- end -}}

{{/* sluice.tokensSecretName: the Secret holding the runner and artifact tokens. */}}
{{- define "sluice.tokensSecretName" -}}
{{- default (printf "%s-tokens" (include "sluice.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{/* sluice.runnerURL: where the syncer and operator reach the runner workload. */}}
{{- define "sluice.runnerURL" -}}
{{- printf "http://%s-runner.%s.svc:%d" (include "sluice.fullname" .) .Release.Namespace (int .Values.runner.port) -}}
{{- end -}}

{{/*
sluice.terraformArgs: the arguments that send a component's Terraform runs
to the runner workload and serve their state; call with
(dict "ctx" $ "v" .Values.syncer). The state URL is the pod's own address:
a run credential is valid only at the process that granted it, and with
more than one replica a Service could send the run to another one.
*/}}
{{- define "sluice.terraformArgs" -}}
{{- $ctx := .ctx -}}
{{- if $ctx.Values.runner.enabled }}
- --terraform-runner={{ include "sluice.runnerURL" $ctx }}
- --terraform-runner-token-file=/etc/sluice/tokens/runner-token
{{- end }}
- --state-bind-address=:{{ .v.ports.state }}
- --state-base-url=http://$(POD_IP):{{ .v.ports.state }}
{{- end -}}

{{/* sluice.tokenVolume: the tokens a caller of the runner and the artifact server holds; call with (dict "ctx" $ "keys" (list ...)). */}}
{{- define "sluice.tokenVolume" -}}
- name: tokens
  secret:
    secretName: {{ include "sluice.tokensSecretName" .ctx }}
    defaultMode: 0440
    items:
      {{- range .keys }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end -}}
