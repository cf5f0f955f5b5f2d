{{/* The namespace every object goes into. */}}
{{- define "dra-solver.namespace" -}}
{{- required "namespace.name is required" .Values.namespace.name -}}
{{- end }}

{{/* The container image: repository and tag (the chart's appVersion unless set). */}}
{{- define "dra-solver.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end }}

{{/* Extra container args for the log format; nothing for the default (text). */}}
{{- define "dra-solver.logArgs" -}}
{{- if not (has .Values.logFormat (list "text" "json")) }}
{{- fail (printf "logFormat: Unsupported value: %q: supported values: text, json" .Values.logFormat) }}
{{- end }}
{{- if eq .Values.logFormat "json" }}
            - --log-format=json
{{- end }}
{{- end }}
