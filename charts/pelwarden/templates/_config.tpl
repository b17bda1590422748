{{/*
pelwarden's config.yaml, built from values. Keys follow internal/config; a
file path points into the projected volume that pelwarden.volumeSources
builds, under pelwarden.configDir.
*/}}
{{- define "pelwarden.config" -}}
{{- $dir := include "pelwarden.configDir" . -}}
{{- $grpc := dict "addr" ":9090" "shutdownTimeout" .Values.grpc.shutdownTimeout "maxRecvMsgBytes" .Values.grpc.maxRecvMsgBytes "refusedCallsPerSecond" .Values.grpc.refusedCallsPerSecond -}}
{{- if .Values.grpc.tls.enabled -}}
{{- $tls := dict "certFile" (printf "%s/grpc-tls/tls.crt" $dir) "keyFile" (printf "%s/grpc-tls/tls.key" $dir) -}}
{{- if .Values.grpc.tls.clientCA.enabled -}}
{{- $_ := set $tls "clientCAFile" (printf "%s/grpc-tls/client-ca.crt" $dir) -}}
{{- end -}}
{{- $_ := set $grpc "tls" $tls -}}
{{- end -}}
{{- $hygiene := pick .Values.hygiene "scanInterval" "leaseTTL" "batchSize" "workers" "maxTargets" "targets" -}}
{{- with .Values.hygiene.identity }}{{ $_ := set $hygiene "identity" . }}{{ end -}}
{{- $kube := pick .Values.kubernetes "enabled" "maxPodWatches" "maxPodWatchesPerNamespace" "apiQPS" "apiBurst" -}}
{{- with .Values.kubernetes.kubeconfig }}{{ $_ := set $kube "kubeconfig" . }}{{ end -}}
{{- $admin := dict -}}
{{- if .Values.admin.token.existingSecret -}}
{{- $_ := set $admin "tokenFile" (printf "%s/admin/token" $dir) -}}
{{- end -}}
{{- with .Values.admin.allowedClientIdentities }}{{ $_ := set $admin "allowedClientIdentities" . }}{{ end -}}
{{- if .Values.admin.workerToken.existingSecret -}}
{{- $_ := set $admin "workerTokenFile" (printf "%s/admin/worker-token" $dir) -}}
{{- end -}}
{{- with .Values.admin.workerTokens -}}
{{- $scoped := list -}}
{{- range $i, $w := . -}}
{{- $scoped = append $scoped (dict "tokenFile" (printf "%s/admin/worker-tokens/%d" $dir $i) "streams" $w.streams) -}}
{{- end -}}
{{- $_ := set $admin "workerTokens" $scoped -}}
{{- end -}}
{{- with .Values.admin.workerIdentityPrefix }}{{ $_ := set $admin "workerIdentityPrefix" . }}{{ end -}}
{{- $redis := list -}}
{{- range $r := .Values.redis -}}
{{- $conn := pick $r "name" "mode" "addr" "username" "db" "dialTimeout" "readTimeout" "writeTimeout" "poolSize" -}}
{{- $conn = merge $conn (pick $r "waitReplicas" "waitTimeout" "idleBefore72") -}}
{{- with $r.sentinel -}}
{{- $sentinel := pick . "masterName" "addrs" "username" "replicaReads" -}}
{{- if and .existingSecret .existingSecret.name -}}
{{- $_ := set $sentinel "passwordFile" (printf "%s/redis/%s/sentinel-password" $dir $r.name) -}}
{{- end -}}
{{- $_ := set $conn "sentinel" $sentinel -}}
{{- end -}}
{{- with $r.cluster }}{{ $_ := set $conn "cluster" (pick . "addrs" "readOnly" "routeByLatency" "routeRandomly") }}{{ end -}}
{{- if and $r.existingSecret $r.existingSecret.name -}}
{{- $_ := set $conn "passwordFile" (printf "%s/redis/%s/password" $dir $r.name) -}}
{{- end -}}
{{- if and $r.tls $r.tls.enabled -}}
{{- $tls := pick $r.tls "enabled" "serverName" "insecureSkipVerify" -}}
{{- if $r.tls.existingSecret -}}
{{- if include "pelwarden.redisCAKey" $r.tls -}}
{{- $_ := set $tls "caFile" (printf "%s/redis/%s/ca.crt" $dir $r.name) -}}
{{- end -}}
{{- if $r.tls.certKey -}}
{{- $_ := set $tls "certFile" (printf "%s/redis/%s/tls.crt" $dir $r.name) -}}
{{- $_ := set $tls "keyFile" (printf "%s/redis/%s/tls.key" $dir $r.name) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $conn "tls" $tls -}}
{{- end -}}
{{- $redis = append $redis $conn -}}
{{- end -}}
{{- $cfg := dict
  "grpc" $grpc
  "http" (dict "addr" ":8080")
  "log" .Values.log
  "scaler" .Values.scaler
  "hygiene" $hygiene
  "kubernetes" $kube
  "admin" $admin
  "triggers" .Values.triggers
  "redis" $redis
-}}
{{- toYaml $cfg }}
{{- end }}

