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
{{- $url := required "federationUrl is required unless leafNode.enabled" .Values.federationUrl -}}
{{- include "cairn.tlsUrl" (dict "key" "federationUrl" "url" $url "root" .) -}}
{{- end -}}
{{- end -}}

{{/* A URL off the site's own cluster: tls:// unless insecure. */}}
{{- define "cairn.tlsUrl" -}}
{{- if and (not .root.Values.insecure) (not (hasPrefix "tls://" .url)) -}}
{{- fail (printf "%s %s is not a tls:// URL: a site reaches its federation over TLS (insecure: true is for development only)" .key .url) -}}
{{- end -}}
{{- .url -}}
{{- end -}}

{{/* A secret the site cannot connect without: its name, or a render that fails saying
     which and where it comes from. */}}
{{- define "cairn.secret" -}}
{{- required (printf "%s is required: %s (from `cairn provision`, or `request`/`sign`/`accept` at the site; see the chart's README). The chart renders no site without credentials; insecure: true is for development only" .key .what) .value -}}
{{- end -}}
