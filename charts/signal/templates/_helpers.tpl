{{/*
Helpers of Signal's chart. The objects themselves come from files/deploy.yaml (generated from
`kubectl kustomize deploy/`); templates/signal.yaml applies the values to them.
*/}}

{{/* The namespace the kustomize base installs into; the chart moves its objects to .Values.namespace. */}}
{{- define "signal.baseNamespace" -}}signal-system{{- end -}}

{{/* An image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "signal.image" -}}
{{- if .digest -}}{{ .repository }}@{{ .digest }}{{- else -}}{{ .repository }}:{{ .tag }}{{- end -}}
{{- end -}}

{{/* A CEL string literal ('text'); values.schema.json admits no quote or backslash in the text. */}}
{{- define "signal.celString" -}}'{{ . }}'{{- end -}}

{{/* A CEL list of string literals: [] or ['a', 'b']. */}}
{{- define "signal.celList" -}}
{{- if . -}}['{{ join "', '" . }}']{{- else -}}[]{{- end -}}
{{- end -}}

{{/* The trusted step Nodes' selector: extraSelector and the trusted label. */}}
{{- define "signal.trustedSelector" -}}
{{- $selector := deepCopy .Values.trustedNodes.extraSelector -}}
{{- $_ := set $selector .Values.trustedNodes.label .Values.trustedNodes.value -}}
{{- toJson $selector -}}
{{- end -}}

{{/* The same selector as the adapter's --trusted-node-selector reads it: key=value,... sorted by key. */}}
{{- define "signal.trustedSelectorText" -}}
{{- $selector := include "signal.trustedSelector" . | fromJson -}}
{{- $items := list -}}
{{- range $key := keys $selector | sortAlpha -}}
{{- $items = append $items (printf "%s=%s" $key (get $selector $key)) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}

{{/* Replace the value of the policy variable named .name in .policy with .expression; fail if absent. */}}
{{- define "signal.setVariable" -}}
{{- $found := false -}}
{{- range $variable := .policy.spec.variables -}}
{{- if eq $variable.name $.name -}}
{{- $_ := set $variable "expression" $.expression -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "policy %s has no variable %s: files/deploy.yaml and the chart's templates disagree (run `python -m localcluster.helmchart sync` and check templates/signal.yaml)" .policy.metadata.name .name) -}}
{{- end -}}
{{- end -}}
