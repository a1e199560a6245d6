{{- define "nereid.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "nereid.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "nereid.claim" -}}
{{ .Values.models.existingClaim | default (printf "%s-models" .Release.Name) }}
{{- end -}}
