{{- define "ferry.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ferry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ferry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ferry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ferry
{{- end -}}

{{- define "ferry.selector" -}}
app.kubernetes.io/name: {{ include "ferry.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ferry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "ferry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "ferry.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "ferry.secretName" -}}
{{ include "ferry.fullname" . }}
{{- end -}}

{{/* Environment shared by every Ferry container: settings from the ConfigMap, secrets from Secrets. */}}
{{- define "ferry.env" -}}
- name: FERRY_DB_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret | default (include "ferry.secretName" .) }}
      key: {{ if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}db-url{{ end }}
- name: FERRY_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.admin.existingSecret | default (include "ferry.secretName" .) }}
      key: {{ if .Values.admin.existingSecret }}{{ .Values.admin.existingSecretKey }}{{ else }}admin-token{{ end }}
- name: FERRY_KAFKA_CONFIG
  valueFrom:
    secretKeyRef:
      name: {{ include "ferry.secretName" . }}
      key: kafka-config
- name: FERRY_KAFKA_CLUSTERS
  valueFrom:
    secretKeyRef:
      name: {{ include "ferry.secretName" . }}
      key: kafka-clusters
{{- end -}}

{{- define "ferry.podAnnotations" -}}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
checksum/secret: {{ include (print .root.Template.BasePath "/secret.yaml") .root | sha256sum }}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ferry.podCommon" -}}
{{ include "ferry.podBase" . }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}


{{/* The pod settings every component shares, without where it is scheduled. */}}
{{- define "ferry.podBase" -}}
serviceAccountName: {{ include "ferry.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The worker zones to render: worker.zones, or one unnamed zone (a single Deployment, as
without zones). Each zone name is checked here, with what to change. */}}
{{- define "ferry.workerZones" -}}
{{- $zones := .Values.worker.zones | default (list (dict "name" "")) -}}
{{- range $zones }}
{{- if and .name (or (gt (len .name) 40) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .name))) }}
{{- fail (printf "worker.zones: zone name %q must be a DNS label of at most 40 characters (lowercase letters, digits, '-'): it names the zone's Deployment and is FERRY_ZONE" .name) }}
{{- end }}
{{- end }}
{{- toJson $zones -}}
{{- end -}}
