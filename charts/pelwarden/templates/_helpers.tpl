{{/* Names are truncated to 63 characters: Kubernetes label and DNS-1123 limits. */}}
{{- define "pelwarden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pelwarden.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The metrics Service; the suffix is kept whole so the two Services never share a name. */}}
{{- define "pelwarden.metricsName" -}}
{{- printf "%s-metrics" (include "pelwarden.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "pelwarden.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pelwarden.selectorLabels" . }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pelwarden.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pelwarden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pelwarden.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pelwarden.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* RBAC is only worth creating when something reads pods. */}}
{{- define "pelwarden.rbacEnabled" -}}
{{- if and .Values.rbac.create .Values.kubernetes.enabled }}true{{ end }}
{{- end }}

{{/*
Where the projected volume puts each file, relative to /etc/pelwarden. The
config names files by these paths, and the volume is built from the same
definitions, so the two cannot drift apart.
*/}}
{{- define "pelwarden.configDir" -}}/etc/pelwarden{{- end }}
{{- define "pelwarden.grpcTLSEnabled" -}}
{{- if .Values.grpc.tls.enabled }}true{{ end }}
{{- end }}
{{- define "pelwarden.mtlsEnabled" -}}
{{- if and .Values.grpc.tls.enabled .Values.grpc.tls.clientCA.enabled }}true{{ end }}
{{- end }}

{{/*
An alert's labels: its severity and prometheusRule.additionalAlertLabels.
Called with (list $ alert) from a rule at the indentation of its fields.
*/}}
{{- define "pelwarden.alertLabels" -}}
{{- $root := index . 0 }}
{{- $alert := index . 1 }}
{{- $labels := merge (dict "severity" $alert.severity) $root.Values.prometheusRule.additionalAlertLabels }}
{{- printf "labels:\n%s" (toYaml $labels | indent 2) | nindent 10 }}
{{- end }}

{{/* An alert's runbook_url: the anchor of its section in the chart README. */}}
{{- define "pelwarden.runbook" -}}
{{- $root := index . 0 }}
{{- printf "runbook_url: %s#%s" $root.Values.prometheusRule.runbookBaseURL (lower (index . 1)) | nindent 12 }}
{{- end }}