{{/* The CA key of a Redis TLS Secret: ca.crt unless caKey says otherwise ("" for the system roots). */}}
{{- define "pelwarden.redisCAKey" -}}
{{- if hasKey . "caKey" }}{{ .caKey }}{{ else }}ca.crt{{ end }}
{{- end }}

{{/*
The sources of the projected volume mounted at pelwarden.configDir: the
ConfigMap and every Secret the config names. A projected volume, not
subPath mounts, so a renewed certificate or rotated password reaches the
running pod.
*/}}
{{- define "pelwarden.volumeSources" -}}
- configMap:
    name: {{ include "pelwarden.fullname" . }}
    items:
      - key: config.yaml
        path: config.yaml
{{- with .Values.admin.token.existingSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $.Values.admin.token.key }}
        path: admin/token
{{- end }}
{{- with .Values.admin.workerToken.existingSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $.Values.admin.workerToken.key }}
        path: admin/worker-token
{{- end }}
{{- range $i, $w := .Values.admin.workerTokens }}
- secret:
    name: {{ $w.existingSecret }}
    items:
      - key: {{ default "token" $w.key }}
        path: admin/worker-tokens/{{ $i }}
{{- end }}
{{- range $r := .Values.redis }}
{{- if and $r.existingSecret $r.existingSecret.name }}
- secret:
    name: {{ $r.existingSecret.name }}
    items:
      - key: {{ default "password" $r.existingSecret.key }}
        path: redis/{{ $r.name }}/password
{{- end }}
{{- if and $r.sentinel $r.sentinel.existingSecret $r.sentinel.existingSecret.name }}
- secret:
    name: {{ $r.sentinel.existingSecret.name }}
    items:
      - key: {{ default "password" $r.sentinel.existingSecret.key }}
        path: redis/{{ $r.name }}/sentinel-password
{{- end }}
{{- if and $r.tls $r.tls.enabled $r.tls.existingSecret }}
{{- $ca := include "pelwarden.redisCAKey" $r.tls }}
{{- if or $ca $r.tls.certKey }}
- secret:
    name: {{ $r.tls.existingSecret }}
    items:
      {{- with $ca }}
      - key: {{ . }}
        path: redis/{{ $r.name }}/ca.crt
      {{- end }}
      {{- if $r.tls.certKey }}
      - key: {{ $r.tls.certKey }}
        path: redis/{{ $r.name }}/tls.crt
      - key: {{ required (printf "redis[%s].tls.keyKey is required with certKey" $r.name) $r.tls.keyKey }}
        path: redis/{{ $r.name }}/tls.key
      {{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.grpc.tls.enabled }}
- secret:
    name: {{ required "grpc.tls.secretName is required when grpc.tls.enabled is true" .Values.grpc.tls.secretName }}
    items:
      - key: tls.crt
        path: grpc-tls/tls.crt
      - key: tls.key
        path: grpc-tls/tls.key
{{- if .Values.grpc.tls.clientCA.enabled }}
- secret:
    name: {{ default .Values.grpc.tls.secretName .Values.grpc.tls.clientCA.secretName }}
    items:
      - key: {{ .Values.grpc.tls.clientCA.key }}
        path: grpc-tls/client-ca.crt
{{- end }}
{{- end }}
{{- end }}
