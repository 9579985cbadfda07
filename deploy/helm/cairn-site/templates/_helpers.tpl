{{- define "cairn.fullname" -}}
{{- printf "%s" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "cairn.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
cairn.site: {{ .Values.site }}
{{- end -}}

{{- define "cairn.natsUrl" -}}
{{- if .Values.leafNode.enabled -}}
nats://{{ include "cairn.fullname" . }}-leaf:{{ .Values.leafNode.port }}
{{- else -}}
{{- required "federationUrl is required unless leafNode.enabled" .Values.federationUrl -}}
{{- end -}}
{{- end -}}
