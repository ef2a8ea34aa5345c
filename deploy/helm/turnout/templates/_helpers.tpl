{{- define "turnout.labels" -}}
app.kubernetes.io/name: turnout
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
{{- define "turnout.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}
{{- define "turnout.tlsArgs" -}}
- --xds-tls-cert=/etc/turnout/xds/tls.crt
- --xds-tls-key=/etc/turnout/xds/tls.key
- --xds-tls-ca=/etc/turnout/xds/ca.crt
{{- end }}
{{- define "turnout.securityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}
