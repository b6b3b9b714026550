{{/* Labels every object of the chart carries, as the manifests do. */}}
{{- define "flowlens.partOf" -}}
app.kubernetes.io/part-of: flowlens
{{- end }}

{{/* Namespace of the dashboard ConfigMaps. */}}
{{- define "flowlens.dashboardsNamespace" -}}
{{ .Values.dashboards.namespace | default .Release.Namespace }}
{{- end }}
