{{- define "gpufleet.labels" -}}
app.kubernetes.io/name: gpufleet
app.kubernetes.io/component: {{ . }}
app.kubernetes.io/part-of: gpufleet
{{- end -}}

{{- define "gpufleet.selector" -}}
app.kubernetes.io/name: gpufleet
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "gpufleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
