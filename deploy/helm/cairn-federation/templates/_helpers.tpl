{{- define "cairn.fullname" -}}
{{- printf "%s" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "cairn.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cairn.natsUrl" -}}
{{- if .Values.nats.deploy -}}
{{- if .Values.insecure -}}
nats://{{ include "cairn.fullname" . }}-nats:{{ .Values.nats.port }}
{{- else -}}
tls://{{ include "cairn.fullname" . }}-nats:{{ .Values.nats.port }}
{{- end -}}
{{- else -}}
{{- $url := required "nats.externalUrl is required when nats.deploy is false" .Values.nats.externalUrl -}}
{{- if and (not .Values.insecure) (not (hasPrefix "tls://" $url)) -}}
{{- fail (printf "nats.externalUrl %s is not a tls:// URL: a secure federation reaches NATS over TLS (insecure: true is for development only)" $url) -}}
{{- end -}}
{{- $url -}}
{{- end -}}
{{- end -}}

{{/* A secret the secure federation cannot run without: its name, or a render that fails
     saying which and where it comes from. */}}
{{- define "cairn.secret" -}}
{{- required (printf "%s is required: %s (from `cairn provision`, see the chart's README). Without it there is no TLS or authorization; set insecure: true only for development" .key .what) .value -}}
{{- end -}}

{{/* One hub service as a Deployment: `cairn run SERVICE` with the federation's files. */}}
{{- define "cairn.hubService" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $values := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "cairn.fullname" $root }}-{{ $name }}
  labels:
    {{- include "cairn.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $name }}
spec:
  replicas: 1
  strategy:
    type: Recreate  # one writer per fact: never two {{ $name }}s at once
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ $root.Release.Name }}
      app.kubernetes.io/component: {{ $name }}
  template:
    metadata:
      labels:
        {{- include "cairn.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ $name }}
      annotations:
        checksum/federation: {{ $root.Values.federation | sha256sum }}
    spec:
      serviceAccountName: {{ include "cairn.fullname" $root }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $name }}
          image: "{{ $root.Values.image.repository }}:{{ $root.Values.image.tag }}"
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - run
            - {{ $name }}
            {{- if and (eq $name "signer") $root.Values.signer.keySecret }}
            - -O
            - evidence_key=/etc/cairn/signer/signer.key
            {{- end }}
            {{- if eq $name "httpapi" }}
            - -O
            - listen=0.0.0.0:{{ $root.Values.api.port }}
            {{- if $root.Values.api.tlsSecret }}
            - -O
            - tls_cert=/etc/cairn/api-tls/tls.crt
            - -O
            - tls_key=/etc/cairn/api-tls/tls.key
            {{- end }}
            {{- end }}
          {{- if eq $name "httpapi" }}
          ports:
            - {name: http, containerPort: {{ $root.Values.api.port }}}
          {{- end }}
          env:
            - {name: CAIRN_NATS_URL, value: {{ include "cairn.natsUrl" $root | quote }}}
            - {name: CAIRN_SITE, value: {{ $root.Values.hubSite | quote }}}
            - {name: CAIRN_FEDERATION, value: /etc/cairn/federation.yaml}
            - {name: CAIRN_STATE_DIR, value: /var/lib/cairn}
            - {name: CAIRN_LOG_FORMAT, value: {{ $root.Values.logFormat | quote }}}
            {{- include "cairn.replicasEnv" $root | nindent 12 }}
            {{- if not $root.Values.insecure }}
            - {name: CAIRN_TLS_CA, value: /etc/cairn/kit/ca.pem}
            {{- if eq $name "httpapi" }}
            - {name: CAIRN_CREDS, value: /etc/cairn/kit/api.creds}
            {{- else }}
            - {name: CAIRN_CREDS, value: "/etc/cairn/kit/{{ $root.Values.hubSite }}.creds"}
            {{- end }}
            {{- end }}
            {{- if $root.Values.tracing.otlpEndpoint }}
            - {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ $root.Values.tracing.otlpEndpoint | quote }}}
            - {name: OTEL_TRACES_SAMPLER, value: {{ $root.Values.tracing.sampler | quote }}}
            - {name: OTEL_TRACES_SAMPLER_ARG, value: {{ $root.Values.tracing.samplerArg | quote }}}
            {{- end }}
          readinessProbe:
            exec:
              command: ["python", "-m", "cairn.runtime.health", {{ $name | quote }}]
            periodSeconds: 10
            timeoutSeconds: 8
          livenessProbe:
            exec:
              command: ["python", "-m", "cairn.runtime.health", {{ $name | quote }}]
            initialDelaySeconds: 30
            periodSeconds: 30
            timeoutSeconds: 8
            failureThreshold: 4
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - {name: federation, mountPath: /etc/cairn/federation.yaml, subPath: federation.yaml, readOnly: true}
            - {name: state, mountPath: /var/lib/cairn}
            - {name: tmp, mountPath: /tmp}
            {{- if not $root.Values.insecure }}
            - {name: kit, mountPath: /etc/cairn/kit, readOnly: true}
            {{- end }}
            {{- if and (eq $name "signer") $root.Values.signer.keySecret }}
            - {name: signer-key, mountPath: /etc/cairn/signer, readOnly: true}
            {{- end }}
            {{- if and (eq $name "httpapi") $root.Values.api.tlsSecret }}
            - {name: api-tls, mountPath: /etc/cairn/api-tls, readOnly: true}
            {{- end }}
      volumes:
        - name: federation
          configMap:
            name: {{ include "cairn.fullname" $root }}-federation
        - {name: state, emptyDir: {}}
        - {name: tmp, emptyDir: {}}
        {{- if not $root.Values.insecure }}
        - name: kit
          secret:
            {{- if eq $name "httpapi" }}
            secretName: {{ include "cairn.secret" (dict "key" "api.credentialsSecret" "what" "the secret with the HTTP API's own kit (kits/api)" "value" $root.Values.api.credentialsSecret) }}
            {{- else }}
            secretName: {{ include "cairn.secret" (dict "key" "credentialsSecret" "what" "the secret with the hub's startup kit" "value" $root.Values.credentialsSecret) }}
            {{- end }}
            defaultMode: 0400
        {{- end }}
        {{- if and (eq $name "signer") $root.Values.signer.keySecret }}
        - name: signer-key
          secret:
            secretName: {{ $root.Values.signer.keySecret }}
            defaultMode: 0400
        {{- end }}
        {{- if and (eq $name "httpapi") $root.Values.api.tlsSecret }}
        - name: api-tls
          secret:
            secretName: {{ $root.Values.api.tlsSecret }}
            defaultMode: 0400
        {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* CAIRN_REPLICAS for a process that creates streams: min(3, the cluster's servers). */}}
{{- define "cairn.replicasEnv" -}}
- {name: CAIRN_REPLICAS, value: {{ min 3 (int .Values.nats.cluster.replicas) | toString | quote }}}
{{- end -}}
